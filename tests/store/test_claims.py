"""Claims, the same on both backends: leases with a fencing epoch, workers, limits that hold under concurrent claimers."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from relay.events import Event
from relay.store import JobStore, WorkerInfo, open_store
from relay.store.pg.store import PgStore
from tests.store.conftest import BACKENDS, target_of


def worker(name: str, *, agents: tuple[str, ...] | None = None, labels: tuple[str, ...] = ()) -> WorkerInfo:
    return WorkerInfo(f"{name}/1", name, "host-a", 100, 7, "boot-a", agents, labels, 4, 15.0)


W = worker("w")


def limits(**per: int) -> dict[str, object]:
    return {"max_total": per.pop("total", 10), "per_agent": lambda agent: per.get(agent, 10)}


def queue(store: JobStore, *jobs: tuple[str, str], labels: tuple[str, ...] = ()) -> None:
    for job_id, agent in jobs:
        store.insert_job(job_id, agent, "cli", {"prompt": job_id}, None, "/w", labels=labels)


def end(store: JobStore, job_id: str, epoch: int | None) -> bool:
    return store.finish_job(
        job_id, "completed", exit_code=0, result=None, error=None, session_id=None, model=None, epoch=epoch
    )


def test_a_claim_takes_the_oldest_jobs_its_worker_can_run_within_every_limit(store: JobStore) -> None:
    queue(store, ("a1", "claude"), ("a2", "codex"))
    queue(store, ("a3", "claude"), labels=("gpu",))
    queue(store, ("a4", "claude"), ("a5", "gemini"))
    store.insert_job("t1", "anthropic:x", "task", {"prompt": "p"}, None, None)  # an in-process task: never claimed
    won = store.claim(W, free=10, **limits(claude=1))  # type: ignore[arg-type]
    assert won == [("a1", "claude", 1), ("a2", "codex", 1), ("a5", "gemini", 1)]
    a1 = store.get_job("a1")
    assert a1 is not None and (a1.worker, a1.epoch, a1.owner_pid, a1.owner_start_ticks) == ("w/1", 1, 100, 7)
    gpu = worker("gpu", agents=("claude",), labels=("gpu",))
    assert store.claim(gpu, free=4, **limits(claude=1)) == []  # type: ignore[arg-type]
    assert end(store, "a1", 1)
    assert store.claim(gpu, free=4, **limits(claude=1)) == [("a3", "claude", 1)]  # type: ignore[arg-type]
    assert store.claim(W, free=4, **limits(total=4)) == [("a4", "claude", 1)]  # type: ignore[arg-type]
    assert store.claim(W, free=4, **limits(total=4)) == []  # type: ignore[arg-type]
    assert not store.has_queued()


def test_a_claim_can_be_narrowed_to_given_jobs_and_never_takes_more_than_its_free_slots(store: JobStore) -> None:
    queue(store, *[(f"j{i}", "claude") for i in range(5)])
    assert store.claim(W, free=1, **limits(), only=["j3", "j4"]) == [("j3", "claude", 1)]  # type: ignore[arg-type]
    assert [j for j, _, _ in store.claim(W, free=2, **limits())] == ["j0", "j1"]  # type: ignore[arg-type]
    assert store.claim(W, free=0, **limits()) == []  # type: ignore[arg-type]


def test_a_write_under_an_epoch_that_was_taken_over_is_refused(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    other = worker("other")
    assert store.take_over("j", epoch, other) == epoch + 1
    assert store.take_over("j", epoch, other) is None  # the old epoch: someone already took it
    running = dict(pid=1, pid_start_ticks=None, boot_id=None, owner_pid=1, owner_start_ticks=None)
    assert not store.mark_running("j", **running, deadline_at=None, idle_timeout_s=None, epoch=epoch)  # type: ignore[arg-type]
    assert not store.add_events("j", 0, [Event("message", {"text": "late"})], epoch=epoch)
    assert store.events("j") == []
    assert not end(store, "j", epoch)
    assert store.mark_running("j", **running, deadline_at=None, idle_timeout_s=None, epoch=epoch + 1)  # type: ignore[arg-type]
    assert store.add_events("j", 0, [Event("message", {"text": "mine"})], epoch=epoch + 1)
    assert end(store, "j", epoch + 1)
    job = store.get_job("j")
    assert job is not None and job.status == "completed" and job.worker == "other/1"


def test_a_fenced_end_closes_the_claim_so_nothing_of_the_lost_worker_is_taken_later(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    assert store.finish_job(
        "j", "interrupted", exit_code=None, result=None, error={"code": "INTERRUPTED"}, session_id=None, model=None,
        epoch=epoch, fence=True,
    )  # fmt: skip
    assert store.claim_states(["j", "nope"]) == {"j": ("w/1", epoch + 1, "interrupted", False)}
    assert not store.add_events("j", 0, [Event("message", {"text": "late"})], epoch=epoch)


def test_a_claim_handed_back_is_queued_again_for_any_worker_under_a_new_epoch(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    assert not store.has_queued()
    assert store.unclaim("j", epoch)
    assert not store.unclaim("j", epoch)  # stale
    job = store.get_job("j")
    assert job is not None and (job.status, job.worker, job.epoch) == ("queued", None, epoch + 1)
    assert store.has_queued()
    [(_, _, again)] = store.claim(worker("b"), free=1, **limits())  # type: ignore[arg-type]
    running = dict(pid=1, pid_start_ticks=None, boot_id=None, owner_pid=1, owner_start_ticks=None)
    assert store.mark_running("j", **running, deadline_at=None, idle_timeout_s=None, epoch=again)  # type: ignore[arg-type]
    assert not store.unclaim("j", again)  # running: handed back only when it asked to be retried
    assert store.add_events("j", 0, [Event("text", {"text": "lost run"})], epoch=again)
    store.append_output("j", "stdout", b"lost run\n")
    assert store.unclaim("j", again, requeue_running=True)
    job = store.get_job("j")
    assert job is not None and (job.status, job.pid, job.started_at) == ("queued", None, None)
    # The run starts over: nothing of the lost one is mixed into the next one's events and output.
    assert store.max_event_seq("j") == -1
    assert store.output_sizes("j") == {"stdout": 0, "stderr": 0, "transcript": 0, "result": 0}


def test_leases_run_out_unless_the_worker_beats(store: JobStore) -> None:
    store.register_worker(W)
    queue(store, ("j1", "claude"), ("j2", "codex"))
    store.insert_job("r", "claude", "cli", {"prompt": "r"}, None, "/w", retry="on_lost_worker")
    won = store.claim(W, free=3, **limits())  # type: ignore[arg-type]
    soon, later = time.time() + W.lease_s + 1, time.time() + 1000
    expected = [(j, "w/1", e, "queued", "on_lost_worker" if j == "r" else None) for j, _, e in won]
    assert sorted(store.expired_leases(soon)) == sorted(expected) and len(expected) == 3
    assert store.expired_leases() == []
    assert store.heartbeat("w/1", 2000)
    assert store.expired_leases(later) == []
    assert not store.heartbeat("nobody/1", 10)


def test_workers_are_listed_with_the_jobs_they_hold_and_what_they_ran(store: JobStore) -> None:
    store.register_worker(W)
    store.register_worker(worker("g", agents=("claude",), labels=("gpu",)))
    queue(store, ("j1", "claude"), ("j2", "codex"))
    store.claim(W, free=2, **limits())  # type: ignore[arg-type]
    end(store, "j1", 1)
    w = store.get_worker("w/1")
    assert w is not None and (w.running, w.ran, w.state, w.agents, w.labels) == (1, 2, "running", None, [])
    g = store.get_worker("g/1")
    assert g is not None and (g.agents, g.labels, g.slots, g.lease_s) == (["claude"], ["gpu"], 4, 15.0)
    store.stop_worker("g/1", "stopped")
    assert [x.id for x in store.list_workers(include_stopped=False)] == ["w/1"]
    stopped = store.get_worker("g/1")
    assert stopped is not None and stopped.state == "stopped" and stopped.stopped_at is not None
    store.register_worker(worker("g"))  # the same id again: running anew
    again = store.get_worker("g/1")
    assert again is not None and (again.state, again.stopped_at, again.ran) == ("running", None, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_queue_version_changes_when_another_process_commits(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, relay_home: Path
) -> None:
    target = target_of(backend, request, tmp_path)
    mine, theirs = open_store(target, home=relay_home), open_store(target, home=relay_home)
    before = mine.queue_version()
    theirs.insert_job("j", "claude", "cli", {"prompt": "p"}, None, "/w")
    wait = getattr(mine, "wait_queue_change", None)  # PostgreSQL: the notice arrives on its own connection
    if wait is not None:
        assert wait(before, 10)
    assert mine.queue_version() != before
    mine.close()
    theirs.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_processs_own_writes_leave_its_queue_version_as_it_is(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, relay_home: Path
) -> None:
    """As SQLite's data_version: the engine's watch looks at what other processes wrote, not at its own."""
    store = open_store(target_of(backend, request, tmp_path), home=relay_home)
    before = store.queue_version()
    every: int = getattr(store, "change_version", lambda: 0)()
    store.insert_job("j", "claude", "cli", {"prompt": "p"}, None, "/w")
    store.append_output("j", "stdout", b"out")
    wait_all = getattr(store, "wait_change", None)  # PostgreSQL: the notices of those writes did arrive
    if wait_all is not None:
        assert wait_all(every, 10)
    assert store.queue_version() == before
    store.close()


# Concurrent claimers: the limits of this test, and how many jobs go through.
MAX_TOTAL, PER_AGENT, RACE_JOBS, CLAIMERS = 3, {"claude": 1, "codex": 2}, 120, 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_claimers_never_hold_more_than_the_limits_and_never_claim_a_job_twice(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, relay_home: Path
) -> None:
    target = target_of(backend, request, tmp_path)
    setup = open_store(target, home=relay_home)
    agents = ["claude", "codex", "gemini"]
    queue(setup, *[(f"job{i:04d}", agents[i % 3]) for i in range(RACE_JOBS)])
    stores = [open_store(target, home=relay_home) for _ in range(CLAIMERS)]
    claimed: Counter[str] = Counter()
    ended: Counter[str] = Counter()
    seen: list[tuple[int, dict[str, int]]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def per_agent(agent: str) -> int:
        return PER_AGENT.get(agent, MAX_TOTAL)

    def held(store: JobStore) -> tuple[int, dict[str, int]]:
        jobs = store.list_jobs(statuses=("queued", "running"), limit=RACE_JOBS)
        counts = Counter(j.agent for j in jobs if j.worker is not None)
        return sum(counts.values()), dict(counts)

    def claimer(n: int) -> None:
        store = stores[n]
        me = worker(f"c{n}")
        mine: list[tuple[str, int]] = []
        try:
            while not done.is_set():
                won = store.claim(me, free=2, max_total=MAX_TOTAL, per_agent=per_agent)
                claimed.update(j for j, _, _ in won)
                seen.append(held(store))
                for job_id, epoch in mine:  # the jobs held since the last turn end now
                    if end(store, job_id, epoch):
                        ended[job_id] += 1
                mine = [(j, e) for j, _, e in won]
                if not mine and not store.has_queued():
                    break
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(CLAIMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for s in (setup, *stores):
        s.close()
    assert errors == []
    assert all(total <= MAX_TOTAL for total, _ in seen), max(seen)
    assert all(counts.get(a, 0) <= cap for _, counts in seen for a, cap in PER_AGENT.items())
    assert max(total for total, _ in seen) == MAX_TOTAL  # the limit was reached, so it was tested
    assert set(claimed.values()) == {1} and len(claimed) == RACE_JOBS
    assert set(ended.values()) == {1} and len(ended) == RACE_JOBS


def test_a_job_behind_many_of_an_agent_at_its_limit_is_still_claimed(store: JobStore) -> None:
    queue(store, *[(f"c{i:03d}", "claude") for i in range(60)], ("x", "codex"))
    assert store.claim(W, free=1, **limits(claude=1)) == [("c000", "claude", 1)]  # type: ignore[arg-type]
    assert store.claim(W, free=1, **limits(claude=1)) == [("x", "codex", 1)]  # type: ignore[arg-type]


def test_a_claimed_job_cancelled_before_its_spawn_is_never_marked_running_again(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    assert store.finish_job(
        "j", "cancelled", exit_code=None, result=None, error={"code": "CANCELLED"}, session_id=None, model=None
    )
    running = dict(pid=1, pid_start_ticks=None, boot_id=None, owner_pid=1, owner_start_ticks=None)
    assert not store.mark_running("j", **running, deadline_at=None, idle_timeout_s=None, epoch=epoch)  # type: ignore[arg-type]
    job = store.get_job("j")
    assert job is not None and job.status == "cancelled" and job.started_at is None


def registered_at(store: JobStore, info: WorkerInfo, when: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Register `info` as if at `when` (its last heartbeat then). PostgreSQL stamps it with its own clock: the row
    is set back by hand there."""
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: when)
        store.register_worker(info)
    if isinstance(store, PgStore):
        store._exec("UPDATE workers SET started_at=?, heartbeat_at=? WHERE id=?", (when, when, info.id))  # pyright: ignore[reportPrivateUsage]


def test_workers_not_heard_from_for_the_retention_are_pruned_unless_an_active_job_names_them(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_ago, cut = time.time() - 30 * 86400, time.time() - 7 * 86400
    for name in ("stopped", "lost", "killed", "ended", "holding"):
        registered_at(store, worker(name), long_ago, monkeypatch)
    store.stop_worker("stopped/1", "stopped")
    store.stop_worker("lost/1", "lost")  # "killed/1" stays `running`: a process killed long ago
    queue(store, ("j1", "claude"), ("j2", "claude"))
    store.claim(worker("ended"), free=1, **limits())  # type: ignore[arg-type]
    assert end(store, "j1", 1)  # its job ended: nothing names it any more
    store.claim(worker("holding"), free=1, **limits())  # type: ignore[arg-type]
    store.stop_worker("holding/1", "lost")  # lost, but its claim on j2 is still active
    store.register_worker(worker("recent"))
    store.stop_worker("recent/1", "stopped")
    assert store.prune_workers(cut) == 4
    assert sorted(w.id for w in store.list_workers()) == ["holding/1", "recent/1"]
    assert store.prune_workers(cut) == 0
    done = store.get_job("j1")
    assert done is not None and done.worker == "ended/1"  # the job still names who ran it
    assert end(store, "j2", 1)
    assert store.prune_workers(cut) == 1
    assert [w.id for w in store.list_workers()] == ["recent/1"]


def test_a_hosts_active_jobs_are_its_workers_claims_unknown_workers_claims_and_running_jobs_of_no_worker(
    store: JobStore,
) -> None:
    here, far = worker("here"), WorkerInfo("far/1", "far", "host-b", 200, 8, "boot-b", None, (), 4, 15.0)
    nameless = WorkerInfo("nb/1", "nb", "host-c", 300, 9, None, None, (), 4, 15.0)
    ghost = WorkerInfo("ghost/1", "ghost", "host-a", 400, 1, "boot-a", None, (), 4, 15.0)  # never registered
    for info in (here, far, nameless):
        store.register_worker(info)
    claims = (("c1-here", here), ("c2-far", far), ("c3-nb", nameless), ("c4-ghost", ghost), ("c5-done", here))
    for job_id, by in claims:
        queue(store, (job_id, "claude"))
        assert store.claim(by, free=1, **limits(), only=[job_id]) != []  # type: ignore[arg-type]
    assert end(store, "c5-done", 1)
    queue(store, ("waiting", "claude"))
    store.insert_job("task", "anthropic:x", "task", {"prompt": "p"}, None, None, owner=(11, 22))
    running = dict(pid=None, pid_start_ticks=None, boot_id=None, owner_pid=11, owner_start_ticks=22)
    assert store.mark_running("task", **running, deadline_at=None, idle_timeout_s=None)  # type: ignore[arg-type]
    store.insert_job("queued-task", "anthropic:x", "task", {"prompt": "p"}, None, None, owner=(11, 22))
    # Newest first; never a job waiting for a claim, another host's claim or an ended job.
    assert [j.id for j in store.active_jobs_of_host("boot-a")] == ["task", "c4-ghost", "c1-here"]
    assert [j.id for j in store.active_jobs_of_host("boot-b")] == ["task", "c4-ghost", "c2-far"]
    assert [j.id for j in store.active_jobs_of_host(None)] == ["task", "c4-ghost", "c3-nb"]
