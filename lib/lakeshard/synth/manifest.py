"""The ground truth of a synthetic landing zone: ``<landing>/_truth/manifest.json`` and ``events.parquet``.

Paths starting with ``_`` are ignored by Spark and by lakeshard's landing readers, so the truth sits
next to the data without being read as input.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakeshard.synth.errors import ManifestError
from lakeshard.synth.spec import SynthSpec

__all__ = [
    "EVENTS_FILE",
    "MANIFEST_FILE",
    "TRUTH_DIR",
    "Burst",
    "Manifest",
    "landing_path",
    "read_manifest",
    "read_truth_events",
]

TRUTH_DIR = "_truth"
MANIFEST_FILE = "manifest.json"
EVENTS_FILE = "events.parquet"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Burst:
    """A tenant whose arrival rate is ``factor`` times its usual rate from ``start`` to ``end``."""

    tenant_id: str
    start: str  # RFC 3339, UTC
    end: str
    factor: float


@dataclass(frozen=True)
class Manifest:
    """What a generated landing zone holds, counted by the generator while writing it.

    Every line of every landing file is one record: ``records = unique_events + duplicate_records +
    bad_records``. Duplicates are producer retries (exact copies of a line) plus the valid lines of
    redelivered files; bad lines inside redelivered files count as bad records again.
    Hours are the UTC hour of an event's normalised ``ts``, as ``YYYY-MM-DDTHH:00:00Z``; paths are
    relative to the landing root, with ``/``.
    """

    spec: SynthSpec
    records: int
    files: int
    unique_events: int
    duplicate_records: int
    retry_records: int  # retry lines in regularly delivered files
    redelivered_duplicate_records: int  # valid lines (originals and retries) in redelivered files
    bad_records: int
    bad_by_category: dict[str, int]  # every category of lakeshard.landing.reasons, zeros included
    late_events: int  # unique events whose ts lies minutes to hours before their arrival
    line_bytes: int  # uncompressed bytes of all files, newlines included
    arrival_start: str
    arrival_end: str
    events_by_tenant: dict[str, int]  # unique events per tenant (every tenant, zeros included)
    bytes_by_tenant: dict[str, int]  # sum of size_bytes of the tenant's unique events
    events_by_tenant_hour: dict[str, dict[str, int]]  # tenant -> hour -> unique events
    file_lines: dict[str, int]  # every file written (redeliveries included) -> its line count
    redelivered_files: dict[str, str]  # redelivered copy -> the file it repeats
    bursts: tuple[Burst, ...]
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Return the manifest as JSON-serialisable data (the layout of ``manifest.json``)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["spec"] = self.spec.to_dict()
        out["bursts"] = [dataclasses.asdict(b) for b in self.bursts]
        return out

    def to_json(self) -> str:
        """Return ``manifest.json``'s text."""
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Manifest:
        """Return the manifest a :meth:`to_dict` result describes.

        Raises:
            ManifestError: keys are missing or unknown, or the format version is not this one.
        """
        version = values.get("format_version")
        if version != FORMAT_VERSION:
            raise ManifestError(f"manifest format_version: expected {FORMAT_VERSION}, found {version!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(names - set(values))
        unknown = sorted(set(values) - names)
        if missing or unknown:
            raise ManifestError(f"manifest keys: missing {missing}, unknown {unknown}")
        kwargs = dict(values)
        kwargs["spec"] = SynthSpec.from_dict(values["spec"])
        kwargs["bursts"] = tuple(Burst(**b) for b in values["bursts"])
        return cls(**kwargs)


def landing_path(landing: str | Path) -> Path:
    """Return the local directory of a landing zone given as a path or a ``file:`` URI."""
    text = str(landing)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif text.startswith("file:"):
        text = text[len("file:") :]
    return Path(text)


def read_manifest(landing: str | Path) -> Manifest:
    """Return the ground truth the generator wrote into ``landing``.

    Raises:
        ManifestError: there is no ``_truth/manifest.json`` or it is not a manifest of this format.
    """
    path = landing_path(landing) / TRUTH_DIR / MANIFEST_FILE
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(
            f"no ground truth at {path}: the landing zone was not written by lakeshard.synth "
            "(or its generation did not finish)"
        ) from None
    except (OSError, ValueError) as exc:
        raise ManifestError(f"cannot read ground truth {path}: {exc}") from None
    if not isinstance(values, dict):
        raise ManifestError(f"ground truth {path}: expected a JSON object, found {type(values).__name__}")
    return Manifest.from_dict(values)


def read_truth_events(landing: str | Path) -> Any:
    """Return ``_truth/events.parquet`` as a ``pyarrow.Table`` (one row per unique valid event).

    Columns: ``tenant_id``, ``event_id``, ``ts_ms`` (int64 epoch ms, UTC), ``size_bytes`` (UTF-8 bytes
    of the first delivery's line), ``late`` (bool), ``arrival_ms`` (int64, first delivery).
    """
    import pyarrow.parquet as pq

    path = landing_path(landing) / TRUTH_DIR / EVENTS_FILE
    if not path.is_file():
        raise ManifestError(f"no ground-truth events at {path}: the landing zone was not written by lakeshard.synth")
    return pq.read_table(path)
