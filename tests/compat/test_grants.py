"""The grant holds on every compat path where the calling model chooses a permission, and a full-access
profile the person serves keeps its seed's full access (relay.jobs.grants)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, ErrorData

from relay.server.app import build_server
from tests.compat.conftest import ProfileClient, call
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio


def runs(argv_log: Path) -> list[list[str]]:
    if not argv_log.exists():
        return []
    return [json.loads(line)["argv"] for line in argv_log.read_text().splitlines()]


def refused(result: CallToolResult) -> bool:
    shown = json.dumps(result.structured_content) + "".join(str(getattr(b, "text", "")) for b in result.content)
    return bool(result.is_error) and ("PERMISSION_NOT_GRANTED" in shown or "above the grant 'edit'" in shown)


# (how relay is served, the tool called, its arguments): each asks for full access by the model's choice.
ABOVE_THE_GRANT = [
    (
        {"profile": "codex-mcp"},
        "codex",
        {"prompt": "p", "sandbox": "danger-full-access", "workingDirectory": "WORKDIR"},
    ),
    ({"profile": "gobby"}, "codex", {"prompt": "p", "sandbox": "dangerFullAccess", "cwd": "WORKDIR"}),
    (
        {},
        "call_tool",
        {"server_name": "surreal", "tool_name": "call_codex", "arguments": {"prompt": "p", "cwd": "WORKDIR"}},
    ),
    (
        {},
        "call_tool",
        {
            "server_name": "claude-code-mcp",
            "tool_name": "claude_code",
            "arguments": {"prompt": "p", "workFolder": "WORKDIR"},
        },
    ),
]


@pytest.mark.parametrize(("served", "tool", "args"), ABOVE_THE_GRANT, ids=lambda v: str(v)[:40])
async def test_a_compat_call_for_full_access_by_the_models_choice_is_refused_without_a_person(
    profile_client: ProfileClient, argv_log: Path, workdir: Path, served: dict[str, str], tool: str, args: Any
) -> None:
    args = json.loads(json.dumps(args).replace("WORKDIR", str(workdir)))
    async with profile_client(**served) as c:
        result = await call(c, tool, **args)
    assert refused(result), result
    assert runs(argv_log) == []


async def accept(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
    return ElicitResult(action="accept", content={"for_session": False})


async def test_codex_mcps_danger_full_access_runs_once_the_person_accepts(
    make_settings: SettingsFactory, fakes_config: str, argv_log: Path, workdir: Path
) -> None:
    settings = make_settings(fakes_config, RELAY_PROFILE="codex-mcp")
    async with Client(build_server(settings), elicitation_callback=accept, mode="legacy") as c:
        result = await call(c, "codex", prompt="p", sandbox="danger-full-access", workingDirectory=str(workdir))
    assert not result.is_error, result
    [argv] = runs(argv_log)
    assert argv[argv.index("-s") + 1] == "danger-full-access"


@pytest.mark.parametrize(
    ("profile", "tool", "args"),
    [
        ("surreal", "call_codex", {"prompt": "p", "cwd": "WORKDIR"}),
        ("claude-code-mcp", "claude_code", {"prompt": "p", "workFolder": "WORKDIR"}),
    ],
)
async def test_a_full_access_profile_the_person_serves_runs_its_seeds_full_access_without_asking(
    profile_client: ProfileClient, argv_log: Path, workdir: Path, profile: str, tool: str, args: dict[str, str]
) -> None:
    args = {k: v.replace("WORKDIR", str(workdir)) for k, v in args.items()}
    async with profile_client(profile) as c:
        result = await call(c, tool, **args)
    assert not result.is_error, result
    [argv] = runs(argv_log)
    assert "danger-full-access" in argv or "bypassPermissions" in argv
