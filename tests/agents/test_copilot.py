"""The Copilot adapter: argv per request, and the JSONL parser on the golden captures."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from relay.agents.base import AgentRequest, HostContext
from relay.agents.copilot import CopilotAdapter, CopilotParser, build, session_id_for
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult
from tests.agents.golden import captured_path, fake_recordings, feed, golden, replay, run_fake

HOST = HostContext(
    command="/usr/bin/copilot",
    environ={
        "PATH": "/bin",
        "COPILOT_MODEL": "gpt-4.1",
        "GH_TOKEN": "gh",
        "GITHUB_TOKEN": "gt",
        "GH_HOST": "example.com",
        "OPENAI_API_KEY": "o",
    },
    job_id="job-42",
)
TEXT = "MOCK-OK: hello from the mock model"
BASE = ("/usr/bin/copilot", "--no-auto-update", "-p", "hello", "-s", "--output-format", "json", "-C", "/w")


def test_a_text_run_yields_the_last_message_session_model_and_turns() -> None:
    result, types = replay(CopilotParser(), "copilot_json_text.out")
    assert result == AgentResult(
        ok=True, text=TEXT, session_id="c72fc497-f117-495c-a0bf-9c770528fdf2", model="gpt-4.1", num_turns=1
    )
    assert types == ["message.delta", "message.delta", "message", "session.started", "turn.completed"]


def test_a_shell_run_records_the_tool_and_keeps_only_the_non_empty_final_message() -> None:
    result, _ = replay(CopilotParser(), "copilot_json_shell.out")
    args = {
        "command": "echo created-by-shell > created_by_shell.txt && pwd && ls",
        "description": "mock shell step",
        "mode": "sync",
        "initial_wait": 30,
    }
    assert result == AgentResult(
        ok=True,
        text="MOCK-DONE: tool output was: <lab>/wscg\ncreated_by_shell.txt\n<shellId: 0 completed with exit code 0>",
        session_id="76196bb2-8fb7-4f24-ba4b-0fea097a3f17",
        model="gpt-4.1",
        num_turns=2,
        tool_uses=({"id": "call_cecffc55", "name": "bash", "input": args, "ok": True},),
    )


def test_a_create_run_lists_the_modified_files() -> None:
    result, _ = replay(CopilotParser(), "copilot_json_create_allow_write.out")
    assert result.ok
    assert result.files_changed == ("<lab>/wscg/created_by_patch.txt",)
    assert [t["name"] for t in result.tool_uses] == ["create"]


def test_a_resumed_run_keeps_the_session_id() -> None:
    result, _ = replay(CopilotParser(), "copilot_json_resume.out")
    assert result.ok and result.text == TEXT
    assert result.session_id == "76196bb2-8fb7-4f24-ba4b-0fea097a3f17"


@pytest.mark.parametrize(
    ("name", "code", "retries"),
    [
        ("copilot_json_error_e400.out", ErrorCode.MODEL_NOT_FOUND, 0),
        ("copilot_json_error_e401.out", ErrorCode.AUTH_INVALID, 2),
        ("copilot_json_error_e500.out", ErrorCode.UPSTREAM_ERROR, 5),
        ("copilot_json_error_conn_refused.out", ErrorCode.UPSTREAM_ERROR, 5),
    ],
)
def test_every_recorded_session_error_maps_to_its_error_code(name: str, code: ErrorCode, retries: int) -> None:
    result, types = replay(CopilotParser(), name, exit_code=1)
    error = next(json.loads(line) for line in golden(name).splitlines() if '"session.error"' in line)["data"]
    assert not result.ok and result.error is not None
    assert result.error.code == code and result.error.hint
    assert result.error.message.startswith(error["message"])
    assert types.count("retry") == retries and "turn.failed" in types
    assert result.session_id is not None


def test_a_query_error_with_a_status_code_names_it() -> None:
    result, _ = replay(CopilotParser(), "copilot_json_error_e500.out", exit_code=1)
    assert result.error is not None and "Last error: 500" in result.error.message
    parser = CopilotParser()
    parser.feed('{"type":"session.error","data":{"errorType":"query","message":"bad gateway","statusCode":502}}')
    parser.feed('{"type":"result","sessionId":"s","exitCode":1}')
    error = parser.finish(1, "").error
    assert error is not None and (error.code, error.message) == (
        ErrorCode.UPSTREAM_ERROR,
        "bad gateway (HTTP 502)",
    )


def test_a_rate_limit_session_error_is_rate_limited() -> None:
    parser = CopilotParser()
    parser.feed('{"type":"session.error","data":{"errorType":"rate_limit","message":"429 slow down","statusCode":429}}')
    parser.feed('{"type":"result","sessionId":"s","exitCode":1}')
    result = parser.finish(1, "")
    assert result.error is not None and result.error.code == ErrorCode.RATE_LIMITED


def test_a_run_aborted_by_sigterm_is_not_a_success_despite_exit_code_zero() -> None:
    result, types = replay(CopilotParser(), "copilot_json_error_hang_killed_by_sigterm.out", exit_code=0)
    assert not result.ok and result.error is not None and result.error.code == ErrorCode.CANCELLED
    assert result.session_id == "70df1e9c-d9d1-4c6a-b636-78154b4089b5"
    assert "warning" in types


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [
        ("copilot_error_no_login.stderr", ErrorCode.AUTH_MISSING, "No authentication information found."),
        (
            "copilot_error_no_model.stderr",
            ErrorCode.CONFIG_INVALID,
            "BYOK providers require an explicit model. Run `copilot help providers` for configuration details.",
        ),
        (
            "copilot_error_offline_without_provider.stderr",
            ErrorCode.CONFIG_INVALID,
            "Offline mode requires a local model provider. Set COPILOT_PROVIDER_BASE_URL to configure one.",
        ),
        (
            "copilot_error_resume_unknown.stderr",
            ErrorCode.SESSION_NOT_FOUND,
            "No session, task, or name matched '00000000-0000-4000-8000-000000000000'.",
        ),
        (
            "copilot_text_error_e401.stderr",
            ErrorCode.AUTH_INVALID,
            "Authentication failed with provider at http://127.0.0.1:18901/v1 (HTTP 401).",
        ),
    ],
)
def test_failures_that_print_no_json_map_from_stderr(name: str, code: ErrorCode, message: str) -> None:
    result = CopilotParser().finish(1, golden(name))
    assert not result.ok and result.error is not None
    assert (result.error.code, result.error.message) == (code, message)
    assert result.error.hint


def test_the_missing_login_hint_offers_login_and_byok() -> None:
    error = CopilotParser().finish(1, golden("copilot_error_no_login.stderr")).error
    assert error is not None and "copilot" in error.hint and "COPILOT_PROVIDER_BASE_URL" in error.hint


def test_a_denied_tool_is_a_permission_denial_and_the_run_still_succeeds() -> None:
    parser = CopilotParser()
    start = {"toolCallId": "c1", "toolName": "bash", "arguments": {"command": "touch x"}}
    parser.feed(json.dumps({"type": "tool.execution_start", "data": start}))
    denied = {
        "toolCallId": "c1",
        "success": False,
        "error": {"code": "denied", "message": "denied due to the following rules: `shell`"},
    }
    types = [e.type for e in parser.feed(json.dumps({"type": "tool.execution_complete", "data": denied}))]
    parser.feed('{"type":"assistant.message","data":{"content":"could not run it"}}')
    parser.feed('{"type":"result","sessionId":"s","exitCode":0}')
    result = parser.finish(0, "")
    assert types == ["tool.completed"]
    assert result.ok and result.text == "could not run it"
    assert result.permission_denials == (
        {
            "tool_name": "bash",
            "tool_use_id": "c1",
            "tool_input": {"command": "touch x"},
            "message": "denied due to the following rules: `shell`",
        },
    )


def test_a_run_without_a_result_line_fails_from_stderr() -> None:
    parser = CopilotParser()
    feed(parser, "\n".join(golden("copilot_json_text.out").splitlines()[:-1]))
    result = parser.finish(None, "")
    assert not result.ok and result.text == TEXT
    assert result.error is not None and result.error.code == ErrorCode.AGENT_FAILED


@pytest.mark.parametrize(
    ("permission", "flags"),
    [
        ("read-only", ("--deny-tool", "shell", "--deny-tool", "write")),
        ("edit", ("--allow-tool", "write")),
        ("full", ("--allow-all-tools",)),
    ],
)
def test_each_permission_level_has_its_tool_flags(permission: str, flags: tuple[str, ...]) -> None:
    inv = build(AgentRequest(prompt="hello", cwd="/w", permission=permission), HOST)  # pyright: ignore[reportArgumentType]
    assert inv.argv == (*BASE, *flags, f"--session-id={session_id_for('job-42')}")
    assert inv.cwd == "/w" and inv.stdin_text is None


def test_a_new_session_gets_a_uuid_derived_from_the_job_id() -> None:
    sid = session_id_for("job-42")
    assert uuid.UUID(sid).version == 5
    assert sid == session_id_for("job-42") != session_id_for("job-43")


def test_without_a_job_id_no_session_id_is_passed() -> None:
    argv = build(AgentRequest(prompt="p", cwd="/w"), HostContext(command="copilot")).argv
    assert not any(a.startswith("--session-id") for a in argv)


def test_model_effort_and_resume_are_passed() -> None:
    req = AgentRequest(
        prompt="hello", cwd="/w", model="gpt-5", reasoning_effort="high", session_id="s-1", permission="edit"
    )
    assert build(req, HOST).argv == (
        *BASE,
        "--model=gpt-5",
        "--allow-tool",
        "write",
        "--reasoning-effort=high",
        "--resume=s-1",
    )


def test_continue_latest_uses_continue_and_no_session_id() -> None:
    argv = build(AgentRequest(prompt="p", cwd="/w", continue_latest=True), HOST).argv
    assert "--continue" in argv and not any(a.startswith("--session-id") for a in argv)


def test_a_flag_like_prompt_gets_a_leading_space() -> None:
    argv = build(AgentRequest(prompt="--help me", cwd="/w"), HOST).argv
    assert argv[argv.index("-p") + 1] == " --help me"


def test_a_prompt_too_long_for_argv_is_rejected_with_a_hint() -> None:
    with pytest.raises(RelayError) as info:
        build(AgentRequest(prompt="x" * 200_000, cwd="/w"), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and "file" in info.value.hint


def test_resume_and_continue_together_is_invalid() -> None:
    with pytest.raises(RelayError) as info:
        build(AgentRequest(prompt="p", cwd="/w", session_id="s", continue_latest=True), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


def test_the_child_sees_copilot_variables_and_only_the_named_github_tokens() -> None:
    env = build(AgentRequest(prompt="p", cwd="/w"), HOST).env
    assert env["COPILOT_MODEL"] == "gpt-4.1" and env["GH_TOKEN"] == "gh" and env["GITHUB_TOKEN"] == "gt"
    assert "GH_HOST" not in env and "OPENAI_API_KEY" not in env


def test_the_fake_copilot_echoes_the_derived_session_id(tmp_path: Path) -> None:
    log = tmp_path / "argv.jsonl"
    req = AgentRequest(prompt="hi [[fake:echo]]", cwd=str(tmp_path))
    result, _ = run_fake(CopilotAdapter(), req, {"FAKE_ARGV_LOG": str(log)}, job_id="job-9")
    assert result == AgentResult(
        ok=True, text="hi [[fake:echo]]", session_id=session_id_for("job-9"), model="gpt-4.1", num_turns=1
    )
    assert json.loads(log.read_text())["argv"][-1] == f"--session-id={session_id_for('job-9')}"


def test_the_fake_copilot_resumes_the_given_session(tmp_path: Path) -> None:
    result, _ = run_fake(CopilotAdapter(), AgentRequest(prompt="again", cwd=str(tmp_path), session_id="s-77"))
    assert result.ok and result.session_id == "s-77" and result.text == TEXT


@pytest.mark.parametrize(
    ("directive", "code"),
    [
        ("replay=copilot_json_error_e401", ErrorCode.AUTH_INVALID),
        ("replay=copilot_error_no_login", ErrorCode.AUTH_MISSING),
        ("missing_session", ErrorCode.SESSION_NOT_FOUND),
    ],
)
def test_the_fake_copilot_fails_like_the_real_one(tmp_path: Path, directive: str, code: ErrorCode) -> None:
    req = AgentRequest(prompt=f"p [[fake:{directive}]]", cwd=str(tmp_path), session_id="s-1")
    result, _ = run_fake(CopilotAdapter(), req)
    assert not result.ok and result.error is not None and result.error.code == code


def test_the_copilot_recordings_are_copies_of_the_golden_captures() -> None:
    for path in fake_recordings("copilot"):
        assert path.read_bytes() == captured_path(path.name).read_bytes(), path.name
