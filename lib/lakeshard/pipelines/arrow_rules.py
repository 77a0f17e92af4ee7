"""Expectation conditions evaluated with pyarrow in this process, for the subset of Spark SQL whose result
pyarrow can give exactly as Spark does.

A flow's expectations are Spark SQL conditions (``shard >= 0``, ``tenant_id <> '' AND ts IS NOT NULL``). Most
are simple comparisons; evaluating them in the driver lets a flow that already works on Arrow tables (the
router, the writer's driver-side step) check its rows without starting Spark. :func:`compile_condition` accepts:

* column names, plain (ASCII letters, digits, ``_``) or backticked (```` `` ```` for a backtick), matched
  exactly and only when no other column has the same name in another case (Spark resolves case-insensitively);
* literals: integers (within a long), decimals without exponent (``2.5``, ``-.5``), strings ``'...'`` (``''`` for
  a quote, no backslash), ``TRUE``, ``FALSE``, ``NULL``;
* ``= == <> != < <= > >=``, ``IS [NOT] NULL``, ``[NOT] IN (literal, ...)``, ``AND``, ``OR``, ``NOT``, parentheses;
  keywords in any case.

Comparisons are typed as Spark types them: integers with integers or decimals (exactly), doubles with numbers
(a double's NaN equals NaN and is greater than any number, as in Spark), strings with strings (by UTF-8 bytes),
booleans with booleans; ``IS NULL`` applies to a column of any type. Everything else — functions, casts,
arithmetic, ``LIKE``, a string compared with a number, timestamps, floats, decimals, a column the table lacks —
raises :class:`UnsupportedCondition`, and the caller evaluates the condition with Spark instead. AND, OR, NOT
and IN follow SQL's three-valued logic; :meth:`ArrowCondition.passes` is true only where the condition is TRUE.

Example::

    rule = compile_condition("tenant_id <> '' AND shard >= 0", table.schema)
    kept = table.filter(rule.passes(table))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, Union

from lakeshard.pipelines.errors import PipelineError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowCondition", "UnsupportedCondition", "compile_condition"]

_INT64 = (-(1 << 63), (1 << 63) - 1)
# A decimal literal compared with a double is converted as Spark converts it (long value / 10^scale, exact
# operands, one rounding) only while its digits fit a double exactly.
_DOUBLE_EXACT_DIGITS = 15


class UnsupportedCondition(PipelineError):
    """A condition (or part of it) is outside what :func:`compile_condition` evaluates exactly as Spark does."""

    def __init__(self, condition: str, why: str) -> None:
        self.condition, self.why = condition, why
        super().__init__(f"condition {condition!r} cannot be evaluated in Arrow: {why}")


# ------------------------------------------------------------------------------------------------ parsing
Kind = Literal["int", "dec", "float", "str", "bool", "null", "any"]
Op = Literal["=", "<>", "<", "<=", ">", ">="]
_OPS: dict[str, Op] = {"=": "=", "==": "=", "<>": "<>", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIP: dict[Op, Op] = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_KEYWORDS = {"AND", "OR", "NOT", "IS", "NULL", "IN", "TRUE", "FALSE"}

# ASCII only: Python's \d and \s also match other scripts' digits and spaces, which Spark's lexer rejects.
_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\n]+)
  | (?P<num>(?:-[ \t\r\n]*)?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+))(?![A-Za-z0-9_.])
  | (?P<str>'(?:[^'\\]|'')*')(?!')
  | (?P<quoted>`(?:[^`]|``)+`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)(?![A-Za-z0-9_'`])
  | (?P<op><>|!=|<=|>=|==|=|<|>)(?![=<>!])
  | (?P<punct>[(),])
""", re.VERBOSE | re.ASCII)


@dataclass(frozen=True)
class _Column:
    name: str


@dataclass(frozen=True)
class _Literal:
    kind: Kind
    value: int | Decimal | str | bool | None


@dataclass(frozen=True)
class _Compare:
    op: Op
    left: _Node
    right: _Node


@dataclass(frozen=True)
class _IsNull:
    operand: _Node
    negated: bool


@dataclass(frozen=True)
class _In:
    operand: _Node
    items: tuple[_Literal, ...]
    negated: bool


@dataclass(frozen=True)
class _Logic:
    op: Literal["AND", "OR", "NOT"]
    operands: tuple[_Node, ...]


_Node = Union[_Column, _Literal, _Compare, _IsNull, _In, _Logic]  # noqa: UP007 (a runtime alias)


def _tokens(condition: str) -> list[tuple[str, str]]:
    """Return the condition's tokens as (kind, text), or raise UnsupportedCondition at the first one outside the
    subset (a comment, a backslash escape, a double-quoted string, a number with a suffix or exponent, ...)."""
    out: list[tuple[str, str]] = []
    at = 0
    while at < len(condition):
        m = _TOKEN.match(condition, at)
        if m is None or m.lastgroup is None:
            raise UnsupportedCondition(condition, f"unsupported text at {condition[at:at + 20]!r}")
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
        at = m.end()
    return out


class _Parser:
    """Recursive descent over Spark's precedence: OR < AND < NOT < predicate (IS NULL, IN) < comparison."""

    def __init__(self, condition: str) -> None:
        self.condition = condition
        self.tokens = _tokens(condition)
        self.at = 0

    def fail(self, why: str) -> UnsupportedCondition:
        return UnsupportedCondition(self.condition, why)

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def keyword(self, *words: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "word" and token[1].upper() in words:
            self.at += 1
            return True
        return False

    def punct(self, text: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "punct" and token[1] == text:
            self.at += 1
            return True
        return False

    def parse(self) -> _Node:
        node = self.disjunction()
        if self.peek() is not None:
            raise self.fail(f"unsupported text at {self.peek()[1]!r}")  # type: ignore[index]
        return node

    def disjunction(self) -> _Node:
        node = self.conjunction()
        while self.keyword("OR"):
            node = _Logic("OR", (node, self.conjunction()))
        return node

    def conjunction(self) -> _Node:
        node = self.negation()
        while self.keyword("AND"):
            node = _Logic("AND", (node, self.negation()))
        return node

    def negation(self) -> _Node:
        if self.keyword("NOT"):
            return _Logic("NOT", (self.negation(),))
        return self.predicate()

    def predicate(self) -> _Node:
        node = self.comparison()
        if self.keyword("IS"):
            negated = self.keyword("NOT")
            if not self.keyword("NULL"):
                raise self.fail("only IS [NOT] NULL is supported after IS")
            return _IsNull(node, negated)
        negated = self.keyword("NOT")
        if self.keyword("IN"):
            return _In(node, self.in_list(), negated)
        if negated:
            raise self.fail("only NOT IN is supported after a value")
        return node

    def in_list(self) -> tuple[_Literal, ...]:
        if not self.punct("("):
            raise self.fail("IN needs a parenthesised list of literals")
        items = []
        while True:
            item = self.primary()
            if not isinstance(item, _Literal):
                raise self.fail("IN lists may hold literals only")
            items.append(item)
            if self.punct(")"):
                return tuple(items)
            if not self.punct(","):
                raise self.fail("IN list items are separated by commas")

    def comparison(self) -> _Node:
        node = self.primary()
        while (token := self.peek()) is not None and token[0] == "op":
            self.at += 1
            node = _Compare(_OPS[token[1]], node, self.primary())
        return node

    def primary(self) -> _Node:
        token = self.peek()
        if token is None:
            raise self.fail("the condition ends where a value was expected")
        kind, text = token
        self.at += 1
        if kind == "punct" and text == "(":
            node = self.disjunction()
            if not self.punct(")"):
                raise self.fail("a parenthesis is not closed")
            return node
        if kind == "num":
            return _number(self.condition, re.sub(r"[ \t\r\n]", "", text))
        if kind == "str":
            return _Literal("str", text[1:-1].replace("''", "'"))
        if kind == "quoted":
            return _Column(text[1:-1].replace("``", "`"))
        if kind == "word":
            word = text.upper()
            if word in ("TRUE", "FALSE"):
                return _Literal("bool", word == "TRUE")
            if word == "NULL":
                return _Literal("null", None)
            if word in _KEYWORDS:
                raise self.fail(f"{text} where a value was expected")
            if (nxt := self.peek()) is not None and nxt == ("punct", "("):
                raise self.fail(f"function {text}(...) is not supported")
            return _Column(text)
        raise self.fail(f"{text!r} where a value was expected")


def _number(condition: str, text: str) -> _Literal:
    """Return a numeric literal typed as Spark types it: an integer within a long, else a decimal."""
    if "." in text:
        return _Literal("dec", Decimal(text))
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise UnsupportedCondition(condition, f"integer literal {text} is beyond a long (Spark makes it a decimal)")
    return _Literal("int", value)


@lru_cache(maxsize=256)
def _parse(condition: str) -> _Node:
    return _Parser(condition).parse()


# ------------------------------------------------------------------------------------------------ typing
Values = Callable[["pa.Table"], "pa.ChunkedArray | pa.Array | pa.Scalar"]


@dataclass(frozen=True)
class _Typed:
    """A compiled node: its kind, and either a literal's Python value or the function computing its values."""

    kind: Kind
    literal: bool
    value: int | float | Decimal | str | bool | None = None
    values: Values | None = None


def _kind_of(t: pa.DataType) -> Kind:
    import pyarrow as pa

    if pa.types.is_signed_integer(t):
        return "int"
    if pa.types.is_float64(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_boolean(t):
        return "bool"
    return "any"  # only IS [NOT] NULL


class _Compiler:
    def __init__(self, condition: str, schema: pa.Schema) -> None:
        self.condition = condition
        self.schema = schema
        self.columns: list[str] = []

    def fail(self, why: str) -> UnsupportedCondition:
        return UnsupportedCondition(self.condition, why)

    def node(self, node: _Node) -> _Typed:
        if isinstance(node, _Literal):
            return _Typed(node.kind, True, node.value)
        if isinstance(node, _Column):
            return self.column(node.name)
        if isinstance(node, _Compare):
            return self.compare(node.op, self.node(node.left), self.node(node.right))
        if isinstance(node, _IsNull):
            return self.is_null(self.node(node.operand), node.negated)
        if isinstance(node, _In):
            operand = self.node(node.operand)
            # x IN (a, b) is x = a OR x = b in three-valued logic: TRUE on a match, else NULL if x or an item is
            # NULL, else FALSE (Spark's In), and the pairs are typed as Spark types the list.
            found = self.compare("=", operand, _Typed(node.items[0].kind, True, node.items[0].value))
            for item in node.items[1:]:
                found = self.logic("OR", [found, self.compare("=", operand, _Typed(item.kind, True, item.value))])
            return self.logic("NOT", [found]) if node.negated else found
        return self.logic(node.op, [self.node(o) for o in node.operands])

    def column(self, name: str) -> _Typed:
        import pyarrow.compute as pc

        if not name.isascii():
            raise self.fail(f"column name {name!r} is not ASCII (Spark's case-insensitive match is not replayed)")
        same = [c for c in self.schema.names if c.lower() == name.lower()]
        if same != [name]:
            raise self.fail(f"column {name!r} " + ("is not in the table" if not same else
                                                   f"matches the columns {same} (Spark resolves case-insensitively)"))
        field = self.schema.field(name)
        self.columns.append(name)
        kind = _kind_of(field.type)
        if kind == "int":
            return _Typed(kind, False, values=lambda t: pc.cast(t.column(name), "int64"))
        return _Typed(kind, False, values=lambda t: t.column(name))

    def is_null(self, operand: _Typed, negated: bool) -> _Typed:
        import pyarrow.compute as pc

        if operand.literal:
            return _Typed("bool", True, (operand.value is not None) if negated else (operand.value is None))
        assert operand.values is not None
        values = operand.values
        return _Typed("bool", False, values=(lambda t: pc.is_valid(values(t))) if negated
                      else (lambda t: pc.is_null(values(t))))

    def logic(self, op: Literal["AND", "OR", "NOT"], operands: Sequence[_Typed]) -> _Typed:
        import pyarrow as pa
        import pyarrow.compute as pc

        for o in operands:
            if o.kind not in ("bool", "null"):
                raise self.fail(f"{op} needs boolean operands, found a {o.kind} value")
        if all(o.literal for o in operands):
            return _Typed("bool", True, _fold_logic(op, [o.value for o in operands]))  # type: ignore[misc]
        args = [_operand(o, pa.bool_()) for o in operands]
        if op == "NOT":
            return _Typed("bool", False, values=lambda t: pc.invert(args[0](t)))
        kernel = pc.and_kleene if op == "AND" else pc.or_kleene
        return _Typed("bool", False, values=lambda t: kernel(args[0](t), args[1](t)))

    def compare(self, op: Op, left: _Typed, right: _Typed) -> _Typed:
        comparable = {"int", "dec", "float", "str", "bool", "null"}
        if left.kind not in comparable or right.kind not in comparable:
            raise self.fail(f"{left.kind} {op} {right.kind} is not supported")
        if left.literal and not right.literal:
            left, right, op = right, left, _FLIP[op]
        if left.kind == "null" or right.kind == "null":
            return _Typed("bool", True, None)
        if left.literal:  # both literals
            return _Typed("bool", True, self.fold(op, left, right))
        kinds = {left.kind, right.kind}
        if right.literal:
            if left.kind == "int" and right.kind == "int":
                return _compare_values(op, left, _scalar(right.value, "int64"))
            if left.kind == "int" and right.kind == "dec":
                return self.int_vs_decimal(op, left, right.value)  # type: ignore[arg-type]
            if left.kind == "float" and right.kind in ("int", "dec"):
                return _float_compare(op, left, _Typed("float", True, self.as_double(right)))
            if left.kind == right.kind and left.kind in ("str", "bool"):
                return _compare_values(op, left, _scalar(right.value, "string" if left.kind == "str" else "bool"))
            raise self.fail(f"a {left.kind} column compared with a {right.kind} literal is not supported")
        if kinds == {"int"} or (left.kind == right.kind and left.kind in ("str", "bool")):
            return _compare_values(op, left, right.values)  # type: ignore[arg-type]
        if kinds <= {"int", "float"}:
            return _float_compare(op, left, right)
        raise self.fail(f"a {left.kind} column compared with a {right.kind} column is not supported")

    def fold(self, op: Op, left: _Typed, right: _Typed) -> bool:
        numeric = {"int", "dec"}
        if left.kind in numeric and right.kind in numeric:
            a, b = Decimal(left.value), Decimal(right.value)  # type: ignore[arg-type]
        elif left.kind == right.kind and left.kind in ("str", "bool"):
            # Python orders strings by code point, which is the order of their UTF-8 bytes (Spark's order).
            a, b = left.value, right.value  # type: ignore[assignment]
        else:
            raise self.fail(f"a {left.kind} literal compared with a {right.kind} literal is not supported")
        return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]

    def int_vs_decimal(self, op: Op, left: _Typed, d: Decimal) -> _Typed:
        """Spark compares an integer with a decimal exactly (both as decimals): the same as comparing the integer
        with the decimal's floor or ceiling, which keeps the comparison in integers."""
        import math

        import pyarrow.compute as pc

        floor, ceil = math.floor(d), math.ceil(d)
        if not (_INT64[0] <= floor and ceil <= _INT64[1]):
            raise self.fail(f"decimal literal {d} is beyond a long")
        values = left.values
        assert values is not None
        if op in ("=", "<>") and floor != ceil:  # never equal: FALSE (or TRUE for <>) where the integer is not null
            answer = op == "<>"
            return _Typed("bool", False, values=lambda t: pc.if_else(pc.is_valid(values(t)), answer, None))
        bound = {"=": floor, "<>": floor, "<": ceil, "<=": floor, ">": floor, ">=": ceil}[op]
        return _compare_values(op, left, _scalar(bound, "int64"))

    def as_double(self, literal: _Typed) -> float:
        """Return a numeric literal as the double Spark casts it to (exactly one rounding)."""
        if literal.kind == "dec":
            d = Decimal(literal.value)  # type: ignore[arg-type]
            if len(d.as_tuple().digits) > _DOUBLE_EXACT_DIGITS:
                raise self.fail(f"decimal literal {d} has more digits than a double holds exactly")
        return float(literal.value)  # type: ignore[arg-type]


def _scalar(value: object, type_name: Literal["int64", "string", "bool"]) -> Values:
    """Return a function giving ``value`` as an Arrow scalar of ``type_name`` (a comparison's right side)."""
    import pyarrow as pa

    scalar = pa.scalar(value, {"int64": pa.int64(), "string": pa.string(), "bool": pa.bool_()}[type_name])
    return lambda t: scalar


def _operand(node: _Typed, type_: pa.DataType) -> Values:
    """Return a function giving a boolean operand's values: a column's, or a literal as a scalar."""
    import pyarrow as pa

    if node.literal:
        scalar = pa.scalar(node.value, type_)
        return lambda t: scalar
    assert node.values is not None
    return node.values


def _compare_values(op: Op, left: _Typed, right: Values) -> _Typed:
    import pyarrow.compute as pc

    kernel = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
              ">=": pc.greater_equal}[op]
    values = left.values
    assert values is not None
    return _Typed("bool", False, values=lambda t: kernel(values(t), right(t)))


def _float_compare(op: Op, left: _Typed, right: _Typed) -> _Typed:
    """Compare as doubles with Spark's NaN: NaN equals NaN and is greater than every other number. The null-
    propagating ``and_``/``or_`` keep a null operand's result null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def doubles(node: _Typed) -> Values:
        if node.literal:
            scalar = pa.scalar(node.value, pa.float64())
            return lambda t: scalar
        values = node.values
        assert values is not None
        return lambda t: pc.cast(values(t), pa.float64(), safe=False)

    a_of, b_of = doubles(left), doubles(right)

    def compute(t: pa.Table) -> pa.ChunkedArray | pa.Array:
        a, b = a_of(t), b_of(t)
        nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
        if op in ("=", "<>"):
            equal = pc.or_(pc.equal(a, b), pc.and_(nan_a, nan_b))
            return equal if op == "=" else pc.invert(equal)
        if op == "<":
            return pc.or_(pc.less(a, b), pc.and_(pc.invert(nan_a), nan_b))
        if op == "<=":
            return pc.or_(pc.less_equal(a, b), nan_b)
        if op == ">":
            return pc.or_(pc.greater(a, b), pc.and_(nan_a, pc.invert(nan_b)))
        return pc.or_(pc.greater_equal(a, b), nan_a)

    return _Typed("bool", False, values=compute)


def _fold_logic(op: str, values: Sequence[bool | None]) -> bool | None:
    if op == "NOT":
        return None if values[0] is None else not values[0]
    a, b = values
    if op == "AND":
        return False if a is False or b is False else (None if a is None or b is None else True)
    return True if a is True or b is True else (None if a is None or b is None else False)


# ------------------------------------------------------------------------------------------------ the result
@dataclass(frozen=True)
class ArrowCondition:
    """A condition compiled for tables of one schema.

    Attributes:
        condition: the Spark SQL text.
        columns: the table columns it reads (read only these).
    """

    condition: str
    columns: tuple[str, ...]
    _typed: _Typed

    def values(self, table: pa.Table) -> pa.ChunkedArray:
        """Return the condition's value per row of ``table``: TRUE, FALSE or NULL (SQL's three values)."""
        import pyarrow as pa

        node = self._typed
        if node.literal:
            return pa.chunked_array([pa.repeat(pa.scalar(node.value, pa.bool_()), table.num_rows)])
        assert node.values is not None
        out = node.values(table)
        if isinstance(out, pa.Scalar):
            return pa.chunked_array([pa.repeat(out, table.num_rows)])
        return out if isinstance(out, pa.ChunkedArray) else pa.chunked_array([out], pa.bool_())

    def passes(self, table: pa.Table) -> pa.ChunkedArray:
        """Return, per row of ``table``, whether the condition is TRUE (NULL fails, as the gate's Spark check
        ``coalesce(cast(condition as boolean), false)``)."""
        import pyarrow.compute as pc

        return pc.fill_null(self.values(table), False)


def compile_condition(condition: str, schema: pa.Schema) -> ArrowCondition:
    """Return ``condition`` compiled for tables of ``schema``.

    Raises:
        UnsupportedCondition: the condition is outside the subset (see the module docstring), names a column
            ``schema`` lacks, or compares values Spark would compare differently; evaluate it with Spark.
    """
    compiler = _Compiler(condition, schema)
    typed = compiler.node(_parse(condition))
    if typed.kind not in ("bool", "null"):
        raise UnsupportedCondition(condition, f"the condition is a {typed.kind} value, not a boolean")
    return ArrowCondition(condition, tuple(dict.fromkeys(compiler.columns)), typed)
