"""The job store's API, the same on both backends: a SQLite file on disk and a throwaway PostgreSQL."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from relay.errors import ErrorCode, RelayError
from relay.events import Event
from relay.store import JobStore, SessionTurn, open_store
from relay.store.migrations import MIGRATIONS
from relay.store.outputs import CHUNK_BYTES
from tests.store.conftest import BACKENDS, target_of

# The migrations of the queue's tables and of the threads: both backends have them, under the same names.
QUEUE_MIGRATIONS = [
    "m001_jobs",
    "m002_events",
    "m003_sessions",
    "m004_threads",
    "m008_indexes",
    "m012_audit_mark",
    "m014_principals",
    "m015_claims",
    "m016_outputs",
    "m017_jobs_worker_index",
]


def finish(store: JobStore, job_id: str, status: str = "completed", **kw: object) -> bool:
    args: dict[str, object] = {"exit_code": 0, "result": None, "error": None, "session_id": None, "model": None}
    return store.finish_job(job_id, status, **(args | kw))  # type: ignore[arg-type]


def test_both_backends_record_the_queue_migrations_under_sqlites_names(store: JobStore) -> None:
    applied = store.applied_migrations()
    assert set(QUEUE_MIGRATIONS) <= set(applied) <= {name for name, _ in MIGRATIONS}
    assert applied == sorted(applied)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reopening_a_store_applies_no_migration_twice(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, relay_home: Path
) -> None:
    target = target_of(backend, request, tmp_path)
    first = open_store(target, home=relay_home)
    first.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w")
    applied = first.applied_migrations()
    first.close()
    again = open_store(target, home=relay_home)
    assert again.applied_migrations() == applied
    assert again.get_job("j1") is not None
    again.close()


def test_a_job_goes_from_queued_to_running_to_finished_once_only(store: JobStore) -> None:
    store.insert_job("j1", "claude", "cli", {"prompt": "p", "session_id": "s0"}, "m0", "/w", owner=(11, 22))
    queued = store.get_job("j1")
    assert queued is not None and queued.status == "queued" and queued.session_id == "s0"
    assert (queued.owner_pid, queued.owner_start_ticks, queued.cancel_requested) == (11, 22, False)
    store.mark_running(
        "j1",
        pid=123,
        pid_start_ticks=2**40,
        boot_id="boot",
        owner_pid=11,
        owner_start_ticks=22,
        deadline_at=time.time() + 60,
        idle_timeout_s=30.0,
    )
    running = store.get_job("j1")
    assert running is not None and running.status == "running" and running.pid == 123
    assert running.pid_start_ticks == 2**40 and running.boot_id == "boot" and running.idle_timeout_s == 30.0
    assert running.started_at is not None and running.started_at >= queued.created_at
    turn = SessionTurn("claude", "s1", "/w", "m1", "edit", "title", 0.25)
    assert finish(store, "j1", exit_code=0, result={"usage": {"input": 1}}, session_id="s1", model="m1", session=turn)
    assert not finish(store, "j1", "failed", exit_code=1)
    done = store.get_job("j1")
    assert done is not None and done.is_final and done.status == "completed" and done.exit_code == 0
    assert (done.session_id, done.model, done.result) == ("s1", "m1", {"usage": {"input": 1}})
    session = store.get_session("s1", "claude")
    assert session is not None and (session.turns, session.total_cost_usd, session.cwd) == (1, 0.25, "/w")
    events = [json.loads(line)["event"] for line in store.audit.path.read_text().splitlines()]
    assert events == ["queued", "running", "completed"]


def test_an_error_and_a_cancel_request_and_a_stop_reason_are_kept(store: JobStore) -> None:
    store.insert_job("j1", "codex", "cli", {"prompt": "p"}, None, None)
    store.request_cancel("j1")
    store.set_stop_reason("j1", "cancelled")
    store.set_stop_reason("j1", "timed_out")  # the first reason stays
    store.set_session("j1", "sess")
    error = {"code": "CANCELLED", "message": "stopped", "hint": ""}
    assert finish(store, "j1", "cancelled", exit_code=None, error=error)
    job = store.get_job("j1")
    assert job is not None and job.cancel_requested and job.stop_reason == "cancelled"
    assert (job.session_id, job.error) == ("sess", error)


def test_jobs_are_listed_newest_first_filtered_and_paged(store: JobStore) -> None:
    for i in range(6):
        agent = "claude" if i % 2 else "codex"
        via = "core/delegate" if i < 3 else "powerspawn/spawn_codex"
        store.insert_job(f"job{i}", agent, "cli", {"prompt": str(i), "via": via}, None, "/w", principal=f"p{i % 3}")
        if i == 4:
            finish(store, f"job{i}")
    ids = [r.id for r in store.list_jobs()]
    assert ids == [f"job{i}" for i in reversed(range(6))]
    assert [r.id for r in store.list_jobs(statuses=("completed",))] == ["job4"]
    assert [r.id for r in store.list_jobs(agent="codex", statuses=("queued", "running"))] == ["job2", "job0"]
    assert [r.id for r in store.list_jobs(via="powerspawn/")] == ["job5", "job4", "job3"]
    assert [r.id for r in store.list_jobs(principal="p1")] == ["job4", "job1"]
    first = store.list_jobs(limit=4)
    rest = store.list_jobs(limit=4, before=(first[-1].created_at, first[-1].id))
    assert [r.id for r in first + rest] == ids
    assert store.list_jobs(since=time.time() + 60) == []
    assert [r.id for r in store.find_jobs("job")] == [f"job{i}" for i in range(5)]
    assert [r.id for r in store.find_jobs("job", principal="p2")] == ["job2", "job5"]
    assert store.get_job("job1", principal="p0") is None


def test_a_request_and_a_result_keep_every_character(store: JobStore) -> None:
    prompt = 'naïve ☃ \U0001f600 \u0000 quote" backslash\\ ' + "x" * 300_000
    store.insert_job("j1", "claude", "cli", {"prompt": prompt}, None, "/w")
    assert finish(store, "j1", result={"text": prompt})
    job = store.get_job("j1")
    assert job is not None and job.request["prompt"] == prompt and job.result == {"text": prompt}


def test_events_are_stored_in_order_deduplicated_by_sequence_and_name_the_session(store: JobStore) -> None:
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w")
    assert store.max_event_seq("j1") == -1
    store.add_events("j1", 0, [Event("message", {"text": "a"}), Event("message", {"text": "b"})])
    store.add_events("j1", 1, [Event("message", {"text": "B"}), Event("tool", {"n": 3})], session_id="s9")
    got = store.events("j1")
    assert [(s, e.type, e.data) for s, _, e in got] == [
        (0, "message", {"text": "a"}),
        (1, "message", {"text": "b"}),
        (2, "tool", {"n": 3}),
    ]
    assert [s for s, _, _ in store.events("j1", after_seq=0, limit=1)] == [1]
    assert store.max_event_seq("j1") == 2
    job = store.get_job("j1")
    assert job is not None and job.session_id == "s9"


def test_sessions_accumulate_turns_and_cost_and_list_last_used_first(store: JobStore) -> None:
    for _ in range(2):
        store.upsert_session("claude", "s1", cwd="/w", model="m", permission="edit", title="t", cost=0.5)
    store.upsert_session("codex", "s2", cwd="/v", model=None, permission="read-only", title="u", cost=0)
    session = store.get_session("s1", "claude")
    assert session is not None and (session.turns, session.total_cost_usd, session.model) == (2, 1.0, "m")
    assert [s.session_id for s in store.list_sessions()] == ["s2", "s1"]
    assert [s.session_id for s in store.list_sessions(agent="claude")] == ["s1"]
    assert store.get_session("s1", "codex") is None
    assert store.get_session("s1", principal="alice") is None
    assert store.list_sessions(principal="alice") == []


def test_an_output_stream_is_appended_in_chunks_and_read_back_in_pages(store: JobStore) -> None:
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w")
    first = bytes(range(256)) * (CHUNK_BYTES // 256) + b"tail"  # one chunk and four bytes
    assert store.append_output("j1", "stdout", first) == len(first)
    assert store.append_output("j1", "stdout", b"more") == len(first) + 4
    whole = first + b"more"
    assert store.read_output_page("j1", "stdout", 0, 10) == (whole[:10], len(whole))
    # a page across the boundary of two chunks, and across two appends
    at = CHUNK_BYTES - 5
    assert store.read_output_page("j1", "stdout", at, 12) == (whole[at : at + 12], len(whole))
    assert store.read_output_page("j1", "stdout", len(whole) - 3, 100) == (b"ore", len(whole))
    assert store.read_output_page("j1", "stdout", len(whole), 100) == (b"", len(whole))
    assert store.read_output_page("j1", "stdout", 0, 0) == (b"", len(whole))
    assert store.read_output_page("j1", "stderr", 0, 100) == (b"", 0)
    store.append_output("j1", "result", b"{}")
    assert store.read_output_page("j1", "result", 0, 100) == (b"{}", 2)
    assert store.output_sizes("j1") == {"stdout": len(whole), "stderr": 0, "transcript": 0, "result": 2}


def test_an_unknown_output_stream_or_a_negative_offset_is_refused_with_a_hint(store: JobStore) -> None:
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w")
    with pytest.raises(RelayError) as unknown:
        store.append_output("j1", "stdin", b"x")
    assert unknown.value.code is ErrorCode.INVALID_ARGUMENT and "stdout" in unknown.value.hint
    with pytest.raises(RelayError) as negative:
        store.read_output_page("j1", "stdout", -1, 10)
    assert negative.value.code is ErrorCode.INVALID_ARGUMENT


def test_both_backends_give_the_same_answers_to_the_same_calls(pg_url: str, tmp_path: Path, relay_home: Path) -> None:
    """One scripted history, replayed on SQLite and on PostgreSQL: the records match field for field."""
    answers: list[object] = []
    for target in (tmp_path / "relay.db", pg_url):
        store = open_store(target, home=relay_home)
        store.insert_job("a1", "claude", "cli", {"prompt": "p", "via": "core/x"}, "m", "/w", principal="alice")
        store.insert_job("a2", "codex", "cli", {"prompt": "q"}, None, None, owner=(5, 6))
        store.add_events("a1", 0, [Event("message", {"text": "hi"})], session_id="s")
        store.mark_running(
            "a1",
            pid=9,
            pid_start_ticks=99,
            boot_id="b",
            owner_pid=5,
            owner_start_ticks=6,
            deadline_at=None,
            idle_timeout_s=None,
        )
        finish(store, "a1", error={"code": "X"}, session=SessionTurn("claude", "s", "/w", "m", "edit", "t", 0.5))
        jobs = [replace(r, created_at=0.0, started_at=None, finished_at=None) for r in store.list_jobs(principal=None)]
        sessions = [replace(s, created_at=0.0, last_used_at=0.0) for s in store.list_sessions()]
        events = [(s, e) for s, _, e in store.events("a1")]
        answers.append((jobs, sessions, events, store.read_output_page("a1", "stdout", 0, 10)))
        store.close()
    assert answers[0] == answers[1]
