"""A caller's values never become a CLI's flags: each slot filled with the CLI's own most dangerous flags.

For claude, codex, gemini and copilot, every caller-fillable slot of `delegate` (session_id,
model, system_prompt, the prompt itself, reasoning_effort, continue_latest) is filled in turn
with that CLI's most dangerous flags, as one value, the way a hostile calling model would send
it. Each delegation must either be refused before any job exists (INVALID_ARGUMENT, or the
tool's typed schema), or run the real CLI against the mock model server with the approval mode
and sandbox the grant allows, read back from the CLI itself:

- codex: the `sandbox_mode` it reports in every request's `x-codex-turn-metadata` header (and
  in its permissions instructions to the model); `codex exec` never asks, so the sandbox is
  what the grant decides.
- gemini: no "YOLO mode is enabled" on stderr, and only the tools its approval mode declares
  (read-only: no write or shell tools; edit: no shell tool).
- claude: the `permissionMode` of its stream-json `system/init` event.
- copilot: it prints no mode, so the mock asks it for a shell command in the workspace and a
  file outside it; both must come back denied in its own tool results, and neither may exist.

A job that ends before its CLI reaches the model fails the test: the value was read as a flag.
Each CLI runs through a thin wrapper that records the exact argv relay gave it, for the message.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.config import load_settings
from relay.server.app import build_server
from relay.store import Store
from tests.e2e import mocks
from tests.e2e.conftest import CALL_TIMEOUT_S, Relay, World
from tests.e2e.mocks import Reply, WriteFile

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# Each CLI's own most dangerous flags, each as the single value a caller would send.
DANGEROUS: dict[str, tuple[str, ...]] = {
    "codex": (
        "--dangerously-bypass-approvals-and-sandbox",
        "--yolo",
        "-sdanger-full-access",
        '-csandbox_mode="danger-full-access"',
    ),
    "gemini": ("-y", "--yolo", "--approval-mode=yolo"),
    "claude": ("--dangerously-skip-permissions", "--permission-mode=bypassPermissions"),
    "copilot": ("--allow-all-tools", "--allow-all-paths", "--yolo"),
}
# Slots whose value reaches the CLI's argv (or its prompt); the job may run if the grant holds.
ARGV_SLOTS = ("session_id", "model", "system_prompt", "prompt")
# Slots the tool's schema types (a level name, a boolean): a flag there never becomes a job.
TYPED_SLOTS = ("reasoning_effort", "continue_latest")
# The dangerous values alternate between the two grants a caller gets without asking, so every
# CLI and slot meets both.
GRANTS = ("read-only", "edit")

CODEX_SANDBOX = {"read-only": "read-only", "edit": "workspace-write"}
CLAUDE_MODE = {"read-only": "default", "edit": "acceptEdits"}
# Gemini's tools that only a higher approval mode declares.
GEMINI_BEYOND = {
    "read-only": {"write_file", "replace", "run_shell_command"},
    "edit": {"run_shell_command"},
}
GEMINI_YOLO = "YOLO mode is enabled"
# The prompt beside a filled slot: a hostile caller starts it with '-' too, which moves it out of the
# argv (onto stdin) and leaves a flag in a slot free to act (codex then resumes `-`, the stdin prompt).
COMPANION_PROMPT = "- say hello PROMPT-4e1"
# Seconds a running job may take; the CLIs here answer one or three mock turns.
JOB_TIMEOUT_S = 60.0
# The wrapper each CLI runs through: records its argv (NUL-separated), then becomes the CLI.
WRAPPER = """#!/bin/sh
printf '%s\\0' "$@" > "{log}/argv.$$"
exec "{real}" "$@"
"""


@dataclass(frozen=True)
class Case:
    agent: str
    slot: str
    value: str
    grant: str

    @property
    def id(self) -> str:
        return f"{self.agent}-{self.slot}-{self.value}-{self.grant}"


def _cases(slots: tuple[str, ...]) -> list[Case]:
    return [
        Case(agent, slot, value, GRANTS[i % len(GRANTS)])
        for agent, values in DANGEROUS.items()
        for slot in slots
        for i, value in enumerate(values)
    ]


ARGV_CASES = _cases(ARGV_SLOTS)
TYPED_CASES = [(agent, slot) for agent in DANGEROUS for slot in TYPED_SLOTS]


@dataclass(frozen=True)
class ShellCall(Reply):
    """A Chat Completions turn asking copilot's `bash` tool to run `command` (the shared mock has none)."""

    command: str = ""


def _chat_stream(original: Any) -> Any:
    def stream(reply: Reply, text: str, model: str) -> Iterator[bytes]:
        if not isinstance(reply, ShellCall):
            yield from original(reply, text, model)
            return
        args = json.dumps({"command": reply.command, "description": "mock", "mode": "sync", "initial_wait": 10})
        call = {
            "index": 0,
            "id": "call_mock_shell",
            "type": "function",
            "function": {"name": "bash", "arguments": args},
        }
        base = {"id": "chatcmpl-mockshell", "object": "chat.completion.chunk", "created": 0, "model": model}
        for choices in (
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
            [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        ):
            yield f"data: {json.dumps({**base, 'choices': choices})}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return stream


@pytest.fixture
def hostile(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    """The shared sealed world, with each CLI behind an argv-recording wrapper and a mock that can ask for a shell."""
    wrappers, log = world.root / "argv-bin", world.root / "argv-log"
    wrappers.mkdir()
    log.mkdir()
    for agent in DANGEROUS:
        path = wrappers / agent
        path.write_text(WRAPPER.format(log=log, real=world.bin / agent), encoding="utf-8")
        path.chmod(0o755)
    monkeypatch.setattr(mocks, "chat_stream", _chat_stream(mocks.chat_stream))
    return dataclasses.replace(world, bin=wrappers)


def _argvs(world: World) -> list[list[str]]:
    found: list[list[str]] = []
    for path in sorted((world.root / "argv-log").glob("argv.*")):
        found.append(path.read_bytes().decode("utf-8", "replace").split("\0")[:-1])
    return found


def _body(world: World, case: Case) -> dict[str, Any]:
    body: dict[str, Any] = {
        "agent": case.agent,
        "prompt": COMPANION_PROMPT,
        "cwd": str(world.workdir),
        "mode": "sync",
        "permission": case.grant,
        "timeout_s": JOB_TIMEOUT_S,
    }
    body[case.slot] = case.value
    return body


async def _delegate(relay: Relay, body: dict[str, Any]) -> dict[str, Any]:
    """The delegation's structured result; a schema refusal has none, so it becomes `{"schema_error": text}`."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await relay.client.call_tool("delegate", body)
    if result.structured_content is None:
        text = " ".join(str(getattr(c, "text", "")) for c in result.content)
        assert result.is_error, f"delegate returned no structured result: {text}"
        return {"schema_error": text}
    return dict(result.structured_content)


def _jobs(relay: Relay) -> list[str]:
    db = relay.settings.db_path
    return [rec.id for rec in Store(db).list_jobs(limit=100)] if Path(db).exists() else []


async def _page(relay: Relay, job_id: str, view: str) -> str:
    page = await relay.call("job_result", {"job_id": job_id, "view": view, "limit": 200_000})
    return str(page["text"])


def _copilot_script(world: World) -> tuple[Path, Path]:
    """Ask copilot for a shell command in the workspace, then a file outside it; return what each would write."""
    shell_mark = world.workdir / "shell-ran.txt"
    outside = world.root / "outside.txt"
    world.mock.script_for(
        "chat",
        # A program, not a plain redirection (copilot lets `--allow-tool write` run `echo ... > file`).
        ShellCall(command=f"node -e \"require('fs').writeFileSync('{shell_mark}', 'ran')\""),
        Reply(write=WriteFile(str(outside), "written outside the workspace\n")),
        Reply(text="done DONE-c0p", echo_tool_result=True),
    )
    return shell_mark, outside


@dataclass(frozen=True)
class Ran:
    """A delegation that became a job: its envelope and what its CLI printed."""

    env: dict[str, Any]
    stderr: str
    events: str


@asynccontextmanager
async def _relay(
    world: World, extra_args: dict[str, list[str]] | None = None, profile: str | None = None
) -> AsyncIterator[Relay]:
    """relay behind the MCP client, with `[agents.NAME] extra_args` the person configured, or a compat profile."""
    world.settings()
    config = world.relay_home / "config.toml"
    text = config.read_text(encoding="utf-8")
    for agent, args in (extra_args or {}).items():
        text = text.replace(f"[agents.{agent}]\n", f"[agents.{agent}]\nextra_args = {json.dumps(args)}\n")
    config.write_text(text, encoding="utf-8")
    environ = {**world.relay_environ(), **({"RELAY_PROFILE": profile} if profile else {})}
    settings = load_settings(environ, cwd=world.workdir)
    async with Client(build_server(settings)) as client:
        yield Relay(client, settings, world)


async def _run(world: World, body: dict[str, Any], extra_args: dict[str, list[str]] | None = None) -> Ran | None:
    """Delegate `body`; None when relay refused it (then no job exists and no CLI started)."""
    async with _relay(world, extra_args) as relay:
        env = await _delegate(relay, body)
        jobs = _jobs(relay)
        if not env.get("job_id"):
            assert env.get("error", {}).get("code") == "INVALID_ARGUMENT", env
            assert env["error"].get("hint"), env
            assert jobs == [], f"refused, yet jobs {jobs} exist"
            assert _argvs(world) == [], "refused, yet the CLI was started"
            return None
        return Ran(env, await _page(relay, env["job_id"], "stderr"), await _page(relay, env["job_id"], "events"))


def _check_grant_held(world: World, agent: str, grant: str, ran: Ran, targets: tuple[Path, Path] | None) -> None:
    """What the CLI itself says about its approval mode and sandbox is what the grant allows."""
    turns = world.mock.turns()
    env = ran.env
    where = (
        f"argv {_argvs(world)}\nstatus {env.get('status')} error {env.get('error')}\n"
        f"stderr:\n{ran.stderr[-2500:]}\nevents:\n{ran.events[:1500]}"
    )
    assert turns, f"the job ended before {agent} reached the model (the value was read as a flag?)\n{where}"
    if agent == "codex":
        for turn in turns:
            meta = json.loads(turn.headers.get("x-codex-turn-metadata", "{}"))
            assert meta.get("sandbox_mode") == CODEX_SANDBOX[grant], (
                f"codex reported sandbox_mode {meta.get('sandbox_mode')!r}, sandbox {meta.get('sandbox')!r}\n{where}"
            )
            assert "`sandbox_mode` is `danger-full-access`" not in turn.text, where
    elif agent == "gemini":
        assert GEMINI_YOLO not in ran.stderr, f"gemini says: {GEMINI_YOLO}\n{where}"
        for turn in turns:
            declared = {
                str(decl.get("name"))
                for tool in turn.body.get("tools", [])
                for decl in tool.get("functionDeclarations", [])
            }
            beyond = declared & GEMINI_BEYOND[grant]
            assert not beyond, f"gemini declared {sorted(beyond)} at {grant}\n{where}"
    elif agent == "claude":
        modes = re.findall(r'"permissionMode":\s*"([^"]*)"', ran.events)
        assert modes, f"claude printed no system/init event\n{where}"
        assert set(modes) == {CLAUDE_MODE[grant]}, f"claude ran with permissionMode {modes}\n{where}"
    else:
        assert targets is not None
        shell_mark, outside = targets
        assert len(turns) == 3, f"copilot did not take both tool calls ({len(turns)} turns)\n{where}"
        denied = [d.get("tool_name") for d in env.get("permission_denials", [])]
        assert sorted(denied) == ["bash", "create"], f"copilot's own tool results denied {denied}\n{where}"
        assert not shell_mark.exists(), f"copilot ran the shell command at {grant}\n{where}"
        assert not outside.exists(), f"copilot wrote outside the workspace at {grant}\n{where}"


@pytest.mark.parametrize("case", ARGV_CASES, ids=[c.id for c in ARGV_CASES])
async def test_a_dangerous_flag_in_a_slot_is_refused_or_the_cli_runs_with_the_grants_mode(
    hostile: World, case: Case
) -> None:
    targets = _copilot_script(hostile) if case.agent == "copilot" else None
    ran = await _run(hostile, _body(hostile, case))
    if ran is not None:
        _check_grant_held(hostile, case.agent, case.grant, ran, targets)


@pytest.mark.parametrize(("agent", "slot"), TYPED_CASES, ids=[f"{a}-{s}" for a, s in TYPED_CASES])
async def test_a_dangerous_flag_in_a_typed_slot_never_becomes_a_job(hostile: World, agent: str, slot: str) -> None:
    async with hostile.relay() as relay:
        for i, value in enumerate(DANGEROUS[agent]):
            case = Case(agent, slot, value, GRANTS[i % len(GRANTS)])
            env = await _delegate(relay, _body(hostile, case))
            assert "schema_error" in env or env.get("error", {}).get("code") == "INVALID_ARGUMENT", (case, env)
        jobs = _jobs(relay)
    assert jobs == []
    assert _argvs(hostile) == []
    assert hostile.mock.requests == []


# The readback is not vacuous: each CLI's own report shows a dangerous flag the person configured.
CONFIGURED = {
    "codex": ("read-only", ["--dangerously-bypass-approvals-and-sandbox"], "codex reported"),
    "gemini": ("read-only", ["-y"], "gemini says: YOLO"),
    "claude": ("read-only", ["--permission-mode", "acceptEdits"], "claude ran with permissionMode"),
    "copilot": ("edit", ["--allow-all-tools"], "copilot's own tool results denied"),
}


@pytest.mark.parametrize("agent", sorted(CONFIGURED))
async def test_the_clis_own_report_shows_a_dangerous_flag_the_person_configured(hostile: World, agent: str) -> None:
    grant, extra_args, report = CONFIGURED[agent]
    targets = _copilot_script(hostile) if agent == "copilot" else None
    body = {**_body(hostile, Case(agent, "prompt", COMPANION_PROMPT, grant))}
    ran = await _run(hostile, body, {agent: extra_args})
    assert ran is not None
    with pytest.raises(AssertionError, match=report):
        _check_grant_held(hostile, agent, grant, ran, targets)


# gobby's `codex(thread_id=...)` reaches the same codex argv slot as delegate's session_id.
GOBBY_SANDBOX = {"read-only": "readOnly", "edit": "workspaceWrite"}
GOBBY_CASES = [Case("codex", "thread_id", value, GRANTS[i % len(GRANTS)]) for i, value in enumerate(DANGEROUS["codex"])]


@pytest.mark.parametrize("case", GOBBY_CASES, ids=[c.id for c in GOBBY_CASES])
async def test_a_dangerous_flag_as_gobbys_codex_thread_id_is_refused_or_codex_keeps_its_sandbox(
    hostile: World, case: Case
) -> None:
    body = {
        "prompt": COMPANION_PROMPT,
        "thread_id": case.value,
        "cwd": str(hostile.workdir),
        "sandbox": GOBBY_SANDBOX[case.grant],
    }
    async with _relay(hostile, profile="gobby") as relay:
        with anyio.fail_after(CALL_TIMEOUT_S):
            result = await relay.client.call_tool("codex", body)
        reply = dict(result.structured_content or {})
        jobs = _jobs(relay)
        job_dir = relay.settings.jobs_dir
    if not reply.get("job_id"):
        assert reply.get("success") is False and reply.get("error_type") == "ValueError", reply
        assert jobs == [] and _argvs(hostile) == [], (jobs, reply)
        return
    files = job_dir / str(reply["job_id"])
    stderr = (files / "stderr").read_text(encoding="utf-8", errors="replace")
    events = (files / "stdout").read_text(encoding="utf-8", errors="replace")
    _check_grant_held(hostile, case.agent, case.grant, Ran(reply, stderr, events), None)
