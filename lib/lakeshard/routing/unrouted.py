"""The landing bytes no batch plan has routed yet, estimated from file sizes (the completionist's backlog)."""

from __future__ import annotations

import dataclasses

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.landing import LandingFile, scan_landing
from lakeshard.routing.consumed import consumed_landing
from lakeshard.tables import EVENTS, FUSED_APP_ID, LANDING_BATCHES, ROUTED, ROUTER_APP_ID

__all__ = ["unrouted_landing"]


def unrouted_landing(store: TableStore, cfg: LakeshardConfig, landing: str | None = None) -> list[LandingFile]:
    """Return the landing bytes not routed yet (to ``routed``, or to ``events`` by the fused hand-off): each file's
    range after what the finished batches consumed (the whole file when it is new or changed other than by an
    append; a held-back tail included).

    Decided from sizes alone, without reading the files: an estimate for watermarks, not a batch plan.
    """
    files = scan_landing(landing or cfg.landing).files
    batches_uri = cfg.table_uri(LANDING_BATCHES)
    if not store.exists(batches_uri):
        return files
    routed_uri, events_uri = cfg.table_uri(ROUTED), cfg.table_uri(EVENTS)
    routed = (store.transaction_version(routed_uri, ROUTER_APP_ID) or 0) if store.exists(routed_uri) else 0
    # A batch handed to the writers in memory (the fused hand-off) is routed once its events are committed; batches
    # are finished in order, so the newest finished one of either kind bounds what the plans consumed.
    fused = (store.transaction_version(events_uri, FUSED_APP_ID) or 0) if store.exists(events_uri) else 0
    routed = max(routed, fused)
    consumed = consumed_landing(store, batches_uri, routed, identities={f.identity for f in files})
    out = []
    for f in files:
        last = consumed.get(f.identity)
        if last is None or f.size_bytes < last.end or (f.size_bytes == last.size_bytes and f.mtime != last.mtime):
            out.append(f)
        elif f.size_bytes > last.end:
            out.append(dataclasses.replace(f, start=last.end, first_line=last.next_line))
    return out
