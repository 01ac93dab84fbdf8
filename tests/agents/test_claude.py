"""The Claude Code adapter: argv built per request, and the stream-json parser on recorded runs."""

from __future__ import annotations

import pytest

from relay.agents.base import AgentRequest, HostContext
from relay.agents.claude import ClaudeParser, build
from relay.errors import ErrorCode, RelayError
from relay.events import Usage
from tests.agents.golden import captured_path, fake_recordings, golden

HOST = HostContext(command="/usr/bin/claude", environ={"PATH": "/bin", "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o"})


def parse(name: str, exit_code: int = 0, stderr: str = "") -> tuple[ClaudeParser, list[str]]:
    parser = ClaudeParser()
    types: list[str] = []
    for line in golden(name).splitlines():
        types += [e.type for e in parser.feed(line)]
    return parser, types


def test_the_text_run_yields_text_session_usage_and_cost() -> None:
    parser, types = parse("claude_stream_text.ndjson")
    result = parser.finish(0, "")
    assert result.ok
    assert result.text == "hi from mock"
    assert result.session_id == "b3af0212-3a6d-4156-a35c-cfab742dc56e"
    assert result.usage == Usage(input=10, output=5, cached=0)
    assert result.cost_usd == 0.000175
    assert result.model == "claude-opus-4-8[1m]"
    assert result.error is None
    assert types == ["session.started", "message", "turn.completed"]


def test_a_write_tool_run_records_the_tool_use_and_its_result() -> None:
    parser, types = parse("claude_stream_tool_write.ndjson")
    result = parser.finish(0, "")
    assert result.ok
    assert [t["name"] for t in result.tool_uses] == ["Write"]
    assert result.tool_uses[0]["ok"] is True
    assert "tool.started" in types and "tool.completed" in types
    assert result.permission_denials == ()


def test_an_api_error_with_subtype_success_is_a_failure() -> None:
    parser, types = parse("claude_stream_error_500.ndjson")
    result = parser.finish(1, "")
    assert not result.ok
    assert result.error is not None and result.error.code == ErrorCode.UPSTREAM_ERROR
    assert "500" in result.error.message
    # The synthetic assistant message repeats the error; it is not an answer.
    assert "message" not in types and "warning" in types and "retry" in types


def test_a_valid_result_followed_by_a_nonzero_exit_is_still_the_answer() -> None:
    parser, _ = parse("claude_stream_text.ndjson")
    result = parser.finish(3, "")
    assert result.ok and result.text == "hi from mock"


def test_noise_before_the_json_becomes_log_events_and_does_not_break_parsing() -> None:
    parser = ClaudeParser()
    events = parser.feed("Loading configuration...\n") + parser.feed("{not json")
    assert [e.type for e in events] == ["log", "log"]
    for line in golden("claude_stream_text.ndjson").splitlines():
        parser.feed(line)
    assert parser.finish(0, "").text == "hi from mock"


@pytest.mark.parametrize(
    ("stderr", "code"),
    [
        ("No conversation found with session ID: abc", ErrorCode.SESSION_NOT_FOUND),
        ("Not logged in · Please run /login", ErrorCode.AUTH_MISSING),
        ("segfault", ErrorCode.AGENT_FAILED),
    ],
)
def test_a_run_without_a_result_line_is_mapped_from_stderr(stderr: str, code: ErrorCode) -> None:
    result = ClaudeParser().finish(1, stderr)
    assert not result.ok and result.error is not None and result.error.code == code
    assert result.error.hint


def test_max_turns_result_maps_to_max_turns() -> None:
    parser = ClaudeParser()
    parser.feed(
        '{"type":"result","subtype":"error_max_turns","is_error":true,"errors":["Reached maximum number of turns (1)"],"session_id":"s"}'
    )
    result = parser.finish(1, "")
    assert result.error is not None and result.error.code == ErrorCode.MAX_TURNS


def test_build_read_only_default() -> None:
    inv = build(AgentRequest(prompt="hello", cwd="/w"), HOST)
    assert inv.argv == (
        "/usr/bin/claude",
        "-p",
        "hello",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "default",
    )
    assert inv.cwd == "/w" and inv.stdin_text is None
    assert inv.env["ANTHROPIC_API_KEY"] == "k"
    assert "OPENAI_API_KEY" not in inv.env
    assert inv.env["RELAY_DEPTH"] == "1"


@pytest.mark.parametrize(("permission", "mode"), [("edit", "acceptEdits"), ("full", "bypassPermissions")])
def test_permission_levels_map_to_permission_modes(permission: str, mode: str) -> None:
    inv = build(AgentRequest(prompt="p", cwd="/w", permission=permission), HOST)  # pyright: ignore[reportArgumentType]
    i = inv.argv.index("--permission-mode")
    assert inv.argv[i + 1] == mode


def test_full_permission_as_root_sets_is_sandbox() -> None:
    root = HostContext(command="claude", is_root=True)
    assert build(AgentRequest(prompt="p", cwd="/w", permission="full"), root).env["IS_SANDBOX"] == "1"
    assert "IS_SANDBOX" not in build(AgentRequest(prompt="p", cwd="/w", permission="edit"), root).env


def test_model_resume_system_prompt_and_max_turns_are_passed() -> None:
    req = AgentRequest(prompt="p", cwd="/w", model="sonnet", session_id="s1", system_prompt="be terse", max_turns=3)
    argv = build(req, HOST).argv
    assert "--model=sonnet" in argv and "--resume=s1" in argv
    assert "--append-system-prompt=be terse" in argv
    assert argv[argv.index("--max-turns") + 1] == "3"
    assert "-c" not in argv


def test_continue_latest_uses_dash_c() -> None:
    assert "-c" in build(AgentRequest(prompt="p", cwd="/w", continue_latest=True), HOST).argv


def test_resume_and_continue_together_is_invalid() -> None:
    with pytest.raises(RelayError) as info:
        build(AgentRequest(prompt="p", cwd="/w", session_id="s", continue_latest=True), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and info.value.hint


def test_a_prompt_that_looks_like_a_flag_goes_on_stdin() -> None:
    inv = build(AgentRequest(prompt="--help me", cwd="/w"), HOST)
    assert "--help me" not in inv.argv and inv.stdin_text == "--help me"


def test_a_huge_prompt_goes_on_stdin() -> None:
    prompt = "x" * 200_000
    inv = build(AgentRequest(prompt=prompt, cwd="/w"), HOST)
    assert prompt not in inv.argv and inv.stdin_text == prompt


def test_the_fake_claudes_recordings_are_copies_of_the_captures() -> None:
    for path in fake_recordings("claude"):
        assert path.read_bytes() == captured_path(path.name).read_bytes(), path.name
