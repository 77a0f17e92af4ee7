"""The byte-range planner alone, over in-memory files: no Spark, no tables (properties with hypothesis)."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.landing.listing import LandingFile, content_checksum
from lakeshard.routing import lifecycle
from lakeshard.routing.lifecycle import Consumed, HeldBack, PlannedRange, next_range

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _read(data: bytes):  # type: ignore[no-untyped-def]
    return lambda offset, length: data[offset : offset + length]


def _step(data: bytes, mtime: datetime, last: Consumed | None, *, now: datetime, settle: int = 60
          ) -> tuple[PlannedRange | HeldBack | None, Consumed | None]:
    """Plan one run over ``data``; return the plan and what is consumed after it."""
    f = LandingFile("file:///landing/a.jsonl", len(data), mtime)
    got = next_range(f, last, _read(data), now=now, settle_seconds=settle, keep=True)
    if isinstance(got, PlannedRange):
        assert got.file.end is not None
        assert got.content == data[got.file.start : got.file.end]  # the bytes kept are the bytes planned
        return got, Consumed(f.path, got.file.end, f.size_bytes, mtime, got.anchor, got.next_line)
    return got, last


def _record(i: int) -> bytes:
    return json.dumps({"tenant_id": "t", "event_id": f"e{i}", "ts": 1_700_000_000_000 + i}).encode()


@settings(max_examples=200)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30), st.integers(1, 60))
def test_a_log_written_in_arbitrary_pieces_is_taken_once_in_whole_lines(cuts: list[int], records: int) -> None:
    """However a producer's writes split its lines, the ranges taken tile the file from 0 without gap or overlap,
    no range cuts a record, and once the file is complete every byte has been taken exactly once."""
    full = b"".join(_record(i) + b"\n" for i in range(records))
    pieces, position = [], 0
    for cut in cuts:
        position = min(len(full), position + cut * 7)
        pieces.append(position)
    pieces.append(len(full))
    taken: list[tuple[int, int, int]] = []
    last: Consumed | None = None
    mtime = T0
    for n, size in enumerate(pieces):
        data = full[:size]
        if last is None or size != last.size_bytes:  # a write moves the modification time
            mtime = T0 + timedelta(seconds=n)
        got, last = _step(data, mtime, last, now=T0 + timedelta(seconds=n))  # nothing settles between writes
        if isinstance(got, PlannedRange):
            f = got.file
            assert f.end is not None
            taken.append((f.start, f.end, f.first_line))
            chunk = data[f.start : f.end]
            # A range ends after a newline, or with a last line that is a whole record already.
            assert chunk.endswith(b"\n") or isinstance(json.loads(chunk.rsplit(b"\n", 1)[-1]), dict)
            assert f.checksum == content_checksum(chunk)
    assert [s for s, _, _ in taken] == [0] + [e for _, e, _ in taken[:-1]]  # contiguous, from byte 0
    assert taken[-1][1] == len(full)
    assert [line for _, _, line in taken] == [full[:s].count(b"\n") + 1 for s, _, _ in taken]


def test_a_file_that_shrank_after_its_listing_hands_no_bytes_to_the_parse() -> None:
    """The listing saw more bytes than a read finds (the file was rewritten shorter meanwhile): the plan keeps
    nothing, so the parse reads the file and checks the plan's checksum, as a replay would."""
    data = b"".join(_record(i) + b"\n" for i in range(5))
    listed = LandingFile("file:///landing/a.jsonl", len(data) + 40, T0)
    got = next_range(listed, None, _read(data), now=T0 + timedelta(hours=1), settle_seconds=60, keep=True)
    assert isinstance(got, PlannedRange) and got.content is None
    whole = next_range(LandingFile(listed.path, len(data), T0), None, _read(data), now=T0 + timedelta(hours=1),
                       settle_seconds=60, keep=True)
    assert isinstance(whole, PlannedRange) and whole.content == data


def test_an_empty_file_is_neither_routed_nor_held_back_until_it_has_bytes() -> None:
    assert _step(b"", T0, None, now=T0 + timedelta(hours=1)) == (None, None)
    got, _ = _step(_record(0) + b"\n", T0 + timedelta(seconds=1), None, now=T0 + timedelta(seconds=1))
    assert isinstance(got, PlannedRange) and (got.file.start, got.file.end) == (0, len(_record(0)) + 1)


def test_a_half_written_last_line_waits_until_the_file_settles() -> None:
    data = _record(0) + b"\n" + _record(1)[:10]
    got, last = _step(data, T0, None, now=T0)
    assert isinstance(got, PlannedRange) and got.file.end == len(_record(0)) + 1
    held, _ = _step(data, T0, last, now=T0 + timedelta(seconds=59))
    assert held == HeldBack("file:///landing/a.jsonl", 10, "last line still being written")
    final, _ = _step(data, T0, last, now=T0 + timedelta(seconds=60))
    assert isinstance(final, PlannedRange) and (final.file.start, final.file.end) == (len(_record(0)) + 1, len(data))


def test_a_gzip_file_is_taken_whole_once_its_stream_ends_and_again_whole_when_it_changes() -> None:
    whole = gzip.compress(b"".join(_record(i) + b"\n" for i in range(50)))
    held, _ = _step(whole[: len(whole) // 2], T0, None, now=T0)
    assert isinstance(held, HeldBack) and held.reason == "gzip stream still being written"
    got, last = _step(whole, T0, None, now=T0)
    assert isinstance(got, PlannedRange) and (got.file.start, got.file.end) == (0, len(whole))
    assert _step(whole, T0, last, now=T0 + timedelta(hours=1))[0] is None  # unchanged: nothing
    grown = whole + gzip.compress(_record(99) + b"\n")  # a second member appended
    again, _ = _step(grown, T0 + timedelta(seconds=1), last, now=T0 + timedelta(seconds=1))
    assert isinstance(again, PlannedRange) and (again.file.start, again.file.end, again.rewritten) == (0, len(grown),
                                                                                                     True)


@settings(max_examples=300)
@given(st.lists(st.sampled_from([b"a", b" ", b"\n", b"{", b"}", b'"k":1']), max_size=80), st.integers(0, 30),
       st.integers(1, 40), st.booleans())
def test_a_range_ends_after_its_last_newline_however_the_file_is_read_back(
    pieces: list[bytes], start: int, first_step: int, settled: bool
) -> None:
    """The end of a range is found by reading back from the file's end in growing steps: wherever the last newline
    is, and however short the first step, the end is the one a whole-file search gives."""
    data = b"".join(pieces)
    start = min(start, len(data))
    cut = data.rfind(b"\n", start)
    position = cut + 1 if cut >= 0 else start
    tail = data[position:]
    expected = len(data) if not tail.strip() or settled or lifecycle._is_whole_record(tail) else position
    with patch.object(lifecycle, "_TAIL", first_step):
        assert lifecycle._end_of(_read(data), start, len(data), settled) == expected


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(1, 70), st.booleans())
def test_a_range_carries_the_line_its_next_range_starts_at_however_the_count_is_sliced(
    data: bytes, count_slice: int, keep: bool
) -> None:
    """The plan numbers lines by counting the newlines of each range a slice at a time: wherever the slices cut,
    and whether the bytes are kept or read in chunks, the next range starts at the first line plus the newlines
    in the range's bytes."""
    f = LandingFile("file:///landing/a.jsonl", len(data), T0)
    with patch.object(lifecycle, "_COUNT_SLICE", count_slice), patch.object(lifecycle, "_CHUNK", count_slice + 7):
        got = next_range(f, None, _read(data), now=T0 + timedelta(hours=1), settle_seconds=60, keep=keep)
    if isinstance(got, PlannedRange):
        assert got.file.end is not None
        assert got.next_line == got.file.first_line + data[got.file.start : got.file.end].count(b"\n")
