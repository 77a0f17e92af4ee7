"""How a routed batch reaches the writers: through ``routed``, or handed over in memory (the fused hand-off).

A batch's plan names its hand-off (``landing_batches.handoff``, docs/decisions.md record 19). The router commits a
``routed`` batch itself; a ``fused`` batch it hands to one call, :meth:`FusedHandoff.deliver`, implemented by the
writers (:meth:`lakeshard.dedupe.ShardWriter.deliver`, the one delivery into ``events`` of a batch in memory). When
that call hands the batch back (None), the router commits it to ``routed``, whose ``router`` → the batch makes any
replay take that path too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from lakeshard.lake import CommitResult

__all__ = ["FusedHandoff"]


class FusedHandoff(Protocol):
    """Takes a fused batch's routed rows (landing event columns, ``window_start``, ``shard``) in memory."""

    def deliver(self, batch: int, routed: pa.Table) -> CommitResult | None:
        """Return the ``events`` commit of batch plan ``batch`` (skipped: another process had committed it),
        having committed its IDs too; called again for a batch whose ``events`` commit was made, it commits
        only the IDs. None when the batch must go through ``routed`` instead (the router commits it there): the
        writers met a shard's damaged file, or ``routed`` already holds the batch."""

    def derive(self, events: pa.Table) -> pa.Table:
        """Return the columns the hand-off derives from each row of a fused batch's parsed events alone, row for row
        (no others): the router computes them on a worker thread while it places the rows, and appends them to the
        routed rows handed to :meth:`deliver` (a batch delivered without them gets them computed there)."""
