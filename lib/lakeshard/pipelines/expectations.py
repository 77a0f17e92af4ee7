"""Expectations: named data-quality rules a flow's rows are checked against (Delta Live Tables' ``expect``
family, plus quarantine).

Example::

    rules = (expect("message_present", "message IS NOT NULL"),
             expect_or_quarantine("tenant_known", "tenant_id IS NOT NULL"))
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Expectation",
    "ExpectationKind",
    "expect",
    "expect_or_drop",
    "expect_or_fail",
    "expect_or_quarantine",
]


class ExpectationKind(StrEnum):
    """What happens to a row that fails an expectation (DLT's ``expect`` family, plus quarantine)."""

    RECORD = "expect"  # keep the row, count it
    DROP = "expect_or_drop"  # leave the row out, count it
    QUARANTINE = "expect_or_quarantine"  # move the row to ``expectation_quarantine`` with the rule's name
    FAIL = "expect_or_fail"  # stop the flow before it commits; downstream flows do not run


@dataclass(frozen=True)
class Expectation:
    """A named data-quality rule: a Spark SQL boolean ``condition`` every row should satisfy.

    A row passes only when the condition is true; false *and* null fail (an unknown value is not a pass).
    """

    name: str
    condition: str
    kind: ExpectationKind = ExpectationKind.RECORD


def expect(name: str, condition: str) -> Expectation:
    """Return an expectation that records how many rows pass and fail, and keeps them all."""
    return Expectation(name, condition, ExpectationKind.RECORD)


def expect_or_drop(name: str, condition: str) -> Expectation:
    """Return an expectation whose failing rows are left out of the flow's output (and counted)."""
    return Expectation(name, condition, ExpectationKind.DROP)


def expect_or_quarantine(name: str, condition: str) -> Expectation:
    """Return an expectation whose failing rows go to ``expectation_quarantine`` with the rule's name."""
    return Expectation(name, condition, ExpectationKind.QUARANTINE)


def expect_or_fail(name: str, condition: str) -> Expectation:
    """Return an expectation that fails the flow before its commit when any row fails it."""
    return Expectation(name, condition, ExpectationKind.FAIL)
