"""Parse landing files in this process, without Spark: the driver path of a batch small enough that a Spark
job's fixed cost would dominate.

:func:`parse_landing_arrow` reads each file's planned bytes and runs the parse of :mod:`lakeshard.landing.batches` over
them, the same as :func:`lakeshard.landing.read_landing` runs inside Spark, so both give the same rows and reasons. A
batch of 4 MiB or more is spread over threads (:mod:`lakeshard.landing.threads`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import wait
from functools import partial

import pyarrow as pa

from lakeshard.config import LandingConfig
from lakeshard.landing.batches import PARSED, ParseFiles, path_key, unreadable
from lakeshard.landing.listing import LandingFile, open_landing_file
from lakeshard.landing.threads import parse_threads, split_by_bytes
from lakeshard.process import SharedJobs, worker_pool
from lakeshard.tables import EVENT_SCHEMA, QUARANTINE_SCHEMA

__all__ = ["parse_landing_arrow"]


def parse_landing_arrow(
    files: Sequence[LandingFile], *, limits: LandingConfig, now_ms: int | None = None, threads: int | None = None,
    contents: MutableMapping[str, bytes] | None = None, shared: SharedJobs[list[pa.RecordBatch]] | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Return ``(events, quarantine)`` of these landing files, parsed in this process as Arrow tables.

    The same parse as :func:`read_landing` (the same function over the same bytes, so the same rows and
    reasons), without Spark: for batches small enough that a Spark job's fixed cost would dominate.
    ``events`` holds the :data:`EVENT_SCHEMA` columns, ``quarantine`` the :data:`QUARANTINE_SCHEMA` ones
    (Arrow types as the parse makes them; a store's write casts them to the table's).

    A file that cannot be read here (vanished, permission denied) is one ``unreadable_file`` quarantine
    row, like a file that cannot be decoded; the other files go on. ``threads`` bounds the threads parsing files
    side by side (default: :func:`~lakeshard.landing.threads.parse_threads`); the rows do not depend on it.
    ``contents`` holds, by path, ranges a batch plan read and hashed moments before
    (:attr:`~lakeshard.routing.lifecycle.Intake.contents`): those bytes are the ones the plan's checksum was taken
    of, so they are parsed without reading or hashing them again, and each is taken out of ``contents`` once used.
    Given ``shared``, the files are parsed one by one as its jobs (``threads`` is then not used): this thread runs
    them, and a thread waiting for this parse may join in (:meth:`~lakeshard.process.sharing.SharedJobs.join`).

    Raises:
        LandingReadError: a file's location is not understood.
    """
    clock = int(time.time() * 1000) if now_ms is None else now_ms
    parse = ParseFiles(limits, clock, {path_key(f.path): f for f in files})

    def parse_files(part: Sequence[LandingFile]) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        for f in part:
            kept = contents.pop(f.path, None) if contents else None
            if kept is not None:
                out.extend(parse.parse([(dataclasses.replace(f, checksum=None), kept, f.start)]))
                continue
            try:
                with open_landing_file(f.path) as stream:  # exactly the planned bytes
                    stream.seek(f.start)
                    content = stream.read() if f.end is None else stream.read(f.end - f.start)
            except (OSError, pa.ArrowException) as exc:
                # Vanished, permission denied, a directory: the file is quarantined and the batch goes on.
                problem = f"cannot read the file ({exc})"
                end = f.size_bytes if f.end is None else f.end
                out.append(unreadable(f.path, f.size_bytes, problem, clock * 1000, byte_range=(f.start, end)))
                continue
            out.extend(parse.parse([(f, content, f.start)]))
        return out

    if shared is not None:
        return _tables([b for out in shared.run([partial(parse_files, [f]) for f in files]) for b in out])
    parts = split_by_bytes(files, min(threads, parse_threads(files)) if threads else parse_threads(files))
    if len(parts) == 1:
        return _tables(parse_files(parts[0]))
    # Arrow's JSON reader and compute kernels release the GIL: files parsed on a thread per core, the batches kept
    # in file order (the result does not depend on the split). Every part is waited for before a failure is raised.
    parsing = [worker_pool().submit(parse_files, part) for part in parts]
    wait(parsing)
    return _tables([b for part in parsing for b in part.result()])


def _tables(batches: Sequence[pa.RecordBatch]) -> tuple[pa.Table, pa.Table]:
    """Return ``(events, quarantine)`` of the parse's batches, in their order."""
    # The parse yields each batch all events or all rejections: split by batch, without copying a column.
    kinds = [(b, b.num_rows and b.column(0)[0].as_py()) for b in batches]
    events = pa.Table.from_batches([b for b, is_event in kinds if is_event], schema=PARSED)
    quarantine = pa.Table.from_batches([b for b, is_event in kinds if not is_event], schema=PARSED)
    return (events.select([f.name for f in EVENT_SCHEMA.fields]),
            quarantine.select([f.name for f in QUARANTINE_SCHEMA.fields]))
