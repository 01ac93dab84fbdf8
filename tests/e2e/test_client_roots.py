"""Which real clients declare MCP roots: each calls relay's `status`, whose `allowed_roots` says where each root came from.

relay's own configured root is elsewhere (config.toml), so the client's folder shows up in
`allowed_roots` only if the client declared it through the `roots` capability. The findings are
recorded in docs/clients.md ("Allowed roots from the client").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.client_mock import ClientModel, ToolCall
from tests.e2e.conftest import GEMINI_MODEL, MOCK_KEYS, ClaudeClient, World
from tests.e2e.mocks import Reply
from tests.e2e.test_install_clients import (
    INNER_ANSWER,
    assert_era,
    brain_for,
    codex_env,
    delegate_args,
    install,
    run,
    run_claude,
)

pytestmark = pytest.mark.e2e

# What each pinned client does (Claude Code 2.1.197 and 2.1.328, Codex 0.169.0, Gemini CLI 0.61.0).
DECLARES_ROOTS = {"claude-code": True, "codex": False, "gemini": True}


def declared_roots(model: ClientModel) -> list[str]:
    """The roots listed as the client's in the status result the client handed back to its model."""
    text = json.dumps([body for _, body in model.requests]).replace('\\"', '"')
    assert "config.toml [security] allowed_roots" in text, "no status result reached the model: " + text[-2000:]
    return re.findall(r'"path":\s*"([^"]+)",\s*"source":\s*"the MCP client\'s roots', text)


def configure(world: World) -> Path:
    """relay's configured root: a folder the client does not run in (beside the agents on the mock)."""
    elsewhere = world.tmp / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    world.settings()
    with (world.relay_home / "config.toml").open("a", encoding="utf-8") as fh:
        fh.write(f'\n[security]\nallowed_roots = ["{elsewhere}"]\n')
    return elsewhere


def test_claude_code_declares_its_working_folder_as_an_mcp_root_and_a_delegation_runs_there(
    world: World, claude_client: ClaudeClient
) -> None:
    """relay's own root is elsewhere, so the delegation into Claude Code's folder runs only because the client's
    roots reached relay: through `roots/list` on the 2025 era, through an input-required round on 2026-07-28."""
    configure(world)
    world.mock.always(Reply(text=INNER_ANSWER))
    calls = [ToolCall("mcp__relay__status", {}), ToolCall("mcp__relay__delegate", delegate_args(world))]
    with ClientModel(brain_for(calls)) as model:
        ran = run_claude(world, claude_client, model, "OUTER: relay status, then ask another agent")
    assert_era(ran, claude_client)
    assert ran.out.returncode == 0, ran.out.stdout[-2000:] + ran.out.stderr[-2000:] + ran.dump()
    assert set(declared_roots(model)) == ({str(world.workdir.resolve())} if DECLARES_ROOTS["claude-code"] else set())
    assert "blue-7f3a" in ran.result["result"], ran.result["result"] + ran.dump()
    asked = "roots/list" if claude_client.opening == "initialize" else "input_required"
    assert asked in json.dumps([msg for way, msg in ran.wire if way == "<"]), ran.dump()


def test_codex_declares_no_mcp_roots(world: World) -> None:
    configure(world)
    calls = [
        ToolCall("tool_search", {"query": "relay status", "limit": 8}, kind="tool_search_call"),
        ToolCall("status", {}, namespace="mcp__relay"),
    ]
    with ClientModel(brain_for(calls)) as model:
        env = codex_env(world, model)
        install(world, "codex", env)
        out = run([str(world.bin / "codex"), "exec", "--json", "OUTER: relay status"], env, world.workdir)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert set(declared_roots(model)) == ({str(world.workdir.resolve())} if DECLARES_ROOTS["codex"] else set())


def test_gemini_cli_declares_its_working_folder_as_an_mcp_root(world: World) -> None:
    configure(world)
    with ClientModel(brain_for([ToolCall("mcp_relay_status", {})])) as model:
        env = {
            **world.relay_environ(),
            "GEMINI_CLI_HOME": str(world.home),
            "GOOGLE_GEMINI_BASE_URL": model.url,
            "GEMINI_API_KEY": MOCK_KEYS["gemini"],
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
        install(world, "gemini", env)
        argv = [str(world.bin / "gemini"), "-p", "OUTER: relay status", "-m", GEMINI_MODEL, "-o", "json"]
        out = run(argv, env, world.workdir)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert set(declared_roots(model)) == ({str(world.workdir.resolve())} if DECLARES_ROOTS["gemini"] else set())
