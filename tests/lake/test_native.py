"""The native adapter's parts that run without Delta's JVM: adapter choice, Scala calls, conflicts, timestamps.

Its contract tests against real Delta commits are in ``test_store_contract.py`` (``delta_jvm``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from py4j_errors import DELTA_LOST_RACE, py4j_error
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.errors import EnvironmentProblem, TableStoreError
from lakeshard.lake import TableStore, adapter_choice, choose_adapter, open_store
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.lake.native import NativeTableStore
from lakeshard.lake.native.conflicts import is_concurrent_modification
from lakeshard.lake.native.jvm import has_delta_jvm, scala_call
from lakeshard.lake.native.log import commit_timestamps


@pytest.mark.parametrize(("setting", "delta_jvm", "gateway", "expected", "why"), [
    ("auto", True, True, "native", "load in this session"),
    ("auto", False, True, "embedded", "are not on the Spark session's classpath"),
    ("auto", False, False, "embedded", "Spark Connect session"),
    ("embedded", True, True, "embedded", "(configured)"),
    ("native", True, True, "native", "(configured)"),
])
def test_adapter_choice_and_its_reason(setting: str, delta_jvm: bool, gateway: bool, expected: str, why: str) -> None:
    choice = choose_adapter(setting, delta_jvm=delta_jvm, gateway=gateway)
    assert choice.name == expected and why in choice.reason


def test_forcing_native_on_a_classic_session_without_delta_says_what_is_missing() -> None:
    with pytest.raises(EnvironmentProblem, match=r"io\.delta\.tables\.DeltaTable"):
        choose_adapter("native", delta_jvm=False, gateway=True)


def test_forcing_native_on_a_connect_session_uses_deltas_public_api_on_the_server() -> None:
    choice = choose_adapter("native", delta_jvm=False, gateway=False)
    assert choice.name == "native" and "must have Delta's jars and SQL extension" in choice.reason


def test_auto_picks_native_exactly_when_the_session_has_deltas_engine(spark: SparkSession,
                                                                      test_config: LakeshardConfig) -> None:
    auto = load_config(overrides={"spark": {"adapter": "auto", "jars": test_config.spark.jars}})
    unasked = load_config(overrides={"spark": {"adapter": "auto", "jars": ""}})
    assert adapter_choice(spark, unasked).name == "embedded"  # a local session given no jars stays embedded
    if has_delta_jvm(spark):  # the Delta jars make env installed are on the shared session
        assert adapter_choice(spark, auto).name == "native"
        assert isinstance(open_store(spark, auto), NativeTableStore)
        return
    assert adapter_choice(spark, auto).name == "embedded"
    assert isinstance(open_store(spark, auto), EmbeddedTableStore)
    with pytest.raises(EnvironmentProblem, match=r"Delta's JVM classes \(io\.delta\.tables\.DeltaTable\)"):
        open_store(spark, load_config(overrides={"spark": {"adapter": "native"}}))
    with pytest.raises(EnvironmentProblem, match="DeltaLog class is in none of"):
        NativeTableStore(spark)


def test_doctor_names_the_adapter_and_why(spark: SparkSession, test_config: LakeshardConfig) -> None:
    from lakeshard.app.cli import _doctor_session
    from lakeshard.runtime import RuntimeKind

    rows: list[tuple[str, str]] = []
    assert _doctor_session(load_config(overrides={"spark": {**vars(test_config.spark), "adapter": "auto"}}),
                           RuntimeKind.LOCAL, rows)
    found = dict(rows)
    expected = ("native - auto: Delta's JVM classes (io.delta.tables.DeltaTable) load" if has_delta_jvm(spark) else
                "embedded - auto: Delta's JVM classes (io.delta.tables.DeltaTable) are not")
    assert found["adapter"].startswith(expected)
    engine = "Delta-Lake/4.4" if has_delta_jvm(spark) else "delta-rs (deltalake) commits"
    assert engine in found["delta engine"] and found["delta engine"].endswith("classic session")
    assert found["delta round trip"] == "ok"


class _NoSuchMethod(Exception):
    pass


class _ScalaObject:
    """Stands in for a py4j proxy of a Scala object whose ``checkpoint(snapshot, tags)`` has defaults."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def checkpoint(self, *args: Any) -> str:
        if len(args) != 2:
            raise _NoSuchMethod(f"Method checkpoint({list(args)}) does not exist")
        self.calls.append(args)
        return "done"

    def __getattr__(self, name: str) -> Any:
        defaults = {"checkpoint$default$1": lambda: "latest snapshot", "checkpoint$default$2": lambda: "no tags"}
        if name in defaults:
            return defaults[name]
        raise AttributeError(name)


def test_scala_call_fills_in_default_arguments() -> None:
    obj = _ScalaObject()
    assert scala_call(obj, "checkpoint") == "done"
    assert scala_call(obj, "checkpoint", "v7") == "done"
    assert obj.calls == [("latest snapshot", "no tags"), ("v7", "no tags")]
    with pytest.raises(AttributeError, match="no overload of checkpoint accepts 3 arguments"):
        scala_call(obj, "checkpoint", 1, 2, 3)


def test_delta_concurrent_exceptions_are_conflicts_and_others_are_not() -> None:
    assert is_concurrent_modification(py4j_error(*DELTA_LOST_RACE))
    # The JVM's own ConcurrentModificationException (a collection changed while iterated) is no lost race.
    assert not is_concurrent_modification(py4j_error(*DELTA_LOST_RACE[2:]))
    assert not is_concurrent_modification(py4j_error("java.io.FileNotFoundException"))
    assert not is_concurrent_modification(ValueError("plain Python"))


def test_commit_timestamps_follow_time_travel() -> None:
    times = commit_timestamps([(2, 5_000, None), (0, 1_000, None), (1, 900, None), (3, 4_000, 7_000)])
    assert [times[v] for v in range(4)] == [datetime.fromtimestamp(s, tz=UTC) for s in (1.0, 1.001, 5.0, 7.0)]


def _shape() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField("n", LongType(), False), StructField("p", StringType())])


def test_a_creation_that_meets_another_process_creating_the_table_waits_for_its_commit(
    native_store: TableStore, tmp_path: Path
) -> None:
    import shutil
    import threading

    other = tmp_path / "other"
    native_store.create(str(other), _shape(), properties={"lakeshard.test.created_by": "other"})
    table = tmp_path / "t"
    (table / "_delta_log" / "_staged_commits").mkdir(parents=True)  # the other creator has begun
    first = "_delta_log/00000000000000000000.json"
    committer = threading.Timer(1.5, lambda: shutil.copyfile(other / first, table / first))
    committer.start()
    try:
        assert native_store.create(str(table), _shape()) == 0
    finally:
        committer.join()
    assert (table / first).read_bytes() == (other / first).read_bytes()  # its commit, not a second creation
    assert len(list((table / "_delta_log").glob("*.json"))) == 1


def test_a_log_folder_holding_files_but_no_commit_is_left_alone_with_a_clear_error(
    native_store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native_store, "creation_wait_s", 0.2, raising=False)
    table = tmp_path / "t"
    (table / "_delta_log" / "_staged_commits").mkdir(parents=True)
    stray = table / "_delta_log" / "_staged_commits" / "00000000000000000000.uuid.json"
    stray.write_text("{}")
    with pytest.raises(TableStoreError, match=r"holds files but no Delta commit.*remove the folder's contents"):
        native_store.create(str(table), _shape())
    assert stray.read_text() == "{}" and not native_store.exists(str(table))


@pytest.mark.slow
@pytest.mark.delta_jvm
def test_a_process_killed_inside_a_table_creation_leaves_nothing_the_next_run_cannot_create(
    native_store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child creates tables one after another on Delta's engine and is SIGKILLed inside one creation: a random
    few milliseconds after Delta made that table's `_delta_log` folder, the moment before its first commit (some 30 to
    60 ms here). This process then creates every table: each is at version 0 with the declared shape."""
    import json
    import random
    import subprocess
    import sys
    import time

    from phase_kills import child_env, kill_process_group, kill_seed

    seed = kill_seed()
    rng = random.Random(seed)
    count, target = 4, rng.randint(1, 2)
    root = tmp_path / "tables"
    log = root / f"t{target:03d}" / "_delta_log"
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_create_native_tables.py")), str(root), str(count),
         json.dumps(_shape().jsonValue()), "p"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), start_new_session=True)
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if line.split() == ["creating", str(target)]:
                deadline = time.monotonic() + 60
                while not log.exists() and time.monotonic() < deadline:
                    time.sleep(0.001)
                time.sleep(rng.uniform(0.0, 0.06))
                kill_process_group(child.pid)  # the child and its JVM at once
                break
    finally:
        kill_process_group(child.pid)
        _, err = child.communicate(timeout=60)
    assert log.exists(), f"seed {seed}: the child never began table {target}: {err[-3000:]}"
    left = sorted(p.name for p in log.iterdir())
    print(f"seed {seed}: killed inside table {target}'s creation; its log folder held {left}")
    monkeypatch.setattr(native_store, "creation_wait_s", 0.5, raising=False)  # the killed process commits no more
    for i in range(count):
        uri = str(root / f"t{i:03d}")
        assert native_store.create(uri, _shape(), partition_by=["p"]) == 0, (seed, i, left)
        assert native_store.schema(uri) == _shape() and native_store.partition_columns(uri) == ["p"], (seed, i)


def test_the_commit_path_probe_reads_javas_method_text_and_matches_signatures() -> None:
    """What ``commit_path`` compares: Java's ``Method.toString`` of each public method, against the parameter and
    return types lakeshard calls with (exact, a prefix for a Scala method called with defaults, or any overload)."""
    from lakeshard.lake.native.jvm import _METHOD, JvmMethod, _matches

    text = ("public long org.apache.spark.sql.delta.OptimisticTransaction.commit(scala.collection.immutable.Seq,"
            "org.apache.spark.sql.delta.DeltaOperations$Operation) throws java.io.IOException\n"
            "public final synchronized void org.apache.spark.sql.delta.DeltaLog.checkpoint(org.apache.spark.sql.delta"
            ".Snapshot,scala.Option)\n"
            "public static org.apache.spark.sql.delta.DeltaLog org.apache.spark.sql.delta.DeltaLog$.forTable()")
    found = [(m["name"], m["returns"], tuple(p for p in m["params"].split(",") if p)) for m in _METHOD.finditer(text)]
    assert [f[:2] for f in found] == [("commit", "long"), ("checkpoint", "void"),
                                      ("forTable", "org.apache.spark.sql.delta.DeltaLog")]
    package = "org.apache.spark.sql.delta"
    commit = JvmMethod("{delta}.OptimisticTransaction", "commit",
                       ("scala.collection.immutable.Seq", "{delta}.DeltaOperations$Operation"), "long")
    assert _matches(commit, package, found[0])
    assert not _matches(JvmMethod(commit.cls, "commit", commit.params, "int"), package, found[0])
    assert not _matches(JvmMethod(commit.cls, "commit", ("scala.collection.immutable.Seq",), "long"), package,
                        found[0])
    assert _matches(JvmMethod("{delta}.DeltaLog", "checkpoint", ("{delta}.Snapshot", "...")), package, found[1])
    assert not _matches(JvmMethod("{delta}.DeltaLog", "checkpoint", ("{delta}.Snapshot",)), package, found[1])
    assert _matches(JvmMethod("{delta}.DeltaLog$", "forTable", None), package, found[2])


@pytest.mark.parametrize(("configuration", "expected"), [
    ({}, None),  # no checkpoint through a property change ever left its record
    ({"delta.checkpointInterval": "1"}, None),  # an interval of 1 the table's user chose
    ({"delta.checkpointInterval": "1", "lakeshard.checkpoint_interval_before": "unset"}, "unset"),
    ({"delta.checkpointInterval": "1", "lakeshard.checkpoint_interval_before": "50"}, "50"),
    # given back by a restore that died before removing the record, or set by the user since: left as it is
    ({"delta.checkpointInterval": "50", "lakeshard.checkpoint_interval_before": "50"}, None),
    ({"delta.checkpointInterval": "7", "lakeshard.checkpoint_interval_before": "unset"}, None),
    ({"lakeshard.checkpoint_interval_before": "50"}, None),
])
def test_the_interval_to_give_back_is_the_recorded_one_only_while_the_temporary_interval_is_there(
        configuration: dict[str, str], expected: str | None) -> None:
    from lakeshard.lake.native.public import CHECKPOINT_INTERVAL_BEFORE, interval_before, interval_left

    assert interval_before(configuration) == expected
    assert interval_left(configuration) == (CHECKPOINT_INTERVAL_BEFORE in configuration)
