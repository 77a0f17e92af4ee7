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
        ("", {"LAKESHARD_DEDUPE_ARROW_MAX_BYTES": "-1"}, r"dedupe.arrow_max_bytes: expected 0 \(always Spark\)"),
        ("[compaction]\noutlier_fraction = 1.5\n", {}, r"compaction.outlier_fraction and outlier_max_share must be"),
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
