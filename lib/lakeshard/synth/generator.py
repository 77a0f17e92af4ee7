"""Write a realistic, seeded landing zone of multi-tenant observability events plus its ground truth.

Layout of a generated landing zone (one file per ``file_seconds`` of arrival; names sort by arrival)::

    <landing>/2026-01-01/00/part-000000.jsonl
    <landing>/2026-01-01/00/part-000001.json.gz
    <landing>/2026-01-01/00/part-000017.redelivery-000003.jsonl   # file 3 delivered again, at minute 17
    ...
    <landing>/_truth/manifest.json       # counts (see Manifest)
    <landing>/_truth/events.parquet      # one row per unique valid event

Every decision is drawn from ``numpy.random.default_rng(spec.seed)`` in a fixed order, so one spec gives
byte-identical files. The truth is written last: a landing zone without ``_truth/manifest.json`` is
incomplete.
"""

from __future__ import annotations

import gzip
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from lakeshard.errors import ConfigError, LakeshardError
from lakeshard.landing import CATEGORIES
from lakeshard.synth.malformed import BAD_WEIGHTS, malformed_line
from lakeshard.synth.manifest import (
    EVENTS_FILE,
    MANIFEST_FILE,
    TRUTH_DIR,
    Burst,
    Manifest,
    landing_path,
)
from lakeshard.synth.records import (
    EventColumns,
    FragmentTables,
    TenantProfiles,
    event_ids,
    render_lines,
    tenant_profiles,
)
from lakeshard.synth.spec import SynthSpec
from lakeshard.synth.timestamps import format_rfc3339_many
from lakeshard.synth.vocabulary import (
    ENV_WEIGHTS,
    EXTRA_FIELDS,
    STATUS_WEIGHTS,
    STATUSES,
    Corpus,
    attribute_pool,
    encode_pool,
    message_prefixes,
    text_corpus,
    trace_corpus,
)
from lakeshard.utc import EPOCH, millis

__all__ = ["Progress", "ProgressBar", "generate_landing", "new_run_folder"]


class Progress(Protocol):
    """A progress bar the generator advances by the records it wrote (tqdm's ``update`` and ``close``)."""

    def update(self, n: int, /) -> object:
        """Advance the bar by ``n`` records."""

    def close(self) -> object:
        """End the bar."""


ProgressBar = Callable[[int], Progress]
"""Makes a :class:`Progress` bar for a total number of records (the command line passes a tqdm bar)."""

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_MINUTE_MS = 60_000
_HOUR_MS = 3_600_000
_ATTRIBUTE_POOL = 4096
_GZIP_LEVEL = 1  # speed over ratio: readers only care that it is gzip
# ts renderings: epoch ms, RFC 3339 whole seconds, with milliseconds, with microseconds (ms + "000").
_TS_FORMAT_WEIGHTS = (0.35, 0.10, 0.40, 0.15)
_TS_DIGITS = np.array([-1, 0, 3, 6], dtype=np.int64)
_MINIMAL_RATE = 0.04  # records with only tenant_id, event_id and ts
_BIG_MESSAGE_RATE = {"error": 0.1, "other": 0.005}  # stack traces / payload dumps


@dataclass(frozen=True)
class _Plan:
    """Every decision about the valid events, sorted by arrival (index = event number)."""

    tenant: IntArray
    arrival_ms: IntArray
    ts_ms: IntArray
    late: BoolArray
    columns: EventColumns
    bursts: tuple[Burst, ...]


def _iso(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _log_uniform(rng: np.random.Generator, low: float, high: npt.ArrayLike, size: int) -> npt.NDArray[Any]:
    high_arr = np.maximum(np.asarray(high, dtype=np.float64), low)
    return np.exp(rng.uniform(math.log(low), np.log(high_arr), size=size))


def _prepare(landing: str | Path, overwrite: bool) -> Path:
    """Return the landing root, emptied only when ``overwrite`` is set and this generator wrote what is there.

    The ground-truth folder is created before any data file, so a landing zone this generator started (even one
    a crash cut short) carries it, and a producer's landing zone, which never does, is never deleted.
    """
    root = landing_path(landing)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"landing zone {root} exists and is not a directory")
    if root.is_dir():
        entries = sorted(root.iterdir())
        if entries and not overwrite:
            raise ConfigError(
                f"landing zone {root} is not empty ({len(entries)} entries, e.g. {entries[0].name}); "
                "pass overwrite=True to replace a landing zone this generator wrote, or write into a new "
                "sub-folder (new_run_folder)"
            )
        if entries and not (root / TRUTH_DIR).is_dir():
            raise ConfigError(
                f"landing zone {root} holds {len(entries)} entries (e.g. {entries[0].name}) but no {TRUTH_DIR}/: "
                "this generator did not write it, so overwrite=True will not delete it; write into a new "
                "sub-folder (new_run_folder) or an empty directory"
            )
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    (root / TRUTH_DIR).mkdir(parents=True, exist_ok=True)
    return root


def new_run_folder(landing: str | Path, *, now: datetime | None = None) -> Path:
    """Return a new, empty folder ``<landing>/synthetic/<UTC time>`` that one generator run owns.

    Writing there leaves everything else under ``landing`` (producers' files, earlier runs) untouched, while
    readers of ``landing`` still see the new files (they list sub-folders too).

    Args:
        landing: the landing zone, a directory path or ``file:`` URI; created if missing.
        now: the time that names the folder (default: the current UTC time).

    Example::

        truth = generate_landing(new_run_folder("/Volumes/main/lakeshard/landing"), SynthSpec(events=1_000))
    """
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    parent = landing_path(landing) / "synthetic"
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 1000):
        folder = parent / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise ConfigError(f"cannot create a new run folder under {parent}: {stamp} and 998 variants exist")


def _arrivals(
    rng: np.random.Generator, spec: SynthSpec, profiles: TenantProfiles, start_ms: int, span_ms: int
) -> tuple[IntArray, IntArray, tuple[Burst, ...]]:
    """Return (tenant, arrival_ms) per event, sorted by arrival, and the bursts that shaped them."""
    tenants = spec.tenants
    weights = profiles.weights
    burst_t = rng.choice(tenants, size=spec.burst_tenants, replace=False).astype(np.int64)
    duration = np.minimum(rng.uniform(2.0, 8.0, size=len(burst_t)) * _MINUTE_MS, span_ms / 2)
    begin = rng.random(len(burst_t)) * (span_ms - duration)
    factor = _log_uniform(rng, 10.0, 100.0, len(burst_t))
    # A tenant's rate is weight inside normal time and weight * factor inside its burst window.
    mass = weights * span_ms
    mass[burst_t] += weights[burst_t] * (factor - 1.0) * duration
    counts = rng.multinomial(spec.events, mass / mass.sum())
    tenant = np.repeat(np.arange(tenants, dtype=np.int64), counts)
    p_base = np.ones(tenants)
    p_base[burst_t] = span_ms / (span_ms + (factor - 1.0) * duration)
    b_begin = np.zeros(tenants)
    b_begin[burst_t] = begin
    b_len = np.zeros(tenants)
    b_len[burst_t] = duration
    in_burst = rng.random(spec.events) >= p_base[tenant]
    pos = rng.random(spec.events)
    offset = np.where(in_burst, b_begin[tenant] + pos * b_len[tenant], pos * span_ms)
    offset = np.minimum(offset.astype(np.int64), span_ms - 1)
    order = np.argsort(offset, kind="stable")
    bursts = tuple(
        Burst(
            tenant_id=profiles.ids[int(t)],
            start=_iso(start_ms + math.ceil(b)),
            end=_iso(start_ms + math.floor(b + d)),
            factor=round(float(f), 3),
        )
        for t, b, d, f in zip(burst_t.tolist(), begin.tolist(), duration.tolist(), factor.tolist(), strict=True)
    )
    return tenant[order], start_ms + offset[order], bursts


def _message_spans(
    rng: np.random.Generator, corpus: Corpus, lengths: IntArray, ascii_only: BoolArray
) -> tuple[IntArray, IntArray]:
    """Return ``(start, stop)`` offsets of message bodies of ``lengths`` characters in escaped ``corpus``."""
    first, stop = corpus.cut(rng, lengths)
    utf8, ascii_ = corpus.escaped_starts
    return np.where(ascii_only, ascii_[first], utf8[first]), np.where(ascii_only, ascii_[stop], utf8[stop])


def _plan_events(
    rng: np.random.Generator,
    spec: SynthSpec,
    profiles: TenantProfiles,
    start_ms: int,
    span_ms: int,
    text: Corpus,
    trace: Corpus,
) -> _Plan:
    n = spec.events
    tenant, arrival, bursts = _arrivals(rng, spec, profiles, start_ms, span_ms)

    late = rng.random(n) < spec.late_rate
    lateness = _log_uniform(rng, 2.0 * _MINUTE_MS, spec.late_max_hours * _HOUR_MS, n)
    jitter = np.minimum(rng.exponential(800.0, size=n), 30_000.0)
    ts_ms = arrival - np.where(late, lateness, jitter).astype(np.int64)
    ts_format = rng.choice(len(_TS_FORMAT_WEIGHTS), size=n, p=_TS_FORMAT_WEIGHTS)
    ts_ms = np.where(ts_format == 1, ts_ms - ts_ms % 1000, ts_ms)
    offset_code = np.where(rng.random(n) < 0.7, profiles.home_offset[tenant], 0)
    ts_json: list[str] = [""] * n
    epoch_idx = np.flatnonzero(ts_format == 0)
    for i, value in zip(epoch_idx.tolist(), ts_ms[epoch_idx].tolist(), strict=True):
        ts_json[i] = str(value)
    rfc_idx = np.flatnonzero(ts_format != 0)
    texts = format_rfc3339_many(ts_ms[rfc_idx], offset_code[rfc_idx], _TS_DIGITS[ts_format[rfc_idx]])
    for i, value in zip(rfc_idx.tolist(), texts, strict=True):
        ts_json[i] = f'"{value}"'

    ids = event_ids(rng, profiles.id_style[tenant], ts_ms)
    if len(set(ids)) != n:  # 80+ random bits per ID: practically impossible, but uniqueness is promised
        raise LakeshardError(f"event IDs collided for seed {spec.seed}; choose another seed")

    svc_flat = profiles.svc_first[tenant] + (profiles.svc_count[tenant] * rng.random(n) ** 2).astype(np.int64)
    host_flat = profiles.host_first[svc_flat] + (profiles.host_count[svc_flat] * rng.random(n)).astype(np.int64)
    status = rng.choice(len(STATUSES), size=n, p=STATUS_WEIGHTS).astype(np.int64)
    env = rng.choice(len(ENV_WEIGHTS), size=n, p=ENV_WEIGHTS).astype(np.int64)
    minimal = rng.random(n) < _MINIMAL_RATE
    full = ~minimal
    host_idx = np.where(full & (rng.random(n) < 0.92), host_flat, -1)
    env_idx = np.where(full & (rng.random(n) < 0.95), env, -1)
    # Small specs get a smaller pool: building it is a fixed cost that would dominate them.
    pool = attribute_pool(rng, min(_ATTRIBUTE_POOL, 64 + n // 8))
    attr_idx = np.where(full & (rng.random(n) < 0.75), rng.integers(0, len(pool), size=n), -1)
    extra_idx = np.where(full & (rng.random(n) < 0.08), rng.integers(0, len(EXTRA_FIELDS), size=n), -1)

    is_error = np.isin(status, [STATUSES.index("error"), STATUSES.index("critical")])
    big = rng.random(n) < np.where(is_error, _BIG_MESSAGE_RATE["error"], _BIG_MESSAGE_RATE["other"])
    length = np.where(big, rng.lognormal(math.log(6000), 0.8, size=n), rng.lognormal(math.log(60), 1.2, size=n))
    length = np.clip(length, 8, spec.max_message_bytes).astype(np.int64)
    prefixes, prefix_first, prefix_count = message_prefixes()
    prefix = prefix_first[status] + (rng.random(n) * prefix_count[status]).astype(np.int64)
    prefix_len = np.array([len(p) for p in prefixes], dtype=np.int64)[prefix]
    body_len = np.maximum(length - prefix_len, 0)
    style = profiles.style[tenant]
    ascii_only = style == 1
    text_start, text_stop = _message_spans(rng, text, body_len, ascii_only)
    trace_start, trace_stop = _message_spans(rng, trace, body_len, ascii_only)

    compact, spaced = encode_pool(pool, spaced=False), encode_pool(pool, spaced=True)
    tables = FragmentTables(profiles.service_names, profiles.host_names, [compact, spaced, compact], prefixes)
    svc_idx = np.where(full, svc_flat, -1)
    status_idx = np.where(full, status, -1)
    tenant_names = np.array(profiles.ids, dtype=object)
    columns = EventColumns(
        tenant_id=tenant_names[tenant].tolist(),
        event_id=ids,
        ts_json=ts_json,
        style=style.tolist(),
        service=FragmentTables.pick(tables.service, style, svc_idx),
        host=FragmentTables.pick(tables.host, style, host_idx),
        env=FragmentTables.pick(tables.env, style, env_idx),
        status=FragmentTables.pick(tables.status, style, status_idx),
        attributes=FragmentTables.pick(tables.attributes, style, attr_idx),
        extra=FragmentTables.pick(tables.extra, style, extra_idx),
        message_head=FragmentTables.pick(tables.message_head, style, np.where(full, prefix, -1)),
        message_source=(big * 2 + ascii_only).astype(np.int64).tolist(),
        message_start=np.where(big, trace_start, text_start).tolist(),
        message_stop=np.where(big, trace_stop, text_stop).tolist(),
    )
    return _Plan(tenant=tenant, arrival_ms=arrival, ts_ms=ts_ms, late=late, columns=columns, bursts=bursts)


def _bad_categories(rng: np.random.Generator, count: int) -> list[str]:
    """Return ``count`` quarantine categories: one of each when there is room, the rest by weight."""
    weights = np.array([BAD_WEIGHTS[c] for c in CATEGORIES])
    base = np.ones(len(CATEGORIES), dtype=np.int64) if count >= len(CATEGORIES) else np.zeros(len(CATEGORIES), np.int64)
    per = base + rng.multinomial(count - int(base.sum()), weights / weights.sum())
    cats = np.repeat(np.arange(len(CATEGORIES)), per)[rng.permutation(count)]
    return [CATEGORIES[c] for c in cats.tolist()]


class _Writer:
    """Writes landing files and counts what it wrote."""

    def __init__(self, root: Path, spec: SynthSpec, start_ms: int, windows: int) -> None:
        self.root = root
        self.spec = spec
        self.start_ms = start_ms
        self.file_ms = spec.file_seconds * 1000
        self.width = max(6, len(str(max(windows - 1, 0))))
        self.file_lines: dict[str, int] = {}
        self.line_bytes = 0

    def directory(self, window: int) -> str:
        when = EPOCH + timedelta(milliseconds=self.start_ms + window * self.file_ms)
        return f"{when:%Y-%m-%d}/{when:%H}"

    def name(self, window: int, gz: bool, redelivery_of: int | None = None) -> str:
        ext = "json.gz" if gz else "jsonl"
        part = f"part-{window:0{self.width}d}"
        if redelivery_of is not None:
            part += f".redelivery-{redelivery_of:0{self.width}d}"
        return f"{self.directory(window)}/{part}.{ext}"

    def write(self, relpath: str, payload: bytes, lines: int, raw_bytes: int) -> None:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
        self.file_lines[relpath] = lines
        self.line_bytes += raw_bytes


def generate_landing(
    landing: str | Path,
    spec: SynthSpec | None = None,
    *,
    progress: ProgressBar | None = None,
    overwrite: bool = False,
) -> Manifest:
    """Return the ground truth of the landing zone this call writes into ``landing``.

    Writes newline-delimited JSON files (``*.jsonl``, some ``*.json.gz``) organised by arrival time,
    with Zipf-skewed tenants, bursts, producer retries, redelivered files, late events and malformed
    records as ``spec`` asks, then ``_truth/manifest.json`` and ``_truth/events.parquet``.

    Args:
        landing: a directory path or ``file:`` URI; created if missing.
        spec: what to generate (default :class:`SynthSpec()`).
        progress: makes the bar shown over the records written, given their total (None: no bar).
        overwrite: delete the contents of a non-empty ``landing`` first instead of refusing; only a landing
            zone this generator wrote (it has ``_truth/``) is deleted, never a producer's.

    Raises:
        ConfigError: ``landing`` is not empty (and ``overwrite`` is false, or it was not written by this
            generator) or is not a directory.

    Example::

        truth = generate_landing("/tmp/landing", SynthSpec(events=10_000, tenants=20))
        assert truth.records == truth.unique_events + truth.duplicate_records + truth.bad_records
    """
    spec = SynthSpec() if spec is None else spec
    root = _prepare(landing, overwrite)
    rng = np.random.default_rng(spec.seed)
    start_ms = millis(spec.start)
    span_ms = max(1, round(spec.hours * _HOUR_MS))
    end_ms = start_ms + span_ms
    file_ms = spec.file_seconds * 1000
    windows = -(-span_ms // file_ms)

    profiles = tenant_profiles(rng, spec.tenants, spec.zipf_s)
    text = text_corpus(rng, 4 * spec.max_message_bytes + 65_536)
    trace = trace_corpus(rng, 2 * spec.max_message_bytes + 65_536)
    plan = _plan_events(rng, spec, profiles, start_ms, span_ms, text, trace)
    sources = (*text.escaped, *trace.escaped)
    n = spec.events

    # Producer retries: exact copies of a line, seconds to hours later, never past the arrival span.
    n_retry = round(spec.retry_rate * n) if n else 0
    retry_of = np.sort(rng.integers(0, max(n, 1), size=n_retry)).astype(np.int64)
    room = end_ms - 1 - plan.arrival_ms[retry_of]
    delay = _log_uniform(rng, 1000.0, np.minimum(spec.retry_max_hours * _HOUR_MS, room), n_retry)
    retry_arrival = plan.arrival_ms[retry_of] + np.minimum(delay.astype(np.int64), room)

    # Malformed records, at uniformly random arrival times, from Zipf-weighted tenants.
    n_bad = round(spec.bad_rate * n)
    bad_cats = _bad_categories(rng, n_bad)
    bad_arrival = start_ms + (rng.random(n_bad) * span_ms).astype(np.int64)
    bad_tenant = rng.choice(spec.tenants, size=n_bad, p=profiles.weights / profiles.weights.sum())
    bad_lines = [
        malformed_line(rng, cat, profiles.ids[t], a - 500, spec.max_record_bytes)
        for cat, t, a in zip(bad_cats, bad_tenant.tolist(), bad_arrival.tolist(), strict=True)
    ]
    bad_code = np.array([CATEGORIES.index(c) for c in bad_cats], dtype=np.int64)

    # Deliveries (original, retry, bad) in arrival order; an original precedes its own retries.
    d_arrival = np.concatenate((plan.arrival_ms, retry_arrival, bad_arrival)).astype(np.int64)
    d_kind = np.concatenate((np.zeros(n, np.int64), np.ones(n_retry, np.int64), np.full(n_bad, 2, np.int64)))
    d_ref = np.concatenate((np.arange(n, dtype=np.int64), retry_of, np.arange(n_bad, dtype=np.int64)))
    order = np.lexsort((d_ref, d_kind, d_arrival))
    d_kind, d_ref = d_kind[order], d_ref[order]
    d_window = (d_arrival[order] - start_ms) // file_ms
    d_bounds = np.searchsorted(d_window, np.arange(windows + 1))
    e_bounds = np.searchsorted((plan.arrival_ms - start_ms) // file_ms, np.arange(windows + 1))

    # Redelivered files: whole files again, a minute to two hours after they closed.
    nonempty = np.flatnonzero(np.diff(d_bounds) > 0)
    n_red = round(spec.redelivered_files * len(nonempty))
    red_orig = np.sort(rng.choice(nonempty, size=n_red, replace=False)).astype(np.int64)
    red_delay = _log_uniform(rng, float(_MINUTE_MS), 2.0 * _HOUR_MS, n_red).astype(np.int64)
    red_arrival = np.minimum(start_ms + (red_orig + 1) * file_ms + red_delay, end_ms - 1)
    red_window = (red_arrival - start_ms) // file_ms
    to_keep = set(red_orig.tolist())
    red_at: dict[int, list[int]] = {}
    for orig, at in zip(red_orig.tolist(), red_window.tolist(), strict=True):
        red_at.setdefault(at, []).append(orig)
    gz = (rng.random(windows) < spec.gzip_rate).tolist()

    writer = _Writer(root, spec, start_ms, windows)
    retried = np.zeros(n, dtype=bool)
    retried[retry_of] = True
    retry_cache: dict[int, str] = {}
    sizes = np.zeros(n, dtype=np.int64)
    kept: dict[int, tuple[bytes, int, int, int, npt.NDArray[np.int64]]] = {}
    bad_by_code = np.zeros(len(CATEGORIES), dtype=np.int64)
    redelivered: dict[str, str] = {}
    redelivered_valid = 0
    red_sizes = np.diff(d_bounds)[red_orig]
    total_lines = int(len(d_kind) + red_sizes.sum())
    bar = _progress_bar(progress, total_lines)

    for k in range(windows):
        lo, hi = int(d_bounds[k]), int(d_bounds[k + 1])
        if hi > lo:
            e_lo, e_hi = int(e_bounds[k]), int(e_bounds[k + 1])
            fresh = render_lines(plan.columns, e_lo, e_hi, sources)
            for i in (e_lo + np.flatnonzero(retried[e_lo:e_hi])).tolist():
                retry_cache[i] = fresh[i - e_lo]
            kinds, refs = d_kind[lo:hi], d_ref[lo:hi]
            is_retry, is_bad = kinds == 1, kinds == 2
            pool = (
                fresh
                + [retry_cache[r] for r in refs[is_retry].tolist()]
                + [bad_lines[r] for r in refs[is_bad].tolist()]
            )
            slot = refs - e_lo
            slot[is_retry] = len(fresh) + np.arange(int(is_retry.sum()))
            slot[is_bad] = len(fresh) + int(is_retry.sum()) + np.arange(int(is_bad.sum()))
            raw = ("\n".join(map(pool.__getitem__, slot.tolist())) + "\n").encode("utf-8")
            line_len = _line_lengths(raw, hi - lo, writer.name(k, gz[k]))
            is_fresh = kinds == 0
            sizes[refs[is_fresh]] = line_len[is_fresh]
            payload = gzip.compress(raw, compresslevel=_GZIP_LEVEL, mtime=0) if gz[k] else raw
            window_bad = np.bincount(bad_code[refs[is_bad]], minlength=len(CATEGORIES))
            bad_by_code += window_bad
            writer.write(writer.name(k, gz[k]), payload, hi - lo, len(raw))
            if k in to_keep:
                kept[k] = (payload, hi - lo, len(raw), int(window_bad.sum()), window_bad)
            bar.update(hi - lo)
        for orig in red_at.get(k, []):
            payload, count, raw_len, bad, window_bad = kept.pop(orig)
            name = writer.name(k, gz[orig], redelivery_of=orig)
            writer.write(name, payload, count, raw_len)
            redelivered[name] = writer.name(orig, gz[orig])
            redelivered_valid += count - bad
            bad_by_code += window_bad
            bar.update(count)
    bar.close()

    if n and int(sizes.max()) > spec.max_record_bytes:
        raise LakeshardError(
            f"a valid record of {int(sizes.max())} bytes exceeds max_record_bytes={spec.max_record_bytes}"
        )
    _write_events(root, profiles, plan, sizes)
    manifest = _manifest(
        spec, profiles, plan, sizes, writer, start_ms, end_ms,
        n_retry=n_retry, redelivered_valid=redelivered_valid, bad_by_code=bad_by_code,
        redelivered=redelivered,
    )  # fmt: skip
    (root / TRUTH_DIR / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
    return manifest


def _line_lengths(raw: bytes, lines: int, name: str) -> IntArray:
    """Return the byte length of each line of ``raw`` (newline excluded), checking there are ``lines``."""
    ends = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    if len(ends) != lines:  # a record with a raw newline inside would break "one record per line"
        raise LakeshardError(f"generator wrote {len(ends)} newlines into {name}, expected {lines}")
    lengths: IntArray = np.diff(ends, prepend=-1) - 1
    return lengths


class _NoBar:
    def update(self, _n: int) -> None:
        return None

    def close(self) -> None:
        return None


def _progress_bar(progress: ProgressBar | None, total: int) -> Progress:
    return progress(total) if progress else _NoBar()


def _write_events(root: Path, profiles: TenantProfiles, plan: _Plan, sizes: IntArray) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    truth = root / TRUTH_DIR
    truth.mkdir(parents=True, exist_ok=True)
    tenant_names = pa.array(profiles.ids, type=pa.string())
    table = pa.table(
        {
            "tenant_id": tenant_names.take(pa.array(plan.tenant)),
            "event_id": pa.array(plan.columns.event_id, type=pa.string()),
            "ts_ms": pa.array(plan.ts_ms, type=pa.int64()),
            "size_bytes": pa.array(sizes, type=pa.int64()),
            "late": pa.array(plan.late, type=pa.bool_()),
            "arrival_ms": pa.array(plan.arrival_ms, type=pa.int64()),
        }
    )
    pq.write_table(table, truth / EVENTS_FILE, compression="zstd")


def _manifest(
    spec: SynthSpec,
    profiles: TenantProfiles,
    plan: _Plan,
    sizes: IntArray,
    writer: _Writer,
    start_ms: int,
    end_ms: int,
    *,
    n_retry: int,
    redelivered_valid: int,
    bad_by_code: IntArray,
    redelivered: dict[str, str],
) -> Manifest:
    tenants = spec.tenants
    per_tenant = np.bincount(plan.tenant, minlength=tenants)
    bytes_tenant = np.bincount(plan.tenant, weights=sizes, minlength=tenants).astype(np.int64)
    hour = plan.ts_ms // _HOUR_MS
    by_hour: dict[str, dict[str, int]] = {}
    if len(hour):
        first = int(hour.min())
        width = int(hour.max()) - first + 1
        keys, counts = np.unique(plan.tenant * width + (hour - first), return_counts=True)
        for key, c in zip(keys.tolist(), counts.tolist(), strict=True):
            t, h = divmod(key, width)
            stamp = (EPOCH + timedelta(hours=first + h)).strftime("%Y-%m-%dT%H:00:00Z")
            by_hour.setdefault(profiles.ids[t], {})[stamp] = c
    bad = {cat: int(c) for cat, c in zip(CATEGORIES, bad_by_code.tolist(), strict=True)}
    unique = spec.events
    duplicates = n_retry + redelivered_valid
    bad_total = sum(bad.values())
    records = sum(writer.file_lines.values())
    if records != unique + duplicates + bad_total:
        raise LakeshardError(
            f"generator bookkeeping: {records} lines written, expected {unique} unique + "
            f"{duplicates} duplicates + {bad_total} bad"
        )
    return Manifest(
        spec=spec,
        records=records,
        files=len(writer.file_lines),
        unique_events=unique,
        duplicate_records=duplicates,
        retry_records=n_retry,
        redelivered_duplicate_records=redelivered_valid,
        bad_records=bad_total,
        bad_by_category=bad,
        late_events=int(plan.late.sum()),
        line_bytes=writer.line_bytes,
        arrival_start=_iso(start_ms),
        arrival_end=_iso(end_ms),
        events_by_tenant={profiles.ids[t]: int(c) for t, c in enumerate(per_tenant.tolist())},
        bytes_by_tenant={profiles.ids[t]: int(c) for t, c in enumerate(bytes_tenant.tolist())},
        events_by_tenant_hour=by_hour,
        file_lines=dict(writer.file_lines),
        redelivered_files=redelivered,
        bursts=plan.bursts,
    )
