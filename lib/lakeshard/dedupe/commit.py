"""A writer step's commits on a store whose commit carries one app transaction: each shard's rows on their own.

A step of shards ``s1..sk`` normally commits its events in one ``events`` commit carrying every ``writer/<s>``
(and its IDs likewise). Delta's public writer carries one ``txnAppId`` per write
(:attr:`~lakeshard.lake.TableStore.max_app_transactions`), so there a step commits each shard's events with
``writer/<s>`` alone, then each committed shard's IDs (docs/decisions.md record 2). Exactly once per shard then
comes from Delta's idempotent writes: a version at or below the committed one is skipped, and a concurrent commit
of the same app id fails the other. A crash between two shards' commits leaves one shard done and the other not;
the next step reads each shard's progress and takes only what each has not consumed, and a shard whose IDs lag
its events is repaired before anything is deduplicated (:meth:`~lakeshard.dedupe.index.IdIndex.repair`).

Rows come as a Spark DataFrame or an Arrow table. Where the store commits files written by this process
(:attr:`~lakeshard.lake.TableStore.writes_in_process`) Arrow rows are written by pyarrow; elsewhere (Spark
Connect) they go to Spark as a DataFrame. Either way one file per partition value, sorted as the table's writers
sort it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, CommitResult, TableStore
from lakeshard.tables import writer_app_id

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from lakeshard.lake import WrittenFile


__all__ = ["Layout", "ShardCommits", "StepRows", "append_shard", "commits_per_shard"]


def commits_per_shard(store: TableStore) -> bool:
    """Return whether a commit of shards' progress goes shard by shard on this store (its commits carry a limited
    number of app transactions): even one shard's, so that Arrow rows reach a store that cannot commit files
    written by this process."""
    return store.max_app_transactions is not None


@dataclass(frozen=True)
class Layout:
    """How a table's files are laid out: one file per value of ``partition_by``, rows sorted by ``sort_by``."""

    partition_by: tuple[str, ...]
    sort_by: tuple[str, ...]


def _is_arrow(rows: DataFrame | pa.Table) -> TypeGuard[pa.Table]:
    import pyarrow as pa

    return isinstance(rows, pa.Table)


def _shard_rows(rows: DataFrame | pa.Table, shard: int) -> DataFrame | pa.Table:
    if _is_arrow(rows):
        import pyarrow.compute as pc

        return rows.filter(pc.equal(rows.column("shard"), shard))
    from pyspark.sql import functions as F

    return rows.where(F.col("shard") == shard)


def append_shard(store: TableStore, table: str, rows: DataFrame | pa.Table,
                 layout: Layout, txn: AppTransaction, *, metadata: Mapping[str, Any],
                 read_version: int | None = None, buckets: str | None = None,
                 schema: pa.Schema | None = None) -> CommitResult:
    """Return the result of appending ``rows`` (one shard's) in one commit carrying ``txn`` alone.

    ``schema``: the table's Arrow schema when the caller has it (a step commits shard after shard to one table):
    Arrow rows are written or handed over in its columns, without another look at the log for it.

    ``buckets``: the ``buckets`` table whose closing buckets rows written as a DataFrame must not go into, checked
    inside the write (:mod:`lakeshard.buckets.guard`); given for ``events`` on a store that asks for it
    (:attr:`~lakeshard.lake.TableStore.writes_guard_closing`).

    Raises:
        CommitConflict: a concurrent commit carried the same app id, or one after ``read_version`` did, or one of
            the rows' buckets was closing when the write ran.
    """
    hours: list[str] | None = None
    if _is_arrow(rows):
        if store.writes_in_process:
            from lakeshard.dedupe.faults import write_or_blame
            from lakeshard.lake import write_partitioned
            from lakeshard.tables import EVENT_KEY

            columns = schema if schema is not None else store.arrow_schema(table)
            arrow: pa.Table = rows

            def write(part: pa.Table, target: str) -> list[WrittenFile]:
                return write_partitioned(part, target, columns, list(layout.partition_by), list(layout.sort_by))

            # Event rows failing alone are named (RecordLevelFailure), to be dead-lettered, as on the one-commit path.
            blamed = set(EVENT_KEY) <= set(arrow.column_names)
            return store.append(table, None, app_transactions=[txn], metadata=metadata, read_version=read_version,
                                write=lambda target: write_or_blame(arrow, target, write) if blamed
                                else write(arrow, target))
        names = set(schema.names if schema is not None else store.schema(table).fieldNames())
        if buckets is not None:  # the rows' hours, known here without a Spark job: the guard reads only those
            import pyarrow.compute as pc

            hours = [str(h) for h in pc.unique(rows.column("hour")).to_pylist() if h is not None]
        rows = store.frame(table, rows.select([c for c in rows.column_names if c in names]))
    df: DataFrame = rows
    if buckets is not None:
        from lakeshard.buckets import guard_open_buckets

        df = guard_open_buckets(store, buckets, df, hours)
    ordered = (df.repartition(*layout.partition_by).sortWithinPartitions(*layout.partition_by, *layout.sort_by)
               if layout.partition_by else df.coalesce(1).sortWithinPartitions(*layout.sort_by))
    try:
        return store.append(table, ordered, app_transactions=[txn], metadata=metadata, read_version=read_version)
    except Exception as exc:
        from lakeshard.buckets import refused_by_guard

        conflict = refused_by_guard(exc, table, read_version, (txn.app_id,)) if buckets is not None else None
        if conflict is None:
            raise
        raise conflict from None


class ShardCommits:
    """One step's commits, shard by shard: every shard's events, then the IDs of the shards whose events landed.

    Args:
        store: the writer's store.
        before_commit: called with the table name before each commit (the crash tests' seam).
    """

    def __init__(self, store: TableStore, before_commit: Callable[[str], None]) -> None:
        self.store = store
        self._before_commit = before_commit

    def events(self, table: str, rows: DataFrame | pa.Table, layout: Layout, shards: Sequence[int],
               routed_version: int, *, metadata: Mapping[str, Any], read_version: int,
               seam: str, buckets: str | None = None) -> tuple[list[int], list[int]]:
        """Commit each shard's ``rows`` with ``writer/<shard>`` → ``routed_version``; return the shards committed
        and the shards lost (a concurrent commit of the same progress, progress already committed, or a bucket
        of ``buckets`` closing while the write ran: see :func:`append_shard`)."""
        committed: list[int] = []
        lost: list[int] = []
        schema = self._arrow_schema(table, rows)
        for shard in shards:
            self._before_commit(seam)
            try:
                result = append_shard(self.store, table, _shard_rows(rows, shard), layout,
                                      AppTransaction(writer_app_id(shard), routed_version),
                                      metadata={**metadata, "shards": [shard]}, read_version=read_version,
                                      buckets=buckets, schema=schema)
            except CommitConflict:
                lost.append(shard)
                continue
            (lost if result.skipped else committed).append(shard)
        return committed, lost

    def ids(self, table: str, rows: DataFrame | pa.Table, layout: Layout, versions: Mapping[int, int], *,
            metadata: Mapping[str, Any], seam: str | None = None) -> None:
        """Commit each shard's IDs with ``writer/<shard>`` → ``versions[shard]`` (a replay is skipped)."""
        schema = self._arrow_schema(table, rows) if versions else None
        for shard, version in sorted(versions.items()):
            if seam is not None:
                self._before_commit(seam)
            append_shard(self.store, table, _shard_rows(rows, shard), layout,
                         AppTransaction(writer_app_id(shard), version), metadata={**metadata, "shards": [shard]},
                         schema=schema)

    def _arrow_schema(self, table: str, rows: DataFrame | pa.Table) -> pa.Schema | None:
        """Return the table's Arrow schema for Arrow rows, looked up once for all the shards' commits (each look at
        the log costs a Spark job under Spark Connect); None for a DataFrame, which needs none."""
        return self.store.arrow_schema(table) if _is_arrow(rows) else None


@dataclass(frozen=True)
class StepRows:
    """What a step commits: its kept ``events`` and the ``ids`` of every new key (both with a ``shard`` column),
    and the ``events`` commit's ``metadata``."""

    events: DataFrame | pa.Table
    ids: DataFrame | pa.Table
    metadata: Mapping[str, Any]

