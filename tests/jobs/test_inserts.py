"""Jobs submitted together on PostgreSQL are recorded together: one transaction and one claim for those that arrive
while another is in flight (jobs/inserts.py), the claim's slots held meanwhile, a refused value failing its own job
only, each job recorded as its own submitter's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs import inserts as inserts_module
from relay.jobs.engine import Engine, JobRequest
from relay.principal import Principal, acting_as
from relay.store import NewJob, open_store
from relay.store.claims import ClaimAsk
from relay.store.pg import PgStore
from tests.conftest import RECORDINGS, SettingsFactory
from tests.jobs.fakeproc import FakeProcess, Spawner

pytestmark = pytest.mark.anyio

TEXT_RUN = (RECORDINGS / "claude_stream_text.ndjson").read_text()


class HeldInserts:
    """The store's `insert_jobs`, recorded (how many jobs each transaction held); the first one sent from a thread
    (a flight of jobs/inserts.py) waits for `release`, so the jobs submitted meanwhile are all waiting for the next."""

    def __init__(self, store: PgStore, refuse: Callable[[NewJob], bool] = lambda _: False) -> None:
        self.sizes: list[int] = []
        self.blocked = threading.Event()  # the held flight is waiting
        self.release = threading.Event()
        self._held = False
        self._real = store.insert_jobs
        self._refuse = refuse
        store.insert_jobs = self  # type: ignore[method-assign]

    def __call__(self, jobs: Sequence[NewJob], claim: ClaimAsk | None) -> list[tuple[str, str, int]]:
        if threading.current_thread() is not threading.main_thread() and not self._held:
            self._held = True
            self.blocked.set()
            assert self.release.wait(30)
        self.sizes.append(len(jobs))
        if any(self._refuse(job) for job in jobs):
            raise RelayError(ErrorCode.INVALID_ARGUMENT, "the server refused a value", "change it")
        return self._real(jobs, claim)


@pytest.fixture
def together(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Submissions a test makes at once are "together" however slow the machine is today.
    monkeypatch.setattr(inserts_module, "TOGETHER_S", 60.0)
    yield


def request(workdir: Path, prompt: str) -> JobRequest:
    return JobRequest(agent="claude", prompt=prompt, cwd=str(workdir))


def pg_store(make_settings: SettingsFactory, pg_url: str) -> tuple[Settings, PgStore]:
    """Settings of eight slots on the PostgreSQL store at `pg_url`, and that store."""
    settings = make_settings(RELAY_STORE=pg_url, RELAY_MAX_CONCURRENT="8")
    store = open_store(settings.store_target, home=settings.home)
    assert isinstance(store, PgStore)
    return settings, store


def finish(procs: Sequence[FakeProcess]) -> None:
    for proc in procs:
        proc.write(TEXT_RUN)
        proc.exit(0)


async def submit_together(
    engine: Engine,
    held: HeldInserts,
    requests: list[tuple[JobRequest, Principal | None]],
    meanwhile: Callable[[], None] = lambda: None,
) -> list[str | RelayError]:
    """Submit every request at once; the first flight is released once all the others wait behind it (and
    `meanwhile` ran, on the loop)."""
    out: list[str | RelayError] = ["" for _ in requests]

    async def one(index: int, req: JobRequest, who: Principal | None) -> None:
        try:
            if who is None:
                out[index] = await engine.submit_confirmed(req)
            else:
                with acting_as(who):
                    out[index] = await engine.submit_confirmed(req)
        except RelayError as err:
            out[index] = err

    async with anyio.create_task_group() as tg:
        for index, (req, who) in enumerate(requests):
            tg.start_soon(one, index, req, who)
            await anyio.lowlevel.checkpoint()

        def waiting() -> int:
            return len(engine._queueing._inserts._waiting)  # pyright: ignore[reportPrivateUsage]

        with anyio.fail_after(10):
            while waiting() < len(requests) - 2 or not held.blocked.is_set():  # the first alone, the second held
                await anyio.sleep(0.01)
        meanwhile()
        held.release.set()
    return out


async def test_jobs_submitted_while_a_transaction_is_in_flight_go_together_in_the_next_and_all_run(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, together: None
) -> None:
    settings, store = pg_store(make_settings, pg_url)
    held, spawner = HeldInserts(store), Spawner()
    async with Engine(settings, spawn=spawner, store=store).running() as engine:  # type: ignore[arg-type]
        ids = await submit_together(engine, held, [(request(workdir, f"p{i}"), None) for i in range(4)])
        assert held.sizes == [1, 1, 2]  # the first on the loop, the second in flight, the two behind it together
        procs = await spawner.wait_for(4)
        finish(procs)
        with anyio.fail_after(10):
            records = await engine.wait([str(i) for i in ids], "all", 10)
    assert [r.status for r in records] == ["completed"] * 4 and len(spawner.procs) == 4
    assert {r.worker for r in records} == {engine.worker.id}
    store.close()


async def test_the_slots_a_claim_in_flight_may_fill_are_not_claimed_twice(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, relay_home: Path, together: None
) -> None:
    # A worker of two slots (of ten in all): the first job takes one, the second's claim is in flight for the other.
    # Meanwhile another front queues two jobs and a job's end (a pump) looks for work: the slot in flight is not free,
    # so only the flight's claim fills it (with the oldest queued job), and two processes run, not three.
    settings = replace(make_settings(RELAY_STORE=pg_url, RELAY_MAX_CONCURRENT="10"), worker_slots=2)
    store, other = open_store(settings.store_target, home=settings.home), open_store(pg_url, home=relay_home)
    assert isinstance(store, PgStore)
    held, spawner = HeldInserts(store), Spawner()
    front_settings = make_settings(RELAY_STORE=pg_url, RELAY_RUN_JOBS="0")
    async with (
        Engine(settings, spawn=spawner, store=store).running() as engine,  # type: ignore[arg-type]
        Engine(front_settings, spawn=spawner, store=other).running() as front,  # type: ignore[arg-type]
    ):

        def meanwhile() -> None:
            for prompt in ("a", "b"):
                front.submit(request(workdir, prompt))
            engine._lifecycle.pump()  # pyright: ignore[reportPrivateUsage]

        await submit_together(engine, held, [(request(workdir, f"p{i}"), None) for i in range(2)], meanwhile)
        procs = await spawner.wait_for(2)
        await anyio.sleep(0.5)  # time enough for a slot claimed twice to start a third process
        assert len(spawner.procs) == 2 and engine.running_count() == 2
        assert spawner.running("p0") in procs and spawner.running("a") in procs
        finish(procs)
        with anyio.fail_after(10):
            while len(spawner.procs) < 4:  # then the other two, in the freed slots
                await anyio.sleep(0.05)
        finish(spawner.procs[2:])
    other.close()
    store.close()


async def test_a_value_the_server_refuses_fails_its_own_job_and_the_others_of_its_transaction_run(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, together: None
) -> None:
    settings, store = pg_store(make_settings, pg_url)
    held, spawner = HeldInserts(store, refuse=lambda job: job.request.get("prompt") == "refused"), Spawner()
    prompts = ["p0", "p1", "refused", "p3"]
    async with Engine(settings, spawn=spawner, store=store).running() as engine:  # type: ignore[arg-type]
        out = await submit_together(engine, held, [(request(workdir, p), None) for p in prompts])
        refused = out[2]
        assert isinstance(refused, RelayError) and refused.code is ErrorCode.INVALID_ARGUMENT
        assert held.sizes == [1, 1, 2, 1, 1]  # the two together, refused, then each alone
        ids = [str(i) for i in out if not isinstance(i, RelayError)]
        procs = await spawner.wait_for(3)
        finish(procs)
        with anyio.fail_after(10):
            records = await engine.wait(ids, "all", 10)
        assert [r.status for r in records] == ["completed"] * 3
        assert len(store.find_jobs("")) == 3  # the refused one left no row
    store.close()


async def test_each_job_of_a_transaction_is_recorded_as_its_own_submitters(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, together: None
) -> None:
    settings, store = pg_store(make_settings, pg_url)
    held, spawner = HeldInserts(store), Spawner()
    people = [Principal("alice"), Principal("bob"), Principal("carol"), Principal("alice")]
    async with Engine(settings, spawn=spawner, store=store).running() as engine:  # type: ignore[arg-type]
        out = await submit_together(engine, held, [(request(workdir, f"p{i}"), p) for i, p in enumerate(people)])
        assert held.sizes == [1, 1, 2]
        owners: list[Any] = []
        for job_id, who in zip(out, people, strict=True):
            rec = store.get_job(str(job_id))
            assert rec is not None
            owners.append(rec.principal)
            assert store.get_job(str(job_id), principal=who.name) is not None
        assert owners == [p.name for p in people]
        finish(await spawner.wait_for(4))
    store.close()


async def test_a_job_submitted_while_the_last_ones_insert_held_the_loop_goes_with_the_next_not_alone(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first job of a burst is inserted on the loop; the calls behind it reach the loop only once that round
    # trip is answered, however long it took: they are together with it, not each alone on the loop in turn.
    monkeypatch.setattr(inserts_module, "TOGETHER_S", 0.05)
    settings, store = pg_store(make_settings, pg_url)
    real, on_loop = store.insert_jobs, list[bool]()

    def slow_first(jobs: Sequence[NewJob], claim: ClaimAsk | None) -> list[tuple[str, str, int]]:
        on_loop.append(threading.current_thread() is threading.main_thread())
        if len(on_loop) == 1:
            threading.Event().wait(0.2)  # a slow server: the loop is held past TOGETHER_S
        return real(jobs, claim)

    store.insert_jobs = slow_first  # type: ignore[method-assign]
    spawner = Spawner()
    async with Engine(settings, spawn=spawner, store=store).running() as engine:  # type: ignore[arg-type]
        ids: list[str] = []

        async def submit(prompt: str) -> None:
            ids.append(await engine.submit_confirmed(request(workdir, prompt)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(submit, "first")
            await anyio.lowlevel.checkpoint()
            tg.start_soon(submit, "second")
        assert on_loop == [True, False]  # the second went to a thread, the loop free meanwhile
        finish(await spawner.wait_for(2))
        with anyio.fail_after(10):
            records = await engine.wait(ids, "all", 10)
    assert [r.status for r in records] == ["completed"] * 2
    store.close()
