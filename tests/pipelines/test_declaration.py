"""The declaration alone (no Spark): DAG order, and every inconsistency rejected with a message that names it."""

from __future__ import annotations

import dataclasses

import pytest

from lakeshard.pipelines import (
    Flow,
    FlowContext,
    FlowResult,
    Pipeline,
    PipelineError,
    expect,
    expect_or_drop,
    expect_or_fail,
    expect_or_quarantine,
    lakeshard_pipeline,
)
from lakeshard.pipelines.runner import refresh_closure, resolve_params


def _nothing(ctx: FlowContext) -> FlowResult:
    return FlowResult()


def _flow(name: str, inputs: tuple[str, ...] = (), outputs: tuple[str, ...] = (), **kw: object) -> Flow:
    return Flow(name, _nothing, inputs=inputs, outputs=outputs, **kw)  # type: ignore[arg-type]


def test_lakeshard_pipeline_runs_in_dependency_order() -> None:
    p = lakeshard_pipeline()
    assert p.order() == ["route", "ingest", "close_buckets", "compact", "autoshard", "balance", "compact_books"]
    assert p.edges() == [("route", "ingest"), ("ingest", "close_buckets"), ("close_buckets", "compact"),
                         ("ingest", "compact"), ("compact", "autoshard"), ("route", "autoshard"),
                         ("autoshard", "balance"), ("route", "balance"), ("balance", "compact_books")]
    assert p.jobs() == {"ingest": ["route", "ingest"],
                        "maintenance": ["close_buckets", "compact", "autoshard", "balance", "compact_books"]}
    assert p.order(["balance", "route"]) == ["route", "balance"]
    assert p.downstream("ingest") == {"close_buckets", "compact", "autoshard", "balance", "compact_books"}
    assert p.downstream("balance") == {"compact_books"}
    assert p.downstream("compact_books") == set()


def test_order_follows_tables_not_declaration_order() -> None:
    p = Pipeline("p", (_flow("c", ("b_out",), ("c_out",)), _flow("b", ("a_out",), ("b_out",)),
                       _flow("a", ("src",), ("a_out",)), _flow("z", ("src",), ())), sources=("src",))
    assert p.order() == ["a", "b", "c", "z"]


def test_after_orders_flows_no_table_links() -> None:
    p = Pipeline("p", (_flow("compact", outputs=("x",), after=("close",)), _flow("close", outputs=("y",))))
    assert p.order() == ["close", "compact"]


def test_a_cycle_is_rejected_and_named() -> None:
    with pytest.raises(PipelineError, match=r"pipeline 'p' has a cycle: a -> b -> c -> a|b -> c -> a -> b"):
        Pipeline("p", (_flow("a", ("c_out",), ("a_out",)), _flow("b", ("a_out",), ("b_out",)),
                       _flow("c", ("b_out",), ("c_out",))))


def test_an_unknown_input_is_rejected_and_named() -> None:
    with pytest.raises(PipelineError, match=r"flow 'b' reads 'nowhere', which no flow of pipeline 'p' writes"):
        Pipeline("p", (_flow("a", outputs=("a_out",)), _flow("b", ("nowhere",), ("b_out",))))


def test_repeated_names_unknown_after_and_stray_refresh_are_rejected() -> None:
    with pytest.raises(PipelineError, match=r"flow name\(s\) \['a'\] declared more than once"):
        Pipeline("p", (_flow("a"), _flow("a")))
    with pytest.raises(PipelineError, match=r"flow 'a' runs after unknown flow\(s\) \['ghost'\]"):
        Pipeline("p", (_flow("a", after=("ghost",)),))
    with pytest.raises(PipelineError, match=r"would refresh \['other'\], which are not among its outputs"):
        Pipeline("p", (_flow("a", outputs=("mine",), refresh=("other",)),))
    with pytest.raises(PipelineError, match=r"refresh_with \['elsewhere'\] must name its own inputs"):
        Pipeline("p", (_flow("a", outputs=("mine",)),
                       dataclasses.replace(_flow("b", ("mine",), ("state",)), refresh_with=("elsewhere",))))


@pytest.mark.parametrize("rule", [expect_or_drop("r", "x > 0"), expect_or_quarantine("r", "x > 0"),
                                  expect_or_fail("r", "x > 0")])
def test_only_a_gated_flow_can_act_on_rows(rule: object) -> None:
    with pytest.raises(PipelineError, match=r"flow 'a' commits inside the library .* can only record"):
        Pipeline("p", (_flow("a", expectations=(rule,)),))
    gated = Pipeline("p", (_flow("a", expectations=(rule, expect("s", "y > 0")), gated=True),))
    assert [e.kind.value for e in gated.flow("a").expectations] == [rule.kind.value, "expect"]  # type: ignore[attr-defined]


def test_expectation_names_must_be_unique_in_a_flow() -> None:
    with pytest.raises(PipelineError, match=r"expectation names repeat: \['r', 'r'\]"):
        Pipeline("p", (_flow("a", expectations=(expect("r", "x > 0"), expect("r", "y > 0"))),))


def test_unknown_flows_and_parameters_are_rejected_before_a_run() -> None:
    p = lakeshard_pipeline()
    with pytest.raises(PipelineError, match=r"has no flow 'vacuum'; flows: \['route', 'ingest', 'close_buckets'"):
        p.order(["vacuum"])
    with pytest.raises(PipelineError, match=r"flow 'route' has no parameter 'speed'; parameters: \['batch_files'\]"):
        resolve_params(p, {"route": {"speed": 3}})
    with pytest.raises(PipelineError, match=r"parameter autoshard.apply: expected true or false, found 'maybe'"):
        resolve_params(p, {"autoshard": {"apply": "maybe"}})
    assert resolve_params(p, {"autoshard": {"apply": "false"}, "route": {"batch_files": "7"}})["autoshard"] == \
        {"apply": False, "as_of": ""}
    assert resolve_params(p, {"route": {"batch_files": "7"}})["route"] == {"batch_files": 7}


def test_extend_is_how_later_flows_plug_in() -> None:
    p = lakeshard_pipeline().extend(
        _flow("hourly_rollup", ("events", "buckets"), ("rollups",), job="reports"),
        _flow("dedupe_rollup", ("rollups",), ("rollups",), refresh=(), job="reports"))
    assert p.order()[-2:] == ["hourly_rollup", "dedupe_rollup"]
    assert p.upstream("hourly_rollup") == ["close_buckets", "ingest"]
    assert p.upstream("dedupe_rollup") == ["hourly_rollup"]  # its own output among its inputs is no edge
    assert p.jobs()["reports"] == ["hourly_rollup", "dedupe_rollup"]
    # The maintenance job's chain (close buckets -> compact -> autoshard -> balance -> compact_books) holds by
    # `after`.
    assert p.jobs()["maintenance"] == ["close_buckets", "compact", "autoshard", "balance", "compact_books"]
    assert p.upstream("compact") == ["close_buckets", "ingest"]


def test_a_full_refresh_takes_in_the_upstream_flows_it_must_rebuild() -> None:
    p = lakeshard_pipeline()
    # ingest empties events, so the bucket states describing them are rebuilt too (refresh_with)
    assert refresh_closure(p, ["ingest"]) == ["close_buckets", "ingest", "route"]
    assert refresh_closure(p, ["compact"]) == ["compact"]  # rearranges events in place: nothing to rebuild
    assert refresh_closure(p, ["balance"]) == ["balance"]  # keeps its settings: nothing to rebuild upstream
    assert refresh_closure(p, ["route"]) == ["route"]


def test_with_upstream_gives_what_a_flow_needs_in_order() -> None:
    p = lakeshard_pipeline()
    assert p.with_upstream(["balance"]) == ["route", "ingest", "close_buckets", "compact", "autoshard", "balance"]
    assert p.with_upstream(["close_buckets"]) == ["route", "ingest", "close_buckets"]
    assert p.with_upstream(["ingest"]) == ["route", "ingest"]
    assert p.with_upstream(["route"]) == ["route"]
