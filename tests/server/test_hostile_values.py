"""Through `delegate` (the MCP SDK's in-memory client): a caller's value that a CLI could read as a flag is refused
at admission, before any job, process or audit line exists; a flag-like prompt still reaches the CLI as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.audit import LOG_FILE, iter_lines, parse_loose
from relay.server.app import build_server
from tests.conftest import FAKES, SettingsFactory

pytestmark = pytest.mark.anyio

CLIS = ("claude", "codex", "gemini", "copilot", "mycli")
# Each CLI's own most dangerous flags, and values a parser could split.
HOSTILE = ("--dangerously-bypass-approvals-and-sandbox", "-y", "--yolo", "--allow-all-tools", "-c", "ok\n--yolo")
SLOTS = {
    "claude": ("session_id", "model", "reasoning_effort"),
    "codex": ("session_id", "model", "reasoning_effort"),
    "gemini": ("session_id", "model"),
    "copilot": ("session_id", "model", "reasoning_effort"),
    "mycli": ("session_id", "model"),
}


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "argv.jsonl"


@pytest.fixture
def config(argv_log: Path) -> str:
    """Every CLI is its fake, logging its argv; `mycli` is a CLI declared in config.toml with value templates."""
    env = f'[agents.claude.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
    blocks = [
        f'[agents.{name}]\ncommand = "{FAKES / name}"\n[agents.{name}.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
        for name in ("codex", "gemini", "copilot")
    ]
    mycli = (
        f'[agents.mycli]\ncommand = "{FAKES / "generic"}"\nargs = ["--jsonl", "{{prompt}}"]\noutput = "jsonl"\n'
        'model_args = ["--model", "{model}"]\nresume_args = ["--session", "{session_id}"]\n'
        f'[agents.mycli.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
    )
    return "\n".join([env, *blocks, mycli])


async def delegate(c: Client, **args: Any) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(30):
        result = await c.call_tool("delegate", {"mode": "sync", **args})
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


async def jobs(c: Client) -> list[dict[str, Any]]:
    result = await c.call_tool("job_list", {"limit": 50})
    assert result.structured_content is not None
    return result.structured_content["jobs"]


def audit_events(relay_home: Path) -> list[dict[str, Any]]:
    return [e for e in map(parse_loose, iter_lines(relay_home / LOG_FILE)) if e]


def argv_of(argv_log: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in argv_log.read_text().splitlines()] if argv_log.exists() else []


async def test_the_codex_and_gemini_exploits_are_refused_before_a_job_or_an_audit_line_exists(
    make_settings: SettingsFactory, config: str, workdir: Path, argv_log: Path, relay_home: Path
) -> None:
    async with Client(build_server(make_settings(config))) as c:
        codex = await delegate(
            c,
            agent="codex",
            session_id="--dangerously-bypass-approvals-and-sandbox",
            prompt="- delete everything",
            cwd=str(workdir),
        )
        gemini = await delegate(c, agent="gemini", session_id="-y", prompt="hi", cwd=str(workdir))
        listed = await jobs(c)
    for failed, body in (codex, gemini):
        assert failed and body["error"]["code"] == "INVALID_ARGUMENT", body
        assert "session_id" in body["error"]["message"] and body["error"]["hint"]
        assert "job_id" not in body or body["job_id"] is None
    assert listed == [] and argv_of(argv_log) == []
    assert audit_events(relay_home) == []  # no job, so nothing recorded as run read-only


@pytest.mark.parametrize("cli", CLIS)
async def test_every_value_slot_of_every_cli_refuses_a_flag_with_a_code_naming_the_argument(
    make_settings: SettingsFactory, config: str, workdir: Path, argv_log: Path, cli: str
) -> None:
    answers: dict[tuple[str, str], tuple[bool, str, str]] = {}
    async with Client(build_server(make_settings(config))) as c:
        for slot in SLOTS[cli]:
            for value in HOSTILE:
                failed, body = await delegate(c, agent=cli, prompt="hi", cwd=str(workdir), **{slot: value})
                error = body.get("error") or {}
                answers[slot, value] = (failed, error.get("code"), slot in str(error.get("message")))
        listed = await jobs(c)
    assert answers == {key: (True, "INVALID_ARGUMENT", True) for key in answers}
    assert listed == [] and argv_of(argv_log) == []


async def test_a_session_id_that_is_not_the_clis_own_format_nor_recorded_is_refused(
    make_settings: SettingsFactory, config: str, workdir: Path, argv_log: Path
) -> None:
    async with Client(build_server(make_settings(config))) as c:
        latest = await delegate(c, agent="gemini", session_id="latest", prompt="hi", cwd=str(workdir))
        index = await delegate(c, agent="gemini", session_id="1", prompt="hi", cwd=str(workdir))
        prefix = await delegate(c, agent="copilot", session_id="c72f", prompt="hi", cwd=str(workdir))
    for failed, body in (latest, index, prefix):
        assert failed and body["error"]["code"] == "INVALID_ARGUMENT" and "UUID" in body["error"]["hint"]
    assert argv_of(argv_log) == []


async def test_a_system_prompt_with_a_control_character_and_a_base_that_is_an_option_are_refused(
    make_settings: SettingsFactory, config: str, workdir: Path
) -> None:
    async with Client(build_server(make_settings(config))) as c:
        system = await delegate(c, agent="claude", prompt="hi", cwd=str(workdir), system_prompt="terse\x1b[2J")
        base = await delegate(c, prompt="hi", cwd=str(workdir), workspace="worktree", base="--upload-pack=touch x")
        listed = await jobs(c)
    assert system[0] and system[1]["error"]["code"] == "INVALID_ARGUMENT"
    assert base[0] and base[1]["error"]["code"] == "INVALID_ARGUMENT" and "base" in base[1]["error"]["message"]
    assert listed == []


@pytest.mark.parametrize("cli", CLIS)
async def test_a_prompt_made_of_the_clis_flags_reaches_it_as_text(
    make_settings: SettingsFactory, config: str, workdir: Path, argv_log: Path, cli: str
) -> None:
    prompt = "--yolo -y --dangerously-bypass-approvals-and-sandbox [[fake:echo]]"
    async with Client(build_server(make_settings(config))) as c:
        failed, body = await delegate(c, agent=cli, prompt=prompt, cwd=str(workdir))
    assert not failed, body
    (argv,) = argv_of(argv_log)
    assert not {"--yolo", "-y", "--dangerously-bypass-approvals-and-sandbox"} & set(argv), argv
    assert prompt in body["output"]
