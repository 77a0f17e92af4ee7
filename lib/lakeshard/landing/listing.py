"""List a landing zone: which files it holds, under which names, and how to open one.

:func:`scan_landing` finds the input (``*.json``, ``*.jsonl``, ``*.json.gz``, ``*.jsonl.gz`` below the landing root,
skipping every path component that starts with ``_`` or ``.``: ground truth, checkpoints, in-progress uploads),
follows symbolic links with one policy (each real file once, cycles ended, dangling links named), and describes each
file as a :class:`LandingFile`, which a batch plan narrows to a byte range.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs

from lakeshard.landing.errors import LandingReadError
from lakeshard.utc import aware

__all__ = [
    "LANDING_SUFFIXES",
    "LandingFile",
    "LandingScan",
    "content_checksum",
    "list_landing_files",
    "open_landing_file",
    "scan_landing",
]

LANDING_SUFFIXES: tuple[str, ...] = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
"""File names the reader takes as landing input (case-sensitive)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class LandingFile:
    """One input file of a landing zone: its URI (``file:///...`` locally), size and modification time, and
    which of its bytes a read takes.

    A listed file is read whole. A batch plan narrows it to the byte range ``[start, end)`` whose first line is
    physical line ``first_line`` (line numbers stay those of the file), and records the range's ``checksum``
    (:func:`content_checksum`): a read that finds other bytes there quarantines one ``file_changed`` row for the
    range instead of parsing them. ``target`` is the file the path resolves to when it is (or lies below) a
    symbolic link, as a URI; empty otherwise. :attr:`identity` is what the router tracks a file by.
    """

    path: str
    size_bytes: int
    mtime: datetime  # UTC
    start: int = 0
    end: int | None = None  # None: to the end of the file
    first_line: int = 1
    checksum: str | None = None
    target: str = ""

    @property
    def identity(self) -> str:
        """Return the URI of the real file: ``target`` for a link, else ``path``."""
        return self.target or self.path

    @property
    def read_bytes(self) -> int:
        """Return how many bytes a read of this file takes (the range's length, or the size)."""
        return (self.size_bytes if self.end is None else self.end) - self.start


@dataclass(frozen=True)
class LandingScan:
    """A landing zone's listing: the files to read, and the symbolic links whose target does not exist."""

    files: list[LandingFile]
    dangling: list[str] = field(default_factory=list)  # URIs of links with a landing name and no target


def content_checksum(data: bytes) -> str:
    """Return the checksum a batch plan records for a byte range of a landing file: SHA-256, as hex."""
    return hashlib.sha256(data).hexdigest()


def _local_path_of_file_uri(uri: str) -> str:
    rest = uri[len("file:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        host, sep, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise LandingReadError(f"landing zone {uri}: file URIs on another host ({host}) are not supported")
        rest = sep + path
    if not rest.startswith("/"):
        raise LandingReadError(f"landing zone {uri}: a file URI needs an absolute path, e.g. file:///data/landing")
    return rest


def _resolve(landing: str) -> tuple[pafs.FileSystem, str, str]:
    """Return ``(filesystem, path inside it, URI prefix)``; a file's URI is prefix + its path."""
    if landing.startswith("file:"):
        return pafs.LocalFileSystem(), os.path.normpath(_local_path_of_file_uri(landing)), "file://"
    if "://" in landing:
        scheme = landing.split("://", 1)[0]
        try:
            fs, path = pafs.FileSystem.from_uri(landing)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise LandingReadError(f"landing zone {landing}: cannot open this location ({exc})") from None
        return fs, path.rstrip("/"), f"{scheme}://"
    return pafs.LocalFileSystem(), os.path.abspath(landing), "file://"


def _is_landing_name(name: str) -> bool:
    return name.endswith(LANDING_SUFFIXES)


def _mtime(info: pafs.FileInfo) -> datetime:
    when: datetime | None = info.mtime
    if when is None:
        return _EPOCH
    return aware(when)


def list_landing_files(landing: str | os.PathLike[str]) -> list[LandingFile]:
    """Return the landing zone's input files, sorted by path (for generated zones: arrival order).

    Looks recursively below ``landing`` (a local path or a ``file:`` URI; other URIs that
    ``pyarrow.fs`` understands, e.g. ``s3://``, are listed the same way) for files named
    ``*.json``, ``*.jsonl``, ``*.json.gz`` or ``*.jsonl.gz``, skipping every file or directory below the
    root whose name starts with ``_`` or ``.`` (``_truth/``, ``_checkpoints/``, ``.part-0001.jsonl``).
    ``landing`` may also name one file, which is then the whole list. Symbolic links: see :func:`scan_landing`.

    Raises:
        LandingReadError: ``landing`` does not exist or its location is not understood.

    Example::

        files = list_landing_files("/data/landing")
        files[0].path  # 'file:///data/landing/2026-01-01/00/part-000000.jsonl'
    """
    return scan_landing(landing).files


def scan_landing(landing: str | os.PathLike[str]) -> LandingScan:
    """Return the landing zone's input files (as :func:`list_landing_files`) and its dangling links.

    Symbolic links on a local file system: a link to a file is read as that file, and each real file once —
    under the first of its names in path order (``target`` says which file it is); a link to a directory is
    followed, each real directory at most once, so a link cycle ends; a link with a landing name whose target
    does not exist is listed in ``dangling`` (it is read once its target appears).

    Raises:
        LandingReadError: ``landing`` does not exist or its location is not understood.
    """
    text = os.fspath(landing)
    fs, root, prefix = _resolve(text)
    if isinstance(fs, pafs.LocalFileSystem):
        return _scan_local(text, root, prefix)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise LandingReadError(f"landing zone {text} does not exist")
    if info.type == pafs.FileType.File:
        return LandingScan([LandingFile(prefix + root, info.size or 0, _mtime(info))] if _is_landing_name(root) else [])
    out: list[LandingFile] = []
    for entry in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if entry.type != pafs.FileType.File or not _is_landing_name(entry.base_name):
            continue
        relative = entry.path[len(root) :].lstrip("/")
        if any(part.startswith(("_", ".")) for part in relative.split("/")):
            continue
        out.append(LandingFile(prefix + entry.path, entry.size or 0, _mtime(entry)))
    out.sort(key=lambda f: f.path)
    return LandingScan(out)


def _stat_mtime(st: os.stat_result) -> datetime:
    # Exactly as pyarrow's FileInfo.mtime rounds it (checked): the router compares a file's mtime with the one a
    # batch plan recorded, and plans made by earlier versions recorded pyarrow's.
    return datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)


def _scan_local(text: str, root: str, prefix: str) -> LandingScan:
    """Return the scan of a local landing zone, walking it with ``os.scandir`` to see its symbolic links."""
    if not os.path.exists(root):
        raise LandingReadError(f"landing zone {text} does not exist")
    real_root = os.path.realpath(root)

    def uri_of_real(real: str) -> str:
        # A target inside the landing zone is named as the zone names it (its root unresolved), so a file's
        # identity does not depend on links above the root.
        if real == real_root or real.startswith(real_root + os.sep):
            return prefix + root + real[len(real_root) :]
        return prefix + real

    if not os.path.isdir(root):
        if not _is_landing_name(root):
            return LandingScan([])
        real, st = os.path.realpath(root), os.stat(root)
        return LandingScan([LandingFile(prefix + root, st.st_size, _stat_mtime(st),
                                        target=prefix + real if real != root else "")])
    found: list[tuple[str, os.stat_result, str]] = []  # (path, stat of the real file, target URI or "")
    dangling: list[str] = []
    visited = {real_root}  # real directories entered through a link (and the root): each once
    stack: list[tuple[str, bool]] = [(root, False)]  # (directory, whether a link led into it)
    while stack:
        directory, linked = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:  # vanished or unreadable between listing and walking: like a file that is gone
            continue
        for entry in entries:
            if entry.name.startswith(("_", ".")):
                continue
            link = entry.is_symlink()
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError:
                is_dir = is_file = False
            if is_dir:
                if link:
                    real = os.path.realpath(entry.path)
                    if real in visited:
                        continue
                    visited.add(real)
                stack.append((entry.path, linked or link))
            elif is_file and _is_landing_name(entry.name):
                try:
                    st = entry.stat()
                except OSError:
                    continue
                target = uri_of_real(os.path.realpath(entry.path)) if link or linked else ""
                found.append((entry.path, st, target))
            elif link and not is_file and _is_landing_name(entry.name) and not os.path.exists(entry.path):
                dangling.append(prefix + entry.path)
    found.sort(key=lambda f: f[0])
    files: list[LandingFile] = []
    seen: set[str] = set()
    for path, st, target in found:
        identity = target or prefix + path
        if identity in seen:  # a second name of a file listed already
            continue
        seen.add(identity)
        files.append(LandingFile(prefix + path, st.st_size, _stat_mtime(st), target=target))
    return LandingScan(files, sorted(dangling))


def open_landing_file(uri: str) -> pa.NativeFile:
    """Return a landing file (a URI as :class:`LandingFile` holds it) opened for random access; close it after.

    Raises:
        OSError, pyarrow.ArrowException: the file cannot be opened.
        LandingReadError: the location is not understood.
    """
    fs, path, _ = _resolve(uri)
    return fs.open_input_file(path)
