"""Which bytes of each landing file the router takes next: landing files are consumed like logs, by byte offset.

A batch plan entry covers ``[start, end)`` of a file. ``end`` is the end of the file's last complete line (``\\n``
included); an unterminated last line is taken too when it is a whole JSON object or the file has been quiet for
``landing_format.settle_seconds``, otherwise it is *held back* until a later run, so a half-written record is
never cut. What the router consumed of a file last (:class:`Consumed`, its newest plan entry) decides the next
range (:func:`next_range`):

* not consumed yet: from byte 0;
* unchanged (same size and modification time) and consumed to its size: nothing;
* grown (or a held-back tail), and the ``ANCHOR_BYTES`` before the consumed end still hash to the recorded
  anchor: an append, from the consumed end (line numbers go on from where the last range stopped);
* anything else (shrunk, same size with a new modification time, the bytes before the consumed end differ, or a
  plan made before anchors existed): a rewrite, routed again from byte 0 — the shard writers drop the events
  already written;
* gzip files (by their magic bytes) cannot be read from an offset: a changed one is routed again whole, and a
  fresh one whose stream does not end yet is held back like a half-written line.

Each range records a checksum of its bytes (:func:`content_checksum`); the parse verifies it, so a replay reads
exactly the bytes the first attempt planned or says that it could not. A plan made to be parsed at once can keep the
bytes it hashed (:attr:`Intake.contents`): the parse then takes those, neither reading nor hashing them again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from lakeshard.landing import (
    GZIP_HEADER_BYTES,
    LandingFile,
    LandingScan,
    content_checksum,
    gzip_stream_ends,
    is_gzip,
    open_landing_file,
)

__all__ = [
    "ANCHOR_BYTES",
    "Consumed",
    "HeldBack",
    "Intake",
    "PlannedRange",
    "next_range",
    "plan_intake",
]

ANCHOR_BYTES = 1024
"""How many bytes before a consumed end are hashed to recognise an append (versus a rewrite)."""

_CHUNK = 8 << 20  # bytes read at a time: a big file is hashed without holding it whole
_TAIL = 64 << 10  # the first read back from a file's end for its last line; longer lines take more reads
_BOM = b"\xef\xbb\xbf"
_NEWLINE = ord("\n")

Read = Callable[[int, int], bytes]
"""``read(offset, length)``: up to ``length`` bytes of one file from ``offset``."""


@dataclass(frozen=True)
class Consumed:
    """How far the router has consumed one landing file: the file as its newest batch plan entry saw it."""

    path: str
    end: int  # the first byte not routed yet
    size_bytes: int
    mtime: datetime
    anchor: str | None  # checksum of the ANCHOR_BYTES before ``end``; None in plans made before anchors
    next_line: int  # the physical line number the byte at ``end`` lies on


@dataclass(frozen=True)
class PlannedRange:
    """A range to route: the file with ``start``/``end``/``first_line``/``checksum`` set, and its anchor."""

    file: LandingFile
    anchor: str
    next_line: int
    rewritten: bool  # True when the file was consumed before and changed other than by an append
    content: bytes | None = field(default=None, repr=False, compare=False)  # the range's bytes, when kept


@dataclass(frozen=True)
class HeldBack:
    """Bytes of a landing file left for a later run: a record still being written."""

    path: str
    bytes: int
    reason: str


def _consumed_whole(f: LandingFile, last: Consumed) -> bool:
    return f.size_bytes == last.size_bytes and f.mtime == last.mtime and last.end >= f.size_bytes


def _settled(f: LandingFile, now: datetime, settle_seconds: int) -> bool:
    return now - f.mtime >= timedelta(seconds=settle_seconds)


def _is_whole_record(tail: bytes) -> bool:
    """Return whether an unterminated last line is a complete JSON object (a record that needs no newline)."""
    text = tail.removeprefix(_BOM).strip()
    if not text.startswith(b"{"):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:  # json.JSONDecodeError and UnicodeDecodeError
        return False


def _start_of(f: LandingFile, last: Consumed | None, read: Read, gzip: bool) -> tuple[int, int, bool]:
    """Return ``(start, first_line, rewritten)``: where the next range of ``f`` begins, or ``start == -1`` when
    the file holds nothing new."""
    if last is None:
        return 0, 1, False
    if _consumed_whole(f, last):
        return -1, 0, False
    unchanged = f.size_bytes == last.size_bytes and f.mtime == last.mtime
    if gzip or f.size_bytes < last.end or (f.size_bytes == last.size_bytes and not unchanged):
        return 0, 1, True
    if last.anchor is None:
        return 0, 1, True
    begin = max(0, last.end - ANCHOR_BYTES)
    if content_checksum(read(begin, last.end - begin)) != last.anchor:
        return 0, 1, True
    return last.end, last.next_line, False


def next_range(f: LandingFile, last: Consumed | None, read: Read, *, now: datetime, settle_seconds: int,
               keep: bool = False) -> PlannedRange | HeldBack | None:
    """Return the range of ``f`` the next batch routes, what is held back of it, or None when nothing is new.

    ``f`` is the file as listed now (its size bounds what is read: bytes a producer adds meanwhile wait for the
    next run), ``last`` what the router consumed of it before (None: nothing), ``read`` reads its bytes. With
    ``keep`` the range carries the bytes its checksum was taken of (:attr:`PlannedRange.content`).
    """
    if last is not None and _consumed_whole(f, last):
        return None
    gzip = f.size_bytes >= GZIP_HEADER_BYTES and is_gzip(read(0, GZIP_HEADER_BYTES))
    start, first_line, rewritten = _start_of(f, last, read, gzip)
    if start < 0:
        return None
    settled = _settled(f, now, settle_seconds)
    if gzip:
        if not settled and not gzip_stream_ends(read, f.size_bytes):
            return HeldBack(f.path, f.size_bytes, "gzip stream still being written")
        end = f.size_bytes
    else:
        end = _end_of(read, start, f.size_bytes, settled)
        if end <= start:  # nothing complete yet; an empty file is not held back, it is empty
            return HeldBack(f.path, f.size_bytes - start, "last line still being written") if f.size_bytes > start \
                else None
    digest = hashlib.sha256()
    newlines = 0
    # Bytes kept are read in one piece (no second copy to join them); others a chunk at a time.
    kept = read(start, end - start) if keep else None
    for chunk in [kept] if kept is not None else _chunks(read, start, end):
        digest.update(chunk)
        newlines += _newlines(chunk)
    anchor_begin = max(0, end - ANCHOR_BYTES)
    planned = replace(f, start=start, end=end, first_line=first_line, checksum=digest.hexdigest())
    # A short read (the file shrank since it was listed) is not handed over: the parse then reads the file and
    # finds it changed, as a replay of this plan would.
    content = kept if kept is not None and len(kept) == end - start else None
    return PlannedRange(planned, content_checksum(read(anchor_begin, end - anchor_begin)),
                        first_line + newlines, rewritten, content)


def _newlines(chunk: bytes) -> int:
    # numpy counts them in a third of the time bytes.count takes, and lets the other threads run meanwhile. A slice
    # at a time into one small mask: a mask of the whole range (a byte per landing byte) was new memory the kernel
    # zeroed page by page, which cost more than the count (bench/results/ingest-profile.md).
    data = np.frombuffer(chunk, np.uint8)
    mask = np.empty(min(_COUNT_SLICE, data.size), dtype=bool)
    total = 0
    for offset in range(0, data.size, _COUNT_SLICE):
        part = data[offset:offset + _COUNT_SLICE]
        found = mask[:part.size]
        np.equal(part, _NEWLINE, out=found)
        total += int(np.count_nonzero(found))
    return total


_COUNT_SLICE = 256 << 10  # bytes compared at a time when counting lines: the mask stays in the CPU's cache


def _chunks(read: Read, start: int, end: int) -> Iterator[bytes]:
    """Return the bytes of ``[start, end)`` a chunk at a time, up to where the file ends."""
    offset = start
    while offset < end:
        chunk = read(offset, min(_CHUNK, end - offset))
        if not chunk:
            return
        yield chunk
        offset += len(chunk)


def _end_of(read: Read, start: int, size: int, settled: bool) -> int:
    """Return the end of the bytes to take from ``[start, size)``: after the last ``\\n``, or ``size`` when the
    unterminated last line is a whole record, blank, or final because the file is quiet."""
    tail = b""
    position = size
    step = _TAIL  # the last line is short next to the file: read back from the end in growing steps
    while position > start:
        step = min(step, position - start)
        chunk = read(position - step, step)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            tail = chunk[cut + 1:] + tail
            position = position - step + cut + 1
            break
        tail = chunk + tail
        position -= step
        step = min(2 * step, _CHUNK)
    if not tail.strip() or settled or _is_whole_record(tail):
        return size
    return position


@dataclass(frozen=True)
class Intake:
    """What the next batch takes of a landing zone, and what it leaves: held-back tails, dangling links, and whether
    the batch's limits left bytes for a later batch (``more``)."""

    ranges: list[PlannedRange]
    held_back: list[HeldBack] = field(default_factory=list)
    dangling: list[str] = field(default_factory=list)
    more: bool = False
    # The ranges' bytes by path, when the plan kept them (``keep_bytes``); the parse takes each out as it uses it.
    contents: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    @property
    def held_back_bytes(self) -> int:
        """Return the bytes left for a later run because they are still being written."""
        return sum(h.bytes for h in self.held_back)


def plan_intake(scan: LandingScan, consumed: Mapping[str, Consumed], *, now: datetime, settle_seconds: int,
                max_files: int, max_bytes: int, keep_bytes: int = 0) -> Intake:
    """Return the ranges of the next batch (in path order, up to ``max_files`` files and ``max_bytes`` bytes but
    at least one), and what was held back of the files looked at.

    ``consumed`` maps a file's identity (:attr:`LandingFile.identity`) to what was routed of it. A file that
    vanishes before it is read is left out: it is no longer input. A batch of at most ``keep_bytes`` bytes keeps
    them (:attr:`Intake.contents`) for a parse that follows at once; a bigger one keeps none.
    """
    ranges: list[PlannedRange] = []
    held: list[HeldBack] = []
    contents: dict[str, bytes] = {}
    total = 0
    more = False
    for f in scan.files:
        last = consumed.get(f.identity)
        if last is not None and _consumed_whole(f, last):
            continue  # the common case decided without opening the file
        estimate = f.size_bytes - (last.end if last is not None and last.end <= f.size_bytes else 0)
        if ranges and (len(ranges) >= max_files or total + estimate > max_bytes):
            more = True
            break
        try:
            with open_landing_file(f.path) as handle:
                got = next_range(f, last, _reader(handle), now=now, settle_seconds=settle_seconds,
                                 keep=total + estimate <= keep_bytes)
        except (OSError, pa.ArrowException):
            continue
        if isinstance(got, HeldBack):
            held.append(got)
        elif got is not None:
            if got.content is not None:
                contents[f.path] = got.content
                got = replace(got, content=None)
            ranges.append(got)
            total += got.file.read_bytes
            if got.file.read_bytes < f.size_bytes - got.file.start:
                held.append(HeldBack(f.path, f.size_bytes - got.file.start - got.file.read_bytes,
                                     "last line still being written"))
    return Intake(ranges, held, list(scan.dangling), more=more,
                  contents=contents if total <= keep_bytes else {})


def _reader(handle: pafs.NativeFile) -> Read:
    def read(offset: int, length: int) -> bytes:
        return bytes(handle.read_at(length, offset)) if length > 0 else b""

    return read
