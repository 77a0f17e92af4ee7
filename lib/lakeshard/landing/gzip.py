"""Gzip landing files: how one is recognised and how it is decompressed, in one place.

Compression is recognised by content (the magic bytes, deflate as the method, no reserved flag: RFC 1952), not
by the name, so a mislabelled file still reads and a plain file whose first line happens to start with the
magic bytes stays plain. Concatenated gzip members are read as one stream; zero padding after the last member
is tolerated, as gzip(1) tolerates it.
"""

from __future__ import annotations

import zlib

__all__ = ["GZIP_HEADER_BYTES", "gunzip", "is_gzip"]

GZIP_HEADER_BYTES = 4
"""How many leading bytes :func:`is_gzip` looks at."""

_GUNZIP_PIECE = 16 * 1024 * 1024  # decompressed bytes per zlib call


def is_gzip(head: bytes) -> bool:
    """Return True when ``head`` (a file's first bytes) opens a gzip stream: the magic bytes, deflate as the method
    and no reserved flag set (RFC 1952). Compression is recognised by content, not by name, and the method and
    flag checks keep a plain file whose first line happens to start with the two magic bytes a plain file."""
    return (len(head) >= GZIP_HEADER_BYTES and head[:3] == b"\x1f\x8b\x08"
            and head[3] & 0xE0 == 0)


def gunzip(data: bytes, limit: int) -> tuple[bytes, str | None]:
    """Return the decompressed bytes of a gzip file, or ``b""`` and why the file cannot be read.

    Decompression streams by pieces of bounded output: past ``limit`` bytes it stops at once, so a gzip
    bomb costs about ``limit`` bytes of memory, not what it would expand to.
    """
    parts: list[bytes] = []
    done = 0
    rest = data
    while rest:
        stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while not stream.eof:
            try:
                # Pieces, not one call of limit + 1: one big call holds its output twice at the end.
                part = stream.decompress(rest, min(_GUNZIP_PIECE, limit + 1 - done))
            except zlib.error as exc:
                return b"", f"gzip stream is corrupt after {done} decompressed bytes ({exc})"
            done += len(part)
            if done > limit:
                return b"", f"decompresses to more than landing_format.max_file_bytes = {limit} bytes"
            parts.append(part)
            # A full piece may leave output pending inside zlib with no input left: ask again; only a call
            # that neither consumes input nor gives output means the stream ends before its end.
            if not part and len(stream.unconsumed_tail) == len(rest):
                return b"", f"gzip stream is truncated after {done} decompressed bytes"
            rest = stream.unconsumed_tail
        rest = stream.unused_data
        if not rest.strip(b"\x00"):  # gzip(1) tolerates zero padding after the last member
            break
    return b"".join(parts), None

