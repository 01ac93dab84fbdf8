"""Claims and workers: the one body is store/queue.py (both backends); its names, where callers import them."""

from relay.store.queue import (
    CLAIM_WINDOW,
    GONE_WORKERS,
    HOLDS_SLOT,
    QUEUE_DEPTH,
    REVIVE,
    ClaimAsk,
    ClaimsBody,
    WorkerInfo,
    WorkerRecord,
    worker_row,
)

__all__ = [
    "CLAIM_WINDOW",
    "GONE_WORKERS",
    "HOLDS_SLOT",
    "QUEUE_DEPTH",
    "REVIVE",
    "ClaimAsk",
    "ClaimsBody",
    "WorkerInfo",
    "WorkerRecord",
    "worker_row",
]
