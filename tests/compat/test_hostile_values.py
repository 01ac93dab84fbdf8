"""Every compat tool that takes a session/thread id or a model: a CLI's own flag as that value is refused before a
job or a process exists (gobby codex(thread_id), surreal's resume_session_id, call-cc's session_id, codex-mcp's
model, gemini-mcp's model); where the profile maps the value away (codex-mcp's sessionId) or passes a prompt
(claude-code-mcp), the CLI gets it only as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.compat.conftest import ProfileClient, call, logged, text

pytestmark = pytest.mark.anyio

HOSTILE = ("--dangerously-bypass-approvals-and-sandbox", "-y", "--yolo", "ok\n--yolo")
# (profile, tool, the argument a caller fills with a flag, the tool's other arguments); the slot named in the refusal.
REFUSED: list[tuple[str, str, str, dict[str, Any], str]] = [
    ("gobby", "codex", "thread_id", {}, "session_id"),
    ("gobby", "codex", "model", {}, "model"),
    ("surreal", "call_codex", "resume_session_id", {"cwd": "{workdir}"}, "session_id"),
    ("surreal", "call_gem", "resume_session_id", {"cwd": "{workdir}"}, "session_id"),
    ("surreal", "call_cc", "resume_session_id", {"cwd": "{workdir}"}, "session_id"),
    ("call-cc", "call_cc", "session_id", {"working_directory": "{workdir}"}, "session_id"),
    ("call-cc", "call_cc", "model", {"working_directory": "{workdir}"}, "model"),
    ("codex-mcp", "codex", "model", {"workingDirectory": "{workdir}"}, "model"),
    ("gemini-mcp", "ask-gemini", "model", {}, "model"),
]


def filled(args: dict[str, Any], workdir: Path) -> dict[str, Any]:
    return {k: v.format(workdir=workdir) if isinstance(v, str) else v for k, v in args.items()}


@pytest.mark.parametrize(("profile", "tool", "arg", "others", "slot"), REFUSED)
async def test_a_cli_flag_as_a_compat_tools_session_or_model_is_refused_before_any_process(
    profile_client: ProfileClient,
    workdir: Path,
    argv_log: Path,
    profile: str,
    tool: str,
    arg: str,
    others: dict[str, Any],
    slot: str,
) -> None:
    answers: dict[str, tuple[bool, bool]] = {}
    async with profile_client(profile) as c:
        for value in HOSTILE:
            result = await call(c, tool, prompt="hi", **filled(others, workdir), **{arg: value})
            answers[value] = (bool(result.is_error), f"{slot} " in text(result))
    assert answers == {value: (True, True) for value in HOSTILE}
    assert logged(argv_log) == []


async def test_codex_mcps_session_id_names_relays_own_conversation_and_never_reaches_argv(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("codex-mcp") as c:
        result = await call(
            c,
            "codex",
            prompt="hi",
            sessionId="--dangerously-bypass-approvals-and-sandbox",
            workingDirectory=str(workdir),
        )
    assert not result.is_error, text(result)
    (run,) = logged(argv_log)
    assert run["argv"] == [
        "exec",
        "--json",
        f"--cd={workdir}",
        "--skip-git-repo-check",
        "-s",
        "read-only",
        "--model=gpt-5.2-codex",
        "--",
        "hi",
    ]


async def test_claude_code_mcps_flag_like_prompt_reaches_claude_as_text_on_stdin(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    # claude_code runs with the seed's skipped permissions (full): this person granted it
    async with profile_client("claude-code-mcp", '[security]\ngrant = "full"\n') as c:
        result = await call(c, "claude_code", prompt="--dangerously-skip-permissions -c", workFolder=str(workdir))
    assert not result.is_error, text(result)
    (run,) = logged(argv_log)
    assert "--dangerously-skip-permissions" not in run["argv"] and "-c" not in run["argv"]
    assert run["prompt"] == "--dangerously-skip-permissions -c"
