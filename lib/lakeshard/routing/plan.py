"""A batch plan as rows of ``landing_batches``: which bytes of which landing files batch *n* holds, and back.

The plan is the router's write-ahead log (docs/decisions.md, record 5): committed before any of the batch's rows,
read back to replay the batch after a crash, with the clock its parse validates by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from lakeshard.landing import LandingFile
from lakeshard.routing.lifecycle import PlannedRange
from lakeshard.utc import aware, millis

__all__ = ["PlannedBatch", "plan_rows", "planned_batch", "planned_file"]

@dataclass(frozen=True)
class PlannedBatch:
    """A committed batch plan read back: its file ranges by path, the clock (epoch ms) its parse validates by and
    its hand-off (``fused``, or None through ``routed``)."""

    files: list[LandingFile]
    now_ms: int
    handoff: str | None


def plan_rows(batch: int, ranges: Sequence[PlannedRange], now: datetime, handoff: str | None = None) -> pa.Table:
    """Return the ``landing_batches`` rows of batch ``batch``: one per file range, each with the plan's clock and
    hand-off."""
    ts = pa.timestamp("us", tz="UTC")
    n = len(ranges)
    return pa.table({"batch": pa.array([batch] * n, pa.int64()),
                     "path": pa.array([r.file.path for r in ranges], pa.string()),
                     "size_bytes": pa.array([r.file.size_bytes for r in ranges], pa.int64()),
                     "mtime": pa.array([r.file.mtime for r in ranges], ts),
                     "planned_at": pa.array([now] * n, ts),
                     "start_byte": pa.array([r.file.start for r in ranges], pa.int64()),
                     "end_byte": pa.array([r.file.end for r in ranges], pa.int64()),
                     "first_line": pa.array([r.file.first_line for r in ranges], pa.int64()),
                     "next_line": pa.array([r.next_line for r in ranges], pa.int64()),
                     "checksum": pa.array([r.file.checksum for r in ranges], pa.string()),
                     "anchor": pa.array([r.anchor for r in ranges], pa.string()),
                     "file_id": pa.array([r.file.identity for r in ranges], pa.string()),
                     "handoff": pa.array([handoff] * n, pa.string())})


def planned_batch(rows: Sequence[dict[str, Any]]) -> PlannedBatch:
    """Return the batch a plan's rows hold (rows made before hand-offs: through ``routed``)."""
    files = sorted((planned_file(r) for r in rows), key=lambda f: f.path)
    return PlannedBatch(files, max(millis(aware(r["planned_at"])) for r in rows),
                        next((str(r["handoff"]) for r in rows if r.get("handoff")), None))


def planned_file(row: dict[str, Any]) -> LandingFile:
    """Return the file range a plan row holds (a row made before byte ranges: the whole file, unchecked)."""
    size = int(row["size_bytes"])
    file_id = row.get("file_id")
    return LandingFile(row["path"], size, aware(row["mtime"]), start=int(row.get("start_byte") or 0),
                       end=size if row.get("end_byte") is None else int(row["end_byte"]),
                       first_line=int(row.get("first_line") or 1), checksum=row.get("checksum"),
                       target="" if file_id in (None, row["path"]) else str(file_id))
