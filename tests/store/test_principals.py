"""Principals in the store: each row records who started it, and a `user` finds only its own rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.principal import LOCAL, Principal, acting_as
from relay.server.tasks_ext import TaskStore as McpTaskStore
from relay.store import Store
from relay.threads import NewTurn, new_thread_id
from relay.tracker import TaskChanges, TaskStore, resolve_project
from tests.conftest import SettingsFactory
from tests.store.conftest import BACKENDS, threads_of

ALICE = Principal("alice", "user")
BOB = Principal("bob", "user")
ROOT = Principal("root", "admin")


def test_jobs_are_found_by_id_prefix_and_list_only_for_the_principal_that_started_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.db")
    store.insert_job("abcd0001", "claude", "cli", {"prompt": "a"}, None, "/w", principal="alice")
    store.insert_job("abcd0002", "claude", "cli", {"prompt": "b"}, None, "/w", principal="bob")
    assert store.get_job("abcd0001", principal="bob") is None
    assert store.get_job("abcd0001", principal="alice") is not None
    # a prefix both share is one job for each of them, never ambiguous, never the other's
    assert [r.id for r in store.find_jobs("abcd", principal="alice")] == ["abcd0001"]
    assert [r.id for r in store.find_jobs("abcd", principal="bob")] == ["abcd0002"]
    assert [r.id for r in store.list_jobs(principal="bob")] == ["abcd0002"]
    assert sorted(r.id for r in store.list_jobs()) == ["abcd0001", "abcd0002"]
    assert store.get_job("abcd0002") is not None and store.get_job("abcd0002").principal == "bob"  # type: ignore[union-attr]
    entries = [json.loads(line) for line in store.audit.path.read_text().splitlines()]
    queued = [e for e in entries if e["event"] == "queued"]
    assert [(e["job_id"], e["data"]["principal"]) for e in queued] == [("abcd0001", "alice"), ("abcd0002", "bob")]


def test_rows_written_before_principals_existed_belong_to_the_local_user(tmp_path: Path) -> None:
    path = tmp_path / "relay.db"
    Store(path).close()
    with sqlite3.connect(path) as db:  # relay.db as it was before migration m014_principals
        db.execute("DELETE FROM migrations WHERE name='m014_principals'")
        db.execute("DROP INDEX jobs_principal_created_id")
        db.execute("DROP INDEX threads_principal_updated")
        for table in ("jobs", "mcp_tasks", "threads", "sessions"):
            db.execute(f"ALTER TABLE {table} DROP COLUMN principal")
        db.execute("ALTER TABLE tasks DROP COLUMN created_by")
        db.execute("ALTER TABLE tasks DROP COLUMN changed_by")
        db.execute(
            "INSERT INTO jobs (id, agent, status, request, created_at) VALUES ('old1', 'claude', 'completed', '{}', 1)"
        )
    store = Store(path)
    old = store.get_job("old1")
    assert old is not None and old.principal == "local"
    assert store.get_job("old1", principal="alice") is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_user_finds_only_its_own_threads_and_cannot_add_to_another(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    threads = threads_of(backend, request, tmp_path)
    theirs, mine = new_thread_id(), new_thread_id()
    with acting_as(ALICE):
        threads.add_turns(theirs, [NewTurn("user", "alice's secret")], tool="chat", title="alice")
    with acting_as(BOB):
        threads.add_turns(mine, [NewTurn("user", "bob's")], tool="chat", title="bob")
        assert threads.find(theirs) is None
        assert [t.id for t in threads.list()] == [mine]
        with pytest.raises(RelayError):
            threads.add_turns(theirs, [NewTurn("user", "sneaking in")], tool="chat")
    with acting_as(ROOT):
        assert sorted(t.id for t in threads.list()) == sorted([theirs, mine])
    with acting_as(ALICE):
        found = threads.find(theirs)
        assert found is not None and [t.content for t in found.turns] == ["alice's secret"]
    threads.close()


def test_an_mcp_task_id_answers_only_for_the_principal_that_created_the_task(tmp_path: Path) -> None:
    Store(tmp_path / "relay.db").close()  # migrations
    tasks = McpTaskStore(tmp_path / "relay.db")
    with acting_as(ALICE):
        tasks.add("task-a", "job-a", "delegate", "job", 1.0)
        assert tasks.get("task-a") is not None
    with acting_as(BOB):
        assert tasks.get("task-a") is None
    with acting_as(ROOT):
        assert tasks.get("task-a") is not None
    assert tasks.get("task-a") is not None  # the local user (stdio) is the machine's one user


def test_a_tracker_task_records_who_created_it_and_who_changed_it_last(tmp_path: Path, workdir: Path) -> None:
    tracker = TaskStore(tmp_path / "relay.db")
    project = resolve_project(workdir)
    with acting_as(ALICE):
        task = tracker.create(project, "fix the build")
    assert (task.created_by, task.changed_by) == ("alice", "alice")
    with acting_as(ROOT):  # an admin may change anyone's task (another user may not: tests/tracker)
        tracker.update(project, task.id, TaskChanges(priority=1))
    changed = tracker.get(project, task.id)
    assert (changed.created_by, changed.changed_by) == ("alice", "root")
    tracker.close_task(project, task.id)  # the local user (stdio, the dashboard)
    assert tracker.get(project, task.id).changed_by == "local"


def test_agent_sessions_list_only_for_the_principal_whose_jobs_started_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.db")
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w", principal="alice")
    rec = store.get_job("j1")
    assert rec is not None
    from relay.store import SessionTurn

    turn = SessionTurn("claude", "s-alice", "/w", None, "read-only", "alice's work", 0.0, principal="alice")
    store.finish_job(
        "j1", "completed", exit_code=0, result={}, error=None, session_id="s-alice", model=None, session=turn
    )
    assert [s.session_id for s in store.list_sessions(principal="alice")] == ["s-alice"]
    assert store.list_sessions(principal="bob") == []
    assert store.get_session("s-alice", principal="bob") is None


@pytest.mark.parametrize(
    ("table", "why"),
    [
        ('[server.tokens.alice]\ntoken = "short"', "too short"),
        ('[server.tokens.alice]\ntoken = "0123456789abcdef0123"\nrole = "owner"', "unknown role"),
        ('[server.tokens.local]\ntoken = "0123456789abcdef0123"', "the local user's name"),
        (
            '[server.tokens.a]\ntoken = "0123456789abcdef0123"\n[server.tokens.b]\ntoken = "0123456789abcdef0123"',
            "reused",
        ),
        ('[server.tokens.alice]\ntoken_env = "UNSET_VARIABLE"', "variable not set"),
    ],
)
def test_a_named_token_that_cannot_be_a_principal_is_refused_with_a_hint(tmp_path: Path, table: str, why: str) -> None:
    (tmp_path / "config.toml").write_text(table)
    with pytest.raises(RelayError) as err:
        load_settings({"RELAY_HOME": str(tmp_path)}, cwd=tmp_path)
    assert err.value.code is ErrorCode.CONFIG_INVALID and err.value.hint, why


def test_named_tokens_load_with_their_roles_and_user_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[server.tokens.alice]\ntoken_env = "ALICE"\n[server.tokens.root]\ntoken = "0123456789abcdef0123"\nrole = "admin"'
    )
    settings = load_settings({"RELAY_HOME": str(tmp_path), "ALICE": "a" * 20}, cwd=tmp_path)
    assert [(t.principal, t.token) for t in settings.tokens] == [
        (Principal("alice", "user"), "a" * 20),
        (Principal("root", "admin"), "0123456789abcdef0123"),
    ]
    assert LOCAL.is_admin and "0123456789abcdef0123" not in repr(settings.tokens)


def test_resuming_another_principals_agent_session_is_refused_as_not_found(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    import shutil

    from relay.jobs.request import JobRequest, check, resolve
    from relay.store import SessionTurn

    settings = make_settings()
    store = Store(settings.db_path)
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, str(workdir), principal="alice")
    turn = SessionTurn("claude", "s-alice", str(workdir), None, "read-only", "alice's", 0.0, principal="alice")
    store.finish_job(
        "j1", "completed", exit_code=0, result={}, error=None, session_id="s-alice", model=None, session=turn
    )
    req = JobRequest(agent="claude", prompt="go on", session_id="s-alice")
    with acting_as(BOB), pytest.raises(RelayError) as err:
        resolve(settings, store, shutil.which, req, check(settings, req))
    assert err.value.code is ErrorCode.SESSION_NOT_FOUND
    with acting_as(ALICE):
        assert resolve(settings, store, shutil.which, req, check(settings, req)).cwd == str(workdir)


@pytest.mark.anyio
async def test_a_named_token_in_a_prompt_is_redacted_from_the_job_record(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    from relay.jobs.engine import Engine, JobRequest

    token = "alice-secret-token-0123456789"
    settings = make_settings(f'[server.tokens.alice]\ntoken = "{token}"\n')
    async with Engine(settings).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt=f"use {token} please", cwd=str(workdir)))
        rec = await engine.wait_one(job_id, 30)
    assert token not in rec.request_json and "use " in rec.request["prompt"]
