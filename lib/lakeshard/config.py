"""The one typed configuration object of lakeshard: defaults, then a TOML file, then environment variables.

Sources, later ones winning:

1. the defaults below;
2. a TOML file: ``$LAKESHARD_CONFIG`` if set, else ``./lakeshard.toml`` if present. Sections match the
   nested dataclasses (``[spark]``, ``[landing]``) and top-level keys match :class:`LakeshardConfig`;
3. environment variables ``LAKESHARD_<KEY>`` for top-level keys and ``LAKESHARD_<SECTION>_<KEY>`` for
   section keys, e.g. ``LAKESHARD_LAKEHOUSE=/data/lh`` or ``LAKESHARD_SPARK_DRIVER_MEMORY=8g``.

Example::

    cfg = load_config()                       # defaults + file + env
    cfg = load_config(overrides={"lakehouse": "/tmp/lh", "spark": {"master": "local[1]"}})
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from lakeshard.errors import ConfigError

__all__ = [
    "OTHER_VARIABLES", "BalancingConfig", "Bounds", "CompactionConfig", "DedupeConfig", "LakeshardConfig",
    "LandingConfig", "MaintenanceConfig", "RoutingConfig", "Setting", "SparkConfig", "StorageConfig", "load_config",
    "settings", "settings_table",
]

Adapter = Literal["auto", "embedded", "native"]
_T = TypeVar("_T")

# ``LAKESHARD_*`` variables read outside the configuration object; any other ``LAKESHARD_*`` name that is not a
# setting is refused, so a misspelt setting never goes unnoticed.
OTHER_VARIABLES: dict[str, str] = {
    "LAKESHARD_CONFIG": "the TOML file to read (default ./lakeshard.toml when present)",
    "LAKESHARD_DEBUG": "print an unexpected error's traceback instead of saving it to a file",
    "LAKESHARD_HUGE_PAGES": "1: the machine's transparent huge pages for a lakeshard command's process "
                            "(lakeshard.process.memory)",
    "LAKESHARD_TRACE_PHASES": "a file the table store appends a line to around each commit and Parquet write "
                              "(lakeshard.lake.trace)",
    "LAKESHARD_DELTA_JARS": "the folder holding Delta's jars (default .delta-jars/ beside the project, filled by "
                            "scripts/install-delta-jars.sh)",
    "LAKESHARD_REQUIRE_DELTA_JVM": "test suite: fail, not skip, the tests that need Delta's JVM when it is "
                                   "missing (CI)",
    "LAKESHARD_KILL_SEED": "test suite: replays the seed of a kill or race test",
    "LAKESHARD_SIGKILLS": "test suite: how many SIGKILLs the kill harness aims",
    "LAKESHARD_TEST_SPARK_REMOTE": "test suite: run the tests' Spark session over Spark Connect at this address",
    "LAKESHARD_REQUIRE_MATRIX": "environment matrix (make matrix): fail, not skip, an environment this machine cannot "
                                "build (CI)",
    "LAKESHARD_PYTHON311": "environment matrix: the Python 3.11 interpreter to build the lowest versions' "
                           "environment with",
    "LAKESHARD_PYTHON312": "environment matrix: the Python 3.12 interpreter to build the Databricks-shaped "
                           "environments with",
}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class Bounds:
    """The values a numeric setting accepts: from ``low`` to ``high`` (either may be open or absent).

    Example: ``Bounds(0, 1, high_open=True)`` admits 0 <= x < 1 and reads ``in [0, 1)``; NaN is never admitted.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""

    def admits(self, value: float) -> bool:
        """Return whether ``value`` lies inside the bounds (an infinite float never does: no setting can work
        with an endless duration, size or rate)."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            text = (f"in {'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)}"
                    f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {_number(self.low)}"
        else:
            text = f"{'<' if self.high_open else '<='} {_number(self.high or 0)}"
        return f"{text} ({self.note})" if self.note else text


def _setting(default: _T, bounds: Bounds) -> _T:
    """Return a dataclass field with ``default`` whose values must lie inside ``bounds``."""
    return field(default=default, metadata={"bounds": bounds})


def _at_least(low: float, note: str = "", high: float | None = None) -> Bounds:
    return Bounds(low, high, note=note)


def _above(low: float, high: float | None = None) -> Bounds:
    return Bounds(low, high, low_open=True)


# The most shards a ring may have: an ingest run without ``--shards`` walks every shard of it (65,536 shards cost
# a run ~4 s, 2^20 ~30 s and 500 MB, 10^11 a MemoryError).
MAX_SHARDS = 65_536
# The longest duration a setting may give: ten years, in seconds and in hours (longer ones overflow a window's
# microseconds or a ``timedelta``).
MAX_SECONDS = 3653 * 86_400
MAX_HOURS = 3653 * 24
_INT64 = 2**63 - 1  # every integer setting ends up in a 64-bit column or array


def _check(f: dataclasses.Field[Any], value: Any, where: str) -> None:
    bounds = f.metadata.get("bounds")
    if bounds is not None and isinstance(value, (int, float)) and not bounds.admits(value):
        raise ConfigError(f"{where}: expected {bounds}, found {value!r}")
    if bounds is not None and isinstance(value, int) and not -_INT64 - 1 <= value <= _INT64:
        raise ConfigError(f"{where}: expected {bounds} and at most {_INT64}, found {value!r}")


class _Section:
    """A section of the configuration: each numeric setting is checked against its bounds when it is built."""

    section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(typing.cast(Any, self)):
            _check(f, getattr(self, f.name), f"{self.section}.{f.name}")


@dataclass(frozen=True)
class SparkConfig(_Section):
    """How the Spark session is obtained and tuned when lakeshard starts it locally."""

    section: ClassVar[str] = "spark"

    master: str = "local[*]"
    app_name: str = "lakeshard"
    driver_memory: str = "4g"
    shuffle_partitions: int = _setting(4, _at_least(1))
    # "auto" uses Delta's JVM classes when the session has them, otherwise delta-rs commits.
    adapter: Adapter = "auto"
    # Comma-separated jar files for a local session, e.g. delta-spark's and delta-storage's for the native
    # adapter (``spark.jars``; no download). With delta-spark among them, Delta's SQL extension and catalog
    # are switched on too.
    jars: str = ""
    # Use databricks-connect when it is installed and this is true (or DATABRICKS_* is configured).
    databricks_connect: bool = False
    # Spark Connect: "" = a classic local session (``master``); "local" / "local[N]" = start the Spark Connect
    # server pyspark ships in this process and talk to it over Connect; "sc://host:port" = connect to a server.
    remote: str = ""
    # Under Spark Connect: the most Arrow bytes one request hands the server (a bigger write is staged in chunks
    # of this size), and how long one request may run before it is interrupted and reported (a stalled server).
    connect_request_mb: int = _setting(32, _at_least(1, high=4096))
    connect_timeout_seconds: int = _setting(900, _at_least(1, high=MAX_SECONDS))
    log_level: str = "ERROR"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.remote and not re.fullmatch(r"local(\[(\d+|\*)\])?|sc://\S+", self.remote):
            raise ConfigError(f"spark.remote: expected '' (classic session), 'local', 'local[N]' or 'sc://host:port', "
                              f"found {self.remote!r}")


@dataclass(frozen=True)
class LandingConfig(_Section):
    """The landing record format's limits (docs/design.md §2)."""

    section: ClassVar[str] = "landing_format"

    max_record_bytes: int = _setting(256 * 1024, _at_least(1))
    max_tenant_id_chars: int = _setting(128, _at_least(1))
    max_event_id_chars: int = _setting(256, _at_least(1))
    # Timestamps outside [earliest, now + max_future] are "absurd" and quarantined.
    earliest_ts: str = "2000-01-01T00:00:00Z"
    max_future_seconds: int = _setting(24 * 3600, _at_least(0, high=MAX_SECONDS))
    # An unterminated last line of a landing file is routed when it is a whole JSON object, or once the file has
    # not changed for this long (then it is final, and quarantined if it is not a record); until then the router
    # holds it back as a record still being written. Also how long a fresh gzip file may stay unfinished.
    settle_seconds: int = _setting(60, _at_least(0, high=MAX_SECONDS))
    # The bytes one landing file may hold once decompressed (plain files: their size). A file past it is
    # quarantined whole as unreadable_file, and decompression stops there, so a gzip bomb costs at most this
    # much memory. Its decompressed bytes and their parsed rows (~2-3x) must fit a Spark Python worker (and
    # the driver on the in-driver path); landing files are typically tens of megabytes.
    max_file_bytes: int = _setting(256 * 1024 * 1024, _at_least(1))


@dataclass(frozen=True)
class RoutingConfig(_Section):
    """Shard routing (Husky): the shard ring, placement windows, and defaults for new tenants."""

    section: ClassVar[str] = "routing"

    total_shards: int = _setting(16, _at_least(1, high=MAX_SHARDS))
    window_seconds: int = _setting(300, _above(0, MAX_SECONDS))
    default_shard_count: int = _setting(1, _at_least(1, high=MAX_SHARDS))
    # Allocators racing for the same placements retry this often before giving up with an error.
    allocation_retries: int = _setting(25, _at_least(1))
    # A route batch whose landing files hold at most this many bytes is parsed, placed, hashed and written in
    # the driver process (pyarrow), not as Spark jobs, whose fixed cost dominates a trickle; bigger batches use
    # Spark's parallel parse. Both give the same rows on the same shards. A backlog is cut into batches of this
    # size, so only a single bigger file goes to Spark. 0 = always Spark (one batch up to 2 GiB / 200 files:
    # for a cluster whose executors parse faster than its driver).
    arrow_max_bytes: int = _setting(32 * 1024 * 1024, _at_least(0, "0 = always Spark"))
    # With the fused hand-off (``lakeshard ingest`` without --shards: routed and written in one process), a batch
    # holds up to this many landing bytes, parsed and written in the driver. Each batch adds one events file per
    # (tenant, hour) it touches, so bigger batches write fewer, larger files; memory grows with the batch (two
    # batches' parse are held at once: peak RSS about 1.35 GiB at 160 MiB, 1.5 at 192, 1.0 at 96). 0 =
    # routing.arrow_max_bytes.
    fused_max_bytes: int = _setting(160 * 1024 * 1024, _at_least(0, "0 = routing.arrow_max_bytes"))
    # The event hash new placements route by: 2 = Spark's built-in xxhash64 (no Python in the Spark plan),
    # 1 = mmh3 (what lakeshard used before versions; a Python UDF in Spark). Existing placements keep theirs.
    # Set 1 while processes of an older lakeshard (which route by mmh3 only) still route into the lakehouse.
    event_hash_version: int = _setting(2, Bounds(1, 2, note="1 = mmh3, 2 = xxhash64"))
    # Spark path: how many tasks write a batch's routed rows, without a shuffle (each writes one file per shard
    # it has rows of). 0 = one per core on up to 8 cores; on a bigger cluster a shuffle by shard (one file each).
    write_tasks: int = _setting(0, _at_least(0, "0 = one per core"))


@dataclass(frozen=True)
class BalancingConfig(_Section):
    """Load management (Husky): the autosharder's shard counts and the sharding balancer's salt moves."""

    section: ClassVar[str] = "balancing"

    # The bytes/s one shard should take from one tenant. Keep it a fraction (about a quarter) of what a
    # shard's writer sustains: then no tenant fills a shard alone and the balancer has pieces to pack.
    target_bytes_per_second: float = _setting(1024.0 * 1024.0, _above(0))
    min_shards: int = _setting(1, _at_least(1, high=MAX_SHARDS))
    max_shards: int = _setting(64, _at_least(1, high=MAX_SHARDS))
    # Scale down only when the peak rate stayed below this share of the current capacity (count x target)
    # for ``scale_down_windows`` windows in a row, and the last count change is ``cooldown_seconds`` old.
    scale_down_below: float = _setting(0.5, Bounds(0, 1, low_open=True, high_open=True))
    scale_down_windows: int = _setting(6, _at_least(1))
    cooldown_seconds: int = _setting(1800, _at_least(0, high=MAX_SECONDS))
    # Metrics whose newest window ended longer ago than this are stale: the autosharder changes nothing.
    metrics_max_age_seconds: int = _setting(900, _above(0, MAX_SECONDS))
    # The balancer acts while the per-shard load's variance over its squared mean (sigma^2 / mu^2) is above this.
    variance_threshold: float = _setting(0.005, _at_least(0))
    max_moves: int = _setting(50, _at_least(0))
    # Salts 0 .. candidate_salts-1 are the positions a tenant may be moved to (docs/balancing.md).
    candidate_salts: int = _setting(32, _at_least(1))
    # The balancer balances each tenant's mean bytes over this many recent windows.
    lookback_windows: int = _setting(6, _at_least(1))

    def __post_init__(self) -> None:
        super().__post_init__()
        # Each bound is in its range alone; together they must leave the autosharder a shard count to choose.
        if self.min_shards > self.max_shards:
            raise ConfigError(f"balancing.min_shards = {self.min_shards} is above balancing.max_shards = "
                              f"{self.max_shards} (LAKESHARD_BALANCING_MIN_SHARDS, LAKESHARD_BALANCING_MAX_SHARDS): "
                              "expected min_shards <= max_shards")


@dataclass(frozen=True)
class DedupeConfig(_Section):
    """Exactly-once writers (Husky): how long IDs are remembered and how many are held in memory."""

    section: ClassVar[str] = "dedupe"

    # Duplicates whose event time is more than this before the newest committed hour of their shard are not
    # detected (their IDs may have expired from the index); keep it above the longest redelivery delay.
    id_retention_hours: float = _setting(7 * 24.0, _above(0, MAX_HOURS))
    # Byte bound of each writer's in-memory LRU of ID intervals (16 bytes per ID).
    id_cache_bytes: int = _setting(256 * 1024 * 1024, _at_least(0))
    # Memory gate on intake: one writer step takes routed commits only up to this many Parquet bytes (at least
    # one commit, whatever its size); the rest waits for the next step. With arrow_max_bytes > 0 a step also
    # stays within it, so a backlog is taken in driver steps rather than one Spark step.
    max_batch_bytes: int = _setting(256 * 1024 * 1024, _at_least(1))
    # A step that fails on an infrastructure fault (storage, I/O, memory, Spark) is retried after
    # retry_initial_seconds, the wait doubling up to retry_max_delay_seconds, for retry_total_seconds in all;
    # then the run stops with an error naming the shards and the routed version, nothing of the batch committed
    # or quarantined (lakeshard.dedupe.faults). Only rows proven unwritable by themselves are dead-lettered.
    retry_initial_seconds: float = _setting(0.5, _at_least(0, high=MAX_SECONDS))
    retry_max_delay_seconds: float = _setting(10.0, _at_least(0, high=MAX_SECONDS))
    retry_total_seconds: float = _setting(60.0, _at_least(0, high=MAX_SECONDS))
    # A writer step whose new routed files hold at most this many Parquet bytes runs in the driver process
    # (pyarrow + numpy: read, hash, dedupe, sort, write Parquet, commit) instead of as Spark jobs, whose fixed
    # cost dominates a micro-batch (an expectation gate's checks still run on Spark); bigger steps use Spark. Both paths
    # give the same rows, files and IDs. 0 = always Spark. The driver holds about 5-10x this in memory.
    arrow_max_bytes: int = _setting(64 * 1024 * 1024, _at_least(0, "0 = always Spark"))
    # Commit coalescing for a following writer (``lakeshard ingest --follow``): a step waits until its shards'
    # new routed commits hold commit_min_bytes of Parquet, or the oldest of them is commit_max_wait_seconds
    # old, so a trickle makes fewer, bigger commits (fewer log entries and small files). 0 = commit whatever
    # is there. A run that processes what is available and stops (batch mode, the pipeline) never waits.
    commit_min_bytes: int = _setting(0, _at_least(0, "0 = commit whatever is there"))
    commit_max_wait_seconds: float = _setting(60.0, _at_least(0, high=MAX_SECONDS))
    # Expiry of consumed routed data: once a writer consumed this many routed files since it last did, it removes
    # from ``routed`` every file of its shards that their committed progress has passed (one commit; the rows
    # are in ``events`` or were dropped as duplicates; vacuum reclaims the storage). ``routed`` then holds
    # about what is not consumed yet instead of everything ever routed: its snapshot, which every router commit
    # and writer step brings up to date, stops growing. 0 = never (routed keeps every file).
    routed_expire_files: int = _setting(256, _at_least(0, "0 = never"))


@dataclass(frozen=True)
class CompactionConfig(_Section):
    """Compaction (Husky): the merge's memory and threads, and the outlier outputs (docs/compaction.md)."""

    section: ClassVar[str] = "compaction"

    # Arrow memory one compaction round's merges may use together (a bucket's inputs that fit are sorted in
    # memory; bigger ones stream, bounded by row group x inputs).
    memory_budget_bytes: int = _setting(256 * 1024 * 1024, _at_least(1))
    # Merges of one round that fit memory_budget_bytes / merge_threads run this many at a time.
    merge_threads: int = _setting(2, _at_least(1))
    # Rows carrying a value that fewer than this share of a merge's rows carry (non-leading sort columns)
    # go to a separate sorted outlier file, so needles on rare values read about one file per bucket and
    # common values one more. 0 switches outlier files off.
    outlier_fraction: float = _setting(0.02, Bounds(0, 1, high_open=True, note="0 = no outlier files"))
    # At most this share of a merge's rows go to outlier files (rarest values first).
    outlier_max_share: float = _setting(0.1, Bounds(0, 1, high_open=True))
    # Only merges that would write at least this many files unsplit get an outlier file.
    outlier_min_outputs: int = _setting(3, _at_least(1))


@dataclass(frozen=True)
class MaintenanceConfig(_Section):
    """The maintenance job's upkeep of the small bookkeeping tables (docs/pipelines.md, flow ``compact_books``)."""

    section: ClassVar[str] = "maintenance"

    # A bookkeeping table with more live files than this is rewritten into one file per partition. The router
    # reads the batch plan and placement files a run's look needs, so every file still unmerged costs each route run
    # (an ingest job every 5 minutes adds ~12 an hour): 64 made route runs ~40 % dearer at the top of the sawtooth.
    bookkeeping_max_files: int = _setting(16, _at_least(1))
    # Parquet bytes one table's rewrite reads into the driver at most: the smallest files first, so a table's
    # files that have grown past it are left as they are and memory stays bounded.
    bookkeeping_max_bytes: int = _setting(64 * 1024 * 1024, _at_least(1))
    # Rows per Parquet row group of a rewritten ``placements`` or ``landing_batches`` file (sorted by what their
    # readers filter on): a reader decodes only the row groups that can hold what it asks for.
    bookkeeping_row_group_rows: int = _setting(1024, _at_least(1))
    # ``routing_metrics`` rows whose window started longer ago than this are dropped by the maintenance job's
    # ``compact_books``: the autosharder and the balancer read only their newest few windows (at most
    # ``max(scale_down_windows, lookback_windows) x routing.window_seconds``, half an hour by default).
    routing_metrics_retention_hours: float = _setting(24.0, _above(0, MAX_HOURS))
    # Once a day, in the maintenance run of this UTC hour (-1: every run), ``compact_books`` vacuums every table:
    # deletes the data files no version of the last ``vacuum_retention_hours`` references (files compaction and
    # expiry removed, a crashed write's orphans) and what a killed commit left. Older versions can no longer be
    # read (``lakeshard versions show``, time travel). 168 h is Delta's default; Delta on Spark refuses less
    # unless its retention check is turned off.
    vacuum_hour_utc: int = _setting(3, Bounds(-1, 23, note="-1 = every run"))
    vacuum_retention_hours: float = _setting(168.0, _at_least(0, high=MAX_HOURS))


@dataclass(frozen=True)
class StorageConfig:
    """delta-rs storage options per object store (``s3://``, ``abfss://``, ``gs://``), used by
    :func:`lakeshard.lake.embedded.storage_options.storage_options`.

    Keys are the ones delta-rs (``object_store``) expects, e.g. ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``,
    ``AZURE_STORAGE_ACCOUNT_NAME``, ``GOOGLE_SERVICE_ACCOUNT_KEY``. A value ``"env:NAME"`` is read from the
    environment variable ``NAME`` when the options are used, so secrets need not be in the file. In the
    environment a whole section is JSON: ``LAKESHARD_STORAGE_S3='{"AWS_REGION": "eu-west-1"}'``. Values are
    left out of the config's ``repr`` (they may hold secrets).
    """

    s3: dict[str, str] = field(default_factory=dict, repr=False)
    azure: dict[str, str] = field(default_factory=dict, repr=False)
    gcs: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in ("s3", "azure", "gcs"):
            options = getattr(self, name)
            if not isinstance(options, Mapping) or not all(isinstance(v, str) for v in options.values()):
                raise ConfigError(f"storage.{name} must be a table of string keys to string values")


@dataclass(frozen=True)
class LakeshardConfig:
    """Everything lakeshard reads from its environment, in one place."""

    lakehouse: str = "./lakehouse"
    landing: str = "./landing"
    spark: SparkConfig = field(default_factory=SparkConfig)
    landing_format: LandingConfig = field(default_factory=LandingConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    balancing: BalancingConfig = field(default_factory=BalancingConfig)
    dedupe: DedupeConfig = field(default_factory=DedupeConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)

    def table_uri(self, table: str) -> str:
        """Return the location of ``table`` inside the lakehouse (``<lakehouse>/<table>``)."""
        return f"{self.lakehouse.rstrip('/')}/{table}"


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ConfigError(f"{where}: expected one of {list(allowed)}, found {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        return value
    if origin is dict and isinstance(value, str):
        # A table given in one environment variable: a JSON object.
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ConfigError(f"{where}: expected a JSON object, found text that is not one") from None
        return {str(k): str(v) for k, v in parsed.items()}
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{where}: expected a boolean (true/false), found {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, found {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, found {value!r}") from None
    if hint is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, found {value!r}") from None
    if hint is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: expected a string, found {value!r}")
        return str(value)
    return value


def _build(cls: type[Any], values: Mapping[str, Any], env: Mapping[str, str], prefix: str, section: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(
            f"unknown configuration key(s) {sorted(unknown)} in section "
            f"'{section.rstrip('.') or 'top level'}'; known: {sorted(known)}"
        )
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        env_name = f"LAKESHARD_{prefix}{f.name.upper()}"
        if dataclasses.is_dataclass(hint):
            sub = values.get(f.name, {})
            if not isinstance(sub, Mapping):
                raise ConfigError(f"configuration section '{f.name}' must be a table, found {sub!r}")
            kwargs[f.name] = _build(hint, sub, env, f"{prefix}{f.name.upper()}_", f"{section}{f.name}.")  # type: ignore[arg-type]
            continue
        if env_name in env:
            kwargs[f.name] = _coerce(env[env_name], hint, env_name)
            _check(f, kwargs[f.name], env_name)
        elif f.name in values:
            kwargs[f.name] = _coerce(values[f.name], hint, f"{section}{f.name}")
            _check(f, kwargs[f.name], f"{section}{f.name}")
    return cls(**kwargs)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> LakeshardConfig:
    """Return the configuration from defaults, the TOML file, the environment and ``overrides``.

    Args:
        path: a TOML file to read; default ``$LAKESHARD_CONFIG`` or ``./lakeshard.toml`` when present.
        overrides: values that win over everything else (what a CLI flag or a notebook parameter sets).
        env: the environment to read (default ``os.environ``).

    Raises:
        ConfigError: the file is unreadable or a value is unknown or ill-typed (the message names it).
    """
    environ = os.environ if env is None else env
    _refuse_unknown_variables(environ)
    file_values: dict[str, Any] = {}
    candidate = path or environ.get("LAKESHARD_CONFIG")
    if candidate is None and Path("lakeshard.toml").is_file():
        candidate = "lakeshard.toml"
    if candidate is not None:
        try:
            file_values = tomllib.loads(Path(candidate).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read configuration file {candidate}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"configuration file {candidate} is not valid TOML: {exc}") from None
    values = _merge(file_values, {})
    cfg: LakeshardConfig = _build(LakeshardConfig, values, environ, "")
    if overrides:
        # Overrides beat the environment: rebuild with them merged and the env ignored for those keys.
        merged = _merge(dataclasses.asdict(cfg), overrides)
        cfg = _build(LakeshardConfig, merged, {}, "")
    if Path(cfg.landing).is_file():
        raise ConfigError(f"landing: expected a directory (the landing zone), found the file {cfg.landing}")
    if Path(cfg.lakehouse).is_file():
        raise ConfigError(f"lakehouse: expected a directory (the lakehouse), found the file {cfg.lakehouse}")
    return cfg


def _refuse_unknown_variables(environ: Mapping[str, str]) -> None:
    """Raise ConfigError naming every ``LAKESHARD_*`` variable lakeshard does not read, with the nearest name."""
    known = sorted({s.env for s in settings()} | set(OTHER_VARIABLES))
    unknown = sorted(name for name in environ if name.startswith("LAKESHARD_") and name not in known)
    if not unknown:
        return
    named = []
    for name in unknown:
        nearest = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        named.append(f"{name} (did you mean {nearest[0]}?)" if nearest else name)
    raise ConfigError(f"unknown environment variable(s) {', '.join(named)}; every setting and its variable are "
                      "listed in docs/configuration.md")


@dataclass(frozen=True)
class Setting:
    """One setting of :class:`LakeshardConfig`: where it is set, its default and what it accepts."""

    name: str  # the TOML key, ``section.key`` or a top-level key
    env: str  # the environment variable that sets it
    kind: str  # int, float, bool, text, one of, table
    default: Any
    bounds: Bounds | None = None
    choices: tuple[str, ...] = ()

    @property
    def allowed(self) -> str:
        """Return the values the setting accepts, as the settings table shows them."""
        if self.bounds is not None:
            return f"{self.kind} {self.bounds}"
        if self.choices:
            return "one of " + ", ".join(f"`{c}`" for c in self.choices)
        return {"bool": "true or false", "table": "a table of text values (env: a JSON object)"}.get(self.kind, "text")


def settings(cls: type[Any] = LakeshardConfig, section: str = "", prefix: str = "") -> list[Setting]:
    """Return every setting of ``cls`` (default: the whole configuration) in declaration order."""
    hints = typing.get_type_hints(cls)
    defaults = cls()
    out: list[Setting] = []
    for f in dataclasses.fields(cls):
        hint, env = hints[f.name], f"LAKESHARD_{prefix}{f.name.upper()}"
        if dataclasses.is_dataclass(hint):
            out.extend(settings(typing.cast(type[Any], hint), f"{section}{f.name}.", f"{prefix}{f.name.upper()}_"))
            continue
        default = getattr(defaults, f.name)
        if typing.get_origin(hint) is Literal:
            out.append(Setting(f"{section}{f.name}", env, "one of", default, choices=typing.get_args(hint)))
        elif typing.get_origin(hint) is dict:
            out.append(Setting(f"{section}{f.name}", env, "table", default))
        else:
            kind = {int: "int", float: "float", bool: "bool"}.get(hint, "text")
            out.append(Setting(f"{section}{f.name}", env, kind, default, f.metadata.get("bounds")))
    return out


def settings_table() -> str:
    """Return the Markdown tables of every setting (key, variable, default, allowed values) and of the other
    ``LAKESHARD_*`` variables; docs/configuration.md holds them and a test keeps them current."""
    lines = ["| setting | environment variable | default | allowed |", "| --- | --- | --- | --- |"]
    for s in settings():
        default = json.dumps(s.default) if isinstance(s.default, (str, bool, dict)) else _number(s.default)
        lines.append(f"| `{s.name}` | `{s.env}` | `{default}` | {s.allowed} |")
    lines += ["", "| other variable | what it does |", "| --- | --- |"]
    lines += [f"| `{name}` | {what} |" for name, what in OTHER_VARIABLES.items()]
    return "\n".join(lines) + "\n"
