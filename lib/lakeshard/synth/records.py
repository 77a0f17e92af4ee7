"""Valid landing records: tenant profiles (services, hosts, producer styles), event IDs and line rendering.

Rendering is the hot loop of the generator, so everything that can be decided per tenant, per service or
per pool entry is pre-rendered into JSON fragments once, and a line is one f-string over fragments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring, encode_basestring_ascii

import numpy as np
import numpy.typing as npt

from lakeshard.synth.timestamps import OFFSETS
from lakeshard.synth.vocabulary import ENVS, EXTRA_FIELDS, SERVICES, STATUSES

__all__ = [
    "STYLES",
    "EventColumns",
    "FragmentTables",
    "TenantProfiles",
    "event_ids",
    "render_lines",
    "tenant_profiles",
]

IntArray = npt.NDArray[np.int64]

# Producer styles: how a tenant's log shipper writes JSON (key order, separators, unicode escaping).
#   0: compact, canonical key order, raw UTF-8
#   1: spaced (", " and ": "), ts first, non-ASCII escaped as \uXXXX (Python's json.dumps defaults)
#   2: compact, event_id first, ts in the middle
STYLES: tuple[int, ...] = (0, 1, 2)
_STYLE_WEIGHTS = (0.5, 0.3, 0.2)

# Event ID styles: 0 UUID v4, 1 ULID (time-prefixed), 2 "evt_" + 24 hex digits.
_ID_STYLE_WEIGHTS = (0.55, 0.3, 0.15)

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_CROCKFORD = np.frombuffer(b"0123456789ABCDEFGHJKMNPQRSTVWXYZ", dtype=np.uint8)
_UUID_HEX_POSITIONS = np.array(
    [*range(0, 8), *range(9, 13), *range(14, 18), *range(19, 23), *range(24, 36)], dtype=np.int64
)


@dataclass(frozen=True)
class TenantProfiles:
    """Who the tenants are and how their producers behave; services and hosts are flat tables."""

    ids: list[str]
    weights: npt.NDArray[np.float64]  # relative volume (Zipf over a random rank order)
    style: IntArray  # producer style per tenant, see STYLES
    id_style: IntArray  # event ID style per tenant
    home_offset: IntArray  # index into OFFSETS: the offset the tenant's clocks print
    svc_first: IntArray  # per tenant: first index into service_names
    svc_count: IntArray
    service_names: list[str]  # flat over tenants
    host_first: IntArray  # per flat service: first index into host_names
    host_count: IntArray
    host_names: list[str]


def tenant_profiles(rng: np.random.Generator, tenants: int, zipf_s: float) -> TenantProfiles:
    """Return ``tenants`` seeded tenant profiles with Zipf(``zipf_s``) volume weights."""
    ids = [f"tenant-{i:05d}" for i in range(tenants)]
    ranks = rng.permutation(tenants).astype(np.float64) + 1.0
    weights = ranks**-zipf_s
    style = rng.choice(len(STYLES), size=tenants, p=_STYLE_WEIGHTS).astype(np.int64)
    id_style = rng.choice(3, size=tenants, p=_ID_STYLE_WEIGHTS).astype(np.int64)
    # Half the tenants print UTC ("Z"), the rest their local offset.
    home_offset = np.where(rng.random(tenants) < 0.5, 0, rng.integers(1, len(OFFSETS), size=tenants)).astype(np.int64)
    svc_count = rng.integers(2, 13, size=tenants).astype(np.int64)
    svc_first = np.concatenate(([0], np.cumsum(svc_count)[:-1])).astype(np.int64)
    service_names: list[str] = []
    host_counts: list[int] = []
    host_names: list[str] = []
    for t in range(tenants):
        chosen = rng.choice(len(SERVICES), size=int(svc_count[t]), replace=False).tolist()
        host_style = int(rng.integers(0, 3))
        for s in chosen:
            name = SERVICES[s]
            service_names.append(name)
            count = int(rng.integers(1, 9))
            host_counts.append(count)
            for h in range(count):
                if host_style == 0:
                    host_names.append(f"{name}-{rng.bytes(3).hex()}-{rng.bytes(3).hex()[:5]}")
                elif host_style == 1:
                    a, b, c = (int(x) for x in rng.integers(0, 256, size=3))
                    host_names.append(f"ip-10-{a}-{b}-{c}.ec2.internal")
                else:
                    host_names.append(f"{name}-{h + 1:02d}.fra2.acme.net")
    host_count = np.array(host_counts, dtype=np.int64)
    host_first = np.concatenate(([0], np.cumsum(host_count)[:-1])).astype(np.int64)
    return TenantProfiles(
        ids=ids,
        weights=weights,
        style=style,
        id_style=id_style,
        home_offset=home_offset,
        svc_first=svc_first,
        svc_count=svc_count,
        service_names=service_names,
        host_first=host_first,
        host_count=host_count,
        host_names=host_names,
    )


def _fixed_width(chars: npt.NDArray[np.uint8]) -> list[str]:
    """Return the rows of an ``(n, width)`` ASCII byte matrix as strings."""
    n, width = chars.shape
    if n == 0:
        return []
    text = np.ascontiguousarray(chars).tobytes().decode("ascii")
    return [text[i : i + width] for i in range(0, n * width, width)]


def event_ids(rng: np.random.Generator, id_style: IntArray, ts_ms: IntArray) -> list[str]:
    """Return one event ID per element: UUID v4, ULID (time part from ``ts_ms``) or ``evt_<hex>``."""
    n = len(id_style)
    out: list[str] = [""] * n
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    uuid_idx = np.flatnonzero(id_style == 0)
    ulid_idx = np.flatnonzero(id_style == 1)
    hex_idx = np.flatnonzero(id_style == 2)

    b = raw[uuid_idx].copy()
    b[:, 6] = (b[:, 6] & 0x0F) | 0x40  # version 4
    b[:, 8] = (b[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
    hexchars = np.empty((len(b), 32), dtype=np.uint8)
    hexchars[:, 0::2] = _HEX[b >> 4]
    hexchars[:, 1::2] = _HEX[b & 0x0F]
    uuids = np.full((len(b), 36), ord("-"), dtype=np.uint8)
    uuids[:, _UUID_HEX_POSITIONS] = hexchars
    for i, text in zip(uuid_idx.tolist(), _fixed_width(uuids), strict=True):
        out[i] = text

    t = np.maximum(ts_ms[ulid_idx], 0).astype(np.uint64)
    digits = np.empty((len(ulid_idx), 26), dtype=np.uint8)
    for j in range(10):
        digits[:, j] = ((t >> np.uint64(45 - 5 * j)) & np.uint64(31)).astype(np.uint8)
    digits[:, 10:] = raw[ulid_idx] & 31
    for i, text in zip(ulid_idx.tolist(), _fixed_width(_CROCKFORD[digits]), strict=True):
        out[i] = text

    h = raw[hex_idx, :12]
    hexchars = np.empty((len(h), 28), dtype=np.uint8)
    hexchars[:, :4] = np.frombuffer(b"evt_", dtype=np.uint8)
    hexchars[:, 4::2] = _HEX[h >> 4]
    hexchars[:, 5::2] = _HEX[h & 0x0F]
    for i, text in zip(hex_idx.tolist(), _fixed_width(hexchars), strict=True):
        out[i] = text
    return out


def _fragments(key: str, values: Sequence[str], style: int) -> list[str]:
    """Return ``,"key":"value"`` fragments for ``values`` in a style, plus ``""`` (absent) at the end."""
    encode = encode_basestring_ascii if style == 1 else encode_basestring
    sep = ", " if style == 1 else ","
    colon = ": " if style == 1 else ":"
    return [f"{sep}{encode(key)}{colon}{encode(v)}" for v in values] + [""]


def _raw_fragments(key: str, texts: Sequence[str], style: int) -> list[str]:
    """Return ``,"key":<json>`` fragments for already-serialised JSON ``texts``, plus ``""`` at the end."""
    sep = ", " if style == 1 else ","
    colon = ": " if style == 1 else ":"
    return [f'{sep}"{key}"{colon}{t}' for t in texts] + [""]


@dataclass
class EventColumns:
    """Per-event JSON fragments the renderer joins, as Python lists (index = event number by arrival).

    Optional fields are pre-rendered fragments such as ``,"host":"web-01"`` (``""`` when absent). A
    message is ``message_head`` (``,"message":"<prefix>``, an open string; ``""`` when absent)
    followed by ``sources[message_source][message_start:message_stop]`` and a closing quote.
    """

    tenant_id: list[str]
    event_id: list[str]
    ts_json: list[str]  # the JSON text of ts: a quoted RFC 3339 string or an integer
    style: list[int]
    service: list[str]
    host: list[str]
    env: list[str]
    status: list[str]
    attributes: list[str]
    extra: list[str]
    message_head: list[str]
    message_source: list[int]
    message_start: list[int]
    message_stop: list[int]


class FragmentTables:
    """Pre-rendered JSON fragments per producer style, indexed by ``style * width + value``."""

    def __init__(
        self,
        service_names: Sequence[str],
        host_names: Sequence[str],
        attributes: Sequence[Sequence[str]],
        message_prefixes: Sequence[str],
    ) -> None:
        self.service = self._table("service", service_names)
        self.host = self._table("host", host_names)
        self.env = self._table("env", ENVS)
        self.status = self._table("status", STATUSES)
        self.attributes = np.array(
            [f for st in STYLES for f in _raw_fragments("attributes", attributes[st], st)], dtype=object
        )
        extras = [_fragments(k, [v], st)[0] for st in STYLES for k, v in [*EXTRA_FIELDS, ("", "")]]
        self.extra = np.array(extras, dtype=object)
        # The ("", "") placeholder above reserves each style's last slot; it means "no extra field".
        width = len(EXTRA_FIELDS) + 1
        self.extra[width - 1 :: width] = ""
        # An open string: the body and the closing quote follow per record.
        self.message_head = np.array(
            [f[:-1] if f else f for st in STYLES for f in _fragments("message", message_prefixes, st)],
            dtype=object,
        )

    @staticmethod
    def _table(key: str, values: Sequence[str]) -> npt.NDArray[np.object_]:
        return np.array([f for st in STYLES for f in _fragments(key, values, st)], dtype=object)

    @staticmethod
    def pick(table: npt.NDArray[np.object_], style: IntArray, index: IntArray) -> list[str]:
        """Return the fragment per event; ``index == -1`` means the field is absent."""
        width = len(table) // len(STYLES)
        where = np.where(index < 0, width - 1, index) + style * width
        values: list[str] = table[where].tolist()
        return values


def render_lines(cols: EventColumns, lo: int, hi: int, sources: Sequence[str]) -> list[str]:
    """Return the JSON lines (no newline) of events ``lo``..``hi - 1``."""
    out: list[str] = []
    append = out.append
    rows = zip(
        cols.style[lo:hi], cols.tenant_id[lo:hi], cols.event_id[lo:hi], cols.ts_json[lo:hi],
        cols.service[lo:hi], cols.host[lo:hi], cols.env[lo:hi], cols.status[lo:hi],
        cols.attributes[lo:hi], cols.extra[lo:hi], cols.message_head[lo:hi],
        cols.message_source[lo:hi], cols.message_start[lo:hi], cols.message_stop[lo:hi],
        strict=True,
    )  # fmt: skip
    for st, tid, eid, ts, svc, host, env, status, attrs, extra, head, src, a, b in rows:
        msg = f'{head}{sources[src][a:b]}"' if head else ""
        if st == 0:
            append(f'{{"tenant_id":"{tid}","event_id":"{eid}","ts":{ts}{svc}{host}{env}{status}{msg}{attrs}{extra}}}')
        elif st == 1:
            append(
                f'{{"ts": {ts}, "tenant_id": "{tid}", "event_id": "{eid}"{svc}{status}{env}{host}{extra}{msg}{attrs}}}'
            )
        else:
            append(f'{{"event_id":"{eid}","tenant_id":"{tid}"{svc}{status},"ts":{ts}{host}{env}{attrs}{msg}{extra}}}')
    return out
