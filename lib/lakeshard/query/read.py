"""Reading events with fragment pruning: partitions, then min/max statistics, then the pruning regexes.

A query names a tenant, a time range of *event time* (``ts``) and equality / IN predicates on string columns.
Every live file is considered; a file is skipped at the first stage that proves it holds no matching row:

1. **partition** — another tenant; an hour before the range; an hour after it whose file's ``ts``
   statistics miss the range. A late event lands in its tenant's open bucket (a later ``hour`` partition)
   with its true ``ts``, so the partitions after the range are where late rows of the range can be; their
   time statistics decide, which keeps on-time files of later hours out at no read. (Never an earlier
   hour: an event is late only once its own hour closed, and the open bucket is at or after the clock.);
2. **min/max** — the Delta statistics: the time range misses ``[min(ts), max(ts)]``, or every predicate
   value of some column lies outside that column's ``[min, max]`` (or asks for null where there is none);
3. **regex** — the file's fragment metadata: some column's regex rejects every predicate value.

Only the remaining files are read (``store.read_files``) and the predicates are applied to their rows,
so pruning can only save work, never change the answer. Fragment metadata is read for the files past the
partition stage only (:mod:`~lakeshard.compaction.fragment_table`): planning costs what the query touches.

This is the *event-time view*: every event whose ``ts`` is in the range, late ones included, each once. The
*arrival view* — what an hourly consumer of closed buckets reads (``Completionist.closed_buckets``) — is the
``hour`` partition: a late event appears there once, in the bucket it landed in. See docs/buckets.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import unquote

from lakeshard.compaction import FragmentMeta, read_fragments
from lakeshard.errors import DamagedDataFile
from lakeshard.lake import FileInfo, TableStore
from lakeshard.pruning import may_contain
from lakeshard.query.errors import QueryError
from lakeshard.tables import HOUR_FORMAT
from lakeshard.utc import aware

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Predicates", "PruningReport", "TimeBounds", "choose_files", "choose_files_by_values",
           "in_partitions", "plan_read", "pruning_fragments", "read_events"]

Predicates = Mapping[str, "str | Sequence[str | None] | None"]
"""``{column: value}`` (equality; ``None`` means IS NULL) or ``{column: [v1, v2]}`` (IN)."""


@dataclass(frozen=True)
class PruningReport:
    """How many files each stage skipped, and which were read."""

    considered: int
    pruned_by_partition: int
    pruned_by_min_max: int
    pruned_by_regex: int
    read: tuple[str, ...]
    # Files of hours after the range kept past the partition stage: they may hold late events of the range.
    late_candidates: int = 0

    def render(self) -> str:
        """Return the report as one line."""
        return (f"files considered {self.considered}, pruned by partition {self.pruned_by_partition}, "
                f"by min/max {self.pruned_by_min_max}, by regex {self.pruned_by_regex}, read {len(self.read)} "
                f"(of later hours, for late events: {self.late_candidates})")


def _hour(when: datetime) -> str:
    return when.astimezone(UTC).strftime(HOUR_FORMAT)


@dataclass(frozen=True)
class TimeBounds:
    """A range of event time (``ts``) a scan asks for: a lower and an upper bound, either open (None), each
    inclusive or not. Naive datetimes are UTC."""

    lower: datetime | None = None
    upper: datetime | None = None
    lower_inclusive: bool = True
    upper_inclusive: bool = False

    def __post_init__(self) -> None:
        for name in ("lower", "upper"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))

    def and_lower(self, value: datetime, inclusive: bool) -> TimeBounds:
        """Return these bounds ANDed with ``ts >= value`` (``>`` when not ``inclusive``): the tighter lower bound."""
        value = aware(value)
        if self.lower is not None and (self.lower > value or (self.lower == value and not self.lower_inclusive)):
            return self
        return TimeBounds(value, self.upper, inclusive, self.upper_inclusive)

    def and_upper(self, value: datetime, inclusive: bool) -> TimeBounds:
        """Return these bounds ANDed with ``ts <= value`` (``<`` when not ``inclusive``): the tighter upper bound."""
        value = aware(value)
        if self.upper is not None and (self.upper < value or (self.upper == value and not self.upper_inclusive)):
            return self
        return TimeBounds(self.lower, value, self.lower_inclusive, inclusive)

    def misses(self, span: tuple[datetime, datetime] | None) -> bool:
        """Return True when a file whose ``ts`` lies in ``span`` (its statistics; None: unknown) has no row in range."""
        if span is None:
            return False
        lo, hi = span
        return ((self.lower is not None and (hi < self.lower or (hi == self.lower and not self.lower_inclusive)))
                or (self.upper is not None and (lo > self.upper or (lo == self.upper and not self.upper_inclusive))))

    def hours(self) -> tuple[str | None, str | None]:
        """Return the ``hour`` partitions of the range's first and last instants (None where the range is open)."""
        last = None
        if self.upper is not None:
            last = _hour(self.upper if self.upper_inclusive else self.upper - timedelta(microseconds=1))
        return (None if self.lower is None else _hour(self.lower)), last


def _values(predicates: Predicates | None) -> dict[str, tuple[str | None, ...]]:
    out: dict[str, tuple[str | None, ...]] = {}
    for col, want in (predicates or {}).items():
        values = (want,) if want is None or isinstance(want, str) else tuple(want)
        if not values:
            raise QueryError(f"predicate on {col!r} has an empty IN list: it would match nothing")
        bad = [v for v in values if v is not None and not isinstance(v, str)]
        if bad:
            raise QueryError(f"predicate on {col!r} takes strings or None, found {bad[:3]}")
        out[col] = values
    return out


def _outside_min_max(f: FileInfo, col: str, values: Sequence[str | None]) -> bool:
    """Return True when the file's statistics prove no value of ``values`` is in ``col``."""
    lo, hi, nulls = f.min_values.get(col), f.max_values.get(col), f.null_counts.get(col)
    for v in values:
        if v is None:
            if nulls is None or nulls > 0:
                return False
        elif not isinstance(lo, str) or not isinstance(hi, str) or lo <= v <= hi:
            return False
    return True


def _time_outside(f: FileInfo, column: str, start: datetime, end: datetime) -> bool:
    span = f.time_range(column)
    return span is not None and (span[1] < start or span[0] >= end)


def _regex_rejects(meta: FragmentMeta | None, wanted: Mapping[str, Sequence[str | None]]) -> bool:
    if meta is None:
        return False
    return any(col in meta.columns and not any(may_contain(meta.columns[col], v) for v in values)
               for col, values in wanted.items())


def in_partitions(files: Sequence[FileInfo], *, tenant: str, start: datetime, end: datetime,
                  timestamp: str = "ts") -> tuple[list[FileInfo], int]:
    """Return the files past the partition stage (the tenant's files of the range's hours, and of later hours
    when their ``timestamp`` statistics meet the range or are missing) and how many of those are of later hours.

    Raises:
        QueryError: ``end`` is not after ``start``.
    """
    if end <= start:
        raise QueryError(f"time range is empty: end {end.isoformat()} is not after start {start.isoformat()}")
    first_hour, last_hour = _hour(start), _hour(end - timedelta(microseconds=1))
    kept: list[FileInfo] = []
    later = 0
    for f in files:
        hour = f.partition_values.get("hour") or ""
        if f.partition_values.get("tenant_id") != tenant or hour < first_hour:
            continue
        if hour > last_hour:
            if _time_outside(f, timestamp, start, end):
                continue
            later += 1
        kept.append(f)
    return kept, later


FragmentSource = Mapping[str, FragmentMeta] | Callable[[Sequence[FileInfo]], Mapping[str, FragmentMeta]]
"""Fragment metadata by decoded path, or a function giving it for the files past the partition stage."""


def choose_files(files: Sequence[FileInfo], fragments: FragmentSource, *, tenant: str,
                 start: datetime, end: datetime, predicates: Predicates | None = None,
                 timestamp: str = "ts", use_min_max: bool = True,
                 use_regex: bool = True) -> tuple[list[FileInfo], PruningReport]:
    """Return the files a query must read and the report of what each stage pruned (pure, unless
    ``fragments`` is a function that reads: it is called once, with the files past the partition stage).

    The stages are :func:`choose_files_by_values`' (the Spark data source's): the tenant and the range
    ``[start, end)`` are its ``tenant_id`` value and time bounds.

    Raises:
        QueryError: ``end`` is not after ``start``, or a predicate is malformed.
    """
    if end <= start:
        raise QueryError(f"time range is empty: end {end.isoformat()} is not after start {start.isoformat()}")
    values = _values(predicates)
    values["tenant_id"] = tuple(v for v in values.get("tenant_id", (tenant,)) if v == tenant)
    return choose_files_by_values(files, fragments, values, time=TimeBounds(start, end), timestamp=timestamp,
                                  use_min_max=use_min_max, use_regex=use_regex)


def choose_files_by_values(files: Sequence[FileInfo], fragments: FragmentSource,
                           values: Mapping[str, Sequence[str | None]], *,
                           partition_columns: Sequence[str] = ("tenant_id", "hour"),
                           time: TimeBounds | None = None, timestamp: str = "ts", use_min_max: bool = True,
                           use_regex: bool = True) -> tuple[list[FileInfo], PruningReport]:
    """Return the files that may hold rows whose columns take the ``values`` given (``None``: null) and whose
    ``timestamp`` is in ``time``, and the report of what each stage pruned: partition values (and the ``hour``
    partition against the time range), then min/max and null counts, then the regexes.

    The one planner front of :func:`read_events` / :func:`plan_read` (through :func:`choose_files`) and of the
    ``lakeshard`` Spark data source. The time range follows the late-event rule of :func:`in_partitions`: hours
    before the range's first hour are pruned; a file of an hour after its last is kept (a late-event candidate)
    only when its time statistics meet the range or are missing. ``fragments`` is called once, with the files
    past the partition stage, when it is a function. ``use_min_max`` / ``use_regex`` off skip those stages (for
    comparison).
    """
    first, last = time.hours() if time is not None and "hour" in partition_columns else (None, None)
    candidates: list[FileInfo] = []
    later = 0
    for f in files:
        if not all(f.partition_values.get(c) in values[c] for c in partition_columns if c in values):
            continue
        hour = f.partition_values.get("hour")
        if hour is not None and first is not None and hour < first:
            continue
        if hour is not None and last is not None and hour > last:
            if time is not None and time.misses(f.time_range(timestamp)):
                continue
            later += 1
        candidates.append(f)
    data = {c: v for c, v in values.items() if c not in partition_columns}
    if callable(fragments):
        fragments = fragments(candidates) if use_regex and candidates and data else {}
    by_min_max = by_regex = 0
    kept = []
    for f in candidates:
        if use_min_max and ((time is not None and time.misses(f.time_range(timestamp))) or any(
                _outside_min_max(f, c, v) for c, v in data.items())):
            by_min_max += 1
        elif use_regex and _regex_rejects(fragments.get(unquote(f.path)), data):
            by_regex += 1
        else:
            kept.append(f)
    return kept, PruningReport(len(files), len(files) - len(candidates), by_min_max, by_regex,
                               tuple(f.path for f in kept), later)


def plan_read(store: TableStore, table: str, *, tenant: str, start: datetime, end: datetime,
              predicates: Predicates | None = None, version: int | None = None,
              use_regex: bool = True) -> tuple[list[FileInfo], PruningReport]:
    """Return the files a query must read and the pruning report, reading the table's live files and the
    fragment metadata of the files past the partition stage only (no Spark job, no walk of the log).

    Raises:
        QueryError: a predicate names a column the table lacks, or the query is malformed.
    """
    start, end = (aware(t) for t in (start, end))
    files = store.files(table, version=version)
    # A column with statistics in a live file is a column of the table (columns are only ever added): the schema,
    # another load of the table, is read only for a predicate column no file has statistics of.
    missing = set(predicates or {})
    for f in files:
        if not missing:
            break
        missing -= f.null_counts.keys() | f.min_values.keys()
    if missing:
        columns = [f.name for f in store.schema(table).fields]
        unknown = [c for c in (predicates or {}) if c not in columns]
        if unknown:
            raise QueryError(f"{table}: predicates name unknown columns {unknown}; columns are {columns}")
    # Metadata of the files the partition stage keeps only: a needle query reads its buckets' rows, no more.
    return choose_files(files, lambda candidates: pruning_fragments(store, table, candidates), tenant=tenant,
                        start=start, end=end, predicates=predicates, use_regex=use_regex)


def pruning_fragments(store: TableStore, table: str, files: Sequence[FileInfo]) -> dict[str, FragmentMeta]:
    """Return the fragment metadata a query prunes ``files`` by: :func:`read_fragments`, or none when a file of the
    fragments table is damaged. The metadata only lets a query skip files, so without it the query reads them and
    gives the same rows; ``lakeshard fsck`` names the damaged file."""
    try:
        return read_fragments(store, table, files)
    except DamagedDataFile:
        return {}


def read_events(spark: SparkSession, store: TableStore, table: str, *, tenant: str, start: datetime,
                end: datetime, predicates: Predicates | None = None, version: int | None = None,
                use_regex: bool = True) -> tuple[DataFrame, PruningReport]:
    """Return a tenant's events whose ``ts`` is in ``[start, end)`` (late ones included) matching ``predicates``,
    reading only files that may match.

    Args:
        spark: the session (an empty answer is built with it).
        store: the table store.
        table: the events table's URI.
        tenant: the tenant.
        start: inclusive start of the time range (timezone-aware; naive means UTC).
        end: exclusive end.
        predicates: ``{column: value | [values]}``; ``None`` as a value means IS NULL.
        version: read this table version (default latest).
        use_regex: also prune with the fragment regexes (off: min/max only, for comparison).

    Raises:
        QueryError: a predicate names a column the table lacks, or the query is malformed.

    Example::

        df, report = read_events(spark, store, uri, tenant="acme", start=t0, end=t1,
                                 predicates={"service": ["billing", "cart"], "env": "prod"})
    """
    from pyspark.sql import functions as F

    start, end = (aware(t) for t in (start, end))
    kept, report = plan_read(store, table, tenant=tenant, start=start, end=end, predicates=predicates,
                             version=version, use_regex=use_regex)
    if not kept:
        return spark.createDataFrame([], store.schema(table)), report
    df = store.read_files(table, kept)
    cond = (F.col("tenant_id") == tenant) & (F.col("ts") >= F.lit(start)) & (F.col("ts") < F.lit(end))
    for col, values in _values(predicates).items():
        present = [v for v in values if v is not None]
        match = F.col(col).isin(present) if present else F.lit(False)
        cond = cond & ((match | F.col(col).isNull()) if None in values else match)
    return df.where(cond), report
