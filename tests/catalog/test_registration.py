"""Registering the user-facing tables in a catalog: the SQL it issues, and locally, a query by table name over
the demo's lakehouse (Delta's catalog on the session, so ``delta_jvm``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakeshard.catalog import LOCAL_CATALOG, register_tables, registration_sql
from lakeshard.config import LakeshardConfig
from lakeshard.errors import ConfigError
from lakeshard.synth import read_manifest
from lakeshard.tables import BUCKETS, EVENTS, USER_TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore



def test_the_statement_quotes_names_and_the_location() -> None:
    assert registration_sql("main", "lake shard", "events", "s3://b/it's/events") == (
        "CREATE TABLE IF NOT EXISTS `main`.`lake shard`.`events` USING DELTA LOCATION 's3://b/it\\'s/events'")
    assert registration_sql("c", "s`x", "t", "/l").startswith("CREATE TABLE IF NOT EXISTS `c`.`s``x`.`t`")


def test_an_empty_name_is_refused_with_what_it_names() -> None:
    with pytest.raises(ConfigError, match=r"^schema: expected a catalog object name, found ''$"):
        registration_sql("main", "", "events", "/l")


@pytest.mark.delta_jvm
@pytest.mark.usefixtures("native_store")  # skips (fails in CI) without Delta's engine on the session
def test_a_query_by_table_name_returns_the_demos_events(
    spark: SparkSession, store: TableStore, demo_lakehouse: LakeshardConfig,
) -> None:
    cfg = demo_lakehouse
    done = register_tables(spark, LOCAL_CATALOG, "lakeshard_demo", cfg.lakehouse, store=store, create_schema=True)
    assert [(r.name, r.status) for r in done] == [(f"`{LOCAL_CATALOG}`.`lakeshard_demo`.`{t}`", "created")
                                                   for t in USER_TABLES]
    by_name = spark.sql(f"SELECT tenant_id, event_id FROM {LOCAL_CATALOG}.lakeshard_demo.events")
    by_path = store.read(cfg.table_uri(EVENTS)).select("tenant_id", "event_id")
    assert by_name.count() == read_manifest(cfg.landing).unique_events == by_path.count()
    assert by_name.exceptAll(by_path).count() == 0 == by_path.exceptAll(by_name).count()
    again = register_tables(spark, LOCAL_CATALOG, "lakeshard_demo", cfg.lakehouse, store=store)
    assert {r.status for r in again} == {"present"}


def test_a_table_the_pipeline_has_not_written_yet_is_reported_missing(
    spark: SparkSession, store: TableStore, tmp_path: Path,
) -> None:
    done = register_tables(spark, LOCAL_CATALOG, "never_created", str(tmp_path), store=store, tables=[EVENTS])
    assert [(r.location, r.status) for r in done] == [(f"{tmp_path}/events", "missing")]


def _cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The machine's Delta jars folder stays (an environment of scripts/matrix/ keeps them outside .delta-jars/).
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHARD_") or k == "LAKESHARD_DELTA_JARS"}
    return subprocess.run([sys.executable, "-m", "lakeshard.app.cli", *args], capture_output=True, text=True,
                          cwd=tmp_path, env={**clean, **(env or {})}, timeout=600)


@pytest.fixture(scope="module")
def small_lakehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lakehouse ``lakeshard ingest`` made of a hand-written landing zone (no JVM: small steps run in Arrow)."""
    root = tmp_path_factory.mktemp("register")
    (root / "landing").mkdir()
    (root / "landing" / "a.jsonl").write_text("".join(
        f'{{"tenant_id": "t {i % 2}", "event_id": "e/{i}", "ts": "2026-11-26T10:0{i}:00+01:00"}}\n' for i in range(5)))
    done = _cli(root, "ingest", "--lakehouse", str(root / "lh"), "--landing", str(root / "landing"))
    assert done.returncode == 0, done.stderr
    return root


@pytest.mark.delta_jvm
@pytest.mark.usefixtures("native_store")  # the installed jars: skips (fails in CI) without them
def test_the_command_registers_on_a_local_session_it_starts_with_deltas_jars(small_lakehouse: Path) -> None:
    done = _cli(small_lakehouse, "register-tables", "--lakehouse", str(small_lakehouse / "lh"),
                "--schema", "by_command", "--create-schema")
    assert done.returncode == 0, done.stderr
    assert "created  `spark_catalog`.`by_command`.`events`" in done.stdout


def test_the_command_without_deltas_jars_says_so_in_one_line(small_lakehouse: Path) -> None:
    done = _cli(small_lakehouse, "register-tables", "--lakehouse", str(small_lakehouse / "lh"),
                "--schema", "nowhere", "--create-schema", env={"LAKESHARD_DELTA_JARS": str(small_lakehouse / "none")})
    assert done.returncode == 2
    assert "has no Delta data source" in done.stderr and "make env" in done.stderr
    assert "at org.apache" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.delta_jvm
@pytest.mark.usefixtures("native_store")  # registering needs Delta's catalog on the session
def test_tables_created_empty_before_the_first_ingest_are_the_ones_ingest_then_writes(
    spark: SparkSession, store: TableStore, tmp_path: Path,
) -> None:
    # What the maintenance job's first run does on a fresh deploy: the downstream pipeline reads events and buckets
    # by name, so register-tables --create-missing makes them before any ingest has run.
    lakehouse = tmp_path / "lh"
    done = register_tables(spark, LOCAL_CATALOG, "first_run", str(lakehouse), store=store, create_schema=True,
                           create_missing=True)
    assert [(r.name, r.status) for r in done] == [(f"`{LOCAL_CATALOG}`.`first_run`.`{t}`", "created_empty")
                                                   for t in USER_TABLES]
    for table in (EVENTS, BUCKETS):
        assert spark.sql(f"SELECT count(*) FROM {LOCAL_CATALOG}.first_run.{table}").first()[0] == 0
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.jsonl").write_text("".join(
        f'{{"tenant_id": "t", "event_id": "e/{i}", "ts": "2026-11-26T10:0{i}:00Z"}}\n' for i in range(3)))
    ingest = _cli(tmp_path, "ingest", "--lakehouse", str(lakehouse), "--landing", str(tmp_path / "landing"))
    assert ingest.returncode == 0, ingest.stderr  # the writer keeps the table it finds: the same shape
    spark.sql(f"REFRESH TABLE {LOCAL_CATALOG}.first_run.events")
    assert spark.sql(f"SELECT count(*) FROM {LOCAL_CATALOG}.first_run.events").first()[0] == 3
    again = register_tables(spark, LOCAL_CATALOG, "first_run", str(lakehouse), store=store, create_missing=True)
    assert {r.status for r in again} == {"present"}


def test_only_the_user_facing_tables_can_be_created_empty(
    spark: SparkSession, store: TableStore, tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"cannot create `spark_catalog`.`s`.`placements` empty: 'placements' is "
                                          r"not a user-facing table \(known: events, quarantine, buckets, "):
        register_tables(spark, LOCAL_CATALOG, "s", str(tmp_path), store=store, tables=["placements"],
                        create_missing=True)
