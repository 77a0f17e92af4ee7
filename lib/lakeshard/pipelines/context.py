"""What a flow function gets (:class:`FlowContext`) and gives back (:class:`FlowResult`), and the
expectation gate it passes its rows through.

The gate is where expectations act, so it sits right before a flow's commit: failing rows are counted
per rule, dropped ones left out, quarantined ones committed to ``expectation_quarantine`` with the same
app transactions as the flow's own commit (a replayed step commits them once), and an ``expect_or_fail``
rule raises :class:`ExpectationFailed` before anything of the step is committed.

The gate takes a Spark DataFrame (``gate(df, txns)``, :meth:`ExpectationGate.observe`) or, for a flow that
works on Arrow tables in the driver, a ``pa.Table`` (:meth:`ExpectationGate.keep_arrow`,
:meth:`ExpectationGate.observe_added`): when every rule of the flow is in the subset
:mod:`lakeshard.pipelines.arrow_rules` evaluates exactly as Spark does, the rules run with pyarrow and no Spark
session is needed (except to write quarantined rows or show a failing row, both rare); otherwise Spark runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from lakeshard.config import LakeshardConfig
from lakeshard.errors import TableStoreError
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.pipelines.arrow_rules import ArrowCondition, UnsupportedCondition, compile_condition
from lakeshard.pipelines.errors import PipelineError
from lakeshard.pipelines.expectations import Expectation, ExpectationKind
from lakeshard.runtime import arrow_dataframe
from lakeshard.tables import EXPECTATION_QUARANTINE, EXPECTATION_QUARANTINE_PARTITIONING, EXPECTATION_QUARANTINE_SCHEMA

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "EXPECTATION_QUARANTINE",
    "DeclaredFlow",
    "ExpectationFailed",
    "ExpectationGate",
    "FlowContext",
    "FlowResult",
    "RuleCount",
    "new_files",
    "new_rows",
]


class DeclaredFlow(Protocol):
    """What a gate and a context read of the flow they serve (a :class:`~lakeshard.pipelines.declaration.Flow`):
    its name and its rules. The declaration holds the functions that take a context, so a context names the
    flow by this shape rather than by the class."""

    @property
    def name(self) -> str: ...

    @property
    def expectations(self) -> tuple[Expectation, ...]: ...


class ExpectationFailed(PipelineError):
    """An ``expect_or_fail`` rule failed: the flow stopped before its commit.

    Attributes:
        flow: the flow's name.
        rule: the expectation's name.
        failed: how many rows of the step failed it.
    """

    def __init__(self, flow: str, rule: Expectation, failed: int, example: str) -> None:
        self.flow, self.rule, self.failed = flow, rule.name, failed
        super().__init__(f"flow {flow!r}: expectation {rule.name!r} ({rule.condition}) failed on {failed} row(s), "
                         f"e.g. {example[:300]}; nothing of this step was committed")


@dataclass
class RuleCount:
    """Rows that passed and failed one expectation during a run."""

    rule: Expectation
    passed: int = 0
    failed: int = 0


def _passes(rule: Expectation) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.expr(rule.condition).cast("boolean"), F.lit(False))


class ExpectationGate:
    """Applies a flow's expectations to the rows it is about to commit, and keeps the counts per rule."""

    def __init__(self, flow: DeclaredFlow, store: TableStore, cfg: LakeshardConfig, run_id: str) -> None:
        self.flow = flow
        self.store = store
        self.run_id = run_id
        self.quarantine_uri = cfg.table_uri(EXPECTATION_QUARANTINE)
        self.counts = {e.name: RuleCount(e) for e in flow.expectations}
        self.dropped = 0
        self.quarantined = 0
        # The rules compiled for the last schema seen, or why one of them is outside the Arrow subset.
        self._compiled: tuple[pa.Schema, dict[str, ArrowCondition] | UnsupportedCondition] | None = None

    def runs_in_arrow(self, schema: pa.Schema) -> bool:
        """Return whether every rule of the flow evaluates in Arrow on tables of ``schema``."""
        return self._arrow_rules(schema) is not None

    def _arrow_rules(self, schema: pa.Schema) -> dict[str, ArrowCondition] | None:
        """Return every rule compiled for ``schema`` by name, or None when one is outside the Arrow subset."""
        if self._compiled is None or not self._compiled[0].equals(schema):
            try:
                compiled: dict[str, ArrowCondition] | UnsupportedCondition = {
                    e.name: compile_condition(e.condition, schema) for e in self.flow.expectations}
            except UnsupportedCondition as exc:
                compiled = exc
            self._compiled = (schema, compiled)
        rules = self._compiled[1]
        return None if isinstance(rules, UnsupportedCondition) else rules

    def _arrow_passes(self, rows: pa.Table) -> dict[str, pa.ChunkedArray] | None:
        rules = self._arrow_rules(rows.schema)
        return None if rules is None else {name: rule.passes(rows) for name, rule in rules.items()}

    def _count_arrow(self, total: int, passes: Mapping[str, pa.ChunkedArray]) -> None:
        import pyarrow.compute as pc

        for name, c in self.counts.items():
            passed = int(pc.sum(passes[name]).as_py() or 0)
            c.passed += passed
            c.failed += total - passed

    def observe_arrow(self, rows: pa.Table) -> None:
        """Count passes and failures of every rule on ``rows``, keeping every row.

        Raises:
            UnsupportedCondition: a rule is outside the Arrow subset (see :meth:`runs_in_arrow`).
        """
        passes = self._arrow_passes(rows)
        if passes is None:
            assert self._compiled is not None and isinstance(self._compiled[1], UnsupportedCondition)
            raise self._compiled[1]
        self._count_arrow(rows.num_rows, passes)

    def observe_added(self, table: str, since_version: int | None) -> None:
        """Count every rule on the rows added to ``table`` after ``since_version`` (all rows when None): read
        with pyarrow (only the columns the rules name) when every rule runs in Arrow, else with Spark."""
        if not self.counts:
            return
        schema = self.store.arrow_schema(table)
        rules = self._arrow_rules(schema)
        if rules is None:
            self.observe(new_rows(self.store, table, since_version))
            return
        # At least one column, so the rows are counted even when no rule names one.
        columns = sorted({c for rule in rules.values() for c in rule.columns}) or [schema.names[0]]
        rows = self.store.read_arrow(table, new_files(self.store, table, since_version), columns=columns)
        self._count_arrow(rows.num_rows, {name: rule.passes(rows) for name, rule in rules.items()})

    def keep_arrow(self, rows: pa.Table, app_transactions: Sequence[AppTransaction] = ()) -> pa.Table | None:
        """Return the rows of ``rows`` to commit after the flow's expectations, as :meth:`__call__` does for a
        DataFrame (same counts, drops, quarantine commit and failure); None, having done nothing, when a rule is
        outside the Arrow subset: then hand the rows to :meth:`__call__` as a DataFrame.

        Raises:
            ExpectationFailed: an ``expect_or_fail`` rule failed on some row; nothing was committed.
        """
        import pyarrow.compute as pc

        rules = self.flow.expectations
        if not rules:
            return rows
        passes = self._arrow_passes(rows)
        if passes is None:
            return None
        for rule in rules:
            if rule.kind is ExpectationKind.FAIL:
                failing = pc.invert(passes[rule.name])
                n = int(pc.sum(failing).as_py() or 0)
                if n:
                    self._count_arrow(rows.num_rows, passes)  # the event log shows the counts that made it fail
                    example = self._as_dataframe(rows.filter(failing).slice(0, 1))
                    line = example.select(_row_json(example)).first()
                    raise ExpectationFailed(self.flow.name, rule, n, str(line[0]) if line else "")
        self._count_arrow(rows.num_rows, passes)
        quarantine = [e for e in rules if e.kind is ExpectationKind.QUARANTINE]
        drop = [e for e in rules if e.kind is ExpectationKind.DROP]
        if not quarantine and not drop:
            return rows
        in_quarantine = 0
        if quarantine:
            failing = pc.invert(_all_true([passes[e.name] for e in quarantine]))
            in_quarantine = int(pc.sum(failing).as_py() or 0)
            # Only failing rows go to Spark (to be written as the DataFrame path writes them); with none, the
            # commit still carries the step's app transactions, as the DataFrame path's empty append does.
            self._quarantine(self._as_dataframe(rows.filter(failing)) if in_quarantine else None, quarantine,
                             app_transactions)
        kept = rows.filter(_all_true([passes[e.name] for e in [*quarantine, *drop]]))
        self.quarantined += in_quarantine
        self.dropped += rows.num_rows - kept.num_rows - in_quarantine
        return kept

    def _as_dataframe(self, rows: pa.Table) -> DataFrame:
        return arrow_dataframe(self.store.spark, rows)

    def observe(self, df: DataFrame) -> None:
        """Count passes and failures of every rule on ``df`` (one aggregation), keeping every row."""
        from pyspark.sql import functions as F

        if not self.counts:
            return
        rules = list(self.counts.values())
        aggs = [F.sum(F.when(_passes(c.rule), 1).otherwise(0)).alias(f"p{i}") for i, c in enumerate(rules)]
        row = df.agg(F.count(F.lit(1)).alias("n"), *aggs).first()
        n = int(row["n"]) if row is not None else 0
        for i, c in enumerate(self.counts.values()):
            passed = int(row[f"p{i}"] or 0) if row is not None else 0
            c.passed += passed
            c.failed += n - passed

    def __call__(self, df: DataFrame, app_transactions: Sequence[AppTransaction] = ()) -> DataFrame:
        """Return the rows of ``df`` to commit after the flow's expectations.

        Args:
            df: the rows the flow is about to commit (persist it: it is read several times).
            app_transactions: the flow's own commit's app transactions; quarantined rows are committed with
                them (prefixed by the flow's name), so a replay of the same step quarantines nothing twice.

        Raises:
            ExpectationFailed: an ``expect_or_fail`` rule failed on some row; nothing was committed.
        """
        from pyspark.sql import functions as F

        rules = self.flow.expectations
        if not rules:
            return df
        self._fail_fast(df)
        self.observe(df)
        quarantine = [e for e in rules if e.kind is ExpectationKind.QUARANTINE]
        drop = [e for e in rules if e.kind is ExpectationKind.DROP]
        keep_all = F.lit(True)
        for e in [*quarantine, *drop]:
            keep_all = keep_all & _passes(e)
        if quarantine:
            self._quarantine(df, quarantine, app_transactions)
        if not quarantine and not drop:
            return df
        total, kept = df.count(), df.where(keep_all)
        n_kept = kept.count()
        # A row failing a quarantine rule is quarantined (even if it also fails a drop rule); the rest dropped.
        in_quarantine = df.where(~_all_pass(quarantine)).count() if quarantine else 0
        self.quarantined += in_quarantine
        self.dropped += total - n_kept - in_quarantine
        return kept

    def _fail_fast(self, df: DataFrame) -> None:
        for rule in self.flow.expectations:
            if rule.kind is not ExpectationKind.FAIL:
                continue
            failing = df.where(~_passes(rule))
            n = failing.count()
            if n:
                self.observe(df)  # the event log shows the counts that made the flow fail
                example = failing.select(_row_json(failing)).first()
                raise ExpectationFailed(self.flow.name, rule, n, str(example[0]) if example else "")

    def _quarantine(self, df: DataFrame | None, rules: Sequence[Expectation], txns: Sequence[AppTransaction]) -> None:
        """Commit the rows of ``df`` failing a quarantine rule (None: no row failed) with the flow's app
        transactions."""
        self.store.create(self.quarantine_uri, EXPECTATION_QUARANTINE_SCHEMA,
                          partition_by=EXPECTATION_QUARANTINE_PARTITIONING,
                          description="rows that failed an expect_or_quarantine rule, with the rule")
        own = [AppTransaction(f"{self.flow.name}/{t.app_id}", t.version) for t in txns]
        meta = {"flow": self.flow.name, "run_id": self.run_id}
        if df is None:
            self.store.append(self.quarantine_uri, None, app_transactions=own, metadata=meta)
            return
        from pyspark.sql import functions as F

        # The first failing quarantine rule names the row's reason.
        rule_name, condition = F.lit(None).cast("string"), F.lit(None).cast("string")
        for e in reversed(rules):
            failed = ~_passes(e)
            rule_name = F.when(failed, F.lit(e.name)).otherwise(rule_name)
            condition = F.when(failed, F.lit(e.condition)).otherwise(condition)
        rows = df.where(~_all_pass(rules)).select(
            F.lit(self.flow.name).alias("flow"), rule_name.alias("rule"), condition.alias("condition"),
            F.lit(self.run_id).alias("run_id"), _row_json(df).alias("row"),
            F.lit(datetime.now(UTC)).alias("quarantined_at"), F.lit(1).cast("long").alias("rows"))
        self.store.append(self.quarantine_uri, rows, app_transactions=own, metadata=meta)


def _all_pass(rules: Sequence[Expectation]) -> Column:
    from pyspark.sql import functions as F

    ok = F.lit(True)
    for e in rules:
        ok = ok & _passes(e)
    return ok


def _all_true(masks: Sequence[pa.ChunkedArray]) -> pa.ChunkedArray:
    """Return the rows where every mask (without nulls) is true."""
    import pyarrow.compute as pc

    out = masks[0]
    for mask in masks[1:]:
        out = pc.and_(out, mask)
    return out


def _row_json(df: DataFrame) -> Column:
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*[F.col(c) for c in df.columns]))


@dataclass(frozen=True)
class FlowResult:
    """What one flow did in a run; the event log stores it.

    ``rows_in = rows_out + duplicates_dropped + quarantined + dropped`` holds for flows that move rows
    (route, ingest); flows that plan (autoshard, balance) count tenants in and settings committed out.
    """

    rows_in: int = 0
    rows_out: int = 0
    duplicates_dropped: int = 0
    quarantined: int = 0
    dropped: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)
    # What the library call returned (a plan, a report), for a caller that shows more than the counts, such as
    # the ``lakeshard`` command that ran the flow; the event log keeps only the fields above.
    outcome: Any = field(default=None, compare=False, repr=False)


@dataclass
class FlowContext:
    """Everything a flow function needs: the session, the store, the config, its parameters, its gate and the
    clock its decisions go by (wall time unless the run was given another, e.g. a simulation's).

    ``session`` may be None when the store starts Spark on first use (:func:`lakeshard.lake.open_lazy_store`):
    a flow hands ``session`` to what can run without Spark and uses :attr:`spark` where it needs one.
    """

    session: SparkSession | None
    store: TableStore
    cfg: LakeshardConfig
    flow: DeclaredFlow
    run_id: str
    params: Mapping[str, Any]
    gate: ExpectationGate
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # The run's gate of each flow by name (:meth:`gate_of`); None for a context built outside a pipeline run.
    gates: Callable[[str], ExpectationGate] | None = None

    @property
    def spark(self) -> SparkSession:
        """Return the session (the store's, started now if it has none yet)."""
        return self.session if self.session is not None else self.store.spark

    def gate_of(self, flow: str) -> ExpectationGate | None:
        """Return the run's expectation gate of ``flow`` (this flow's own gate for its own name), or None for a
        context built outside a pipeline run.

        A flow that commits another flow's rows passes them through that flow's gate: the route flow finishing a
        batch planned for the fused hand-off commits ``events`` as the ingest flow does, under its expectations.
        One gate per flow and run, so its counts are the flow's whichever call committed the rows.
        """
        if flow == self.flow.name:
            return self.gate
        return None if self.gates is None else self.gates(flow)


def new_files(store: TableStore, table: str, since_version: int | None) -> list[FileInfo]:
    """Return the live files of ``table`` that were not live at ``since_version`` (all when None)."""
    files = store.files(table)
    if since_version is not None:
        added = _added_after(store, table, since_version)
        files = [f for f in files if f.path in added]
    return files


def new_rows(store: TableStore, table: str, since_version: int | None) -> DataFrame:
    """Return the rows added to ``table`` after ``since_version`` (all rows when None): the rows of
    :func:`new_files`. Used to check expectations on what an ungated flow committed."""
    files = new_files(store, table, since_version)
    if not files:
        return store.read(table).limit(0)
    return store.read_files(table, files)


def _added_after(store: TableStore, table: str, version: int) -> set[str]:
    """Return the paths of the files the commits after ``version`` added, read from those commits: a snapshot at
    ``version`` would be loaded afresh, at a cost growing with the table's files. From that snapshot only when the
    log no longer holds the commits."""
    try:
        entries = store.log_entries(table, start=version + 1)
    except TableStoreError:  # cleaned from the log after a checkpoint
        before = {f.path for f in store.files(table, version=version)}
        return {f.path for f in store.files(table)} - before
    return {c.file.path for e in entries for c in e.changes if c.action == "add"}
