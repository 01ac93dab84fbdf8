"""The Gemini adapter: argv per request, and the stream-json parser on the golden captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.agents.base import AgentRequest, HostContext
from relay.agents.gemini import DEFAULT_MODEL, GeminiAdapter, GeminiParser, build
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult, Usage
from tests.agents.golden import captured_path, fake_recordings, feed, golden, replay, run_fake

HOST = HostContext(
    command="/usr/bin/gemini",
    environ={
        "PATH": "/bin",
        "GEMINI_API_KEY": "g",
        "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:1",
        "GOOGLE_CLOUD_PROJECT": "p",
        "OPENAI_API_KEY": "o",
    },
)
TEXT_SESSION = "dafb38c5-f1b6-4775-9507-815d99e08496"
STACK = "Error when talking to Gemini API\n    at GeminiClient.generateContent (file:///gemini.js:1:1)\n"


def test_a_text_run_yields_the_concatenated_deltas_session_model_and_usage() -> None:
    result, types = replay(GeminiParser(), "gemini_stream_text.ndjson")
    assert result == AgentResult(
        ok=True,
        text="hi from gemini mock",
        session_id=TEXT_SESSION,
        model="gemini-2.5-flash",
        usage=Usage(input=10, output=5, cached=0),
    )
    assert types == ["session.started", "message.delta", "turn.completed"]


def test_a_write_tool_run_records_the_tool_use_and_its_result() -> None:
    result, types = replay(GeminiParser(), "gemini_stream_tool_write.ndjson")
    tool = {
        "id": "write_file__write_file_1795261057017_0",
        "name": "write_file",
        "input": {"file_path": "hello.txt", "content": "hello\n"},
        "ok": True,
    }
    assert result == AgentResult(
        ok=True,
        text="wrote it",
        session_id="37b103f2-259d-4a64-a20e-00ab654e1d55",
        model="gemini-2.5-flash",
        usage=Usage(input=20, output=10, cached=0),
        tool_uses=(tool,),
    )
    assert types == ["session.started", "tool.started", "tool.completed", "message.delta", "turn.completed"]


def test_deltas_are_concatenated_without_separators() -> None:
    parser = GeminiParser()
    feed(parser, golden("gemini_stream_text.ndjson").splitlines()[0])
    for piece in ("Hel", "lo ", "there"):
        parser.feed(json.dumps({"type": "message", "role": "assistant", "content": piece, "delta": True}))
    parser.feed('{"type":"result","status":"success","stats":{}}')
    assert parser.finish(0, "").text == "Hello there"


def test_the_json_error_on_stderr_with_empty_stdout_is_parsed_after_stack_traces() -> None:
    stderr = STACK + golden("gemini_json_error_400.stderr.json")
    result = GeminiParser().finish(144, stderr)
    assert not result.ok and result.error is not None
    assert result.error.code == ErrorCode.INVALID_ARGUMENT
    assert result.error.message == "mock error 400 (INVALID_ARGUMENT)"
    assert result.error.hint
    assert result.session_id == "40ae87e1-fa2f-4572-aac7-5913487b174d"


def _stream_error(status: int) -> str:
    api = json.dumps({"error": {"code": status, "message": f"mock error {status}", "status": "X"}})
    lines = golden("gemini_stream_text.ndjson").splitlines()[:2]
    result = {
        "type": "result",
        "status": "error",
        "error": {"type": "Error", "message": f"[API Error: {api}]"},
    }
    return "\n".join([*lines, json.dumps(result)])


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, ErrorCode.INVALID_ARGUMENT),
        (401, ErrorCode.AUTH_INVALID),
        (403, ErrorCode.AUTH_INVALID),
        (429, ErrorCode.RATE_LIMITED),
        (500, ErrorCode.UPSTREAM_ERROR),
    ],
)
def test_an_error_result_line_maps_its_http_status_and_exit_code(status: int, code: ErrorCode) -> None:
    parser = GeminiParser()
    types = [e.type for e in feed(parser, _stream_error(status))]
    result = parser.finish(status % 256, "Attempt 1 failed. Retrying...")
    assert types == ["session.started", "turn.failed"]
    assert not result.ok and result.error is not None
    assert (result.error.code, result.error.message) == (code, f"mock error {status} (X)")
    assert result.session_id == TEXT_SESSION


@pytest.mark.parametrize(
    ("exit_code", "stderr", "code"),
    [
        (144, "", ErrorCode.INVALID_ARGUMENT),
        (145, "", ErrorCode.AUTH_INVALID),
        (147, "", ErrorCode.AUTH_INVALID),
        (173, "", ErrorCode.RATE_LIMITED),
        (244, "", ErrorCode.UPSTREAM_ERROR),
        (41, "Invalid auth method selected.", ErrorCode.AUTH_MISSING),
        (42, 'Error resuming session: Invalid session identifier "x".', ErrorCode.SESSION_NOT_FOUND),
        (42, "Session with id x already exists.", ErrorCode.INVALID_ARGUMENT),
        (55, "Gemini CLI is not running in a trusted directory.", ErrorCode.CONFIG_INVALID),
        (1, "models/nope is not found for API version v1beta", ErrorCode.MODEL_NOT_FOUND),
        (1, "fetch failed sending request", ErrorCode.UPSTREAM_ERROR),
        (1, "An unexpected critical error occurred:[object Object]", ErrorCode.AGENT_FAILED),
    ],
)
def test_exit_codes_and_stderr_without_json_map_to_error_codes(exit_code: int, stderr: str, code: ErrorCode) -> None:
    result = GeminiParser().finish(exit_code, "[STARTUP] loading\n" + stderr)
    assert not result.ok and result.error is not None
    assert result.error.code == code and result.error.hint


def test_an_untrusted_folder_hint_names_the_trust_variable() -> None:
    result = GeminiParser().finish(55, "not running in a trusted directory")
    assert result.error is not None and "GEMINI_CLI_TRUST_WORKSPACE=true" in result.error.hint


def test_stderr_noise_alone_is_not_a_failure() -> None:
    noise = "256-color support not detected.\nRipgrep is not available.\nAttempt 1 failed with status 500. Retrying..."
    result, _ = replay(GeminiParser(), "gemini_stream_text.ndjson", exit_code=0, stderr=noise)
    assert result.ok and result.error is None


def test_a_success_result_with_a_nonzero_exit_is_a_failure() -> None:
    result, _ = replay(GeminiParser(), "gemini_stream_text.ndjson", exit_code=1, stderr="boom")
    assert not result.ok and result.text == "hi from gemini mock"
    assert result.error is not None and result.error.code == ErrorCode.AGENT_FAILED


def test_an_unregistered_tool_is_reported_as_a_permission_denial() -> None:
    parser = GeminiParser()
    feed(parser, golden("gemini_stream_text.ndjson").splitlines()[0])
    parser.feed('{"type":"tool_use","tool_name":"write_file","tool_id":"w1","parameters":{"file_path":"a"}}')
    parser.feed(
        '{"type":"tool_result","tool_id":"w1","status":"error",'
        '"error":{"type":"tool_not_registered","message":"Tool \\"write_file\\" not found in registry."}}'
    )
    parser.feed('{"type":"result","status":"success","stats":{}}')
    result = parser.finish(0, "")
    assert result.ok
    assert result.permission_denials == (
        {
            "tool_name": "write_file",
            "tool_use_id": "w1",
            "tool_input": {"file_path": "a"},
            "message": 'Tool "write_file" not found in registry.',
        },
    )
    assert result.tool_uses[0]["ok"] is False


def test_a_run_without_a_result_line_is_a_failure() -> None:
    parser = GeminiParser()
    feed(parser, golden("gemini_stream_text.ndjson").splitlines()[0])
    result = parser.finish(None, "")
    assert not result.ok and result.error is not None and result.error.code == ErrorCode.AGENT_FAILED


@pytest.mark.parametrize(("permission", "mode"), [("read-only", ()), ("edit", ("--approval-mode", "auto_edit"))])
def test_read_only_passes_no_approval_flag_and_edit_auto_edit(permission: str, mode: tuple[str, ...]) -> None:
    inv = build(AgentRequest(prompt="hello", cwd="/w", permission=permission), HOST)  # pyright: ignore[reportArgumentType]
    assert inv.argv == ("/usr/bin/gemini", "-p", "hello", f"--model={DEFAULT_MODEL}", "-o", "stream-json", *mode)
    assert inv.cwd == "/w" and inv.stdin_text is None


def test_full_permission_is_yolo_with_the_given_model_and_resume() -> None:
    req = AgentRequest(prompt="p", cwd="/w", permission="full", model="gemini-2.5-pro", session_id="u-1")
    assert build(req, HOST).argv == (
        "/usr/bin/gemini",
        "-p",
        "p",
        "--model=gemini-2.5-pro",
        "-o",
        "stream-json",
        "--approval-mode",
        "yolo",
        "--resume=u-1",
    )


def test_the_model_is_always_passed_defaulting_to_flash() -> None:
    argv = build(AgentRequest(prompt="p", cwd="/w"), HOST).argv
    assert "--model=gemini-2.5-flash" in argv


def test_continue_latest_resumes_latest() -> None:
    assert build(AgentRequest(prompt="p", cwd="/w", continue_latest=True), HOST).argv[-1] == "--resume=latest"


@pytest.mark.parametrize("prompt", ["--help me", "x" * 200_000])
def test_a_flag_like_or_huge_prompt_goes_on_stdin_without_dash_p(prompt: str) -> None:
    inv = build(AgentRequest(prompt=prompt, cwd="/w"), HOST)
    assert "-p" not in inv.argv and prompt not in inv.argv and inv.stdin_text == prompt


def test_resume_and_continue_together_is_invalid() -> None:
    with pytest.raises(RelayError) as info:
        build(AgentRequest(prompt="p", cwd="/w", session_id="s", continue_latest=True), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


def test_the_child_sees_gemini_and_google_variables_but_no_other_vendor_keys() -> None:
    env = build(AgentRequest(prompt="p", cwd="/w"), HOST).env
    assert env["GEMINI_API_KEY"] == "g" and env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:1"
    assert env["GOOGLE_CLOUD_PROJECT"] == "p"
    assert "OPENAI_API_KEY" not in env


def test_the_fake_gemini_round_trips_and_takes_the_resumed_session_id(tmp_path: Path) -> None:
    log = tmp_path / "argv.jsonl"
    req = AgentRequest(prompt="hi [[fake:echo]]", cwd=str(tmp_path), session_id="uuid-7", permission="edit")
    result, _ = run_fake(GeminiAdapter(), req, {"FAKE_ARGV_LOG": str(log)})
    assert result == AgentResult(
        ok=True,
        text="hi [[fake:echo]]",
        session_id="uuid-7",
        model="gemini-2.5-flash",
        usage=Usage(input=10, output=5, cached=0),
    )
    assert json.loads(log.read_text())["argv"][-3:] == ["--approval-mode", "auto_edit", "--resume=uuid-7"]


def test_the_fake_gemini_reads_a_flag_like_prompt_from_stdin(tmp_path: Path) -> None:
    result, _ = run_fake(GeminiAdapter(), AgentRequest(prompt="-x [[fake:echo]]", cwd=str(tmp_path)))
    assert result.ok and result.text == "-x [[fake:echo]]"


@pytest.mark.parametrize(
    ("directive", "code"),
    [
        ("fail=429", ErrorCode.RATE_LIMITED),
        ("fail=401", ErrorCode.AUTH_INVALID),
        ("replay=gemini_json_error_400", ErrorCode.INVALID_ARGUMENT),
        ("missing_session", ErrorCode.SESSION_NOT_FOUND),
        ("untrusted", ErrorCode.CONFIG_INVALID),
        ("bad_auth", ErrorCode.AUTH_MISSING),
    ],
)
def test_the_fake_gemini_fails_like_the_real_one(tmp_path: Path, directive: str, code: ErrorCode) -> None:
    req = AgentRequest(prompt=f"p [[fake:{directive},noise]]", cwd=str(tmp_path), session_id="u")
    result, _ = run_fake(GeminiAdapter(), req)
    assert not result.ok and result.error is not None and result.error.code == code


def test_the_gemini_recordings_are_copies_of_the_golden_captures() -> None:
    for path in fake_recordings("gemini"):
        assert path.read_bytes() == captured_path(path.name).read_bytes(), path.name


def test_a_server_error_stays_an_upstream_error_when_stderr_mentions_a_model_not_found() -> None:
    from relay.agents.gemini import error_for

    err = error_for("vendor says no (INTERNAL)", 500, 244, "retrying with fallback: model gemini-x not found")
    assert err.code.value == "UPSTREAM_ERROR"
    assert error_for("models/gemini-x is not found", None, 1).code.value == "MODEL_NOT_FOUND"
