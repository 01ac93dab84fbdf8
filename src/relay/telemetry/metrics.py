"""Relay's Prometheus metrics, in one registry of their own (not the process-global default one).

Each process (a front, a worker) counts what it did itself: the jobs it ended, the claims it won, its
leases and store calls. The queue's depth is the store's, read when /metrics is scraped (QueueWatch), so
every process that serves /metrics shows the same queue. docs/scaling.md lists every metric and the
queries of a dashboard over them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)

# Seconds one store call took, measured around the call (a round trip to PostgreSQL, a statement on SQLite).
STORE_CALL_SECONDS = Histogram(
    "relay_store_call_seconds",
    "Time one store call took, from the caller's side (round trip included).",
    ("backend", "call"),
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)

# A job's wait in the queue (a few ms when a slot is free, minutes behind a full queue) and its run (seconds
# for a model call, an hour for a long refactor).
QUEUE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
RUN_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)

JOBS_SUBMITTED = Counter(
    "relay_jobs_submitted",
    "Jobs this process queued (a front's submits), by agent.",
    ("agent",),
    registry=REGISTRY,
)
CLAIM_LATENCY_SECONDS = Histogram(
    "relay_claim_latency_seconds",
    "Time a job waited in the queue, from its submit to the claim this process won on it, by agent.",
    ("agent",),
    registry=REGISTRY,
    buckets=QUEUE_BUCKETS,
)
FIRST_OUTPUT_SECONDS = Histogram(
    "relay_job_first_output_seconds",
    "Time from a job's process starting to the agent's first output (the agent CLI's start-up), by agent.",
    ("agent",),
    registry=REGISTRY,
    buckets=QUEUE_BUCKETS,
)
JOBS_ENDED = Counter(
    "relay_jobs_ended",
    "Jobs whose end this process recorded, by agent and final status (completed, failed, cancelled, timed_out,"
    " interrupted).",
    ("agent", "status"),
    registry=REGISTRY,
)
JOB_DURATION_SECONDS = Histogram(
    "relay_job_duration_seconds",
    "Time a job ran, from its process (or in-process task) starting to its end, by agent and final status.",
    ("agent", "status"),
    registry=REGISTRY,
    buckets=RUN_BUCKETS,
)
LEASE_RENEWALS = Counter(
    "relay_lease_renewals",
    "Heartbeats of this process that renewed the leases of every job it holds.",
    registry=REGISTRY,
)
LEASE_RENEWED_AT = Gauge(
    "relay_lease_renewed_timestamp_seconds",
    "When this process last renewed its leases (Unix time): older than [queue] lease_s means its claims run out.",
    registry=REGISTRY,
)
LEASE_EXPIRIES = Counter(
    "relay_lease_expiries",
    "Claims of a lost worker (its lease ran out) that this process ended: the job queued again (requeued) or"
    " ended interrupted.",
    ("outcome",),
    registry=REGISTRY,
)


def store_call(backend: str, call: str, seconds: float) -> None:
    """Record one store call: `backend` is "sqlite" or "postgresql", `call` the store method's name."""
    child = _store_calls.get((backend, call))
    if child is None:  # a dozen store calls a job: the labelled child found once, not through labels() each time
        child = _store_calls[(backend, call)] = STORE_CALL_SECONDS.labels(backend, call)
    child.observe(seconds)


_store_calls: dict[tuple[str, str], Histogram] = {}


def job_submitted(agent: str) -> None:
    JOBS_SUBMITTED.labels(agent).inc()


def job_claimed(agent: str, waited_s: float) -> None:
    """A claim this process won on a job queued `waited_s` ago (clamped at 0: another host's clock may be ahead)."""
    CLAIM_LATENCY_SECONDS.labels(agent).observe(max(waited_s, 0.0))


def job_first_output(agent: str, waited_s: float) -> None:
    FIRST_OUTPUT_SECONDS.labels(agent).observe(max(waited_s, 0.0))


def job_ended(agent: str, status: str, ran_s: float | None) -> None:
    """A job's end this process recorded; `ran_s` None: it never started (cancelled while queued)."""
    JOBS_ENDED.labels(agent, status).inc()
    if ran_s is not None:
        JOB_DURATION_SECONDS.labels(agent, status).observe(max(ran_s, 0.0))


def lease_renewed() -> None:
    LEASE_RENEWALS.inc()
    LEASE_RENEWED_AT.set(time.time())


def lease_expired(outcome: str, took: bool = True) -> None:
    """A lost worker's claim this process ended (`took`: its write took effect): `requeued` or `interrupted`."""
    if took:
        LEASE_EXPIRIES.labels(outcome).inc()


# --- read when scraped: the queue (the store's) and this process's slots ---------------------------------------


@dataclass(frozen=True)
class QueueRow:
    """Queued CLI jobs no worker claimed yet, of one agent asking for one set of labels."""

    agent: str
    labels: tuple[str, ...]
    count: int
    oldest_created_at: float


# A scrape reads the store's queue at most once per this long, however many scrapers ask (an HA pair of
# Prometheus servers, a person's curl): the store's cost does not grow with them.
QUEUE_READ_TTL_S = 5.0
# ... and a read that took long (a deep queue: its rows are read one by one) is kept for this many times as
# long, so the queue's gauges never take more than 1/50 of the store's time, however deep the queue.
QUEUE_READ_BUDGET = 50
# At most this many (agent, labels) series; the rest are summed under labels="(other)", so a caller inventing
# labels cannot grow the series without bound.
MAX_QUEUE_SERIES = 100
OTHER_LABELS = "(other)"

RunningFn = Callable[[], int]
"""How many jobs one job engine of this process runs now."""
QueueFn = Callable[[], Iterable[tuple[str, str | None, int, float]]]
"""The store's queued jobs: (agent, labels as a JSON list, how many, oldest created_at) per agent and labels."""


class Watch(Collector):
    """The gauges read when scraped: relay_queue_depth and relay_queue_oldest_seconds from the store (the newest
    engine's, kept QUEUE_READ_TTL_S or longer: QUEUE_READ_BUDGET), and this process's relay_worker_slots and
    relay_worker_slots_in_use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[int, tuple[RunningFn, int]] = {}
        self._queues: dict[int, QueueFn] = {}
        self._read: tuple[float, list[QueueRow] | None] = (0.0, None)
        self._ttl = QUEUE_READ_TTL_S

    def watching(self, running: RunningFn, slots: int, queue: QueueFn | None = None) -> Watching:
        """Show an engine's slots (`running()` of `slots` in use) and its store's queue on /metrics while the block
        (`with` or `async with`) runs."""
        return Watching(self, (running, slots), queue)

    def add(self, key: int, slots: tuple[RunningFn, int], queue: QueueFn | None) -> None:
        with self._lock:
            self._slots[key] = slots
            if queue is not None:
                self._queues[key] = queue
                self._read = (0.0, None)

    def remove(self, key: int) -> None:
        with self._lock:
            self._slots.pop(key, None)
            if self._queues.pop(key, None) is not None:
                self._read = (0.0, None)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "relay_queue_depth",
                "Queued jobs no worker has claimed yet, by agent and labels.",
                labels=("agent", "labels"),
            ),
            GaugeMetricFamily(
                "relay_queue_oldest_seconds",
                "Age of the oldest queued job no worker has claimed, by agent.",
                labels=("agent",),
            ),
            GaugeMetricFamily("relay_worker_slots", "Jobs this process may run at once (0: a front that runs none)."),
            GaugeMetricFamily("relay_worker_slots_in_use", "Jobs this process runs now."),
        )

    def collect(self) -> Iterable[GaugeMetricFamily]:
        depth, oldest, slots, in_use = self._families()
        with self._lock:
            engines = list(self._slots.values())
        slots.add_metric([], sum(total for _, total in engines))
        in_use.add_metric([], sum(running() for running, _ in engines))
        rows = self._queue()
        if rows is not None:  # unread (no engine, or the store failed): no samples, so absent() tells
            now = time.time()
            by_agent: dict[str, float] = {}
            for agent, labels, count in capped(rows):
                depth.add_metric([agent, labels], count)
            for row in rows:
                by_agent[row.agent] = min(by_agent.get(row.agent, now), row.oldest_created_at)
            for agent, created in sorted(by_agent.items()):
                oldest.add_metric([agent], max(now - created, 0.0))
        return depth, oldest, slots, in_use

    def _queue(self) -> list[QueueRow] | None:
        with self._lock:
            if not self._queues:
                return None
            read_at, rows = self._read
            if rows is not None and time.monotonic() - read_at < self._ttl:
                return rows
            fn = list(self._queues.values())[-1]
            started = time.monotonic()
            try:
                rows = [QueueRow(agent, _labels(labels), count, oldest) for agent, labels, count, oldest in fn()]
            except Exception:  # the store is away or busy: this scrape shows no queue, the next one tries again
                return None
            now = time.monotonic()
            self._read, self._ttl = (now, rows), max(QUEUE_READ_TTL_S, QUEUE_READ_BUDGET * (now - started))
            return rows


class Watching:
    """An engine shown on /metrics while it runs (Watch.watching)."""

    def __init__(self, watch: Watch, slots: tuple[RunningFn, int], queue: QueueFn | None) -> None:
        self._watch, self._slots, self._queue = watch, slots, queue

    def __enter__(self) -> None:
        self._watch.add(id(self), self._slots, self._queue)

    def __exit__(self, *exc: object) -> None:
        self._watch.remove(id(self))

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()


def _labels(raw: str | None) -> tuple[str, ...]:
    found: Any = json.loads(raw) if raw else []
    return tuple(str(x) for x in found) if isinstance(found, list) else ()  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]


def capped(rows: list[QueueRow]) -> list[tuple[str, str, int]]:
    """(agent, labels, count) per series, the largest MAX_QUEUE_SERIES kept and the rest summed per agent."""
    merged: dict[tuple[str, str], int] = {}
    for row in rows:
        key = (row.agent, ",".join(sorted(row.labels)))
        merged[key] = merged.get(key, 0) + row.count
    ranked = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = [(agent, labels, count) for (agent, labels), count in ranked[:MAX_QUEUE_SERIES]]
    rest: dict[str, int] = {}
    for (agent, _), count in ranked[MAX_QUEUE_SERIES:]:
        rest[agent] = rest.get(agent, 0) + count
    return kept + [(agent, OTHER_LABELS, count) for agent, count in sorted(rest.items())]


WATCH = Watch()
REGISTRY.register(WATCH)
