"""Replace locks on real Delta tables: one winner among racing processes, lease expiry, fencing, appends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _chunk_table import Rows, ids

from lakeshard.lake import TableStore
from lakeshard.versions import Chunk, ChunkLocked, ChunkLocks, ChunkVersions, LockLost, read_chunk, replace_chunk

LOCKER = Path(__file__).with_name("_lock.py")
H10 = "2026-01-01T10"
ACME10 = Chunk("acme", H10)


def _spawn(table: str, holder: str, barrier: Path, lease: float, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "lib"),
                                                         os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(LOCKER), table, holder, str(barrier), str(lease), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
def test_racing_processes_one_wins_and_a_killed_holder_blocks_only_until_its_lease_expires(
    store: TableStore, tmp_path: Path
) -> None:
    table = str(tmp_path / "chunk_locks")
    ChunkLocks(store, table).ensure_table()
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    lease = 600.0  # outlasts any slow start of the processes; expiry is then shown with a clock moved on
    procs = [_spawn(table, tag, barrier, lease, "--die-holding") for tag in ("p1", "p2")]
    deadline = time.monotonic() + 300
    while len(list(barrier.glob("ready-*"))) < 2:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "lock processes did not start"
        time.sleep(0.1)
    (barrier / "go").touch()
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        outs.append(json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {"stderr": stderr[-2000:]})
    winner = [o for o in outs if o.get("outcome") == "acquired"]
    loser = [o for o in outs if o.get("outcome") == "locked"]
    assert len(winner) == 1 and len(loser) == 1, outs
    # The loser failed fast with an error naming the winner and when its lease ends.
    assert f"locked for replacement by {winner[0]['holder']}" in loser[0]["error"]
    assert "until its lease expires at" in loser[0]["error"]
    assert sorted(p.returncode for p in procs) == [-9, 0]  # the winner died holding the lock

    with pytest.raises(ChunkLocked, match=f"by {winner[0]['holder']} ") as blocked:
        ChunkLocks(store, table, holder="compactor-3").acquire(ACME10)
    expires = blocked.value.state.expires_at
    just_before = ChunkLocks(store, table, holder="compactor-3", clock=lambda: expires - timedelta(seconds=1))
    with pytest.raises(ChunkLocked):
        just_before.acquire(ACME10)
    me = ChunkLocks(store, table, holder="compactor-3", clock=lambda: expires)
    lease_ = me.acquire(ACME10)  # the dead holder's lease ran out: taken over, next generation
    assert lease_.state.generation == winner[0]["generation"] + 1
    assert me.release(lease_)
    assert me.state(ACME10).state == "released"


def test_a_second_replacer_fails_fast_and_the_lock_is_per_chunk(store: TableStore, tmp_path: Path) -> None:
    table = str(tmp_path / "chunk_locks")
    a = ChunkLocks(store, table, holder="compaction-a", lease=timedelta(minutes=5))
    b = ChunkLocks(store, table, holder="replace-b")
    with a.lock("acme", H10) as held:
        started = time.perf_counter()
        with pytest.raises(ChunkLocked, match=r"acme/2026-01-01T10 is locked for replacement by compaction-a .*"
                                              r"until its lease expires at"):
            b.acquire(ACME10)
        assert time.perf_counter() - started < 30  # no waiting: one read, then the error
        other = b.acquire(Chunk("acme", "2026-01-01T11"))  # another chunk is free
        assert [s.chunk for s in a.held()] == [ACME10, Chunk("acme", "2026-01-01T11")]
        b.release(other)
        assert held.state.generation == 1
    assert b.acquire(ACME10).state.generation == 3  # released by the with block (generation 2), taken (3)


def test_appends_go_on_under_a_held_lock_and_the_replacement_carries_them_forward(
    store: TableStore, chunk_table: str, rows: Rows, tmp_path: Path
) -> None:
    store.append(chunk_table, rows("acme", H10, "s1", 3))
    store.append(chunk_table, rows("acme", H10, "s2", 3))
    locks = ChunkLocks(store, str(tmp_path / "chunk_locks"), holder="compactor")
    with locks.lock("acme", H10) as lease:
        read_at = store.version(chunk_table)
        compacted = read_chunk(store.spark, store, chunk_table, ACME10, read_at).coalesce(1)
        store.append(chunk_table, rows("acme", H10, "late", 2))  # ingestion is never blocked by the lock
        result = replace_chunk(store, chunk_table, ACME10, compacted, lease=lease, read_version=read_at,
                               data_change=False)
    assert result.files_removed == 2 and result.files_added == 1
    now = read_chunk(store.spark, store, chunk_table, ACME10)
    assert ids(now) == sorted([f"s1-{i}" for i in range(3)] + [f"s2-{i}" for i in range(3)]
                              + ["late-0", "late-1"])
    assert len(ChunkVersions(store, chunk_table, ACME10).snapshot().files) == 2  # compacted + carried append


def test_a_stalled_holder_whose_lease_was_taken_over_cannot_commit(
    store: TableStore, chunk_table: str, rows: Rows, tmp_path: Path
) -> None:
    store.append(chunk_table, rows("acme", H10, "s", 4))
    table = str(tmp_path / "chunk_locks")
    stalled = ChunkLocks(store, table, holder="stalled", lease=timedelta(minutes=1))
    old = stalled.acquire(ACME10)
    later = lambda: datetime.now(UTC) + timedelta(minutes=2)  # noqa: E731 - the successor lives 2 minutes on
    successor = ChunkLocks(store, table, holder="successor", clock=later)
    replace_chunk(store, chunk_table, ACME10, None, locks=successor)
    # The stalled holder wakes up believing its lease is fine (its clock is behind): the fence stops it.
    with pytest.raises(LockLost, match="already replaced under a newer lock generation"):
        replace_chunk(store, chunk_table, ACME10, rows("acme", H10, "stale", 1), lease=old)
    assert read_chunk(store.spark, store, chunk_table, ACME10).count() == 0
    assert not stalled.release(old)  # nothing to release: the successor's generation is current


def test_bad_replacements_are_refused(store: TableStore, chunk_table: str, rows: Rows, tmp_path: Path) -> None:
    locks = ChunkLocks(store, str(tmp_path / "chunk_locks"))
    with pytest.raises(Exception, match="include rows of other chunks: zeta/2026-01-01T10"):
        replace_chunk(store, chunk_table, ACME10, rows("zeta", H10, "z", 1), locks=locks)
    with pytest.raises(Exception, match="exactly one of locks="):
        replace_chunk(store, chunk_table, ACME10, None)
    assert locks.state(ACME10).state == "released"  # the refused replacement let go of the lock
    with pytest.raises(Exception, match="lease must be positive"):
        ChunkLocks(store, "x", lease=timedelta(0))


def test_lock_all_takes_every_chunk_in_one_commit_or_none(store: TableStore, tmp_path: Path) -> None:
    table = str(tmp_path / "chunk_locks")
    a, b = ChunkLocks(store, table, holder="a"), ChunkLocks(store, table, holder="b")
    acme11, zeta = Chunk("acme", "2026-01-01T11"), Chunk("zeta", H10)
    held = a.acquire(ACME10)
    start = store.version(table)
    with pytest.raises(ChunkLocked, match="acme/2026-01-01T10 is locked for replacement by a "):
        b.acquire_all([zeta, acme11, ACME10])
    assert store.version(table) == start and b.states([zeta, acme11]) == {}  # none of the three was taken
    with b.lock_all([zeta, acme11]) as leases:
        assert store.version(table) == start + 1  # both in one commit
        assert [lease.chunk for lease in leases] == [acme11, zeta]
        assert {s.chunk: s.holder for s in a.held()} == {ACME10: "a", acme11: "b", zeta: "b"}
    assert store.version(table) == start + 2  # and released in one
    assert {s.chunk for s in a.held()} == {ACME10}
    assert a.release(held)


@pytest.mark.slow
def test_states_of_a_thousand_tenants_take_one_read_whose_plan_does_not_grow_with_them(
    store: TableStore, tmp_path: Path
) -> None:
    # One predicate per tenant used to make a filter 1,000 ORs deep: the JVM's stack overflowed analysing it.
    locks = ChunkLocks(store, str(tmp_path / "chunk_locks"), holder="compactor-1")
    hours = ["2026-01-01T10", "2026-01-01T11", "2026-01-01T12"]
    chunks = [Chunk(f"t{i:04d}", h) for i in range(1000) for h in hours]
    taken = locks.acquire_all(chunks[::2])
    states = locks.states(chunks)
    assert sorted(states) == sorted(lease.chunk for lease in taken)
    assert {s.holder for s in states.values()} == {"compactor-1"} and {s.state for s in states.values()} == {"held"}
    assert locks.release_all(taken) == len(taken)
    released = locks.states(chunks)
    assert len(released) == len(taken) and {s.state for s in released.values()} == {"released"}
    assert locks.states([Chunk("t0000", hours[1])]) == {}
