"""Tracker tasks belong to the principal that created them: over real HTTP a `user` token sees, reads, changes,
links, closes and deletes only its own (another's id answers as an unknown one), an admin sees all; session links
show only to the principal that made them; the repository file holds no user token's task, and an import adopts
none for the caller."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.principal import LOCAL, Principal, acting_as
from relay.tracker import resolve_project
from relay.tracker.service import Tracker
from tests.conftest import SettingsFactory
from tests.reliability.conftest import free_port, wait_for
from tests.reliability.test_http_guardrails import listening, serving
from tests.server.test_principals import ALICE, BOB, ROOT, TOKENS, as_

pytestmark = pytest.mark.anyio

CANARY = "ALICE-SECRET-7f3a"
UNKNOWN = "gt-ffffff"


def _git_init(folder: Path) -> None:
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True, capture_output=True)


@pytest.fixture
async def port(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> AsyncIterator[int]:
    """A real `relay serve --http` with the tasks toolset, run in a git repository, with alice, bob and root."""
    _git_init(workdir)
    make_settings(TOKENS)
    chosen = free_port()
    with serving(relay_home, workdir, "--port", str(chosen), "--toolsets", "tasks"):
        await wait_for(lambda: listening(chosen), 30, step=0.05)
        yield chosen


async def call(client: Client, tool: str, **args: Any) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


def refusal(body: dict[str, Any], asked: str) -> tuple[str, str]:
    """An error's code and message with the id asked for taken out (another's id must read as an unknown one)."""
    error = body.get("error") or {}
    return error.get("code", ""), str(error.get("message", "")).replace(asked, "<id>")


async def test_a_user_token_reads_changes_and_deletes_only_its_own_tasks_and_another_s_id_is_not_found(
    port: int,
) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob, as_(port, ROOT) as root:
            _, made = await call(
                alice, "create_task", title=f"task {CANARY}", session_id="s-alice", description=CANARY, labels=["a"]
            )
            mine = made["id"]
            _, own = await call(bob, "create_task", title="bob's own", session_id="s-bob")
            before = (await call(alice, "get_task", task_id=mine))[1]

            for tool in ("list_tasks", "list_ready_tasks", "list_blocked_tasks"):
                _, listed = await call(bob, tool, limit=200)
                assert mine not in json.dumps(listed) and CANARY not in json.dumps(listed), tool
                assert [t["id"] for t in (listed.get("tasks") or [])] in ([own["id"]], []), tool

            _, unknown = await call(bob, "get_task", task_id=UNKNOWN)
            expected = refusal(unknown, UNKNOWN)
            assert expected[0] == "TASK_NOT_FOUND"
            probes: list[tuple[str, dict[str, Any]]] = [
                ("get_task", {}),
                ("update_task", {"title": "BOB", "status": "closed"}),
                ("close_task", {"reason": "wont_fix"}),
                ("delete_task", {"cascade": True}),
                ("add_label", {"label": "bob"}),
                ("remove_label", {"label": "a"}),
                ("get_dependency_tree", {}),
                ("get_task_sessions", {}),
                ("link_task_to_session", {"session_id": "s-bob"}),
            ]
            for asked in (mine, mine[:5]):
                for tool, extra in probes:
                    failed, body = await call(bob, tool, task_id=asked, **extra)
                    assert failed and refusal(body, asked) == expected, (tool, asked, body)
                    assert CANARY not in json.dumps(body), tool
            # dependencies on, parents of and blockers by another's task are refused as an unknown task is
            for tool, args in (
                ("add_dependency", {"task_id": own["id"], "depends_on": mine}),
                ("add_dependency", {"task_id": mine, "depends_on": own["id"]}),
                ("create_task", {"title": "x", "session_id": "s-bob", "parent_task_id": mine}),
                ("create_task", {"title": "x", "session_id": "s-bob", "blocks": [mine]}),
            ):
                failed, body = await call(bob, tool, **args)
                assert failed and refusal(body, mine) == expected, (tool, body)

            assert (await call(alice, "get_task", task_id=mine))[1] == before
            _, everyone = await call(root, "list_tasks", limit=200)
            assert {mine, own["id"]} <= {t["id"] for t in everyone["tasks"]}
            failed, seen = await call(root, "get_task", task_id=mine)
            assert not failed and seen["description"] == CANARY


async def test_a_task_linked_to_another_principals_session_id_stays_out_of_that_sessions_tasks(port: int) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob:
            _, made = await call(alice, "create_task", title="alice's", session_id="s-alice")
            _, his = await call(bob, "create_task", title="bob's, on her session", session_id="s-alice")
            await call(bob, "link_task_to_session", task_id=his["id"], session_id="s-alice", action="worked_on")
            _, hers = await call(alice, "get_session_tasks", session_id="s-alice")
            assert [t["id"] for t in hers["tasks"]] == [made["id"]]
            _, his_view = await call(bob, "get_session_tasks", session_id="s-alice")
            assert {t["id"] for t in his_view["tasks"]} == {his["id"]}


def test_a_user_linking_its_task_to_the_local_users_session_id_puts_nothing_into_that_sessions_tasks(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    tracker = Tracker(make_settings(TOKENS))
    try:
        project = resolve_project(workdir)
        with acting_as(LOCAL):
            ours = tracker.store.create(project, "the local user's", session_id="s-local")
        with acting_as(Principal("bob", "user")):
            his = tracker.store.create(project, "bob's", session_id="s-local")
            tracker.store.link_session(project, his.id, "s-local", "worked_on")
        # what a SessionEnd summary of the local user's session lists (relay/hooks/service.py)
        with acting_as(LOCAL):
            assert [t.id for t, _ in tracker.store.session_tasks(project, "s-local")] == [ours.id]
    finally:
        tracker.close()


async def test_the_repository_file_holds_no_user_tokens_task_and_names_an_admins(port: int, workdir: Path) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob, as_(port, ROOT) as root:
            _, hers = await call(alice, "create_task", title=f"task {CANARY}", session_id="s-alice")
            _, gone = await call(alice, "create_task", title=f"gone {CANARY}", session_id="s-alice")
            await call(alice, "delete_task", task_id=gone["id"])
            _, ops = await call(root, "create_task", title="the operator's", session_id="s-root")
            failed, _ = await call(bob, "sync_tasks", direction="export")
            assert not failed
    text = (workdir / ".gobby" / "tasks.jsonl").read_text(encoding="utf-8")
    assert CANARY not in text and hers["id"] not in text and gone["id"] not in text
    lines = {r["id"]: r for r in map(json.loads, text.splitlines())}
    assert lines[ops["id"]]["principal"] == "root"


def test_an_import_run_by_a_user_makes_each_line_its_own_principals_and_never_reaches_a_user_tokens_task(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    _git_init(workdir)
    tracker = Tracker(make_settings(TOKENS))
    try:
        project = resolve_project(workdir)
        with acting_as(Principal("alice", "user")):
            hers = tracker.store.create(project, f"task {CANARY}")
            kept = tracker.store.create(project, f"kept {CANARY}")
        later = "2099-01-01T00:00:00+00:00"
        lines = [
            {"id": "gt-10ca10", "title": "the local user's, pulled", "status": "open", "updated_at": later},
            {"id": hers.id, "title": "rewritten", "status": "closed", "updated_at": later},
            {"id": kept.id, "deleted": True, "updated_at": later},
            {"id": "gt-a11ce0", "title": "forged as alice's", "principal": "alice", "updated_at": later},
        ]
        (workdir / ".gobby").mkdir()
        (workdir / ".gobby" / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        with acting_as(Principal("bob", "user")):
            result = tracker.sync_project(project, "import")
            assert tracker.store.list(project) == []  # nothing of the file became bob's
            assert (
                CANARY not in json.dumps(result)
                and hers.id not in json.dumps(result)
                and kept.id not in json.dumps(result)
            )
        with acting_as(Principal("alice", "user")):
            assert sorted((t.id, t.title, t.status) for t in tracker.store.list(project)) == sorted(
                [(hers.id, f"task {CANARY}", "open"), (kept.id, f"kept {CANARY}", "open")]
            )
        with acting_as(LOCAL):
            pulled = tracker.store.get(project, "gt-10ca10")
            assert pulled.created_by == "local"
            assert tracker.store.find(project, "gt-a11ce0") is None
    finally:
        tracker.close()
