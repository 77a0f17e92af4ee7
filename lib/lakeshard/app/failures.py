"""How a failed command's error reads to its user: one message, without the JVM's stack frames or a terminal's
colours, and a failing disk named as such rather than as a bug."""

from __future__ import annotations

import errno
import os
import re

__all__ = ["plain_message", "storage_failure"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_JVM_FRAME = re.compile(r"^\s*(at [\w$.<>/-]+\(.*\)|\.\.\. \d+ more)\s*$")
_PY4J_CALL = re.compile(r"An error occurred while calling [\w.$]+\.\s*\n?\s*:\s*")
_CHAIN = re.compile(r"\s*\n\s*↳\s*")  # delta-rs's error chain: one cause a line, each under an arrow
# What a disk says when it fails a write: the errno codes, delta-rs's "(os error N)", the JVM's IOException text.
_STORAGE_ERRNOS = {errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS}
_CODES = "|".join(map(str, sorted(_STORAGE_ERRNOS)))
_STORAGE_TEXT = re.compile(r"\(os error (" + _CODES + r")\)|java\.io\.IOException: "
                           r"(?:Input/output error|No space left on device|Disk quota exceeded|Read-only file system)")


def plain_message(text: str) -> str:
    """Return an error's text as a user reads it: terminal colours removed, the JVM's stack frames and py4j's
    "An error occurred while calling o76.sql." dropped (the Java exception's own line kept), delta-rs's chain of
    causes on one line; every other line as it was."""
    text = _PY4J_CALL.sub("", _ANSI.sub("", text))
    text = _CHAIN.sub(": ", text)
    return "\n".join(line for line in text.splitlines() if not _JVM_FRAME.match(line)).strip()


def storage_failure(exc: BaseException) -> str | None:
    """Return what failed when ``exc`` (or an exception it came from) is the lakehouse's storage failing a write (an
    I/O error, a full disk or quota, a read-only file system), in one line; None for anything else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _STORAGE_ERRNOS:
            return f"{current.strerror} (os error {current.errno})"
        found = _STORAGE_TEXT.search(_ANSI.sub("", str(current)))
        if found:
            code = found.group(1)
            return f"{os.strerror(int(code))} (os error {code})" if code else found.group(0).split(": ", 1)[1]
        current = current.__cause__ or current.__context__
    return None
