"""The grant's confirmation answered with the call's retry counts only for the question relay asked, once.

On 2026-07-28 (the SDK client's default) relay cannot send the form as a request: the call answers
`InputRequiredResult` with the form and a `requestState`, and the client's retry carries the answer.
That state is relay's question sealed (tool, agent, folder, permission, task, principal, nonce,
expiry). These tests drive the round by hand with the SDK's low-level request API and check that an
answer without it, replayed, for another question or too late is refused, with nothing run (the fake
claude logs its argv), and that the matching one runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ElicitRequest, ElicitResult, InputRequiredResult, InputResponses

from relay.jobs.grants import Ask
from relay.principal import Principal
from relay.server import confirm
from relay.server.app import build_server
from tests.conftest import FAKES, SettingsFactory
from tests.server.test_grants import Person, audit, full, runs, settings_with

pytestmark = pytest.mark.anyio

ERAS = pytest.mark.parametrize("era", ["legacy", "auto"])
KEY = confirm.input_key("full")
ACCEPT = ElicitResult(action="accept", content={"for_session": False})


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "argv.jsonl"


async def ask(c: Client, args: dict[str, Any]) -> InputRequiredResult:
    """The call's first round: relay asks for the person's answer in its result."""
    with anyio.fail_after(60):
        asked = await c.session.call_tool("delegate", args, allow_input_required=True)
    assert isinstance(asked, InputRequiredResult) and asked.input_requests is not None
    assert list(asked.input_requests) == [KEY] and isinstance(asked.input_requests[KEY], ElicitRequest)
    return asked


async def answer(
    c: Client, args: dict[str, Any], state: str | None, response: ElicitResult = ACCEPT
) -> CallToolResult | InputRequiredResult:
    """The client's retry with an answer (and the request state it echoes, if any)."""
    with anyio.fail_after(60):
        return await c.session.call_tool(
            "delegate", args, input_responses={KEY: response}, request_state=state, allow_input_required=True
        )


def refused(result: CallToolResult | InputRequiredResult) -> dict[str, Any]:
    assert isinstance(result, CallToolResult) and result.is_error and result.structured_content is not None
    error = result.structured_content["error"]
    assert error["code"] == "PERMISSION_NOT_GRANTED", error
    assert "without that answer" in error["hint"] and "relay did not start claude" in error["message"]
    return error


def completed(result: CallToolResult | InputRequiredResult) -> dict[str, Any]:
    assert isinstance(result, CallToolResult) and not result.is_error and result.structured_content is not None
    assert result.structured_content["status"] == "completed", result.structured_content
    return result.structured_content


async def test_the_answer_that_echoes_relays_sealed_question_runs_the_job_with_full_access(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path
) -> None:
    args = full(workdir)
    async with Client(build_server(settings_with(make_settings, argv_log)), elicitation_callback=Person()) as c:
        asked = await ask(c, args)
        assert asked.request_state is not None and runs(argv_log) == []
        completed(await answer(c, args, asked.request_state))
    [argv] = runs(argv_log)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"


@ERAS
async def test_an_answer_without_relays_request_state_is_refused_and_nothing_runs(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, era: Any
) -> None:
    person = Person("accept")  # would say yes if asked: the unsolicited answer must not stand in for it
    async with Client(build_server(settings_with(make_settings, argv_log)), mode=era, elicitation_callback=person) as c:
        error = refused(await answer(c, full(workdir), None))
    assert "does not come with the request state" in error["message"]
    assert runs(argv_log) == [] and person.asked == []


async def test_a_refused_stale_answer_is_on_the_audit_record(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path
) -> None:
    args = full(workdir)
    async with Client(build_server(settings_with(make_settings, argv_log)), elicitation_callback=Person()) as c:
        asked = await ask(c, args)
        completed(await answer(c, args, asked.request_state))
        refused(await answer(c, args, asked.request_state))
        refused(await answer(c, args, None))
    entries = [
        (e["data"]["answer"], e["data"]["permission"], e["data"]["agent"])
        for e in audit(relay_home, "permission.refused")
    ]
    assert entries == [("stale", "full", "claude"), ("stale", "full", "claude")]
    assert all(e["data"]["why"].startswith("the answer to relay's") for e in audit(relay_home, "permission.refused"))


async def test_a_replayed_answer_is_refused_and_the_job_runs_once(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path
) -> None:
    args = full(workdir)
    async with Client(build_server(settings_with(make_settings, argv_log)), elicitation_callback=Person()) as c:
        asked = await ask(c, args)
        completed(await answer(c, args, asked.request_state))
        error = refused(await answer(c, args, asked.request_state))
    assert "used already" in error["message"] and len(runs(argv_log)) == 1


@pytest.mark.parametrize("change", ["permission", "agent", "folder"])
async def test_an_answer_to_a_question_about_another_job_is_refused_and_nothing_runs(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, change: str
) -> None:
    """The answer to "edit for claude in work/" sent with a call for `full`, for codex or in another folder.

    These differ in the call's arguments, which the SDK binds the request state to (a JSON-RPC error);
    relay's seal binds them too (see the last test), so either refuses it and nothing runs."""
    codex = f'[agents.codex]\ncommand = "{FAKES / "codex"}"\n[agents.codex.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
    settings = settings_with(make_settings, argv_log, codex, RELAY_GRANT="read-only")
    (workdir / "sub").mkdir()
    other = {
        "permission": full(workdir),
        "agent": full(workdir, permission="edit", agent="codex"),
        "folder": full(workdir / "sub", permission="edit"),
    }[change]
    async with Client(build_server(settings), elicitation_callback=Person()) as c:
        with anyio.fail_after(60):
            asked = await c.session.call_tool("delegate", full(workdir, permission="edit"), allow_input_required=True)
            assert isinstance(asked, InputRequiredResult) and asked.request_state is not None
            answers: InputResponses = {
                confirm.input_key(other["permission"]): ACCEPT
            }  # keyed as the other call would ask
            try:
                result: Any = await c.session.call_tool(
                    "delegate", other, input_responses=answers, request_state=asked.request_state
                )
            except MCPError as exc:
                result = exc
    if isinstance(result, CallToolResult):
        assert result.is_error and "PERMISSION_NOT_GRANTED" in json.dumps(result.structured_content)
    else:
        assert isinstance(result, MCPError) and "requestState" in result.error.message
    assert runs(argv_log) == []


async def test_an_answer_sent_back_by_another_principal_or_client_is_refused_and_nothing_runs(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same call, the same state and answer, but someone else retries it: relay's own seal refuses it."""
    args = full(workdir)
    async with Client(build_server(settings_with(make_settings, argv_log)), elicitation_callback=Person()) as c:
        asked = await ask(c, args)
        with monkeypatch.context() as m:
            m.setattr(confirm, "current", lambda: Principal("mallory"))
            by_another_principal = refused(await answer(c, args, asked.request_state))
        with monkeypatch.context() as m:
            m.setattr(confirm, "client_name", lambda _ctx: "another-client")  # pyright: ignore[reportUnknownLambdaType]
            by_another_client = refused(await answer(c, args, asked.request_state))
        assert runs(argv_log) == []
        completed(await answer(c, args, asked.request_state))  # the one it was asked of still can, once
    assert "principal differ" in by_another_principal["message"]
    assert "principal differ" in by_another_client["message"] and len(runs(argv_log)) == 1


async def test_an_answer_after_its_question_expired_is_refused_and_nothing_runs(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = full(workdir)
    async with Client(build_server(settings_with(make_settings, argv_log)), elicitation_callback=Person()) as c:
        asked = await ask(c, args)
        later = confirm.now() + confirm.CONFIRM_TTL_S + 1
        monkeypatch.setattr(confirm, "now", lambda: later)
        error = refused(await answer(c, args, asked.request_state))
        again = await ask(c, args)  # retried without the stale answer: relay asks again
        completed(await answer(c, args, again.request_state))
    assert "expired" in error["message"] and len(runs(argv_log)) == 1


async def test_on_a_sessionless_connection_for_this_session_means_this_principal_and_client_for_an_hour(
    make_settings: SettingsFactory, argv_log: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    person = Person("accept", for_session=True)
    settings = settings_with(make_settings, argv_log)
    async with Client(build_server(settings), elicitation_callback=person) as c:  # 2026-07-28: no session
        completed(await c.call_tool("delegate", full(workdir)))
        completed(await c.call_tool("delegate", full(workdir, prompt="and the tests")))
        assert len(person.asked) == 1  # the second call, same principal and client, did not ask
        with monkeypatch.context() as m:
            m.setattr(confirm, "client_name", lambda _ctx: "another-client")  # pyright: ignore[reportUnknownLambdaType]
            completed(await c.call_tool("delegate", full(workdir, prompt="from elsewhere")))
        assert len(person.asked) == 2  # another client of the same principal is asked
        later = confirm.now() + confirm.SESSIONLESS_GRANT_TTL_S + 1
        monkeypatch.setattr(confirm, "now", lambda: later)
        completed(await c.call_tool("delegate", full(workdir, prompt="an hour later")))
    assert len(person.asked) == 3 and len(runs(argv_log)) == 4


@pytest.mark.parametrize("change", ["agent", "cwd", "permission", "principal", "prompt", "via"])
def test_relays_seal_names_what_differs_between_the_question_and_the_call(change: str) -> None:
    ask_ = Ask("claude", "/w", "full", "edit", "default", "fix it", "core/delegate", "local (mcp)")
    changed = {
        "agent": "codex",
        "cwd": "/w/sub",
        "permission": "edit",
        "principal": "mallory (mcp)",
        "prompt": "rm -rf",
        "via": "zen/clink",
    }[change]
    seals = confirm.Seals()
    state = seals.seal(KEY, ask_)
    other = Ask(**{**ask_.__dict__, change: changed})
    with pytest.raises(confirm.StaleAnswer) as caught:
        seals.take(state, KEY, other)
    named = {"cwd": "folder", "prompt": "task", "via": "tool"}.get(change, change)
    assert f"its {named} differ" in caught.value.message
    tampered = state[:-3] + ("AAA" if not state.endswith("AAA") else "BBB")
    with pytest.raises(confirm.StaleAnswer):
        seals.take(tampered, KEY, ask_)
    with pytest.raises(confirm.StaleAnswer):
        confirm.Seals().take(state, KEY, ask_)  # another relay process's key
    seals.take(state, KEY, ask_)
