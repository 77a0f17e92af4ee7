"""Expectation conditions in Arrow against Spark on the same rows: the same three-valued result for every
condition of the subset, and anything else refused (never evaluated differently)."""

from __future__ import annotations

import math
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeshard.pipelines.arrow_rules import UnsupportedCondition, compile_condition
from lakeshard.pipelines.context import _passes
from lakeshard.pipelines.expectations import expect

INTS = [None, 0, 1, -1, 2, 7, 1 << 40, -(1 << 63), (1 << 63) - 1]
FLOATS = [None, 0.0, -0.0, 1.0, 2.5, -3.0, math.nan, math.nan, math.nan, math.inf, -math.inf, 1e300, 7.0]
STRINGS = [None, "", "a", "A", "b", "ab", "it's", "''", "é", "😀", "a b", "\n", "Z"]
SCHEMA = pa.schema([("i", pa.int64()), ("j", pa.int32()), ("f", pa.float64()), ("s", pa.string()),
                    ("b", pa.bool_()), ("ts", pa.timestamp("us", tz="UTC")), ("Up", pa.int64())])


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 8))
    ints = st.lists(st.sampled_from(INTS), min_size=n, max_size=n)
    return pa.table({
        "i": pa.array(draw(ints), pa.int64()),
        "j": pa.array(draw(st.lists(st.sampled_from([None, 0, 1, -1, 2, 7, -(1 << 31)]), min_size=n, max_size=n)),
                      pa.int32()),
        "f": pa.array(draw(st.lists(st.sampled_from(FLOATS), min_size=n, max_size=n)), pa.float64()),
        "s": pa.array(draw(st.lists(st.sampled_from(STRINGS), min_size=n, max_size=n)), pa.string()),
        "b": pa.array(draw(st.lists(st.sampled_from([None, True, False]), min_size=n, max_size=n)), pa.bool_()),
        "ts": pa.array(draw(st.lists(st.sampled_from([None, 0, 1_700_000_000_000_000]), min_size=n, max_size=n)),
                       pa.timestamp("us", tz="UTC")),
        "Up": pa.array(draw(ints), pa.int64()),
    }, schema=SCHEMA)


def _kw(draw: st.DrawFn, word: str) -> str:
    return draw(st.sampled_from([word, word.lower(), word.capitalize()]))


def _col(draw: st.DrawFn, name: str) -> str:
    return draw(st.sampled_from([name, f"`{name}`"]))


def _string_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@st.composite
def operands(draw: st.DrawFn, family: str) -> str:
    """A value of one family: numeric (int, decimal, double), string or boolean; or NULL."""
    if draw(st.integers(0, 9)) == 0:
        return _kw(draw, "NULL")
    if family == "num":
        choice = draw(st.integers(0, 5))
        if choice == 0:
            return _col(draw, draw(st.sampled_from(["i", "j", "f"])))
        if choice <= 2:  # the double column, where Spark's NaN differs from IEEE's
            return _col(draw, "f")
        if choice == 3:
            return str(draw(st.sampled_from([0, 1, -1, 2, 7, 1 << 40, -(1 << 63), (1 << 63) - 1, 3, -(1 << 31)])))
        value = draw(st.decimals(min_value=-100, max_value=100, places=draw(st.integers(0, 3)),
                                 allow_nan=False, allow_infinity=False))
        text = str(value)
        return text if "." in text else text + ".0"
    if family == "str":
        if draw(st.booleans()):
            return _col(draw, "s")
        return _string_literal(draw(st.sampled_from([s for s in STRINGS if s is not None])))
    return draw(st.sampled_from([_col(draw, "b"), _kw(draw, "TRUE"), _kw(draw, "FALSE")]))


@st.composite
def predicates(draw: st.DrawFn) -> str:
    family = draw(st.sampled_from(["num", "num", "str", "bool"]))
    kind = draw(st.integers(0, 6))
    if kind <= 3:
        op = draw(st.sampled_from(["=", "==", "<>", "!=", "<", "<=", ">", ">="]))
        return f"{draw(operands(family))} {op} {draw(operands(family))}"
    if kind == 4:
        value = draw(st.one_of(operands(family), st.just("ts")))
        return f"{value} {_kw(draw, 'IS')} {_kw(draw, 'NOT') + ' ' if draw(st.booleans()) else ''}{_kw(draw, 'NULL')}"
    if kind == 5:
        items = draw(st.lists(operands(family).filter(lambda o: o.strip("`") not in ("i", "j", "f", "s", "b")),
                              min_size=1, max_size=4))
        negated = _kw(draw, "NOT") + " " if draw(st.booleans()) else ""
        return f"{draw(operands(family))} {negated}{_kw(draw, 'IN')} ({', '.join(items)})"
    return _col(draw, "b")


def conditions() -> st.SearchStrategy[str]:
    """Well-typed conditions of the subset: every one must compile."""
    return st.recursive(
        predicates(),
        lambda inner: st.one_of(
            st.builds(lambda a, w, b: f"{a} {w} {b}", inner, st.sampled_from(["AND", "and", "OR", "or"]), inner),
            st.builds(lambda a: f"NOT {a}", inner),
            st.builds(lambda a: f"({a})", inner)),
        max_leaves=4)


def _spark_values(spark: SparkSession, table: pa.Table, conds: list[str]) -> list[tuple[list[object], list[bool]]]:
    numbered = table.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    df = spark.createDataFrame(numbered)
    cols = []
    for k, c in enumerate(conds):
        cols += [F.expr(c).cast("boolean").alias(f"v{k}"), _passes(expect("r", c)).alias(f"p{k}")]
    rows = df.select("__row", *cols).orderBy("__row").collect()
    return [([r[f"v{k}"] for r in rows], [r[f"p{k}"] for r in rows]) for k in range(len(conds))]


@pytest.mark.slow
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.data_too_large])
@given(table=tables(), conds=st.lists(conditions(), min_size=4, max_size=10))
def test_arrow_values_equal_sparks_on_random_rows_and_conditions(spark: SparkSession, table: pa.Table,
                                                                 conds: list[str]) -> None:
    compiled = [compile_condition(c, table.schema) for c in conds]  # well-typed: each one compiles
    expected = _spark_values(spark, table, conds)
    for cond, rule, (values, passes) in zip(conds, compiled, expected, strict=True):
        assert rule.values(table).to_pylist() == values, cond
        assert rule.passes(table).to_pylist() == passes, cond


OPS = ["=", "<>", "<", "<=", ">", ">="]
EDGES = pa.table({"i": pa.array([None, 0, 1, -(1 << 63), (1 << 53) + 1, 7, 2], pa.int64()),
                  "j": pa.array([0, None, 1, 0, 1, 7, 2], pa.int32()),
                  "f": pa.array([math.nan, -0.0, None, math.inf, float((1 << 53) + 2), math.nan, 2.0], pa.float64()),
                  "s": ["", None, "a", "é", "😀", "\x7f", "b"], "b": [True, False, None, True, False, None, True],
                  "ts": pa.array([0, None, 1, 1, 1, 1, 1], pa.timestamp("us", tz="UTC")),
                  "Up": pa.array([1] * 7, pa.int64())}, schema=SCHEMA)


def test_every_operator_on_edge_values_equals_sparks(spark: SparkSession) -> None:
    pairs = [("f", "1"), ("f", "0"), ("f", "-0.0"), ("f", "2.5"), ("f", "f"), ("f", "i"), ("i", "f"), ("2", "f"),
             ("i", "9007199254740993"), ("i", "1.5"), ("j", "-0.5"), ("i", "j"), ("s", "'a'"), ("s", "'é'"),
             ("'😀'", "s"), ("s", "s"), ("b", "TRUE"), ("b", "b"), ("f", "NULL"), ("NULL", "NULL"), ("1", "1.0")]
    conds = [f"{a} {op} {b}" for a, b in pairs for op in OPS]
    conds += ["f IN (1, 2.0, NULL)", "f NOT IN (0, 7)", "i IN (1, 2.0, 2.5)", "s NOT IN ('a', NULL)",
              "NOT (b AND f > 1) OR s IS NULL", "NULL OR TRUE", "NOT NULL", "ts IS NOT NULL AND NOT b"]
    expected = _spark_values(spark, EDGES, conds)
    for cond, (values, passes) in zip(conds, expected, strict=True):
        rule = compile_condition(cond, EDGES.schema)
        assert (rule.values(EDGES).to_pylist(), rule.passes(EDGES).to_pylist()) == (values, passes), cond


def _mixed_operand(draw: st.DrawFn) -> str:
    return draw(st.one_of(operands("num"), operands("str"), operands("bool"), st.just("ts"), st.just("up"),
                          st.just("Up"), st.just("length(s)"), st.just("i + 1"), st.just("CAST(i AS string)"),
                          st.just("'2026-01-01'"), st.just("1L"), st.just("1e3"), st.just("x")))


@st.composite
def mixed_conditions(draw: st.DrawFn) -> str:
    op = draw(st.sampled_from(["=", "<>", "<", ">=", "<=>", "LIKE"]))
    return f"{_mixed_operand(draw)} {op} {_mixed_operand(draw)}"


@pytest.mark.slow
@settings(max_examples=120)
@given(table=tables(), cond=mixed_conditions())
def test_a_condition_outside_the_subset_is_refused_or_equal_to_sparks(spark: SparkSession, table: pa.Table,
                                                                      cond: str) -> None:
    try:
        rule = compile_condition(cond, table.schema)
    except UnsupportedCondition:
        return  # Spark evaluates it (or rejects it) as it always did
    [(values, passes)] = _spark_values(spark, table, [cond])
    assert rule.values(table).to_pylist() == values, cond
    assert rule.passes(table).to_pylist() == passes, cond


@pytest.mark.parametrize("cond", [
    "length(s) > 0", "i + 1 > 0", "-i > 0", "CAST(i AS string) = '1'", "s LIKE 'a%'", "s = 1", "i = '1'",
    "ts > 0", "ts = '2026-01-01'", "ts IN (NULL)", "i > 1L", "i > 1e3", "f > 1.0D", "x = 1", "up = 1", "UP IS NULL",
    "s = 'a' 'b'", "s = 'a\\'b'", 's = "a"', "i <=> 1", "i BETWEEN 1 AND 2", "i IS TRUE", "i = 1 -- c",
    "i = 1 /* c */", "i IN (j)", "i IN ()", "i", "s", "i > 99999999999999999999", "f > 1.234567890123456789",
    "i > 1e", "b = 1", "!b", "DATE '2026-01-01' IS NULL", "X'00' IS NULL", "s = R'a'", "`a.b` IS NULL", "i.x = 1",
    "i AND b", "NOT i", "(i = 1", "i = 1)", "", "i = \u0663", "i\u00a0= 1", "i =\u20031",
])
def test_conditions_outside_the_subset_are_refused(cond: str) -> None:
    with pytest.raises(UnsupportedCondition):
        compile_condition(cond, SCHEMA)


def test_a_compiled_condition_reads_only_its_columns_and_nulls_fail() -> None:
    rule = compile_condition("tenant_id <> '' AND event_id <> '' AND ts IS NOT NULL",
                             pa.schema([("tenant_id", pa.string()), ("event_id", pa.string()),
                                        ("ts", pa.timestamp("us", tz="UTC")), ("service", pa.string())]))
    assert rule.columns == ("tenant_id", "event_id", "ts")
    rows = pa.table({"tenant_id": ["t", "", None, "t"], "event_id": ["e", "e", "e", "e"],
                     "ts": pa.array([1, 1, 1, None], pa.timestamp("us", tz="UTC"))})
    assert rule.values(rows).to_pylist() == [True, False, None, False]
    assert rule.passes(rows).to_pylist() == [True, False, False, False]


def test_integer_against_decimal_is_exact() -> None:
    rows = pa.table({"i": pa.array([(1 << 62) + 1, 2, 3, None], pa.int64())})
    assert compile_condition(f"i > {Decimal(1 << 62)}.5", rows.schema).values(rows).to_pylist() == \
        [True, False, False, None]
    assert compile_condition("i = 2.0", rows.schema).values(rows).to_pylist() == [False, True, False, None]
