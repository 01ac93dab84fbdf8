"""The generic adapter: a CLI declared in config.toml, its argv template and its text or JSONL output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.agents import get_adapter
from relay.agents.base import AgentRequest, HostContext
from relay.agents.codex import CodexAdapter
from relay.agents.copilot import CopilotAdapter
from relay.agents.gemini import GeminiAdapter
from relay.agents.generic import GenericAdapter, GenericParser
from relay.config import AgentConfig, Settings
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult
from tests.agents.golden import feed, run_fake

CFG = AgentConfig(
    args=("run", "--cwd", "{cwd}", "--prompt={prompt}"),
    model_args=("--model", "{model}"),
    resume_args=("--session", "{session_id}"),
    output="jsonl",
)
HOST = HostContext(
    command="/opt/aider",
    environ={"PATH": "/bin", "OPENAI_API_KEY": "o"},
    agent_env={"AIDER_KEY": "k"},
    extra_args=("-q",),
)


def adapter(**changes: object) -> GenericAdapter:
    cfg = AgentConfig(**{**CFG.__dict__, **changes})  # pyright: ignore[reportArgumentType]
    return GenericAdapter("aider", cfg)


def test_the_template_is_rendered_with_prompt_and_cwd_then_extra_args() -> None:
    inv = adapter().build(AgentRequest(prompt="fix it", cwd="/w"), HOST)
    assert inv.argv == ("/opt/aider", "run", "--cwd", "/w", "--prompt=fix it", "-q")
    assert inv.cwd == "/w" and inv.stdin_text is None


def test_model_args_and_resume_args_are_added_only_when_set() -> None:
    inv = adapter().build(AgentRequest(prompt="p", cwd="/w", model="m1", session_id="s1"), HOST)
    assert inv.argv == (
        "/opt/aider",
        "run",
        "--cwd",
        "/w",
        "--prompt=p",
        "--model",
        "m1",
        "--session",
        "s1",
        "-q",
    )


def test_a_template_without_the_prompt_sends_it_on_stdin() -> None:
    inv = adapter(args=("chat",)).build(AgentRequest(prompt="--weird prompt", cwd="/w"), HOST)
    assert inv.argv == ("/opt/aider", "chat", "-q") and inv.stdin_text == "--weird prompt"


def test_an_argument_that_is_only_an_unset_placeholder_is_dropped() -> None:
    inv = adapter(args=("{prompt}", "{model}", "x{session_id}y")).build(AgentRequest(prompt="p", cwd="/w"), HOST)
    assert inv.argv == ("/opt/aider", "p", "xy", "-q")


def test_the_child_env_is_the_base_allowlist_plus_the_agent_env() -> None:
    env = adapter().build(AgentRequest(prompt="p", cwd="/w"), HOST).env
    assert env["AIDER_KEY"] == "k" and env["PATH"] == "/bin" and "OPENAI_API_KEY" not in env


def test_resuming_without_resume_args_is_invalid() -> None:
    with pytest.raises(RelayError) as info:
        adapter(resume_args=()).build(AgentRequest(prompt="p", cwd="/w", session_id="s"), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and "resume_args" in info.value.hint


def test_continue_latest_is_invalid() -> None:
    with pytest.raises(RelayError) as info:
        adapter().build(AgentRequest(prompt="p", cwd="/w", continue_latest=True), HOST)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


def test_an_unknown_output_mode_is_a_config_error() -> None:
    with pytest.raises(RelayError) as info:
        adapter(output="xml").build(AgentRequest(prompt="p", cwd="/w"), HOST)
    assert info.value.code == ErrorCode.CONFIG_INVALID and "agents.aider.output" in info.value.hint


def test_text_output_is_the_whole_stdout_and_ok_on_exit_zero() -> None:
    parser = GenericParser("aider", "text")
    types = [e.type for e in feed(parser, "line one\n\nline three\n")]
    assert types == ["message.delta"] * 3
    assert parser.finish(0, "") == AgentResult(ok=True, text="line one\n\nline three")


def test_text_output_with_a_nonzero_exit_fails_with_the_last_stderr_line() -> None:
    parser = GenericParser("aider", "text")
    parser.feed("partial")
    result = parser.finish(3, "warming up\nfatal: no key\n")
    assert not result.ok and result.text == "partial" and result.error is not None
    assert (result.error.code, result.error.message) == (ErrorCode.AGENT_FAILED, "fatal: no key")


def test_jsonl_output_takes_session_text_and_a_final_result() -> None:
    parser = GenericParser("x", "jsonl")
    lines = [
        json.dumps({"type": "init", "sessionId": "abc", "model": "m"}),
        "not json",
        json.dumps({"type": "message", "role": "user", "content": "question"}),
        json.dumps({"type": "message", "role": "assistant", "content": "Hel", "delta": True}),
        json.dumps({"type": "message", "role": "assistant", "content": "lo", "delta": True}),
        json.dumps({"type": "message", "message": {"content": "second"}}),
    ]
    types = [e.type for e in feed(parser, "\n".join(lines))]
    assert types == ["session.started", "log", "message.delta", "message.delta", "message"]
    assert parser.finish(0, "") == AgentResult(ok=True, text="Hello\nsecond", session_id="abc", model="m")
    parser.feed(json.dumps({"type": "result", "result": "final answer", "thread_id": "ignored"}))
    assert parser.finish(0, "").text == "final answer"


def test_jsonl_error_field_becomes_the_failure_message() -> None:
    parser = GenericParser("x", "jsonl")
    parser.feed(json.dumps({"error": {"message": "quota exceeded"}}))
    result = parser.finish(1, "")
    assert result.error is not None and result.error.message == "quota exceeded"


def test_a_declared_cli_becomes_a_generic_adapter_and_builtins_are_registered(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, agents={"aider": CFG})
    found = get_adapter("aider", settings)
    assert isinstance(found, GenericAdapter) and found.executable == "aider" and found.install_hint
    assert isinstance(get_adapter("codex", settings), CodexAdapter)
    assert isinstance(get_adapter("gemini", settings), GeminiAdapter)
    assert isinstance(get_adapter("copilot", settings), CopilotAdapter)


def test_the_fake_generic_cli_round_trips_in_jsonl_mode(tmp_path: Path) -> None:
    log = tmp_path / "argv.jsonl"
    cfg = AgentConfig(args=("--jsonl", "{prompt}"), model_args=("--model", "{model}"), output="jsonl")
    req = AgentRequest(prompt="hello", cwd=str(tmp_path), model="m2")
    result, _ = run_fake(GenericAdapter("generic", cfg), req, {"FAKE_ARGV_LOG": str(log)})
    assert result == AgentResult(ok=True, text="answer: hello", session_id="generic-session-1", model="m2")
    assert json.loads(log.read_text())["argv"] == ["--jsonl", "hello", "--model", "m2"]


def test_the_fake_generic_cli_reads_stdin_in_text_mode_and_fails_on_demand(tmp_path: Path) -> None:
    ok, _ = run_fake(GenericAdapter("generic", AgentConfig(args=("--",))), AgentRequest(prompt="hi", cwd=str(tmp_path)))
    assert ok == AgentResult(ok=True, text="answer: hi")
    bad, _ = run_fake(
        GenericAdapter("generic", AgentConfig(args=("{prompt}",))),
        AgentRequest(prompt="x [[fake:exit=4,stderr=broken]]", cwd=str(tmp_path)),
    )
    assert not bad.ok and bad.error is not None and bad.error.message == "broken"
