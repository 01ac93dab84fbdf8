"""LISTEN/NOTIFY: a change written through one connection wakes a waiter on another, and survives a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from relay.events import Event
from relay.store import WorkerInfo
from relay.store.pg import QUEUE_CHANNEL, PgChanges, PgStore
from relay.store.pg.listen import Subscription
from relay.store.pg.store import POOL_WAIT_S
from tests.postgres import Cluster

pytestmark = pytest.mark.anyio

WORKER = WorkerInfo("w/1", "w", "host", 1, None, "boot", None, (), 4, 15.0)

# Bounds on waits that end by an event (a NOTIFY arrives in milliseconds; a restart takes seconds).
PROMPT_S = 5.0
RESTART_S = 60.0
# How long a subscription of another job is given to (wrongly) fire.
QUIET_S = 0.3


@pytest.fixture
def pg_store(pg_url: str, relay_home: Path) -> Iterator[PgStore]:
    from relay.audit import open_audit

    store = PgStore(pg_url, open_audit(relay_home))
    yield store
    store.close()


@pytest.fixture
async def changes(pg_store: PgStore) -> AsyncIterator[PgChanges]:
    async with pg_store.changes() as listener:
        with anyio.fail_after(PROMPT_S):
            assert await listener.ready()
        yield listener


async def woken(sub: Subscription) -> bool:
    with anyio.fail_after(PROMPT_S):
        return await sub.wait(PROMPT_S * 2)


async def test_every_state_change_of_a_job_wakes_its_waiter_on_another_connection(
    changes: PgChanges, pg_store: PgStore
) -> None:
    with changes.subscribe("j1") as sub, changes.subscribe("other") as other:
        steps = [
            lambda: pg_store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w"),
            lambda: pg_store.claim(WORKER, free=1, max_total=4, per_agent=lambda _: 4),
            lambda: pg_store.mark_running(
                "j1",
                pid=5,
                pid_start_ticks=None,
                boot_id=None,
                owner_pid=1,
                owner_start_ticks=2,
                deadline_at=None,
                idle_timeout_s=None,
            ),
            lambda: pg_store.add_events("j1", 0, [Event("message", {"text": "hi"})]),
            lambda: pg_store.append_output("j1", "stdout", b"line\n"),
            lambda: pg_store.request_cancel("j1"),
            lambda: pg_store.finish_job(
                "j1", "cancelled", exit_code=None, result=None, error=None, session_id=None, model=None
            ),
        ]
        for step in steps:
            assert not sub.pending()
            step()
            assert await woken(sub)
        assert not await other.wait(QUIET_S)  # another job's subscription heard nothing


async def test_a_queued_job_wakes_whoever_waits_on_the_queue(changes: PgChanges, pg_store: PgStore) -> None:
    with changes.subscribe(channel=QUEUE_CHANNEL) as queue:
        pg_store.insert_job("q1", "codex", "cli", {"prompt": "p"}, None, None)
        assert await woken(queue)
        pg_store.finish_job("q1", "completed", exit_code=0, result=None, error=None, session_id=None, model=None)
        assert not await queue.wait(QUIET_S)  # an end is not a new queued job


async def test_a_wait_for_any_change_ends_when_one_comes_and_after_its_timeout_otherwise(
    changes: PgChanges, pg_store: PgStore
) -> None:
    assert not await changes.wait(QUIET_S)
    async with anyio.create_task_group() as tg:
        got: list[bool] = []

        async def waiter() -> None:
            got.append(await changes.wait(PROMPT_S * 2))

        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        pg_store.insert_job("w1", "claude", "cli", {"prompt": "p"}, None, "/w")
    assert got == [True]


async def test_the_listener_reconnects_after_postgresql_restarts_and_hears_changes_again(
    changes: PgChanges, pg_store: PgStore, pg_cluster: Cluster
) -> None:
    assert changes.connections == 1
    with changes.subscribe() as everything:
        await anyio.to_thread.run_sync(pg_cluster.restart)
        with anyio.fail_after(RESTART_S):
            # Each drop and each reconnect wakes every subscriber (what happened meanwhile was not announced).
            while changes.connections < 2:
                await everything.wait(RESTART_S)
            assert await changes.ready()
    with changes.subscribe("after") as sub:
        with anyio.fail_after(POOL_WAIT_S):
            await anyio.to_thread.run_sync(
                lambda: pg_store.insert_job("after", "claude", "cli", {"prompt": "p"}, None, "/w")
            )
        assert await woken(sub)
    assert changes.last_error is None


async def test_a_lease_renewal_announces_nothing_and_a_cancel_request_does(
    changes: PgChanges, pg_store: PgStore
) -> None:
    pg_store.register_worker(WORKER)
    with changes.subscribe("j1") as sub:
        pg_store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w")
        assert pg_store.claim(WORKER, free=1, max_total=4, per_agent=lambda _: 4) == [("j1", "claude", 1)]
        assert await woken(sub)
        while await sub.wait(QUIET_S):  # the insert's and the claim's notices may come one by one
            pass
        assert pg_store.heartbeat(WORKER.id, 60)
        assert not await sub.wait(QUIET_S)
        pg_store.request_cancel("j1")
        assert await woken(sub)
