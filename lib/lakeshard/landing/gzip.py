"""Gzip landing files: how one is recognised and how it is decompressed, in one place.

Compression is recognised by content (the magic bytes, deflate as the method, no reserved flag: RFC 1952), not
by the name, so a mislabelled file still reads and a plain file whose first line happens to start with the
magic bytes stays plain. Concatenated gzip members are read as one stream; zero padding after the last member
is tolerated, as gzip(1) tolerates it.

Damage costs only what follows it: the members before a damaged one are read as usual, and of a member the bytes
end inside (a producer that stopped mid-write) what it decodes to is kept; :class:`GzipDamage` says where the
unreadable rest begins, so the parse can route the complete lines before it and quarantine the rest as one row.
Telling damage from a file still being written is the router's (:mod:`lakeshard.routing.lifecycle`): a fresh file
whose stream does not end yet (:func:`gzip_stream_ends`) is held back until it has been quiet for
``landing_format.settle_seconds``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["GZIP_HEADER_BYTES", "Gunzipped", "GzipDamage", "gunzip", "gzip_stream_ends", "is_gzip"]

GZIP_HEADER_BYTES = 4
"""How many leading bytes :func:`is_gzip` looks at."""

_GUNZIP_PIECE = 16 * 1024 * 1024  # decompressed bytes per zlib call
_ENDS_CHUNK = 8 << 20  # compressed bytes read, and decompressed bytes made, per step of gzip_stream_ends


def is_gzip(head: bytes) -> bool:
    """Return True when ``head`` (a file's first bytes) opens a gzip stream: the magic bytes, deflate as the method
    and no reserved flag set (RFC 1952). Compression is recognised by content, not by name, and the method and
    flag checks keep a plain file whose first line happens to start with the two magic bytes a plain file."""
    return (len(head) >= GZIP_HEADER_BYTES and head[:3] == b"\x1f\x8b\x08"
            and head[3] & 0xE0 == 0)


@dataclass(frozen=True)
class GzipDamage:
    """Where a gzip stream stops being readable: the compressed bytes ``[start, end)`` from the damaged member on.

    ``truncated``: the bytes end inside the member (a producer that stopped mid-write), so what it decoded to is
    a prefix of what was written and is kept; otherwise zlib refused the member (``detail`` says why) and what it
    decoded to before refusing, ``untrusted``, is not routed.
    """

    start: int
    end: int
    truncated: bool
    detail: str = ""
    untrusted: bytes = b""


@dataclass(frozen=True)
class Gunzipped:
    """A gzip file's decompressed bytes up to any damage, the damage, or why the file cannot be read at all."""

    text: bytes
    damage: GzipDamage | None = None
    problem: str | None = None  # set: nothing of the file is read (``text`` is empty)


def gunzip(data: bytes, limit: int) -> Gunzipped:
    """Return the decompressed bytes of a gzip file, member by member, up to the first damaged member.

    Whole members are kept (zlib checks each one's CRC and length). A member the bytes end inside keeps what it
    decoded to (a prefix of what was written); a member zlib refuses (a bad header, bad deflate data, a CRC or
    length that does not match, bytes after the last member that are not zero padding) keeps nothing, and the
    stream stops there: where a next member would start is not known. Decompression streams by pieces of bounded
    output: past ``limit`` bytes in all it stops at once and the file is not read (``problem``), so a gzip bomb
    costs about ``limit`` bytes of memory, not what it would expand to.
    """
    parts: list[bytes] = []
    done = 0
    rest = data
    while rest:
        start = len(data) - len(rest)
        stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        member: list[bytes] = []
        while not stream.eof:
            try:
                # Pieces, not one call of limit + 1: one big call holds its output twice at the end.
                part = stream.decompress(rest, min(_GUNZIP_PIECE, limit + 1 - done))
            except zlib.error as exc:
                damage = GzipDamage(start, len(data), truncated=False, detail=str(exc), untrusted=b"".join(member))
                return Gunzipped(b"".join(parts), damage)
            done += len(part)
            if done > limit:
                return Gunzipped(b"", problem=f"decompresses to more than landing_format.max_file_bytes = {limit} "
                                              "bytes")
            member.append(part)
            # A full piece may leave output pending inside zlib with no input left: ask again; only a call
            # that neither consumes input nor gives output means the stream ends before its end.
            if not part and len(stream.unconsumed_tail) == len(rest):
                return Gunzipped(b"".join(parts + member), GzipDamage(start, len(data), truncated=True))
            rest = stream.unconsumed_tail
        parts.extend(member)
        rest = stream.unused_data
        if not rest.strip(b"\x00"):  # gzip(1) tolerates zero padding after the last member
            break
    return Gunzipped(b"".join(parts))


def gzip_stream_ends(read: Callable[[int, int], bytes], size: int) -> bool:
    """Return whether a gzip file's bytes end its last member (a producer still writing it leaves one open).

    ``read(offset, length)`` reads the file; it is read by ``_ENDS_CHUNK`` bytes and the output is dropped, so a big or
    highly compressed file costs little memory. Damage (bytes zlib refuses) counts as an end: the file is not
    unfinished but damaged, and its parse routes what lies before the damage (:func:`gunzip`).
    """
    stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    ended = False
    offset = 0
    while offset < size:
        chunk = read(offset, min(_ENDS_CHUNK, size - offset))
        if not chunk:
            break
        offset += len(chunk)
        while chunk:
            if ended:  # bytes after a whole stream: the next member, or padding gzip(1) tolerates
                if not chunk.strip(b"\x00"):
                    break
                stream, ended = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS), False
            try:
                while True:  # the output is dropped: bounded steps keep a highly compressed file cheap
                    out = stream.decompress(chunk, _ENDS_CHUNK)
                    chunk = stream.unconsumed_tail
                    if stream.eof or (not chunk and len(out) < _ENDS_CHUNK):
                        break
            except zlib.error:
                return True  # damaged, not unfinished: the parse routes what lies before the damage
            if stream.eof:
                ended, chunk = True, stream.unused_data
    return ended
