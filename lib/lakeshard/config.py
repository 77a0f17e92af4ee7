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
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lakeshard.errors import ConfigError

__all__ = [
    "BalancingConfig", "CompactionConfig", "DedupeConfig", "LakeshardConfig", "LandingConfig", "MaintenanceConfig",
    "RoutingConfig", "SparkConfig", "StorageConfig", "load_config",
]

Adapter = Literal["auto", "embedded", "native"]


@dataclass(frozen=True)
class SparkConfig:
    """How the Spark session is obtained and tuned when lakeshard starts it locally."""

    master: str = "local[*]"
    app_name: str = "lakeshard"
    driver_memory: str = "4g"
    shuffle_partitions: int = 4
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
    log_level: str = "ERROR"

    def __post_init__(self) -> None:
        if self.remote and not re.fullmatch(r"local(\[(\d+|\*)\])?|sc://\S+", self.remote):
            raise ConfigError(f"spark.remote: expected '' (classic session), 'local', 'local[N]' or 'sc://host:port', "
                              f"found {self.remote!r}")


@dataclass(frozen=True)
class LandingConfig:
    """The landing record format's limits (docs/design.md §2)."""

    max_record_bytes: int = 256 * 1024
    max_tenant_id_chars: int = 128
    max_event_id_chars: int = 256
    # Timestamps outside [earliest, now + max_future] are "absurd" and quarantined.
    earliest_ts: str = "2000-01-01T00:00:00Z"
    max_future_seconds: int = 24 * 3600
    # An unterminated last line of a landing file is routed when it is a whole JSON object, or once the file has
    # not changed for this long (then it is final, and quarantined if it is not a record); until then the router
    # holds it back as a record still being written. Also how long a fresh gzip file may stay unfinished.
    settle_seconds: int = 60
    # The bytes one landing file may hold once decompressed (plain files: their size). A file past it is
    # quarantined whole as unreadable_file, and decompression stops there, so a gzip bomb costs at most this
    # much memory. Its decompressed bytes and their parsed rows (~2-3x) must fit a Spark Python worker (and
    # the driver on the in-driver path); landing files are typically tens of megabytes.
    max_file_bytes: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1:
            raise ConfigError(f"landing_format.max_file_bytes: expected a positive number of bytes, "
                              f"found {self.max_file_bytes}")


@dataclass(frozen=True)
class RoutingConfig:
    """Shard routing (Husky): the shard ring, placement windows, and defaults for new tenants."""

    total_shards: int = 16
    window_seconds: int = 300
    default_shard_count: int = 1
    # Allocators racing for the same placements retry this often before giving up with an error.
    allocation_retries: int = 25
    # A route batch whose landing files hold at most this many bytes is parsed, placed, hashed and written in
    # the driver process (pyarrow), not as Spark jobs, whose fixed cost dominates a trickle; bigger batches use
    # Spark's parallel parse. Both give the same rows on the same shards. A backlog is cut into batches of this
    # size, so only a single bigger file goes to Spark. 0 = always Spark (one batch up to 2 GiB / 200 files:
    # for a cluster whose executors parse faster than its driver).
    arrow_max_bytes: int = 32 * 1024 * 1024
    # The event hash new placements route by: 2 = Spark's built-in xxhash64 (no Python in the Spark plan),
    # 1 = mmh3 (what lakeshard used before versions; a Python UDF in Spark). Existing placements keep theirs.
    # Set 1 while processes of an older lakeshard (which route by mmh3 only) still route into the lakehouse.
    event_hash_version: int = 2
    # Spark path: how many tasks write a batch's routed rows, without a shuffle (each writes one file per shard
    # it has rows of). 0 = one per core on up to 8 cores; on a bigger cluster a shuffle by shard (one file each).
    write_tasks: int = 0

    def __post_init__(self) -> None:
        if self.event_hash_version not in (1, 2):
            raise ConfigError(f"routing.event_hash_version: expected 1 (mmh3) or 2 (xxhash64), "
                              f"found {self.event_hash_version!r}")
        if self.write_tasks < 0:
            raise ConfigError(f"routing.write_tasks: expected 0 (one per core) or a positive number of tasks, "
                              f"found {self.write_tasks}")
        if self.arrow_max_bytes < 0:
            raise ConfigError(f"routing.arrow_max_bytes: expected 0 (always Spark) or a positive number of bytes, "
                              f"found {self.arrow_max_bytes}")


@dataclass(frozen=True)
class BalancingConfig:
    """Load management (Husky): the autosharder's shard counts and the sharding balancer's salt moves."""

    # The bytes/s one shard should take from one tenant. Keep it a fraction (about a quarter) of what a
    # shard's writer sustains: then no tenant fills a shard alone and the balancer has pieces to pack.
    target_bytes_per_second: float = 1024.0 * 1024.0
    min_shards: int = 1
    max_shards: int = 64
    # Scale down only when the peak rate stayed below this share of the current capacity (count x target)
    # for ``scale_down_windows`` windows in a row, and the last count change is ``cooldown_seconds`` old.
    scale_down_below: float = 0.5
    scale_down_windows: int = 6
    cooldown_seconds: int = 1800
    # Metrics whose newest window ended longer ago than this are stale: the autosharder changes nothing.
    metrics_max_age_seconds: int = 900
    # The balancer acts while the per-shard load's variance over its squared mean (sigma^2 / mu^2) is above this.
    variance_threshold: float = 0.005
    max_moves: int = 50
    # Salts 0 .. candidate_salts-1 are the positions a tenant may be moved to (docs/balancing.md).
    candidate_salts: int = 32
    # The balancer balances each tenant's mean bytes over this many recent windows.
    lookback_windows: int = 6


@dataclass(frozen=True)
class DedupeConfig:
    """Exactly-once writers (Husky): how long IDs are remembered and how many are held in memory."""

    # Duplicates whose event time is more than this before the newest committed hour of their shard are not
    # detected (their IDs may have expired from the index); keep it above the longest redelivery delay.
    id_retention_hours: float = 7 * 24.0
    # Byte bound of each writer's in-memory LRU of ID intervals (16 bytes per ID).
    id_cache_bytes: int = 256 * 1024 * 1024
    # Memory gate on intake: one writer step takes routed commits only up to this many Parquet bytes (at least
    # one commit, whatever its size); the rest waits for the next step. With arrow_max_bytes > 0 a step also
    # stays within it, so a backlog is taken in driver steps rather than one Spark step.
    max_batch_bytes: int = 256 * 1024 * 1024
    # A step that fails on an infrastructure fault (storage, I/O, memory, Spark) is retried after
    # retry_initial_seconds, the wait doubling up to retry_max_delay_seconds, for retry_total_seconds in all;
    # then the run stops with an error naming the shards and the routed version, nothing of the batch committed
    # or quarantined (lakeshard.dedupe.faults). Only rows proven unwritable by themselves are dead-lettered.
    retry_initial_seconds: float = 0.5
    retry_max_delay_seconds: float = 10.0
    retry_total_seconds: float = 60.0
    # A writer step whose new routed files hold at most this many Parquet bytes runs in the driver process
    # (pyarrow + numpy: read, hash, dedupe, sort, write Parquet, commit) instead of as Spark jobs, whose fixed
    # cost dominates a micro-batch (an expectation gate's checks still run on Spark); bigger steps use Spark. Both paths
    # give the same rows, files and IDs. 0 = always Spark. The driver holds about 5-10x this in memory.
    arrow_max_bytes: int = 64 * 1024 * 1024
    # Commit coalescing for a following writer (``lakeshard ingest --follow``): a step waits until its shards'
    # new routed commits hold commit_min_bytes of Parquet, or the oldest of them is commit_max_wait_seconds
    # old, so a trickle makes fewer, bigger commits (fewer log entries and small files). 0 = commit whatever
    # is there. A run that processes what is available and stops (batch mode, the pipeline) never waits.
    commit_min_bytes: int = 0
    commit_max_wait_seconds: float = 60.0
    # Expiry of consumed routed data: once a writer consumed this many routed files since it last did, it removes
    # from ``routed`` every file of its shards that their committed progress has passed (one commit; the rows
    # are in ``events`` or were dropped as duplicates; vacuum reclaims the storage). ``routed`` then holds
    # about what is not consumed yet instead of everything ever routed: its snapshot, which every router commit
    # and writer step brings up to date, stops growing. 0 = never (routed keeps every file).
    routed_expire_files: int = 256

    def __post_init__(self) -> None:
        if self.routed_expire_files < 0:
            raise ConfigError(f"dedupe.routed_expire_files: expected 0 (never) or a positive number of files, "
                              f"got {self.routed_expire_files}")
        if self.commit_min_bytes < 0 or self.commit_max_wait_seconds < 0:
            raise ConfigError("dedupe.commit_min_bytes and dedupe.commit_max_wait_seconds must not be negative, "
                              f"found {self.commit_min_bytes} and {self.commit_max_wait_seconds}")
        if self.arrow_max_bytes < 0:
            raise ConfigError(f"dedupe.arrow_max_bytes: expected 0 (always Spark) or a positive number of bytes, "
                              f"found {self.arrow_max_bytes}")


@dataclass(frozen=True)
class CompactionConfig:
    """Compaction (Husky): the merge's memory and threads, and the outlier outputs (docs/compaction.md)."""

    # Arrow memory one compaction round's merges may use together (a bucket's inputs that fit are sorted in
    # memory; bigger ones stream, bounded by row group x inputs).
    memory_budget_bytes: int = 256 * 1024 * 1024
    # Merges of one round that fit memory_budget_bytes / merge_threads run this many at a time.
    merge_threads: int = 2
    # Rows carrying a value that fewer than this share of a merge's rows carry (non-leading sort columns)
    # go to a separate sorted outlier file, so needles on rare values read about one file per bucket and
    # common values one more. 0 switches outlier files off.
    outlier_fraction: float = 0.02
    # At most this share of a merge's rows go to outlier files (rarest values first).
    outlier_max_share: float = 0.1
    # Only merges that would write at least this many files unsplit get an outlier file.
    outlier_min_outputs: int = 3

    def __post_init__(self) -> None:
        if self.memory_budget_bytes < 1 or self.merge_threads < 1:
            raise ConfigError(f"compaction.memory_budget_bytes and compaction.merge_threads must be >= 1, found "
                              f"{self.memory_budget_bytes} and {self.merge_threads}")
        if not 0 <= self.outlier_fraction < 1 or not 0 <= self.outlier_max_share < 1:
            raise ConfigError(f"compaction.outlier_fraction and outlier_max_share must be in [0, 1), found "
                              f"{self.outlier_fraction} and {self.outlier_max_share}")


@dataclass(frozen=True)
class MaintenanceConfig:
    """The maintenance job's upkeep of the small bookkeeping tables (docs/pipelines.md, flow ``compact_books``)."""

    # A bookkeeping table with more live files than this is rewritten into one file per partition. The router
    # reads the batch plan and placement files a run's look needs, so every file still unmerged costs each route run
    # (an ingest job every 5 minutes adds ~12 an hour): 64 made route runs ~40 % dearer at the top of the sawtooth.
    bookkeeping_max_files: int = 16
    # Parquet bytes one table's rewrite reads into the driver at most: the smallest files first, so a table's
    # files that have grown past it are left as they are and memory stays bounded.
    bookkeeping_max_bytes: int = 64 * 1024 * 1024
    # Rows per Parquet row group of a rewritten ``placements`` or ``landing_batches`` file (sorted by what their
    # readers filter on): a reader decodes only the row groups that can hold what it asks for.
    bookkeeping_row_group_rows: int = 1024
    # ``routing_metrics`` rows whose window started longer ago than this are dropped by the maintenance job's
    # ``compact_books``: the autosharder and the balancer read only their newest few windows (at most
    # ``max(scale_down_windows, lookback_windows) x routing.window_seconds``, half an hour by default).
    routing_metrics_retention_hours: float = 24.0
    # Once a day, in the maintenance run of this UTC hour (-1: every run), ``compact_books`` vacuums every table:
    # deletes the data files no version of the last ``vacuum_retention_hours`` references (files compaction and
    # expiry removed, a crashed write's orphans) and what a killed commit left. Older versions can no longer be
    # read (``lakeshard versions show``, time travel). 168 h is Delta's default; Delta on Spark refuses less
    # unless its retention check is turned off.
    vacuum_hour_utc: int = 3
    vacuum_retention_hours: float = 168.0

    def __post_init__(self) -> None:
        if self.bookkeeping_max_files < 1 or self.bookkeeping_max_bytes < 1 or self.bookkeeping_row_group_rows < 1:
            raise ConfigError(f"maintenance.bookkeeping_max_files, bookkeeping_max_bytes and "
                              f"bookkeeping_row_group_rows must be >= 1, found {self.bookkeeping_max_files}, "
                              f"{self.bookkeeping_max_bytes} and {self.bookkeeping_row_group_rows}")
        if not self.routing_metrics_retention_hours > 0:
            raise ConfigError("maintenance.routing_metrics_retention_hours must be > 0, found "
                              f"{self.routing_metrics_retention_hours}")
        if not -1 <= self.vacuum_hour_utc <= 23 or not self.vacuum_retention_hours >= 0:
            raise ConfigError(f"maintenance.vacuum_hour_utc must be -1 (every run) or an hour 0-23 and "
                              f"maintenance.vacuum_retention_hours >= 0, found {self.vacuum_hour_utc} and "
                              f"{self.vacuum_retention_hours}")


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
        elif f.name in values:
            kwargs[f.name] = _coerce(values[f.name], hint, f"{section}{f.name}")
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
    return cfg
