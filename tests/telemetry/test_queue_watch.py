"""The queue's gauges read the store when scraped, bounded in cost: one read per QUEUE_READ_TTL_S however many
scrapes come (longer after a slow read: QUEUE_READ_BUDGET), at most MAX_QUEUE_SERIES label sets, nothing at all
while the store fails; and the store's queue_depth is the same on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from relay.store import JobStore, WorkerInfo, open_store
from relay.telemetry import metrics
from relay.telemetry.metrics import MAX_QUEUE_SERIES, OTHER_LABELS, QUEUE_READ_BUDGET, Watch


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def test_many_scrapes_read_the_store_once_per_interval_and_label_sets_past_the_cap_are_folded() -> None:
    reads: list[int] = []
    rows = [("claude", json.dumps([f"l{i}"]), 1, 100.0) for i in range(MAX_QUEUE_SERIES + 5)]
    rows.append(("claude", None, 10, 50.0))

    def queue() -> list[tuple[str, str | None, int, float]]:
        reads.append(1)
        return rows

    watch, registry = Watch(), CollectorRegistry()
    registry.register(watch)
    with watch.watching(lambda: 1, 4, queue):
        first = scrape(registry)
        for _ in range(20):
            scrape(registry)
    assert len(reads) == 1  # plus none at register: describe() reads nothing
    depth = {labels: v for (name, labels), v in first.items() if name == "relay_queue_depth"}
    assert len(depth) == MAX_QUEUE_SERIES + 1
    assert depth[(("agent", "claude"), ("labels", ""))] == 10
    assert depth[(("agent", "claude"), ("labels", OTHER_LABELS))] == 6  # the 6 smallest, summed
    assert first[("relay_worker_slots", ())] == 4 and first[("relay_worker_slots_in_use", ())] == 1
    # Once the engine is gone, its slots and its queue are too.
    after = scrape(registry)
    assert after[("relay_worker_slots", ())] == 0
    assert not any(name == "relay_queue_depth" for name, _ in after)


def test_a_store_that_fails_when_scraped_leaves_the_queue_gauges_out_and_the_next_scrape_tries_again() -> None:
    calls: list[int] = []

    def queue() -> list[tuple[str, str | None, int, float]]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the store is away")
        return [("codex", '["gpu"]', 2, 1.0)]

    watch, registry = Watch(), CollectorRegistry()
    registry.register(watch)
    with watch.watching(lambda: 0, 0, queue):
        away = scrape(registry)
        back = scrape(registry)
    assert not any(name == "relay_queue_depth" for name, _ in away)
    assert back[("relay_queue_depth", (("agent", "codex"), ("labels", "gpu")))] == 2


def _queue_of(store: JobStore, workdir: Path) -> list[tuple[str, str | None, int, float]]:
    store.insert_job("a", "claude", "cli", {"prompt": "p", "labels": ["gpu"]}, None, str(workdir), labels=("gpu",))
    store.insert_job("b", "claude", "cli", {"prompt": "p"}, None, str(workdir))
    store.insert_job("c", "claude", "cli", {"prompt": "p"}, None, str(workdir))
    store.insert_job("d", "codex", "cli", {"prompt": "p"}, None, str(workdir))
    store.insert_job("t", "openai:gpt-5", "task", {"prompt": "p"}, None, None)  # an in-process task waits for no claim
    me = WorkerInfo("w/1", "w", "h", 1, None, None, ("codex",), (), 1, 30.0)
    store.register_worker(me)
    assert [j for j, _, _ in store.claim(me, free=1, max_total=10, per_agent=lambda _: 10)] == ["d"]
    try:
        return sorted(store.queue_depth(), key=lambda r: (r[0], r[1] or ""))
    finally:
        store.close()  # its background writers stop before the database goes


def test_the_sqlite_stores_queue_depth_counts_unclaimed_cli_jobs_by_agent_and_labels(
    relay_home: Path, workdir: Path
) -> None:
    rows = _queue_of(open_store(relay_home / "relay.db", home=relay_home), workdir)
    assert [(a, json.loads(lab or "[]"), n) for a, lab, n, _ in rows] == [("claude", [], 2), ("claude", ["gpu"], 1)]


def test_the_postgresql_stores_queue_depth_is_the_same(relay_home: Path, workdir: Path, pg_url: str) -> None:
    rows = _queue_of(open_store(pg_url, home=relay_home), workdir)
    assert [(a, json.loads(lab or "[]"), n) for a, lab, n, _ in rows] == [("claude", [], 2), ("claude", ["gpu"], 1)]


def test_the_process_registry_holds_the_watch_once() -> None:
    assert metrics.REGISTRY.get_sample_value("relay_worker_slots") is not None


def test_a_slow_queue_read_is_kept_longer_so_the_gauges_take_a_bounded_share_of_the_stores_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: clock[0])
    reads: list[float] = []

    def slow_queue() -> list[tuple[str, str | None, int, float]]:
        reads.append(clock[0])
        clock[0] += 0.4  # a deep queue: the read takes 0.4 s
        return [("claude", None, 10_000, 1.0)]

    watch, registry = Watch(), CollectorRegistry()
    registry.register(watch)
    with watch.watching(lambda: 0, 0, slow_queue):
        scrape(registry)
        for _ in range(20):  # a scrape a second for 20 s: still within 50 x 0.4 s of the read
            clock[0] += 1.0
            scrape(registry)
        clock[0] += 1.0
        scrape(registry)
    assert len(reads) == 2 and reads[1] - reads[0] >= QUEUE_READ_BUDGET * 0.4
