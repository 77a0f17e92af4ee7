"""Why a landing record was quarantined: the categories every part of lakeshard agrees on.

A quarantine reason is ``"<category>: <detail>"`` (for example ``"missing_field: tenant_id"``); the
category is one of the constants below, so counts can be compared with a generator's ground truth and
the detail tells a person exactly what was wrong.
"""

from __future__ import annotations

__all__ = [
    "ABSURD_TIMESTAMP",
    "BAD_TIMESTAMP",
    "BAD_TYPE",
    "CATEGORIES",
    "EMPTY_FIELD",
    "FILE_CHANGED",
    "INVALID_JSON",
    "MISSING_FIELD",
    "NOT_AN_OBJECT",
    "OVERSIZE",
    "TOO_LONG",
    "UNCONVERTIBLE",
    "UNREADABLE_FILE",
    "WRITE_FAILED",
    "category_of",
]

INVALID_JSON = "invalid_json"  # the line is not JSON (truncated, garbage, bad UTF-8)
NOT_AN_OBJECT = "not_an_object"  # valid JSON, but not an object (a list, a number, null)
MISSING_FIELD = "missing_field"  # tenant_id, event_id or ts absent (or null)
BAD_TYPE = "bad_type"  # a field has the wrong JSON type (event_id: 42, attributes: [..])
EMPTY_FIELD = "empty_field"  # tenant_id or event_id is the empty string
TOO_LONG = "too_long"  # tenant_id > 128 chars or event_id > 256 chars
BAD_TIMESTAMP = "bad_timestamp"  # ts is a string that is not RFC 3339
ABSURD_TIMESTAMP = "absurd_timestamp"  # ts parses but lies before 2000 or too far in the future
OVERSIZE = "oversize"  # the raw record is larger than the configured maximum (default 256 KiB)
# Not parse rules of a line (so not in CATEGORIES):
# a valid record the shard writer dead-lettered after its retries;
WRITE_FAILED = "write_failed"
# Not a parse rule either: a landing file no longer holds the bytes its batch plan recorded (it was rewritten
# between planning and reading); the change itself is routed as a rewritten file by a later batch.
FILE_CHANGED = "file_changed"
# a whole landing file that could not be read (expanding past landing_format.max_file_bytes, vanished, permission
# denied): one row, line_number 0, none of its lines kept; or the damaged rest of a gzip file (cut short, corrupt):
# one row on the line it begins on, naming its compressed byte range, after the complete lines before it;
UNREADABLE_FILE = "unreadable_file"
# a record the parser accepted that still could not be turned into Arrow columns: a parser gap, kept
# visible as its own category instead of failing the batch.
UNCONVERTIBLE = "unconvertible"

CATEGORIES: tuple[str, ...] = (
    INVALID_JSON,
    NOT_AN_OBJECT,
    MISSING_FIELD,
    BAD_TYPE,
    EMPTY_FIELD,
    TOO_LONG,
    BAD_TIMESTAMP,
    ABSURD_TIMESTAMP,
    OVERSIZE,
)


def category_of(reason: str) -> str:
    """Return the category part of a quarantine reason (the text before the first colon)."""
    return reason.split(":", 1)[0].strip()
