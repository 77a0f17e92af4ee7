"""Blind appends the embedded store commits itself (:mod:`lakeshard.lake.embedded.append`), checked against delta-rs.

Every commit written here is read back by delta-rs loading the table afresh: the files, rows, app transaction
versions and commit metadata it sees must be the ones the store says it committed.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.lake.embedded.append import appendable, log_path
from lakeshard.lake.embedded.probed_log import probed_state
from lakeshard.lake.protocol.partitions import partition_directory

SCHEMA = StructType([StructField("tenant_id", StringType(), False), StructField("event_id", StringType(), False),
                     StructField("n", LongType(), True)])


def _writer(tenant: str, ids: list[str]):  # type: ignore[no-untyped-def]
    """A ``write`` function: one Parquet file of these ids under the tenant's partition directory."""
    def write(directory: str) -> None:
        relative, footer = partition_directory({"tenant_id": tenant})
        os.makedirs(f"{directory}/{relative}", exist_ok=True)
        table = pa.table({"event_id": ids, "n": list(range(len(ids)))})
        table = table.replace_schema_metadata(footer or None)
        pq.write_table(table, f"{directory}/{relative}/part-0.parquet")
    return write


def _table(tmp_path: Path, name: str, **properties: str) -> tuple[EmbeddedTableStore, str]:
    store = EmbeddedTableStore(None)
    uri = str(tmp_path / name)
    store.create(uri, SCHEMA, partition_by=["tenant_id"], properties=properties or None)
    return store, uri


def _delta_rs_rows(uri: str) -> list[tuple[str, str]]:
    rows = DeltaTable(uri).to_pyarrow_table(columns=["tenant_id", "event_id"]).to_pylist()
    return sorted((r["tenant_id"], r["event_id"]) for r in rows)


text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(text, min_size=1, max_size=40, unique=True))
def test_paths_are_written_into_the_log_as_delta_rs_writes_them(tmp_path_factory: pytest.TempPathFactory,
                                                                names: list[str]) -> None:
    uri = str(tmp_path_factory.mktemp("enc") / "t")
    EmbeddedTableStore(None).create(uri, SCHEMA, partition_by=["tenant_id"])
    dt = DeltaTable(uri)
    paths = [f"w/{n}/f.parquet" for n in names]
    dt.create_write_transaction(
        [AddAction(path=p, size=1, partition_values={"tenant_id": "x"}, modification_time=1, data_change=True,
                   stats='{"numRecords":1}') for p in paths],
        mode="append", schema=dt.schema(), partition_by=["tenant_id"])
    with open(f"{uri}/_delta_log/{1:020d}.json", encoding="utf-8") as handle:
        written = [json.loads(line)["add"]["path"] for line in handle.read().split("\n") if '"add"' in line]
    assert written == [log_path(p) for p in paths]


@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tenants=st.lists(text, min_size=1, max_size=6, unique=True))
def test_blind_appends_of_any_tenant_read_back_the_same_through_delta_rs(tmp_path_factory: pytest.TempPathFactory,
                                                                         tenants: list[str]) -> None:
    store, uri = _table(tmp_path_factory.mktemp("odd"), "t")
    expected = []
    for i, tenant in enumerate(tenants):
        ids = [f"{tenant}-{i}-{k}" for k in range(3)]
        result = store.append(uri, None, write=_writer(tenant, ids), app_transactions=[AppTransaction("w", i + 1)],
                              metadata={"batch": i})
        assert result.version == i + 1 and result.rows_added == 3
        expected += [(tenant, x) for x in ids]
    assert _delta_rs_rows(uri) == sorted(expected)
    fresh = DeltaTable(uri)
    assert fresh.transaction_version("w") == len(tenants)
    assert sorted(str(p) for p in fresh.get_add_actions(flatten=True).column("path").to_pylist()) == \
        sorted(f.path for f in store.files(uri))
    assert [h.custom_metadata.get("batch") for h in store.history(uri)] == \
        [str(i) for i in reversed(range(len(tenants)))] + [None]
    assert sorted(store.read_arrow(uri, store.files(uri), ["event_id"]).column("event_id").to_pylist()) == \
        sorted(x for _, x in expected)


def test_racing_appends_land_once_each_in_consecutive_versions(tmp_path: Path) -> None:
    """Eight stores (no shared state) append at once: four app ids, each version of each app id offered by two
    threads. Exactly one of each pair lands; every landed commit has its own version; delta-rs agrees."""
    _, uri = _table(tmp_path, "race")
    outcomes: list[tuple[str, int, str, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def run(thread: int) -> None:
        store = EmbeddedTableStore(None)
        app = f"writer/{thread % 4}"
        start.wait()
        for version in range(1, 11):
            tag = f"{app}-{version}-{thread}"
            try:
                result = store.append(uri, None, write=_writer(app, [tag]),
                                      app_transactions=[AppTransaction(app, version)])
                outcome = "skipped" if result.skipped else "committed"
            except CommitConflict:
                outcome = "conflict"
            with lock:
                outcomes.append((app, version, outcome, thread))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = [(a, v) for a, v, o, _ in outcomes if o == "committed"]
    assert sorted(committed) == sorted({(f"writer/{k}", v) for k in range(4) for v in range(1, 11)})
    fresh = DeltaTable(uri)
    assert fresh.version() == 40  # one version per landed commit, no gap, no doubles
    assert {f"writer/{k}": fresh.transaction_version(f"writer/{k}") for k in range(4)} == \
        {f"writer/{k}": 10 for k in range(4)}
    rows = _delta_rs_rows(uri)
    assert len(rows) == 40 and len({(a, x.rsplit("-", 1)[0]) for a, x in rows}) == 40
    on_disk = {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")}
    assert on_disk == {unquote(f.path) for f in EmbeddedTableStore(None).files(uri)}  # losers deleted their files
    assert not list(Path(uri, "_delta_log").glob("*.tmp"))


def test_an_append_prepared_before_a_schema_change_conflicts_and_leaves_nothing(tmp_path: Path) -> None:
    store, uri = _table(tmp_path, "schema")
    store.append(uri, None, write=_writer("a", ["1"]))
    EmbeddedTableStore(None).add_columns(uri, [StructField("extra", StringType(), True)])
    with pytest.raises(CommitConflict, match="metadata"):
        store.append(uri, None, write=_writer("a", ["2"]), read_version=1)
    assert _delta_rs_rows(uri) == [("a", "1")]
    on_disk = {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")}
    assert on_disk == {unquote(f.path) for f in store.files(uri)}


def test_blind_appends_write_the_checkpoints_delta_rs_would(tmp_path: Path) -> None:
    store, uri = _table(tmp_path, "ckpt", **{"delta.checkpointInterval": "4"})
    for i in range(9):
        store.append(uri, None, write=_writer(f"t{i % 3}", [str(i)]), app_transactions=[AppTransaction("w", i)])
    assert store.checkpoint_versions(uri) == [4, 8]
    state = probed_state(uri)
    assert state is not None and state.version == 9 and state.app_versions == {"w": 8}
    assert len(_delta_rs_rows(uri)) == 9 and DeltaTable(uri).transaction_version("w") == 8


def test_appends_to_a_big_table_bring_no_delta_rs_snapshot_up_to_date(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-rs' commit and the snapshot update after it cost time linear in the table's live files; a writer
    step's appends, versions, app versions, file lists and schemas must not go through either."""
    store, uri = _table(tmp_path, "big")
    store.append(uri, None, write=_writer("a", ["0"]))
    calls: list[str] = []
    for name in ("update_incremental", "create_write_transaction", "__init__", "load_as_version"):
        real = getattr(DeltaTable, name)

        def counted(*args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(DeltaTable, name, counted)
    for i in range(1, 20):
        store.append(uri, None, write=_writer(f"t{i}", [str(i)]), app_transactions=[AppTransaction("w", i)])
        assert store.version(uri) == i + 1 and store.transaction_versions(uri, ["w"]) == {"w": i}
        assert len(store.files(uri)) == i + 1 and store.partition_columns(uri) == ["tenant_id"]
        assert store.arrow_schema(uri).names == ["tenant_id", "event_id", "n"]
    assert calls == []


def test_tables_whose_protocol_asks_more_of_a_writer_are_appended_to_by_delta_rs(tmp_path: Path) -> None:
    store, uri = _table(tmp_path, "constrained")
    store.append(uri, None, write=_writer("a", ["1"]))
    DeltaTable(uri).alter.add_constraint({"n_positive": "n >= 0"})
    state = probed_state(uri)
    assert state is not None and not appendable(uri, state)
    result = EmbeddedTableStore(None).append(uri, None, write=_writer("b", ["2"]))
    assert result.version == 3 and _delta_rs_rows(uri) == [("a", "1"), ("b", "2")]
    with open(f"{uri}/_delta_log/{3:020d}.json", encoding="utf-8") as handle:
        assert "delta-rs" in json.loads(handle.readline())["commitInfo"]["clientVersion"]


def test_stores_creating_one_table_at_once_make_one_first_commit(tmp_path: Path) -> None:
    """delta-rs 1.6.6 retries a create that lost the race for version 0 as version 1, with a new table id; every
    commit prepared at version 0 would then conflict. Here eight creators give one table at version 0."""
    def create(uri: str, start: threading.Barrier, versions: list[int]) -> None:
        store = EmbeddedTableStore(None)
        start.wait()
        versions.append(store.create(uri, SCHEMA, partition_by=["tenant_id"]))

    for trial in range(5):
        uri, start, versions = str(tmp_path / f"t{trial}"), threading.Barrier(8), []
        threads = [threading.Thread(target=create, args=(uri, start, versions)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert versions == [0] * 8
        assert sorted(p.name for p in Path(uri, "_delta_log").iterdir()) == [f"{0:020d}.json"]
        assert sorted(p.name for p in Path(uri).iterdir()) == ["_delta_log"]  # no staging directory left
        assert DeltaTable(uri).version() == 0


_KILLED_AT = r'''
import os, signal, sys
sys.path[:0] = [{lib!r}, {tests!r}]
from lakeshard.lake.embedded import EmbeddedTableStore
from lake.test_embedded_append import SCHEMA, _writer
where, uri = sys.argv[1], sys.argv[2]
real_link, real_unlink = os.link, os.unlink
if where == "after-link":  # the commit is in place; the staged file not yet removed
    os.unlink = lambda path, *a, **k: (os.kill(os.getpid(), signal.SIGKILL) if "_commit_" in str(path)
                                       else real_unlink(path, *a, **k))
    EmbeddedTableStore(None).append(uri, None, write=_writer("acme", ["e2"]))
else:  # a create whose commit 0 is written in its staging directory, not linked into place yet
    os.link = lambda src, dst, *a, **k: (os.kill(os.getpid(), signal.SIGKILL) if "_lakeshard_create_" in str(src)
                                         else real_link(src, dst, *a, **k))
    EmbeddedTableStore(None).create(uri, SCHEMA, partition_by=["tenant_id"])
'''


def test_what_a_process_killed_inside_a_commit_or_a_create_leaves_is_vacuumed(tmp_path: Path) -> None:
    """SIGKILL right after a commit's link (its staged file stays in ``_delta_log``) and inside a create (its
    staging directory stays in the table): the table is as committed, a later create works, and vacuum removes
    both leftovers once older than its retention, not before, and not on a dry run."""
    import subprocess
    import sys
    import time

    store, uri = _table(tmp_path, "t")
    store.append(uri, None, write=_writer("acme", ["e1"]))
    script = _KILLED_AT.format(lib=str(Path(__file__).parents[2] / "lib"), tests=str(Path(__file__).parents[1]))
    created = str(tmp_path / "created")
    for where, target in (("after-link", uri), ("create", created)):
        proc = subprocess.run([sys.executable, "-c", script, where, target], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == -9, proc.stderr[-2000:]
    staged = [p.name for p in Path(uri, "_delta_log").glob("_commit_*.json.tmp")]
    creating = [p.name for p in Path(created).glob("_lakeshard_create_*")]
    assert len(staged) == 1 and len(creating) == 1
    assert _delta_rs_rows(uri) == [("acme", "e1"), ("acme", "e2")]  # the killed commit had landed
    fresh = EmbeddedTableStore(None)
    fresh.create(created, SCHEMA, partition_by=["tenant_id"])  # the leftover staging directory is no table
    fresh.append(created, None, write=_writer("zeta", ["z1"]))
    assert _delta_rs_rows(created) == [("zeta", "z1")]

    assert fresh.vacuum(created, retention_hours=1).removed_staging == ()  # younger than the retention
    time.sleep(0.05)
    dry = fresh.vacuum(uri, retention_hours=0, dry_run=True)
    assert dry.removed_staging == (f"_delta_log/{staged[0]}",)
    assert [p.name for p in Path(uri, "_delta_log").glob("_commit_*.json.tmp")] == staged
    assert fresh.vacuum(uri, retention_hours=0).removed_staging == (f"_delta_log/{staged[0]}",)
    assert fresh.vacuum(created, retention_hours=0).removed_staging == (creating[0],)
    assert not list(Path(uri, "_delta_log").glob("*.tmp")) and not list(Path(created).glob("_lakeshard_create_*"))
    assert _delta_rs_rows(uri) == [("acme", "e1"), ("acme", "e2")] and _delta_rs_rows(created) == [("zeta", "z1")]


def test_a_full_disk_while_writing_data_or_the_commit_file_commits_nothing_and_a_retry_commits_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC half-way through a data file or through the staged commit file: the append raises the OS error,
    the table does not move, no staged file is left in the log, and the same append retried once space is back
    commits its rows exactly once (and a second retry is skipped)."""
    import builtins
    import errno

    import lakeshard.lake.embedded.append as embedded_append

    store, uri = _table(tmp_path, "t")
    txn = [AppTransaction("writer-0", 1)]

    def full(data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def full_disk_writer(directory: str) -> None:
        _writer("acme", ["e1", "e2"])(directory)  # one whole file, then the disk fills
        relative, _ = partition_directory({"tenant_id": "acme"})
        with open(f"{directory}/{relative}/part-1.parquet", "wb") as out:
            out.write(b"PAR1")
            full(b"")

    class FullCommitFile:
        def __init__(self, path: str, mode: str) -> None:
            self.file = builtins.open(path, mode)

        def __enter__(self) -> FullCommitFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def write(self, data: bytes) -> None:
            self.file.write(data[: len(data) // 2])
            full(data)

    def commit_file_fills_the_disk(path: str, mode: str = "r", *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if "_commit_" in str(path) and "x" in mode:
            return FullCommitFile(path, mode)
        return builtins.open(path, mode, *args, **kwargs)  # type: ignore[call-overload]

    with pytest.raises(OSError) as data_full:
        store.append(uri, None, write=full_disk_writer, app_transactions=txn)
    assert data_full.value.errno == errno.ENOSPC
    monkeypatch.setattr(embedded_append, "open", commit_file_fills_the_disk, raising=False)
    with pytest.raises(OSError) as log_full:
        store.append(uri, None, write=_writer("acme", ["e1", "e2"]), app_transactions=txn)
    assert log_full.value.errno == errno.ENOSPC
    monkeypatch.undo()

    assert store.version(uri) == 0 and DeltaTable(uri).version() == 0 and _delta_rs_rows(uri) == []
    assert not list(Path(uri, "_delta_log").glob("*.tmp"))
    assert store.append(uri, None, write=_writer("acme", ["e1", "e2"]), app_transactions=txn).version == 1
    assert store.append(uri, None, write=_writer("acme", ["e1", "e2"]), app_transactions=txn).skipped
    assert _delta_rs_rows(uri) == [("acme", "e1"), ("acme", "e2")]
    assert DeltaTable(uri).transaction_version("writer-0") == 1
