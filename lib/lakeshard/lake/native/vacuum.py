"""Delta's VACUUM for the native adapter (public SQL, classic and Spark Connect), with the files it deleted."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

from lakeshard.errors import UnsupportedByAdapter
from lakeshard.lake.native.commit import session_conf
from lakeshard.lake.native.files import LogFiles
from lakeshard.lake.native.public import delta_table_name
from lakeshard.lake.types import VacuumReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["vacuum"]

_RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"


def vacuum(spark: SparkSession, files: LogFiles, uri: str, retention_hours: float, dry_run: bool) -> VacuumReport:
    """Return what Delta's VACUUM deleted (or, ``dry_run``, would delete) of the table at ``uri``: data files no
    version within ``retention_hours`` needs.

    ``DeltaTable.vacuum`` deletes; the files it deleted are the table's files before minus after (it returns no
    list). A dry run is ``VACUUM ... DRY RUN``, which needs Delta's SQL extension
    (``spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension``; always there on Databricks). Delta's own
    refusal of retentions under 7 days is switched off for this call, as the embedded adapter allows them too.
    Delta's VACUUM also removes files no commit ever named (orphans of failed writes) and the directories it empties.

    Raises:
        UnsupportedByAdapter: a dry run on a session without Delta's SQL extension.
    """
    hours = max(0, math.ceil(retention_hours))
    with _retention_check_off(spark, hours):
        if dry_run:
            try:
                listed = spark.sql(f"VACUUM {delta_table_name(uri)} RETAIN {hours} HOURS DRY RUN").collect()
            except Exception as exc:
                raise UnsupportedByAdapter(
                    f"vacuum dry run on {uri}: Delta's VACUUM ... DRY RUN did not run ({str(exc)[:200]}); it "
                    "needs spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension on the session"
                ) from None
            return VacuumReport(uri, True, tuple(sorted(_relative(uri, str(r[0])) for r in listed)), ())
        before = set(files.list_files(uri))
        spark.sql(f"VACUUM {delta_table_name(uri)} RETAIN {hours} HOURS").collect()
        after = set(files.list_files(uri))
    return VacuumReport(uri, False, tuple(sorted(before - after)), ())


@contextlib.contextmanager
def _retention_check_off(spark: SparkSession, hours: int) -> Iterator[None]:
    if hours >= timedelta(days=7).total_seconds() / 3600:
        yield
        return
    with session_conf(spark, _RETENTION_CHECK_CONF, "false"):
        yield


def _relative(uri: str, path: str) -> str:
    """Return a file VACUUM names (an absolute path or URI) relative to the table root."""
    for root in (uri, f"file:{uri}", f"file://{uri}"):
        if path.startswith(root + "/"):
            return path[len(root) + 1:]
    return path
