"""Whose hook session, codex thread and restored summary is whose, over real Streamable HTTP on profile gobby:
each named bearer token is a principal; a `user` reaches only its own (another's id is as unknown as one that
never existed), an `admin` lists everyone's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.hooks import HookStore
from relay.store import migrations
from relay.store.side import open_side
from tests.conftest import SettingsFactory
from tests.reliability.conftest import free_port, wait_for
from tests.reliability.test_http_guardrails import listening, serving
from tests.server.test_principals import ALICE, BOB, ROOT, TOKENS, as_

from .conftest import FAKE_CODEX

pytestmark = pytest.mark.anyio
THREAD = "01a1fdea-b50b-74e3-a908-2db5de7dba18"  # what the fake codex's recording announces
SECRET = "Alice's secret plan: rename the billing tables"


@pytest.fixture
async def port(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> AsyncIterator[int]:
    """A real `relay serve --http --profile gobby` with the fake codex and three named tokens; its port."""
    make_settings(TOKENS + f'\n[agents.codex]\ncommand = "{FAKE_CODEX}"\n')
    chosen = free_port()
    with serving(relay_home, workdir, "--port", str(chosen), "--profile", "gobby"):
        await wait_for(lambda: listening(chosen), 30, step=0.05)
        yield chosen


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return result.structured_content


async def hook(client: Client, hook_type: str, cli: str = "Codex", **params: Any) -> dict[str, Any]:
    """call_hook as the CLI `cli` reports it; its result."""
    reply = await call(client, "call_hook", hook_type=hook_type, params=params, source=cli)
    assert reply["success"], reply
    return reply["result"]


async def sessions(client: Client) -> list[tuple[str, str]]:
    """(session id, origin) of each session core's session_list shows the caller."""
    listed = await call(client, "call_tool", server_name="core", tool_name="session_list", arguments={"limit": 50})
    return sorted((s["session_id"], s["origin"]) for s in listed["result"]["sessions"])


async def thread_ids(client: Client) -> list[str]:
    listed = await call(client, "codex_list_threads", limit=50)
    return sorted(t["id"] for t in listed["threads"])


async def test_session_start_restores_only_the_callers_own_summary_of_the_project(port: int, workdir: Path) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob:
            await hook(alice, "SessionStart", session_id="a1", source="startup", cwd=str(workdir))
            await hook(alice, "PromptSubmit", session_id="a1", prompt=SECRET)
            await hook(alice, "SessionEnd", session_id="a1")
            bobs = await hook(bob, "SessionStart", session_id="b1", source="clear", cwd=str(workdir))
            alices = await hook(alice, "SessionStart", session_id="a2", source="clear", cwd=str(workdir))

    assert (bobs["restored_summary"], bobs["restored_from"], bobs["parent_session_id"]) == (None, None, None)
    assert alices["restored_from"] == "a1" and alices["parent_session_id"] == "a1"
    assert SECRET in alices["restored_summary"]


async def test_a_hook_on_another_principals_session_id_reaches_a_session_of_the_callers_own(
    port: int, workdir: Path
) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob:
            await hook(alice, "SessionStart", session_id="a1", cwd=str(workdir))
            await hook(alice, "PromptSubmit", session_id="a1", prompt=SECRET)
            started = await hook(bob, "SessionStart", session_id="a1", cwd=str(workdir))
            prompted = await hook(bob, "PromptSubmit", session_id="a1", prompt="bob's question")
            stopped = await hook(bob, "Stop", session_id="a1")
            event = await hook(bob, "PreToolUse", session_id="a1", tool_name="Bash")
            again = await hook(alice, "PromptSubmit", session_id="a1", prompt="alice again")

    assert started["is_new"] is True and started["restored_summary"] is None
    assert (prompted["title"], prompted["prompt_count"]) == ("bob's question", 1)
    assert (stopped["status"], stopped["title"]) == ("paused", "bob's question")
    assert event["events"] == {"PreToolUse": 1}
    assert (again["title"], again["prompt_count"], again["status"]) == (SECRET, 2, "active")


async def test_codex_threads_and_sessions_list_only_the_callers_own_and_an_admin_lists_all(
    port: int, workdir: Path
) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob, as_(port, ROOT) as root:
            ran = await call(alice, "codex", prompt=SECRET)
            await hook(alice, "SessionStart", session_id="thr-alice", cwd=str(workdir))
            await hook(bob, "SessionStart", session_id="thr-bob", cwd=str(workdir))
            await hook(bob, "SessionStart", session_id="gem-bob", cli="Gemini", cwd=str(workdir))
            listed = {"alice": await thread_ids(alice), "bob": await thread_ids(bob), "root": await thread_ids(root)}
            previews = [t["preview"] for t in (await call(bob, "codex_list_threads", limit=50))["threads"]]
            listed_sessions = {who: await sessions(c) for who, c in (("alice", alice), ("bob", bob))}

    assert ran["success"] and ran["thread_id"] == THREAD
    assert listed == {
        "alice": sorted([THREAD, "thr-alice"]),
        "bob": ["thr-bob"],
        "root": sorted([THREAD, "thr-alice", "thr-bob"]),
    }
    assert SECRET not in previews
    assert listed_sessions == {
        "alice": sorted([(THREAD, "relay"), ("thr-alice", "hook")]),
        "bob": [("gem-bob", "hook"), ("thr-bob", "hook")],
    }


async def test_a_user_token_archives_only_its_own_thread_another_is_not_found_and_an_admin_archives_any(
    port: int, workdir: Path
) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob, as_(port, ROOT) as root:
            await call(alice, "codex", prompt=SECRET)
            await hook(alice, "SessionStart", session_id="thr-alice", cwd=str(workdir))
            await hook(bob, "SessionStart", session_id="thr-bob", cwd=str(workdir))
            theirs = await call(bob, "codex_archive_thread", thread_id=THREAD)
            hooked = await call(bob, "codex_archive_thread", thread_id="thr-alice")
            unknown = await call(bob, "codex_archive_thread", thread_id="thr-nope")
            kept = await thread_ids(alice)
            own = await call(bob, "codex_archive_thread", thread_id="thr-bob")
            by_admin = await call(root, "codex_archive_thread", thread_id="thr-alice")
            left = {"alice": await thread_ids(alice), "bob": await thread_ids(bob)}

    def refusal(reply: dict[str, Any]) -> tuple[bool, str, str]:
        return reply["success"], reply["error_type"], reply["error"].replace(reply["thread_id"], "ID")

    assert refusal(theirs) == refusal(hooked) == refusal(unknown) == (False, "SESSION_NOT_FOUND", "Thread ID not found")
    assert kept == sorted([THREAD, "thr-alice"])
    assert own["success"] and by_admin["success"]
    assert left == {"alice": [THREAD], "bob": []}


def test_hook_sessions_recorded_before_principals_belong_to_the_local_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "relay.db"
    before = [(name, step) for name, step in migrations.MIGRATIONS if name != "m018_hook_principals"]
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", before)
        old = open_side(path, 5.0)
        old.execute(
            "INSERT INTO hook_sessions (id, source, machine_id, cwd, project, project_id, title, status, summary,"
            " created_at, updated_at) VALUES ('s-old', 'Codex', 'm', '/w', '/w', 'w', 'old work', 'ended', 'done', 1, 1)"
        )
        old.execute(
            "INSERT INTO hook_events (session_id, hook_type, data, created_at) VALUES ('s-old', 'Stop', '{}', 1)"
        )
        old.close()
    hooks = HookStore(path)
    try:
        mine = hooks.get("s-old", "local")
        theirs = hooks.get("s-old", "alice")
        restored = hooks.last_in_project("/w", exclude="s-new", principal="local")
        for_alice = hooks.last_in_project("/w", exclude="s-new", principal="alice")
        listed = {who: [h.id for h in hooks.list(principal=who)] for who in ("local", "alice")}
        events = hooks.event_counts("s-old", "local"), hooks.event_counts("s-old", "alice")
    finally:
        hooks.close()
    assert mine is not None and (mine.principal, mine.title, mine.summary) == ("local", "old work", "done")
    assert theirs is None and for_alice is None
    assert restored is not None and restored.id == "s-old"
    assert listed == {"local": ["s-old"], "alice": []}
    assert events == ({"Stop": 1}, {})
