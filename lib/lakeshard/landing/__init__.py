"""The landing zone: newline-delimited JSON files any producer can write (docs/design.md §2).

``parse_record`` decides what a valid record is (pure Python); ``read_landing`` reads a landing zone
with Spark into valid ``events`` and a ``quarantine`` of the rest, with the reason for each (:mod:`.spark_read`);
``parse_landing_arrow`` parses the same bytes to the same rows in this process with Arrow (:mod:`.arrow_read`, over
Arrow's JSON reader in :mod:`.arrow_json`).

Names are loaded on first use, so ``import lakeshard.landing.reasons`` (which the synthetic generator
needs) does not import PySpark or PyArrow.

Example::

    from lakeshard.landing import read_landing

    with read_landing(spark, "/data/landing", limits=cfg.landing_format) as batch:
        print(batch.events.count(), batch.quarantine.count())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.landing.arrow_read import (
        parse_landing_arrow,
    )
    from lakeshard.landing.errors import (
        LandingReadError,
    )
    from lakeshard.landing.gzip import GZIP_HEADER_BYTES, gzip_stream_ends, is_gzip
    from lakeshard.landing.listing import (
        LandingFile,
        LandingScan,
        content_checksum,
        list_landing_files,
        open_landing_file,
        scan_landing,
    )
    from lakeshard.landing.parse import (
        ParsedEvent,
        RecordParser,
        Rejection,
        is_blank,
        parse_record,
    )
    from lakeshard.landing.reasons import (
        ABSURD_TIMESTAMP,
        BAD_TIMESTAMP,
        BAD_TYPE,
        CATEGORIES,
        EMPTY_FIELD,
        FILE_CHANGED,
        INVALID_JSON,
        MISSING_FIELD,
        NOT_AN_OBJECT,
        OVERSIZE,
        TOO_LONG,
        UNREADABLE_FILE,
        WRITE_FAILED,
        category_of,
    )
    from lakeshard.landing.spark_read import (
        LandingBatch,
        read_landing,
    )


# Spark and Arrow load on first use of a name, not on `import lakeshard.landing`.
__all__ = [
    "ABSURD_TIMESTAMP",
    "BAD_TIMESTAMP",
    "BAD_TYPE",
    "CATEGORIES",
    "EMPTY_FIELD",
    "FILE_CHANGED",
    "GZIP_HEADER_BYTES",
    "INVALID_JSON",
    "MISSING_FIELD",
    "NOT_AN_OBJECT",
    "OVERSIZE",
    "TOO_LONG",
    "UNREADABLE_FILE",
    "WRITE_FAILED",
    "LandingBatch",
    "LandingFile",
    "LandingReadError",
    "LandingScan",
    "ParsedEvent",
    "RecordParser",
    "Rejection",
    "category_of",
    "content_checksum",
    "gzip_stream_ends",
    "is_blank",
    "is_gzip",
    "list_landing_files",
    "open_landing_file",
    "parse_landing_arrow",
    "parse_record",
    "read_landing",
    "scan_landing",
]

__getattr__, __dir__ = lazy_exports(globals())
