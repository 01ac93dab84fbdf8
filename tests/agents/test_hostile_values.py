"""A caller's value never becomes a CLI's flag: every caller-fillable slot of every adapter, filled with the CLI's
own most dangerous flags (and newlines, NUL), is refused with INVALID_ARGUMENT or lands in argv as a value."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from relay.agents import claude, codex, copilot, gemini, generic, values
from relay.agents.base import AgentRequest, HostContext, Invocation
from relay.config import AgentConfig
from relay.errors import ErrorCode, RelayError

HOSTILE = (
    "-y",
    "--yolo",
    "--dangerously-bypass-approvals-and-sandbox",
    "--allow-all-tools",
    "-c",
    "--dangerously-skip-permissions",
    "ok\n--yolo",
    "ok\x00--yolo",
    "ok\r",
    "ok\u2028x",
    "ok\u202ex",  # a bidi override
)
UUID = "37b103f2-259d-4a64-a20e-00ab654e1d55"
GENERIC_CFG = AgentConfig(
    command="/opt/mycli",
    args=("run", "{prompt}", "--cwd", "{cwd}"),
    model_args=("--model", "{model}"),
    resume_args=("--session", "{session_id}"),
    output="jsonl",
)

Build = Callable[[AgentRequest, HostContext], Invocation]
BUILDS: dict[str, Build] = {
    "claude": claude.build,
    "codex": codex.build,
    "gemini": gemini.build,
    "copilot": copilot.build,
    "mycli": lambda request, host: generic.build("mycli", GENERIC_CFG, request, host),
}
# The slots each CLI's build takes from the caller besides the prompt (relay.agents.values' docstring).
VALUE_SLOTS = {
    "claude": ("session_id", "model", "reasoning_effort"),
    "codex": ("session_id", "model", "reasoning_effort"),
    "gemini": ("session_id", "model"),
    "copilot": ("session_id", "model", "reasoning_effort"),
    "mycli": ("session_id", "model"),
}


def host(cli: str) -> HostContext:
    return HostContext(command=f"/usr/bin/{cli}", job_id="job-1")


def refused(call: Callable[[], object]) -> RelayError:
    with pytest.raises(RelayError) as caught:
        call()
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and caught.value.hint
    return caught.value


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(("cli", "slot"), [(cli, slot) for cli, slots in VALUE_SLOTS.items() for slot in slots])
def test_a_flag_or_control_character_in_any_value_slot_is_refused_by_build(cli: str, slot: str, value: str) -> None:
    request = AgentRequest(prompt="p", cwd="/w", **{slot: value})  # pyright: ignore[reportArgumentType]
    err = refused(lambda: BUILDS[cli](request, host(cli)))
    assert slot in err.message


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("cli", sorted(values.BUILTIN_CLIS))
def test_admission_refuses_a_flag_as_a_session_id_of_any_cli_recorded_or_not(cli: str, value: str) -> None:
    refused(lambda: values.session_id(cli, value))
    refused(lambda: values.session_id(cli, value, recorded=True))
    refused(lambda: values.model(cli, value))
    refused(lambda: values.reasoning_effort(cli, value))


@pytest.mark.parametrize("cli", sorted(values.BUILTIN_CLIS))
@pytest.mark.parametrize("value", ["latest", "3", "thread-name", "s1"])
def test_a_builtin_cli_resumes_only_its_own_id_format_unless_relay_recorded_the_id(cli: str, value: str) -> None:
    # gemini's `latest` and index, copilot's prefix and codex's thread name pick whatever the CLI has
    err = refused(lambda: values.session_id(cli, value))
    assert "UUID" in err.hint
    assert values.session_id(cli, value, recorded=True) == value
    assert values.session_id(cli, UUID) == UUID


@pytest.mark.parametrize("value", ["sonnet", "claude-sonnet-4-5", "sonnet[1m]", "gpt-5.5", "llama3:8b", "org/m-1"])
def test_model_names_and_aliases_the_clis_take_pass(value: str) -> None:
    assert values.model("claude", value) == value


@pytest.mark.parametrize(
    "value", ["main", "origin/main", "v1.0", "HEAD~2", "main^", "HEAD@{1}", "0123abcd", "refs/heads/feature/x"]
)
def test_git_refs_a_caller_names_pass_and_options_do_not(value: str) -> None:
    assert values.git_ref("base", value) == value
    for bad in ("--upload-pack=x", "-b", "main\n-x", "a b", "x\x00"):
        assert "base" in refused(lambda bad=bad: values.git_ref("base", bad)).message


def test_a_session_id_past_the_length_bound_is_refused() -> None:
    refused(lambda: values.session_id("mycli", "a" * (values.MAX_SESSION_ID_CHARS + 1), recorded=True))
    refused(lambda: values.model("claude", "m" * (values.MAX_MODEL_CHARS + 1)))


def test_claude_passes_every_value_as_one_option_string_and_a_flag_like_prompt_on_stdin() -> None:
    request = AgentRequest(
        prompt="--dangerously-skip-permissions",
        cwd="/w",
        model="sonnet",
        session_id=UUID,
        system_prompt="--dangerously-skip-permissions\n-y",
        reasoning_effort="minimal",
        max_turns=2,
    )
    inv = claude.build(request, host("claude"))
    assert inv.argv == (
        "/usr/bin/claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model=sonnet",
        f"--resume={UUID}",
        "--permission-mode",
        "default",
        "--append-system-prompt=--dangerously-skip-permissions\n-y",
        "--max-turns",
        "2",
        "--effort=low",
    )
    assert inv.stdin_text == "--dangerously-skip-permissions"


def test_a_system_prompt_with_a_control_character_is_refused() -> None:
    request = AgentRequest(prompt="p", cwd="/w", system_prompt="be terse\x00--yolo")
    assert "system_prompt" in refused(lambda: claude.build(request, host("claude"))).message


@pytest.mark.parametrize("prompt", ["review", "help", "resume", "fork", "--dangerously-bypass-approvals-and-sandbox"])
def test_codex_puts_the_session_id_and_prompt_after_double_dash_so_no_word_is_a_subcommand(prompt: str) -> None:
    request = AgentRequest(prompt=prompt, cwd="/w", model="gpt-5.5", session_id=UUID, reasoning_effort="max")
    inv = codex.build(request, host("codex"))
    on_stdin = prompt.startswith("-")
    assert inv.argv == (
        "/usr/bin/codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        '--config=sandbox_mode="read-only"',
        "--model=gpt-5.5",
        '--config=model_reasoning_effort="xhigh"',
        "resume",
        "--",
        UUID,
        "-" if on_stdin else prompt,
    )
    assert inv.stdin_text == (prompt if on_stdin else None)
    fresh = codex.build(AgentRequest(prompt=prompt, cwd="/w"), host("codex")).argv
    assert fresh[-2:] == ("--", "-" if on_stdin else prompt)


def test_gemini_passes_the_model_and_resume_id_as_one_option_string_each() -> None:
    inv = gemini.build(AgentRequest(prompt="-y", cwd="/w", model="gemini-2.5-pro", session_id=UUID), host("gemini"))
    assert inv.argv == ("/usr/bin/gemini", "--model=gemini-2.5-pro", "-o", "stream-json", f"--resume={UUID}")
    assert inv.stdin_text == "-y"


def test_copilot_passes_values_as_option_strings_and_a_flag_like_prompt_as_text() -> None:
    request = AgentRequest(
        prompt="--allow-all-tools", cwd="/w", model="gpt-5", session_id=UUID, reasoning_effort="high"
    )
    assert copilot.build(request, host("copilot")).argv == (
        "/usr/bin/copilot",
        "--no-auto-update",
        "-p",
        " --allow-all-tools",
        "-s",
        "--output-format",
        "json",
        "-C",
        "/w",
        "--model=gpt-5",
        "--deny-tool",
        "shell",
        "--deny-tool",
        "write",
        "--reasoning-effort=high",
        f"--resume={UUID}",
    )


@pytest.mark.parametrize("prompt", HOSTILE[:6])
def test_a_declared_cli_never_gets_a_flag_from_a_prompt_filling_a_whole_argument(prompt: str) -> None:
    request = AgentRequest(prompt=prompt, cwd="/w", model="m1", session_id="generic-session-1")
    assert BUILDS["mycli"](request, host("mycli")).argv == (
        "/usr/bin/mycli",
        "run",
        " " + prompt,
        "--cwd",
        "/w",
        "--model",
        "m1",
        "--session",
        "generic-session-1",
    )


def test_a_declared_clis_option_template_keeps_a_flag_like_prompt_as_its_value() -> None:
    cfg = AgentConfig(command="/opt/mycli", args=("--prompt={prompt}",))
    inv = generic.build("mycli", cfg, AgentRequest(prompt="--yolo", cwd="/w"), host("mycli"))
    assert inv.argv == ("/usr/bin/mycli", "--prompt=--yolo")
