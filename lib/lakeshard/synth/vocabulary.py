"""The words synthetic observability traffic is made of: services, statuses, log text, attributes.

Plain data plus small seeded builders; nothing here draws from a global random state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring, encode_basestring_ascii

import numpy as np
import numpy.typing as npt

__all__ = [
    "ENVS",
    "ENV_WEIGHTS",
    "ERROR_STATUSES",
    "EXTRA_FIELDS",
    "SERVICES",
    "STATUSES",
    "STATUS_WEIGHTS",
    "Corpus",
    "attribute_pool",
    "encode_pool",
    "message_prefixes",
    "text_corpus",
    "trace_corpus",
]

SERVICES: tuple[str, ...] = (
    "api-gateway", "auth", "billing", "cart", "catalog", "checkout", "search", "payments", "inventory",
    "shipping", "notifications", "email", "web", "frontend", "worker", "scheduler", "ingest", "etl",
    "reporting", "recommendations", "user-profile", "session", "cdn-edge", "db-proxy", "cache",
    "queue-consumer", "fraud", "ledger", "pricing", "analytics", "media", "thumbnailer", "webhooks",
    "audit", "feature-flags", "graphql", "mobile-bff", "admin", "export", "sync",
)  # fmt: skip

STATUSES: tuple[str, ...] = ("debug", "info", "notice", "warn", "error", "critical")
STATUS_WEIGHTS: tuple[float, ...] = (0.06, 0.70, 0.04, 0.12, 0.07, 0.01)
ERROR_STATUSES: frozenset[str] = frozenset({"error", "critical"})

ENVS: tuple[str, ...] = ("prod", "staging", "dev")
ENV_WEIGHTS: tuple[float, ...] = (0.85, 0.11, 0.04)

# Unknown top-level fields some producers add; a reader folds them into ``attributes``. Their names
# never collide with a known field or an attribute key, so folding is unambiguous.
EXTRA_FIELDS: tuple[tuple[str, str], ...] = (
    ("region", "eu-1"), ("region", "us-east-1"), ("region", "ap-south-1"), ("sdk", "python/3.12.1"),
    ("sdk", "go/1.22.4"), ("sdk", "java/21"), ("source", "fluent-bit"), ("source", "vector"),
    ("k8s_namespace", "payments"), ("k8s_namespace", "default"), ("dc", "fra2"), ("pipeline", "logs-v2"),
)  # fmt: skip

_WORDS: tuple[str, ...] = (
    "request", "response", "handled", "user", "session", "token", "expired", "refreshed", "order", "payment",
    "accepted", "declined", "queue", "depth", "latency", "ms", "bytes", "upstream", "downstream", "timeout",
    "connection", "pool", "exhausted", "retry", "attempt", "cache", "hit", "miss", "key", "shard", "replica",
    "lag", "commit", "offset", "partition", "batch", "flushed", "records", "schema", "version", "deploy",
    "rollout", "canary", "healthy", "unhealthy", "probe", "failed", "succeeded", "started", "stopped",
    "worker", "job", "scheduled", "completed", "in", "for", "with", "from", "to", "after", "of", "the", "a",
    "id=4821", "status=200", "status=503", "code=E1042", "path=/api/v1/orders", "region=eu-west-1",
    "naïve", "Zürich", "São", "Paulo", "Kraków", "東京", "데이터", "✓", "→", "🚀", "café", "Ωmega",
    'said "hello"', "C:\\temp\\dump", "tab\tseparated", "50%", "<html>", "&amp;", "{json}", "[array]",
)  # fmt: skip

# Message heads; the body cut from a corpus brings its own leading separator.
_PREFIXES: dict[str, tuple[str, ...]] = {
    "debug": ("cache lookup", "parsed config", "entering handler", "span closed"),
    "info": ("GET /api/v1/orders 200", "POST /api/v1/checkout 201", "user signed in", "job completed",
             "request handled", "published event", "health check ok"),
    "notice": ("config reloaded", "feature flag changed", "scaling up"),
    "warn": ("slow query", "retrying request", "queue depth high", "deprecated API used"),
    "error": ("payment declined:", "upstream timeout:", "NullPointerException:", "db error:"),
    "critical": ("out of memory:", "data corruption detected:", "all replicas down:"),
}  # fmt: skip


@dataclass(frozen=True)
class Corpus:
    """Words to cut message bodies from, already JSON-escaped so no record pays for escaping.

    Word ``i`` is preceded by the corpus separator (a space, or a newline for stack traces); a body is
    words ``a..b-1``: ``raw_starts[b] - raw_starts[a]`` characters long, and spelled
    ``escaped[s][escaped_starts[s][a]:escaped_starts[s][b]]`` in escaping ``s`` (0: raw UTF-8,
    1: ``\\uXXXX`` for non-ASCII).
    """

    raw_starts: npt.NDArray[np.int64]  # n + 1 offsets; the last one is the total length
    escaped: tuple[str, str]
    escaped_starts: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]

    @classmethod
    def of(cls, words: list[str], separator: str) -> Corpus:
        """Return the corpus of ``words``, each preceded by ``separator``."""
        pieces = [separator + w for w in words]
        raw = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        escaped: list[str] = []
        starts: list[npt.NDArray[np.int64]] = []
        for encode in (encode_basestring, encode_basestring_ascii):
            esc = [encode(p)[1:-1] for p in pieces]
            lengths = np.fromiter((len(e) for e in esc), dtype=np.int64, count=len(esc))
            escaped.append("".join(esc))
            starts.append(np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))
        return cls(
            raw_starts=np.concatenate(([0], np.cumsum(raw))).astype(np.int64),
            escaped=(escaped[0], escaped[1]),
            escaped_starts=(starts[0], starts[1]),
        )

    def cut(
        self, rng: np.random.Generator, lengths: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Return word ranges ``(first, stop)`` of at least ``lengths`` characters each, at random places."""
        total = int(self.raw_starts[-1])
        lengths = np.minimum(lengths, total)
        fits = np.searchsorted(self.raw_starts, total - lengths, side="right")  # first words that fit
        first = (rng.random(len(lengths)) * np.maximum(fits, 1)).astype(np.int64)
        stop = np.searchsorted(self.raw_starts, self.raw_starts[first] + lengths, side="left").astype(np.int64)
        return first, stop


def text_corpus(rng: np.random.Generator, min_chars: int) -> Corpus:
    """Return a word corpus of at least ``min_chars`` characters drawn from ``rng``."""
    words = np.array(_WORDS, dtype=object)
    # Common words dominate, exotic ones (unicode, quotes, tabs) stay rare, as in real logs.
    weights = np.where(np.array([w.isascii() and w.isalnum() for w in _WORDS]), 10.0, 1.0)
    weights /= weights.sum()
    count = max(64, min_chars // 5)
    chosen: list[str] = rng.choice(words, size=count, p=weights).tolist()
    corpus = Corpus.of(chosen, " ")
    if corpus.raw_starts[-1] < min_chars:
        return text_corpus(rng, min_chars * 2)
    return corpus


def trace_corpus(rng: np.random.Generator, min_chars: int) -> Corpus:
    """Return stack-trace-like lines (Java and Python frames) of at least ``min_chars`` characters."""
    classes = ("OrderService", "PaymentClient", "HttpHandler", "Repository", "KafkaConsumer", "Scheduler")
    methods = ("handle", "process", "call", "execute", "poll", "run", "apply")
    modules = ("app/handlers", "app/db", "lib/retry", "app/workers/sync", "site-packages/urllib3/poolmanager")
    lines: list[str] = []
    size = 0
    while size < min_chars:
        kind = int(rng.integers(0, 6))
        if kind == 0:
            line = f"Caused by: java.io.IOException: Connection reset by peer (attempt {rng.integers(1, 9)})"
        elif kind == 1:
            mod = modules[int(rng.integers(0, len(modules)))]
            line = (
                f'  File "/srv/{mod}.py", line {rng.integers(1, 2000)}, in '
                f"{methods[int(rng.integers(0, len(methods)))]}"
            )
        else:
            cls = classes[int(rng.integers(0, len(classes)))]
            meth = methods[int(rng.integers(0, len(methods)))]
            line = f"\tat com.acme.svc.{cls}.{meth}({cls}.java:{rng.integers(10, 900)})"
        lines.append(line)
        size += len(line) + 1
    return Corpus.of(lines, "\n")


def message_prefixes() -> tuple[list[str], np.ndarray, np.ndarray]:
    """Return ``(prefixes, first, count)``: all message prefixes and, per status, where its own start."""
    prefixes: list[str] = []
    first = np.zeros(len(STATUSES), dtype=np.int64)
    count = np.zeros(len(STATUSES), dtype=np.int64)
    for i, status in enumerate(STATUSES):
        first[i] = len(prefixes)
        count[i] = len(_PREFIXES[status])
        prefixes.extend(_PREFIXES[status])
    return prefixes, first, count


def attribute_pool(rng: np.random.Generator, size: int) -> list[dict[str, str]]:
    """Return ``size`` realistic ``attributes`` objects (string → string, 1 to 6 keys)."""
    methods = ("GET", "POST", "PUT", "DELETE", "PATCH")
    codes = ("200", "200", "200", "201", "204", "301", "400", "401", "404", "409", "429", "500", "503")
    routes = ("/api/v1/orders/{id}", "/api/v1/users/{id}", "/healthz", "/api/v2/search", "/graphql")
    regions = ("eu-west-1", "us-east-1", "us-west-2", "ap-southeast-1")
    cities = ("Zürich", "São Paulo", "東京", "Kraków", "Berlin", "Lagos")
    candidates: dict[str, Callable[[], str]] = {
        "http.method": lambda: methods[int(rng.integers(0, len(methods)))],
        "http.status_code": lambda: codes[int(rng.integers(0, len(codes)))],
        "http.route": lambda: routes[int(rng.integers(0, len(routes)))],
        "user_id": lambda: f"u-{int(rng.integers(1, 10**7))}",
        "cloud.region": lambda: regions[int(rng.integers(0, len(regions)))],
        "version": lambda: f"{int(rng.integers(1, 4))}.{int(rng.integers(0, 20))}.{int(rng.integers(0, 9))}",
        "trace_id": lambda: rng.bytes(16).hex(),
        "span_id": lambda: rng.bytes(8).hex(),
        "db.system": lambda: ("postgresql", "mysql", "redis", "mongodb")[int(rng.integers(0, 4))],
        "retry": lambda: str(int(rng.integers(0, 4))),
        "customer_tier": lambda: ("free", "pro", "enterprise")[int(rng.integers(0, 3))],
        "city": lambda: cities[int(rng.integers(0, len(cities)))],
    }
    names = list(candidates)
    pool: list[dict[str, str]] = []
    for _ in range(size):
        keys = int(rng.integers(1, 7))
        picked = rng.choice(len(names), size=keys, replace=False).tolist()
        pool.append({names[i]: candidates[names[i]]() for i in picked})
    return pool


def encode_pool(pool: list[dict[str, str]], *, spaced: bool) -> list[str]:
    """Return each object of ``pool`` serialised as one JSON text (compact, or spaced and ASCII-escaped)."""
    if spaced:
        return [json.dumps(obj, ensure_ascii=True) for obj in pool]
    return [json.dumps(obj, ensure_ascii=False, separators=(",", ":")) for obj in pool]
