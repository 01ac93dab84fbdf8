"""The Codex adapter: argv per request, and the `exec --json` parser on the golden captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.agents.base import AgentRequest, HostContext
from relay.agents.codex import CodexAdapter, CodexParser, build
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult, Usage
from tests.agents.golden import captured_path, fake_recordings, golden, replay, run_fake

HOST = HostContext(
    command="/usr/bin/codex",
    environ={
        "PATH": "/bin",
        "OPENAI_API_KEY": "o",
        "CODEX_HOME": "/c",
        "ANTHROPIC_API_KEY": "a",
        "GH_TOKEN": "g",
    },
)
TEXT = "MOCK-OK: hello from the mock model"
TEXT_THREAD = "01a1fdea-b50b-74e3-a908-2db5de7dba18"


def test_a_text_run_yields_the_answer_thread_id_and_usage() -> None:
    result, types = replay(CodexParser(), "codex_exec_json_text.ndjson")
    assert result == AgentResult(ok=True, text=TEXT, session_id=TEXT_THREAD, usage=Usage(input=11, output=7, cached=0))
    assert types == ["session.started", "message", "turn.completed"]


def test_a_reasoning_item_becomes_a_reasoning_event_not_part_of_the_answer() -> None:
    result, types = replay(CodexParser(), "codex_exec_json_reasoning.ndjson")
    assert result.ok and result.text == TEXT
    assert types == ["session.started", "reasoning", "message", "turn.completed"]


def test_a_shell_command_is_recorded_as_a_tool_use() -> None:
    result, types = replay(CodexParser(), "codex_exec_json_shell_workspace_write.ndjson")
    command = "/bin/bash -lc 'echo created-by-shell > created_by_shell.txt && pwd && ls'"
    assert result == AgentResult(
        ok=True,
        text="MOCK-DONE: tool output was: Chunk ID: 6ece4e\nWall time: 0.0000 seconds\n"
        "Process exited with code 0\nOriginal token count: 10\nOutput:\n<lab>/wsg\ncreated_by_shell.txt\n",
        session_id="01a1fdea-b8e3-7ec2-b8c0-7e5fc514f7b6",
        usage=Usage(input=22, output=14, cached=0),
        tool_uses=({"id": "item_0", "name": "shell", "input": {"command": command}, "ok": True},),
    )
    assert types == ["session.started", "tool.started", "tool.completed", "message", "turn.completed"]


def test_a_patch_lists_its_files_as_changed() -> None:
    result, _ = replay(CodexParser(), "codex_exec_json_patch_workspace_write.ndjson")
    assert result.ok
    assert result.files_changed == ("<lab>/wsg/created_by_patch.txt",)
    changes = [{"path": "<lab>/wsg/created_by_patch.txt", "kind": "add"}]
    assert result.tool_uses == ({"id": "item_0", "name": "apply_patch", "input": {"changes": changes}, "ok": True},)


def test_a_sandbox_blocked_command_leaves_no_tool_use_and_still_succeeds() -> None:
    result, _ = replay(CodexParser(), "codex_exec_json_shell_read_only_denied.ndjson")
    assert result.ok and result.tool_uses == () and result.files_changed == ()
    assert "Read-only file system" in result.text


def test_a_resumed_run_keeps_the_thread_id() -> None:
    result, _ = replay(CodexParser(), "codex_exec_resume_json.ndjson")
    assert result == AgentResult(ok=True, text=TEXT, session_id=TEXT_THREAD, usage=Usage(input=22, output=14, cached=0))


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("codex_exec_json_error_e400.ndjson", ErrorCode.MODEL_NOT_FOUND),
        ("codex_exec_json_error_e401.ndjson", ErrorCode.AUTH_INVALID),
        ("codex_exec_json_error_e429.ndjson", ErrorCode.RATE_LIMITED),
        ("codex_exec_json_error_e500.ndjson", ErrorCode.UPSTREAM_ERROR),
        ("codex_exec_json_error_failed.ndjson", ErrorCode.UPSTREAM_ERROR),
        ("codex_exec_json_error_badsse.ndjson", ErrorCode.UPSTREAM_ERROR),
        ("codex_exec_json_error_missing_key.ndjson", ErrorCode.AUTH_MISSING),
    ],
)
def test_every_recorded_turn_failure_maps_to_its_error_code(name: str, code: ErrorCode) -> None:
    result, types = replay(CodexParser(), name, exit_code=1)
    failed = next(json.loads(line) for line in golden(name).splitlines() if '"turn.failed"' in line)
    assert not result.ok
    assert result.error is not None
    assert (result.error.code, result.error.message) == (code, failed["error"]["message"])
    assert result.error.hint
    assert result.session_id is not None
    assert types[-2:] == ["warning", "turn.failed"]


def test_a_turn_that_streamed_an_answer_before_failing_is_still_a_failure() -> None:
    result, _ = replay(CodexParser(), "codex_exec_json_error_badsse.ndjson", exit_code=1)
    assert not result.ok and result.text == TEXT


def test_a_run_killed_while_reconnecting_is_an_upstream_error_with_retry_events() -> None:
    result, types = replay(CodexParser(), "codex_exec_json_error_conn_refused_hangs.ndjson", exit_code=143)
    assert types == ["session.started"] + ["retry"] * 6
    assert not result.ok and result.error is not None
    assert result.error.code == ErrorCode.UPSTREAM_ERROR
    assert result.error.message.startswith("Reconnecting")


def test_error_events_and_error_items_are_warnings_not_failures() -> None:
    parser = CodexParser()
    parser.feed('{"type":"thread.started","thread_id":"t"}')
    warn = parser.feed('{"type":"error","message":"model metadata for `x` not found"}')
    item = parser.feed('{"type":"item.completed","item":{"id":"i","type":"error","message":"unknown model"}}')
    parser.feed('{"type":"item.completed","item":{"id":"m","type":"agent_message","text":"done"}}')
    parser.feed('{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":2}}')
    assert [e.type for e in warn + item] == ["warning", "warning"]
    assert parser.finish(0, "") == AgentResult(ok=True, text="done", session_id="t", usage=Usage(1, 2, 0))


def test_a_completed_turn_with_a_nonzero_exit_is_a_failure() -> None:
    result, _ = replay(CodexParser(), "codex_exec_json_text.ndjson", exit_code=1, stderr="boom")
    assert not result.ok and result.error is not None and result.error.code == ErrorCode.AGENT_FAILED


def test_outside_a_git_repo_without_the_skip_flag_is_an_invalid_argument() -> None:
    result = CodexParser().finish(1, golden("codex_exec_not_git.stderr"))
    assert result.error is not None
    assert result.error.code == ErrorCode.INVALID_ARGUMENT
    assert result.error.message == "Not inside a trusted directory and --skip-git-repo-check was not specified."
    assert "git" in result.error.hint


def test_resuming_an_unknown_thread_is_session_not_found() -> None:
    stderr = "Error: thread/resume failed: no rollout found for thread id abc (code -32600)\n   0: backtrace\n"
    result = CodexParser().finish(1, stderr)
    assert result.error is not None and result.error.code == ErrorCode.SESSION_NOT_FOUND
    assert "no rollout found" in result.error.message


def test_an_unknown_flag_is_a_config_error() -> None:
    result = CodexParser().finish(2, "error: unexpected argument '--full-auto' found\n\nUsage: codex exec")
    assert result.error is not None and result.error.code == ErrorCode.CONFIG_INVALID


def test_noise_lines_become_log_events() -> None:
    assert [e.type for e in CodexParser().feed("WARNING: could not create PATH aliases")] == ["log"]
    assert CodexParser().feed("") == []


@pytest.mark.parametrize(
    ("permission", "sandbox"),
    [("read-only", "read-only"), ("edit", "workspace-write"), ("full", "danger-full-access")],
)
def test_a_new_session_passes_cwd_and_the_sandbox_for_each_permission(permission: str, sandbox: str) -> None:
    inv = build(AgentRequest(prompt="hello", cwd="/w", permission=permission), HOST)  # pyright: ignore[reportArgumentType]
    assert inv.argv == (
        "/usr/bin/codex",
        "exec",
        "--json",
        "--cd=/w",
        "--skip-git-repo-check",
        "-s",
        sandbox,
        "--",
        "hello",
    )
    assert inv.cwd == "/w" and inv.stdin_text is None


def test_model_and_reasoning_effort_are_passed_as_flag_and_config_override() -> None:
    req = AgentRequest(prompt="p", cwd="/w", model="gpt-5.5", reasoning_effort="high")
    assert build(req, HOST).argv == (
        "/usr/bin/codex",
        "exec",
        "--json",
        "--cd=/w",
        "--skip-git-repo-check",
        "-s",
        "read-only",
        "--model=gpt-5.5",
        '--config=model_reasoning_effort="high"',
        "--",
        "p",
    )


def test_resume_uses_a_sandbox_override_and_repasses_the_model_without_cd() -> None:
    req = AgentRequest(prompt="next", cwd="/w", model="gpt-5.5", session_id="thr-1", permission="edit")
    inv = build(req, HOST)
    assert inv.argv == (
        "/usr/bin/codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        '--config=sandbox_mode="workspace-write"',
        "--model=gpt-5.5",
        "resume",
        "--",
        "thr-1",
        "next",
    )
    assert inv.cwd == "/w"


def test_continue_latest_resumes_the_last_thread() -> None:
    argv = build(AgentRequest(prompt="p", cwd="/w", continue_latest=True), HOST).argv
    assert argv[-4:] == ("resume", "--last", "--", "p")
    assert "--cd=/w" not in argv and "-s" not in argv


def test_extra_args_come_before_the_prompt() -> None:
    host = HostContext(command="codex", extra_args=("-c", "model_provider=mock"))
    assert build(AgentRequest(prompt="p", cwd="/w"), host).argv[-4:] == ("-c", "model_provider=mock", "--", "p")


@pytest.mark.parametrize("prompt", ["--help me", "x" * 200_000])
def test_a_flag_like_or_huge_prompt_goes_on_stdin_as_dash(prompt: str) -> None:
    inv = build(AgentRequest(prompt=prompt, cwd="/w"), HOST)
    assert inv.argv[-1] == "-" and inv.stdin_text == prompt


def test_resume_and_continue_together_is_invalid() -> None:
    with pytest.raises(RelayError) as info:
        build(AgentRequest(prompt="p", cwd="/w", session_id="s", continue_latest=True), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and info.value.hint


def test_a_reasoning_effort_that_is_not_a_word_is_rejected() -> None:
    with pytest.raises(RelayError) as info:
        build(AgentRequest(prompt="p", cwd="/w", reasoning_effort='high"\nx=1'), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


def test_the_child_sees_openai_and_codex_variables_but_no_other_vendor_keys() -> None:
    env = build(AgentRequest(prompt="p", cwd="/w"), HOST).env
    assert env["OPENAI_API_KEY"] == "o" and env["CODEX_HOME"] == "/c"
    assert "ANTHROPIC_API_KEY" not in env and "GH_TOKEN" not in env


def test_the_fake_codex_round_trips_through_build_and_parser(tmp_path: Path) -> None:
    log = tmp_path / "argv.jsonl"
    req = AgentRequest(prompt="hi [[fake:echo]]", cwd=str(tmp_path), model="gpt-5.5")
    result, _ = run_fake(CodexAdapter(), req, {"FAKE_ARGV_LOG": str(log)})
    assert result == AgentResult(
        ok=True, text="hi [[fake:echo]]", session_id=TEXT_THREAD, usage=Usage(input=11, output=7, cached=0)
    )
    logged = json.loads(log.read_text())
    assert logged["argv"][-1] == "hi [[fake:echo]]" and logged["cwd"] == str(tmp_path)


def test_the_fake_codex_resumes_the_given_thread_and_reads_a_dash_prompt_from_stdin(tmp_path: Path) -> None:
    req = AgentRequest(prompt="-x [[fake:echo]]", cwd=str(tmp_path), session_id="thr-9")
    result, _ = run_fake(CodexAdapter(), req)
    assert result.ok and result.session_id == "thr-9" and result.text == "-x [[fake:echo]]"


@pytest.mark.parametrize(
    ("directive", "code"),
    [
        ("replay=codex_exec_json_error_e401", ErrorCode.AUTH_INVALID),
        ("replay=codex_exec_json_error_missing_key", ErrorCode.AUTH_MISSING),
        ("missing_session", ErrorCode.SESSION_NOT_FOUND),
    ],
)
def test_the_fake_codex_fails_like_the_real_one(tmp_path: Path, directive: str, code: ErrorCode) -> None:
    req = AgentRequest(prompt=f"p [[fake:{directive}]]", cwd=str(tmp_path), session_id="thr-1")
    result, _ = run_fake(CodexAdapter(), req)
    assert not result.ok and result.error is not None and result.error.code == code


def test_the_codex_recordings_are_copies_of_the_golden_captures() -> None:
    for path in fake_recordings("codex"):
        assert path.read_bytes() == captured_path(path.name).read_bytes(), path.name
