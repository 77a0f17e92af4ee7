"""``spark.read.format("lakeshard")``: a Spark Python data source that prunes a table's files before Spark reads.

Spark pushes a query's filters to :meth:`LakeshardReader.pushFilters`; the reader keeps the equality, IN and
IS NULL filters on top-level string columns and the comparisons of the event time ``ts`` (``>``, ``>=``, ``<``,
``<=``, ``=``; ``BETWEEN`` arrives as two), and plans with the same stages as
:func:`~lakeshard.query.read_events` (:func:`choose_files_by_values`): partition values and the ``hour``
partition against the time range (late events included: a later hour's file is kept when its ``ts`` statistics
meet the range), then the files' min/max statistics and null counts, then the fragment regexes
(:mod:`~lakeshard.compaction.fragment_table`, read for the partitions left only). Every
filter is still handed back to Spark, which applies it to the rows read: pruning only saves reads. One input
partition per file left; each is read with pyarrow in the Python worker (``TableStore.read_arrow``).

What was pruned: ``reportPath`` (option) receives the :class:`~lakeshard.query.PruningReport` as JSON
when the scan is planned, and the reader logs it (logger ``lakeshard.query.datasource``).

Spark evaluates Python data sources in Python worker processes, so ``lakeshard`` must be importable there (on
a cluster: the library installed on the cluster). Filter pushdown to Python data sources is off unless
``spark.sql.python.filterPushdown.enabled`` is true (Spark 4.1+); without it, and on Spark 4.0 (which has no filter
pushdown to Python data sources), every file is read.

Example::

    register_lakeshard_source(spark)
    df = (spark.read.format("lakeshard").load(cfg.table_uri("events"))
          .where("tenant_id = 'acme' AND service IN ('billing', 'cart')"))
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from lakeshard.lake import FileInfo
from lakeshard.query.errors import QueryError
from lakeshard.query.read import PruningReport, TimeBounds, choose_files_by_values, pruning_fragments

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import Filter
    from pyspark.sql.types import StructType

__all__ = ["LakeshardDataSource", "LakeshardReader", "register_lakeshard_source"]

_LOG = logging.getLogger(__name__)
# The event time column: comparisons on it prune by the ``hour`` partition and ``ts`` statistics.
_TIMESTAMP = "ts"


def register_lakeshard_source(spark: SparkSession) -> None:
    """Register ``format("lakeshard")`` with the session (classic or Spark Connect) and turn filter pushdown
    to Python data sources on."""
    spark.dataSource.register(LakeshardDataSource)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def _store() -> Any:
    from lakeshard.lake import EmbeddedTableStore

    return EmbeddedTableStore(None)  # metadata and Arrow reads only: no Spark session in the worker


class LakeshardDataSource(DataSource):
    """``spark.read.format("lakeshard").load(table_uri)``: a lakeshard (Delta) table with pruning."""

    @classmethod
    def name(cls) -> str:
        """Return the format name."""
        return "lakeshard"

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise QueryError('format("lakeshard") needs the table\'s URI: .load("<lakehouse>/events")')
        return str(path)

    def schema(self) -> StructType:
        """Return the table's schema (data and partition columns), every column nullable: the Arrow batches
        read from Parquet say nullable, and Spark checks the two agree."""
        from pyspark.sql.types import StructField, StructType

        table: StructType = _store().schema(self._path())
        return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in table.fields])

    def reader(self, schema: StructType) -> LakeshardReader:
        """Return the reader of the table."""
        return LakeshardReader(self._path(), self.options.get("reportPath"))


class _Files(InputPartition):
    def __init__(self, files: Sequence[FileInfo]) -> None:
        super().__init__(None)
        self.files = list(files)


class LakeshardReader(DataSourceReader):
    """Plans the files a scan reads from the pushed filters and reads them with pyarrow."""

    def __init__(self, table: str, report_path: str | None) -> None:
        self.table = table
        self.report_path = report_path
        self.values: dict[str, tuple[str | None, ...]] = {}
        self.time: TimeBounds | None = None

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Remember the equality / IN / IS NULL filters on top-level columns and the comparisons of ``ts`` for
        pruning; return every filter, so that Spark applies them all to the rows read."""
        # The filter classes came with filter pushdown (pyspark 4.1): an older Spark never calls this.
        from pyspark.sql.datasource import EqualTo, In, IsNull

        for f in filters:
            attribute: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
            if len(attribute) != 1:
                continue
            col = attribute[0]
            if col == _TIMESTAMP:
                self._push_time(f)
                continue
            if not isinstance(f, EqualTo | In | IsNull):
                continue
            if isinstance(f, EqualTo) and (f.value is None or isinstance(f.value, str)):
                got: tuple[str | None, ...] = (f.value,)
            elif isinstance(f, In) and all(v is None or isinstance(v, str) for v in f.value):
                got = tuple(f.value)
            elif isinstance(f, IsNull):
                got = (None,)
            else:
                continue
            # Filters are ANDed: two on one column leave the values both allow.
            self.values[col] = got if col not in self.values else tuple(v for v in self.values[col] if v in got)
        return filters

    def _push_time(self, f: Filter) -> None:
        from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual

        value = getattr(f, "value", None)
        if not isinstance(value, datetime):
            return
        # Filters are ANDed: each comparison narrows the range.
        time = self.time or TimeBounds()
        if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
            time = time.and_lower(value, not isinstance(f, GreaterThan))
        if isinstance(f, LessThan | LessThanOrEqual | EqualTo):
            time = time.and_upper(value, not isinstance(f, LessThan))
        self.time = time

    def plan(self) -> tuple[list[FileInfo], PruningReport]:
        """Return the files the scan reads and what each stage pruned."""
        store = _store()
        files = store.files(self.table)
        parts = store.partition_columns(self.table)
        return choose_files_by_values(files, lambda left: pruning_fragments(store, self.table, left), self.values,
                                      partition_columns=parts, time=self.time, timestamp=_TIMESTAMP)

    def partitions(self) -> Sequence[InputPartition]:
        """Return one input partition per file left after pruning (at least one, possibly empty)."""
        kept, report = self.plan()
        _LOG.info("%s: %s", self.table, report.render())
        if self.report_path:
            time = self.time or TimeBounds()
            with open(self.report_path, "w", encoding="utf-8") as out:
                json.dump({"filters": {c: list(v) for c, v in self.values.items()},
                           "time": {"lower": time.lower and time.lower.isoformat(), "upper": time.upper and
                                    time.upper.isoformat(), "lower_inclusive": time.lower_inclusive,
                                    "upper_inclusive": time.upper_inclusive},
                           "late_candidates": report.late_candidates,
                           "considered": report.considered, "pruned_by_partition": report.pruned_by_partition,
                           "pruned_by_min_max": report.pruned_by_min_max, "pruned_by_regex": report.pruned_by_regex,
                           "read": list(report.read)}, out)
        return [_Files([f]) for f in kept] or [_Files([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the rows of the partition's files as Arrow record batches."""
        files = partition.files if isinstance(partition, _Files) else []
        if files:
            yield from _store().read_arrow(self.table, files).to_batches()
