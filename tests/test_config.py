"""The typed configuration: defaults, file, environment and overrides, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeshard.config import load_config
from lakeshard.errors import ConfigError


def test_layers_win_in_order(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('lakehouse = "/from/file"\n[spark]\ndriver_memory = "3g"\nshuffle_partitions = 8\n')
    env = {"LAKESHARD_SPARK_SHUFFLE_PARTITIONS": "6", "LAKESHARD_ROUTING_TOTAL_SHARDS": "32"}
    cfg = load_config(toml, env=env, overrides={"spark": {"driver_memory": "5g"}})
    assert cfg.lakehouse == "/from/file"
    assert (cfg.spark.driver_memory, cfg.spark.shuffle_partitions) == ("5g", 6)
    assert cfg.routing.total_shards == 32 and cfg.routing.window_seconds == 300
    assert cfg.table_uri("events") == "/from/file/events"


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[spark]\nmaster = 3\nbogus = 1\n", {}, r"unknown configuration key\(s\) \['bogus'\] in section 'spark'"),
        ("", {"LAKESHARD_ROUTING_TOTAL_SHARDS": "lots"}, "LAKESHARD_ROUTING_TOTAL_SHARDS: expected an integer"),
        ("[spark]\nadapter = 'jvm'\n", {}, r"spark.adapter: expected one of \['auto', 'embedded', 'native'\]"),
        ("spark = 3\n", {}, "configuration section 'spark' must be a table"),
        ("lakehouse = \n", {}, "is not valid TOML"),
        ("", {"LAKESHARD_DEDUPE_ARROW_MAX_BYTES": "-1"},
         r"LAKESHARD_DEDUPE_ARROW_MAX_BYTES: expected >= 0 \(0 = always Spark\), found -1"),
        ("[compaction]\noutlier_fraction = 1.5\n", {},
         r"compaction.outlier_fraction: expected in \[0, 1\) .*, found 1.5"),
    ],
)
def test_bad_values_name_what_is_wrong(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(toml, env=env)


def test_compaction_section_becomes_compaction_settings(tmp_path: Path) -> None:
    """[compaction] keys reach CompactionSettings; outlier_fraction = 0 switches outlier files off."""
    from lakeshard.compaction import CompactionSettings

    toml = tmp_path / "c.toml"
    toml.write_text("[compaction]\noutlier_fraction = 0.05\nmerge_threads = 1\n")
    settings = CompactionSettings.from_config(load_config(toml, env={}).compaction, include_open=True)
    assert settings.outliers is not None and settings.outliers.fraction == 0.05
    assert (settings.merge_threads, settings.include_open) == (1, True)
    off = load_config(toml, env={"LAKESHARD_COMPACTION_OUTLIER_FRACTION": "0"}).compaction
    assert CompactionSettings.from_config(off).outliers is None


@pytest.mark.parametrize(
    ("setting", "value", "allowed"),
    [
        ("LAKESHARD_ROUTING_WINDOW_SECONDS", "-3", "in (0, 315619200]"),
        ("LAKESHARD_DEDUPE_ID_CACHE_BYTES", "-1", ">= 0"),
        ("LAKESHARD_LANDING_FORMAT_MAX_RECORD_BYTES", "0", ">= 1"),
        ("LAKESHARD_LANDING_FORMAT_MAX_TENANT_ID_CHARS", "-7", ">= 1"),
        ("LAKESHARD_LANDING_FORMAT_MAX_FUTURE_SECONDS", "-1", "in [0, 315619200]"),
        ("LAKESHARD_ROUTING_DEFAULT_SHARD_COUNT", "-2", "in [1, 65536]"),
        ("LAKESHARD_LANDING_FORMAT_SETTLE_SECONDS", "-60", "in [0, 315619200]"),
        ("LAKESHARD_BALANCING_SCALE_DOWN_BELOW", "nan", "in (0, 1)"),
        # The autosharder refuses both ends (0 never scales down, 1 scales down at full load): so does the range.
        ("LAKESHARD_BALANCING_SCALE_DOWN_BELOW", "1.0", "in (0, 1)"),
        ("LAKESHARD_BALANCING_SCALE_DOWN_BELOW", "0.0", "in (0, 1)"),
        # Values inside the lower bound that no run can work with: an infinite duration or rate, a ring whose
        # every shard an ingest run walks (MemoryError), a window whose microseconds overflow (OverflowError).
        ("LAKESHARD_DEDUPE_ID_RETENTION_HOURS", "inf", "in (0, 87672]"),
        ("LAKESHARD_BALANCING_TARGET_BYTES_PER_SECOND", "inf", "> 0"),
        ("LAKESHARD_DEDUPE_RETRY_TOTAL_SECONDS", "inf", "in [0, 315619200]"),
        ("LAKESHARD_ROUTING_TOTAL_SHARDS", "99999999999", "in [1, 65536]"),
        ("LAKESHARD_BALANCING_MAX_SHARDS", "70000", "in [1, 65536]"),
        ("LAKESHARD_ROUTING_WINDOW_SECONDS", "99999999999999", "in (0, 315619200]"),
        ("LAKESHARD_ROUTING_ALLOCATION_RETRIES", "99999999999999999999", ">= 1 and at most 9223372036854775807"),
    ],
)
def test_an_environment_value_out_of_range_names_the_variable_the_value_and_the_range(
        setting: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, env={setting: value})
    message = str(raised.value)
    assert message.startswith(f"{setting}: expected {allowed}") and message.endswith(f"found {value}")


def test_a_file_value_out_of_range_names_the_key(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("[routing]\ntotal_shards = 0\n")
    with pytest.raises(ConfigError, match=r"^routing.total_shards: expected in \[1, 65536\]( \(.*\))?, found 0$"):
        load_config(toml, env={})
    with pytest.raises(ConfigError, match=r"^maintenance.vacuum_hour_utc: expected in \[-1, 23\]"):
        load_config(None, env={}, overrides={"maintenance": {"vacuum_hour_utc": 24}})


def test_every_numeric_setting_has_a_range_and_its_default_is_inside() -> None:
    from lakeshard.config import settings

    numeric = [s for s in settings() if s.kind in ("int", "float")]
    assert len(numeric) > 40
    for s in numeric:
        assert s.bounds is not None, s.name
        assert s.bounds.admits(s.default), s.name


def test_a_misspelt_variable_is_refused_with_the_nearest_name() -> None:
    nearest = r"LAKESHARD_ROUTNG_TOTAL_SHARDS \(did you mean LAKESHARD_ROUTING_TOTAL_SHARDS\?\)"
    with pytest.raises(ConfigError, match=nearest):
        load_config(None, env={"LAKESHARD_ROUTNG_TOTAL_SHARDS": "8"})
    with pytest.raises(ConfigError, match=r"LAKESHARD_NOTHING_LIKE_IT"):
        load_config(None, env={"LAKESHARD_NOTHING_LIKE_IT": "1"})


def test_variables_read_outside_the_configuration_are_allowed() -> None:
    env = {"LAKESHARD_DEBUG": "1", "LAKESHARD_TRACE_PHASES": "/tmp/x", "LAKESHARD_KILL_SEED": "3",
           "LAKESHARD_LAKEHOUSE": "/lh", "LAKESHARD_STORAGE_S3": "{}", "OTHER": "x"}
    assert load_config(None, env=env).lakehouse == "/lh"


def test_a_landing_zone_that_is_a_file_is_refused(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "events.jsonl"
    not_a_dir.write_text("{}\n")
    with pytest.raises(ConfigError, match=rf"landing: expected a directory .*, found the file {not_a_dir}$"):
        load_config(None, env={}, overrides={"landing": str(not_a_dir)})
    with pytest.raises(ConfigError, match=rf"lakehouse: expected a directory .*, found the file {not_a_dir}$"):
        load_config(None, env={"LAKESHARD_LAKEHOUSE": str(not_a_dir)})


def test_the_settings_table_in_the_docs_is_current() -> None:
    from lakeshard.config import settings_table

    doc = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert settings_table() in doc, "docs/configuration.md is stale: run python scripts/settings_doc.py"


@pytest.mark.parametrize("source", ["toml", "env", "overrides"])
def test_min_shards_above_max_shards_is_refused_where_the_configuration_enters(tmp_path: Path, source: str) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("[balancing]\nmin_shards = 8\nmax_shards = 4\n" if source == "toml" else "")
    env = {"LAKESHARD_BALANCING_MIN_SHARDS": "8", "LAKESHARD_BALANCING_MAX_SHARDS": "4"} if source == "env" else {}
    overrides = {"balancing": {"min_shards": 8, "max_shards": 4}} if source == "overrides" else None
    with pytest.raises(ConfigError, match=r"^balancing.min_shards = 8 is above balancing.max_shards = 4"):
        load_config(toml, env=env, overrides=overrides)
    # Equal bounds are a fixed shard count: accepted.
    fixed = load_config(None, env={}, overrides={"balancing": {"min_shards": 4, "max_shards": 4}})
    assert (fixed.balancing.min_shards, fixed.balancing.max_shards) == (4, 4)
