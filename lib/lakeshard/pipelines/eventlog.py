"""The pipeline event log: one Delta table, ``pipeline_events``, queryable like Delta Live Tables' event log.

Every run appends one row when a flow starts and one when it ends (``completed``, ``failed``,
``skipped`` because an upstream flow failed, or ``up_to_date`` because none of its input tables changed
since its last completed run). End rows carry the counts (rows in / out, duplicates dropped, quarantined,
dropped by expectations), the pass/fail counts of every expectation, the duration and the error message.
Rows are appended as they happen, so a crashed run still shows what it started.

Example::

    log = EventLog(store, cfg)
    log.read().where("event = 'failed'").select("run_id", "flow", "error").show()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.config import LakeshardConfig
from lakeshard.errors import TableStoreError
from lakeshard.lake import FileInfo, TableStore
from lakeshard.tables import EXPECTATION_SCHEMA, PIPELINE_EVENTS, USER_TABLE_SHAPES
from lakeshard.tables import PIPELINE_EVENTS_SCHEMA as EVENT_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeshard.pipelines.context import FlowResult, RuleCount

__all__ = ["EVENTS_TABLE", "EVENT_KINDS", "EVENT_SCHEMA", "EventLog", "FlowEvent"]

EVENTS_TABLE = PIPELINE_EVENTS
EVENT_KINDS = ("started", "completed", "failed", "skipped", "up_to_date")
_FIRST_PAGE = 32  # commits of the log read first when looking for the newest event



@dataclass(frozen=True)
class FlowEvent:
    """One row of the event log."""

    run_id: str
    pipeline: str
    flow: str
    event: str
    full_refresh: bool
    result: FlowResult | None = None
    expectations: Sequence[RuleCount] = ()
    duration_seconds: float | None = None
    error: str | None = None
    input_versions: Mapping[str, int] | None = None

    def row(self) -> tuple[Any, ...]:
        """Return the event as a row of :data:`EVENT_SCHEMA`."""
        r = self.result
        rules = [(c.rule.name, c.rule.kind.value, c.rule.condition, c.passed, c.failed) for c in self.expectations]
        details = {k: str(v) for k, v in r.details.items()} if r else None
        return (self.run_id, self.pipeline, self.flow, self.event, datetime.now(UTC), self.full_refresh,
                r.rows_in if r else None, r.rows_out if r else None, r.duplicates_dropped if r else None,
                r.quarantined if r else None, r.dropped if r else None, rules if self.expectations else None,
                self.duration_seconds, self.error, dict(self.input_versions) if self.input_versions else None,
                details)


def _arrow_row(row: tuple[Any, ...]) -> list[Any]:
    """Return an event row with its nested values as pyarrow takes them (struct fields as dicts)."""
    names = [f.name for f in EXPECTATION_SCHEMA.fields]
    return [[dict(zip(names, rule, strict=True)) for rule in v] if i == _RULES and v is not None else v
            for i, v in enumerate(row)]


_RULES = [f.name for f in EVENT_SCHEMA.fields].index("expectations")


class EventLog:
    """Appends flow events to ``<lakehouse>/pipeline_events`` and reads them back."""

    def __init__(self, store: TableStore, cfg: LakeshardConfig) -> None:
        self.store = store
        self.uri = cfg.table_uri(EVENTS_TABLE)
        self._ready = False

    def append(self, *events: FlowEvent) -> None:
        """Commit ``events`` to the log in one commit."""
        if not self._ready:
            shape = USER_TABLE_SHAPES[EVENTS_TABLE]
            self.store.create(self.uri, shape.schema, description=shape.description)
            self._ready = True
        schema = self.store.arrow_schema(self.uri)
        rows = pa.Table.from_pylist([dict(zip(schema.names, _arrow_row(e.row()), strict=True)) for e in events],
                                    schema=schema)
        self.store.append_arrow(self.uri, rows, metadata={"run_id": events[0].run_id})

    def read(self, run_id: str | None = None) -> DataFrame:
        """Return the log (of one run when ``run_id`` is given), oldest first.

        Raises:
            TableNotFound: no pipeline has run in this lakehouse yet.
        """
        from pyspark.sql import functions as F

        df = self.store.read(self.uri)
        if run_id is not None:
            df = df.where(F.col("run_id") == run_id)
        return df.orderBy("timestamp")

    def exists(self) -> bool:
        """Return whether any pipeline run has written the log yet."""
        return self.store.exists(self.uri)

    def last_completed_inputs(self, flow: str) -> dict[str, int] | None:
        """Return the input versions recorded by ``flow``'s latest ``completed`` or ``up_to_date`` event, or None."""
        newest = self._newest(["flow", "event", "timestamp", "input_versions"], flow=flow)
        if newest is None or newest["input_versions"] is None:
            return None
        return {str(k): int(v) for k, v in newest["input_versions"]}

    def latest_run(self) -> str | None:
        """Return the id of the newest run in the log, or None when it is empty or missing."""
        newest = self._newest(["run_id", "timestamp"])
        return None if newest is None else str(newest["run_id"])

    def _newest(self, columns: Sequence[str], *, flow: str | None = None) -> dict[str, Any] | None:
        """Return the newest event (these columns; of ``flow``'s completed or up-to-date ends when given), read
        in this process; None if there is none.

        The log grows by a file per append, run after run: it is read newest commits first, in pages that
        double, and stops at the first page holding a match (the latest run's, as a rule).
        """
        if not self.exists():
            return None
        live = {f.path: f for f in self.store.files(self.uri)}
        end, page = self.store.version(self.uri), _FIRST_PAGE
        while end >= 0 and live:
            start = max(0, end - page + 1)
            try:
                entries = self.store.log_entries(self.uri, start=start, end=end)
            except TableStoreError:  # older commits cleaned from the log: read what is left whole
                return self._newest_in(list(live.values()), columns, flow)
            added = [live.pop(c.file.path) for e in entries for c in e.changes
                     if c.action == "add" and c.file.path in live]
            found = self._newest_in(added, columns, flow) if added else None
            if found is not None:
                return found
            end, page = start - 1, page * 2
        return None

    def _newest_in(self, files: Sequence[FileInfo], columns: Sequence[str], flow: str | None
                   ) -> dict[str, Any] | None:
        if not files:
            return None
        log = self.store.read_arrow(self.uri, files, columns)
        if flow is not None:
            log = log.filter(pc.and_(pc.equal(log.column("flow"), flow),
                                     pc.is_in(log.column("event"), pa.array(["completed", "up_to_date"]))))
        if not log.num_rows:
            return None
        newest = pc.sort_indices(log, sort_keys=[("timestamp", "descending")])[:1]
        rows: list[dict[str, Any]] = log.take(newest).to_pylist()
        return rows[0]
