"""Permission grants through the SDK's client: above the grant, a job runs only when the person says yes.

The client is the official SDK's in-memory `Client`; its elicitation callback plays the person (accept,
decline, accept "for this session"), and a client without one is a headless caller. The fake claude
logs its argv, so a refused job is seen never to start and an accepted one to run with full access.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.types import ElicitRequestParams, ElicitResult, ErrorData

from relay.audit import LOG_FILE, iter_lines, parse_loose
from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.server.app import build_server
from relay.server.toolsets import powerspawn
from tests.conftest import SettingsFactory
from tests.reliability.conftest import RELAY, free_port, relay_env, wait_for
from tests.reliability.test_http_guardrails import listening

pytestmark = pytest.mark.anyio

# How the client connects: `legacy` opens with initialize and the form is an elicitation/create request
# (Claude Code, Codex); `auto` speaks 2026-07-28, where the call answers InputRequiredResult and retries.
ERAS = pytest.mark.parametrize("era", ["legacy", "auto"])


class Person:
    """An elicitation callback that answers as a person would, and remembers what it was shown."""

    def __init__(self, action: str = "accept", for_session: bool = False) -> None:
        self.action = action
        self.for_session = for_session
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        self.asked.append(params)
        if self.action != "accept":
            return ElicitResult(action=self.action)  # pyright: ignore[reportArgumentType]
        return ElicitResult(action="accept", content={"for_session": self.for_session})


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "argv.jsonl"


def settings_with(make_settings: SettingsFactory, argv_log: Path, config: str = "", **env: str) -> Any:
    return make_settings(f'[agents.claude.env]\nFAKE_ARGV_LOG = "{argv_log}"\n' + config, **env)


async def call(c: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(60):
        result = await c.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


def runs(argv_log: Path) -> list[list[str]]:
    """The argv of every run of the fake claude."""
    if not argv_log.exists():
        return []
    return [json.loads(line)["argv"] for line in argv_log.read_text().splitlines()]


def audit(home: Path, event: str) -> list[dict[str, Any]]:
    entries = [parse_loose(line) for line in iter_lines(home / LOG_FILE)]
    return [e for e in entries if e is not None and e["event"] == event]


def full(workdir: Path, **more: Any) -> dict[str, Any]:
    return {"prompt": "rewrite the build", "cwd": str(workdir), "mode": "sync", "permission": "full"} | more


async def delegate_full(settings: Any, person: Person, era: Any, workdir: Path) -> tuple[bool, dict[str, Any]]:
    """One delegate at full through a client whose person answers the confirmation."""
    async with Client(build_server(settings), elicitation_callback=person, mode=era) as c:
        return await call(c, "delegate", full(workdir))


@ERAS
async def test_a_client_without_elicitation_asking_for_full_is_refused_and_nothing_runs(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path, era: Any
) -> None:
    async with Client(build_server(settings_with(make_settings, argv_log)), mode=era) as c:
        failed, body = await call(c, "delegate", full(workdir))
        _, listed = await call(c, "job_list", {})
    assert failed
    error = body["error"]
    assert error["code"] == "PERMISSION_NOT_GRANTED"
    assert "'full'" in error["message"] and "grant 'edit'" in error["message"]
    assert '[security] grant = "full"' in error["hint"] and "--grant full" in error["hint"]
    assert "permission 'edit' or lower" in error["hint"]
    assert runs(argv_log) == [] and listed["jobs"] == []
    [refused] = audit(relay_home, "permission.refused")
    assert refused["job_id"] is None
    assert {k: refused["data"][k] for k in ("agent", "permission", "grant", "answer", "via", "principal")} == {
        "agent": "claude",
        "permission": "full",
        "grant": "edit",
        "answer": "unavailable",
        "via": "core/delegate",
        "principal": "local (mcp)",
    }


@ERAS
async def test_a_person_who_accepts_gets_the_job_run_with_full_access(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    failed, env = await delegate_full(settings_with(make_settings, argv_log), person, era, workdir)
    assert not failed and env["status"] == "completed"
    [asked] = person.asked
    assert "claude" in asked.message and str(workdir) in asked.message and "'full'" in asked.message
    assert "grant 'edit'" in asked.message and "rewrite the build" in asked.message
    [argv] = runs(argv_log)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    [queued] = audit(relay_home, "queued")
    assert queued["job_id"] == env["job_id"]
    assert queued["data"]["grant"] == {
        "permission": "full",
        "grant": "edit",
        "grant_source": "default",
        "by": "confirmation",
        "for_session": False,
        "principal": "local (mcp)",
    }
    assert audit(relay_home, "permission.refused") == []


@ERAS
async def test_a_person_who_declines_gets_a_refusal_and_nothing_runs(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("decline")
    failed, body = await delegate_full(settings_with(make_settings, argv_log), person, era, workdir)
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED"
    assert "declined the confirmation" in body["error"]["message"]
    assert len(person.asked) == 1 and runs(argv_log) == []
    [refused] = audit(relay_home, "permission.refused")
    assert refused["data"]["answer"] == "decline" and audit(relay_home, "queued") == []


async def test_for_this_session_is_remembered_for_the_session_only(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path
) -> None:
    person = Person("accept", for_session=True)
    settings = settings_with(make_settings, argv_log)
    async with Client(build_server(settings), elicitation_callback=person, mode="legacy") as c:
        first = await call(c, "delegate", full(workdir))
        second = await call(c, "delegate", full(workdir, prompt="and the tests"))
    assert not first[0] and not second[0]
    assert len(person.asked) == 1  # the second call did not ask
    assert [e["data"]["grant"]["by"] for e in audit(relay_home, "queued")] == ["confirmation", "session"]
    async with Client(build_server(settings), elicitation_callback=person, mode="legacy") as c:  # a new session
        again = await call(c, "delegate", full(workdir, prompt="once more"))
    assert not again[0] and len(person.asked) == 2
    assert len(runs(argv_log)) == 3


async def test_an_accept_without_for_this_session_asks_again_on_the_next_call(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path
) -> None:
    person = Person("accept", for_session=False)
    async with Client(build_server(settings_with(make_settings, argv_log)), elicitation_callback=person) as c:
        await call(c, "delegate", full(workdir))
        await call(c, "delegate", full(workdir, prompt="again"))
    assert len(person.asked) == 2 and len(runs(argv_log)) == 2


async def test_a_full_grant_in_config_runs_without_asking(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path
) -> None:
    person = Person("decline")
    settings = settings_with(make_settings, argv_log, '[security]\ngrant = "full"\n')
    async with Client(build_server(settings), elicitation_callback=person) as c:
        failed, env = await call(c, "delegate", full(workdir))
    assert not failed and env["status"] == "completed" and person.asked == []
    [queued] = audit(relay_home, "queued")
    assert queued["data"]["grant"]["by"] == "grant" and queued["data"]["grant"]["grant"] == "full"
    assert "[security] grant in" in queued["data"]["grant"]["grant_source"]


async def test_a_call_within_the_grant_runs_without_asking(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path
) -> None:
    person = Person("decline")
    async with Client(build_server(settings_with(make_settings, argv_log)), elicitation_callback=person) as c:
        failed, _ = await call(c, "delegate", full(workdir, permission="edit"))
    assert not failed and person.asked == []
    [argv] = runs(argv_log)
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    [queued] = audit(relay_home, "queued")
    assert queued["data"]["grant"]["by"] == "grant"


async def test_a_read_only_grant_refuses_edit_with_the_way_to_change_it(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path
) -> None:
    settings = settings_with(make_settings, argv_log, RELAY_GRANT="read-only")
    async with Client(build_server(settings)) as c:
        failed, body = await call(c, "delegate", full(workdir, permission="edit"))
        _, status = await call(c, "status", {})
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED"
    assert "grant 'read-only' (RELAY_GRANT)" in body["error"]["message"] and runs(argv_log) == []
    assert status["grant"] == {"level": "read-only", "source": "RELAY_GRANT", "profile_grants": {}}


def test_a_grant_that_is_not_a_permission_is_a_config_error(relay_home: Path) -> None:
    (relay_home / "config.toml").write_text('[security]\ngrant = "root"\n')
    with pytest.raises(RelayError) as caught:
        load_settings({"RELAY_HOME": str(relay_home)})
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    with pytest.raises(RelayError) as env_caught:
        load_settings({"RELAY_HOME": str(relay_home), "RELAY_GRANT": "everything"})
    assert env_caught.value.code is ErrorCode.CONFIG_INVALID


async def test_a_resumed_session_keeps_its_full_permission_only_with_a_yes(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path
) -> None:
    settings = settings_with(make_settings, argv_log, '[security]\ngrant = "full"\n')
    async with Client(build_server(settings)) as c:
        _, first = await call(c, "delegate", full(workdir))
    async with Client(build_server(settings_with(make_settings, argv_log))) as c:  # back to the default grant
        failed, body = await call(c, "delegate", {"prompt": "go on", "session_id": first["session_id"], "mode": "sync"})
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED" and len(runs(argv_log)) == 1


async def test_a_profile_whose_seed_runs_with_full_access_keeps_it_when_the_person_serves_it(
    make_settings: SettingsFactory, argv_log: Path, relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agent waits on a file made at wait_for_agents' first progress beat: it cannot end before the wait takes it.
    monkeypatch.setattr(powerspawn, "KEEPALIVE_S", 0.05)
    gate = tmp_path / "open"

    async def beat(progress: float, total: float | None, message: str | None) -> None:
        gate.touch()

    settings = settings_with(make_settings, argv_log, RELAY_PROFILE="powerspawn")
    async with Client(build_server(settings)) as c:
        failed, spawned = await call(c, "spawn_claude", {"prompt": f"fix the tests [[fake:until={gate}]]"})
        with anyio.fail_after(60):
            result = await c.call_tool("wait_for_agents", {"timeout": 60}, progress_callback=beat)
        waited = result.structured_content or {}
    assert not failed and spawned["status"] == "running" and waited["status"] == "all_completed"
    [argv] = runs(argv_log)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    [queued] = audit(relay_home, "queued")
    assert queued["data"]["grant"]["by"] == "grant"
    assert queued["data"]["grant"]["grant_source"].startswith("profile powerspawn")


async def test_a_full_access_profile_reached_through_call_tool_is_held_to_the_grant(
    make_settings: SettingsFactory, argv_log: Path
) -> None:
    async with Client(build_server(settings_with(make_settings, argv_log))) as c:
        failed, body = await call(
            c,
            "call_tool",
            {"server_name": "powerspawn", "tool_name": "spawn_claude", "arguments": {"prompt": "fix the tests"}},
        )
        _, status = await call(c, "status", {})
    assert failed and "PERMISSION_NOT_GRANTED" in json.dumps(body) and "grant 'edit'" in json.dumps(body)
    assert runs(argv_log) == [] and status["grant"]["profile_grants"] == {}


async def test_status_and_the_start_up_notice_name_the_full_access_profile(
    make_settings: SettingsFactory, argv_log: Path
) -> None:
    from relay.server.toolsets import full_access_notice

    settings = settings_with(make_settings, argv_log, RELAY_TOOLSETS="core,powerspawn")
    async with Client(build_server(settings)) as c:
        _, status = await call(c, "status", {})
    assert status["grant"] == {"level": "edit", "source": "default", "profile_grants": {"powerspawn": "full"}}
    assert "profile powerspawn runs its agents with full access" in status["formatted_message"]
    assert full_access_notice("zen") is None and full_access_notice("claude-code-mcp") is not None


async def test_clink_with_a_configured_permission_above_the_grant_asks_the_person(
    make_settings: SettingsFactory, argv_log: Path, relay_home: Path
) -> None:
    settings = settings_with(make_settings, argv_log, '[zen.clink.claude]\npermission = "full"\n')
    clink = {"server_name": "zen", "tool_name": "clink", "arguments": {"prompt": "review", "cli_name": "claude"}}
    async with Client(build_server(settings)) as c:
        refused = await call(c, "call_tool", clink)
    assert refused[0] and "PERMISSION_NOT_GRANTED" in json.dumps(refused[1]) and runs(argv_log) == []
    person = Person("accept")
    async with Client(build_server(settings), elicitation_callback=person, mode="legacy") as c:
        accepted = await call(c, "call_tool", clink)
    assert not accepted[0] and len(person.asked) == 1
    [argv] = runs(argv_log)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    assert [e["data"]["grant"]["by"] for e in audit(relay_home, "queued")] == ["confirmation"]


async def test_a_delegate_started_as_an_mcp_task_asks_in_its_result_and_runs_on_accept(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path
) -> None:
    from mcp.types import InputRequiredResult

    from tests.server.test_mcp_tasks import CreatedTask, Tasks, poll_until_final

    person = Person("accept")  # declares elicitation; the test answers the task's input round itself
    server = build_server(settings_with(make_settings, argv_log))
    async with Client(server, elicitation_callback=person, extensions=[Tasks()]) as c:
        with anyio.fail_after(60):  # the input round comes first (no task yet), then the retry creates the task
            asked = await c.session.call_tool("delegate", full(workdir), allow_claimed=True, allow_input_required=True)
            assert isinstance(asked, InputRequiredResult) and asked.input_requests is not None
            [(key, request)] = asked.input_requests.items()
            assert "'full'" in request.params.message and runs(argv_log) == []  # pyright: ignore[reportAttributeAccessIssue]
            answer = ElicitResult(action="accept", content={"for_session": False})
            created = await c.session.call_tool(
                "delegate",
                full(workdir),
                allow_claimed=True,
                input_responses={key: answer},
                request_state=asked.request_state,  # the question the answer replies to, sealed by relay
            )
        assert isinstance(created, CreatedTask)
        done = await poll_until_final(c, created.task_id)
    assert done["status"] == "completed", done
    [argv] = runs(argv_log)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    [queued] = audit(relay_home, "queued")
    assert queued["data"]["grant"]["by"] == "confirmation" and queued["data"]["grant"]["permission"] == "full"


async def test_a_delegate_started_as_an_mcp_task_without_elicitation_is_refused(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path
) -> None:
    from tests.server.test_mcp_tasks import Tasks

    async with Client(build_server(settings_with(make_settings, argv_log)), extensions=[Tasks()]) as c:
        with anyio.fail_after(60):
            result = await c.call_tool("delegate", full(workdir))
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["error"]["code"] == "PERMISSION_NOT_GRANTED" and runs(argv_log) == []


@contextlib.asynccontextmanager
async def serving_http(relay_home: Path, workdir: Path, *args: str) -> AsyncIterator[tuple[int, subprocess.Popen[str]]]:
    """`relay serve --http` on a free 127.0.0.1 port, once it listens; stopped (by its pid) at the end."""
    port = free_port()
    proc = subprocess.Popen(
        [RELAY, "serve", "--http", "--port", str(port), *args],
        env=relay_env(relay_home),
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await wait_for(lambda: proc.poll() is not None or listening(port), 30)
        assert proc.poll() is None, "relay serve --http did not start"
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(10)


async def test_over_http_a_person_confirms_through_the_session_and_the_audit_names_the_caller(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path
) -> None:
    settings_with(make_settings, argv_log)  # writes config.toml: the fake claude logging its argv
    person = Person("decline")
    async with serving_http(relay_home, workdir) as (port, _):
        over_http = Client(f"http://127.0.0.1:{port}/mcp", elicitation_callback=person, mode="legacy")
        async with over_http as c:
            failed, body = await call(c, "delegate", full(workdir))
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED" and len(person.asked) == 1
    assert runs(argv_log) == []
    [refused] = audit(relay_home, "permission.refused")
    assert refused["data"]["answer"] == "decline" and refused["data"]["principal"] == "local (mcp)"  # loopback: local


async def test_relay_serve_with_a_full_access_profile_says_so_as_it_starts(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    make_settings()
    async with serving_http(relay_home, workdir, "--profile", "powerspawn") as (_, proc):
        assert proc.stderr is not None
        first = proc.stderr.readline()
    assert "profile powerspawn runs its agents with full access" in first
    assert "choosing the profile is the grant" in first


async def test_clink_running_as_an_mcp_task_waits_input_required_for_the_persons_answer(
    make_settings: SettingsFactory, argv_log: Path, relay_home: Path
) -> None:
    from tests.server.test_mcp_task_input import until_input_required, update
    from tests.server.test_mcp_tasks import Tasks, poll_until_final, start_task

    config = '[zen.clink.claude]\npermission = "full"\n'
    settings = settings_with(make_settings, argv_log, config, RELAY_TOOLSETS="core,zen")
    person = Person("accept")  # declares elicitation; the task's question is answered through tasks/update
    async with Client(build_server(settings), elicitation_callback=person, extensions=[Tasks()]) as c:
        created = await start_task(c, "clink", {"prompt": "review", "cli_name": "claude"})
        waiting = await until_input_required(c, created.task_id)
        assert runs(argv_log) == []  # nothing runs while the person has not answered
        [(key, request)] = waiting["inputRequests"].items()
        assert request["method"] == "elicitation/create" and "'full'" in request["params"]["message"]
        await update(c, created.task_id, {key: {"action": "accept", "content": {"for_session": False}}})
        done = await poll_until_final(c, created.task_id)
    assert done["status"] == "completed", done
    [argv] = runs(argv_log)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    [queued] = [e for e in audit(relay_home, "queued") if e["data"]["agent"] == "claude"]
    assert queued["data"]["grant"]["by"] == "confirmation"
