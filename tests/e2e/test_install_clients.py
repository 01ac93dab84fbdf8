"""The README's client story, verbatim: in a temp HOME, `relay install CLIENT`, then the real client, headless,
calls relay's `delegate`, which runs a real inner claude against the mock model, and the answer comes back.

Nothing but what `relay install` wrote tells the client about relay: no --mcp-config, no
--allowedTools, no MCP_CONNECTION_NONBLOCKING, no approval flags.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.client_mock import ClientModel, ToolCall, Turn
from tests.e2e.conftest import CODEX_KEY_VAR, GEMINI_MODEL, MOCK_KEYS, World
from tests.e2e.mocks import Reply, tool_output

pytestmark = pytest.mark.e2e

RELAY = str(Path(sys.executable).with_name("relay"))
INNER_TASK = "INNER-TASK: name the colour of the sky"
INNER_ANSWER = "the inner agent says: blue-7f3a"
# Seconds for one whole headless run of an outer client (its start, relay's start, the inner job).
RUN_TIMEOUT_S = 180


def brain_for(calls: list[ToolCall]) -> Any:
    """The outer client's model: make each call in turn, then repeat what the last tool returned."""

    def brain(api: str, body: dict[str, Any]) -> Turn:
        output = tool_output(api, body)
        made = sum(1 for _ in _tool_results(api, body))
        if made < len(calls):
            return calls[made]
        return f"relay answered: {output}"

    return brain


def _tool_results(api: str, body: dict[str, Any]) -> list[Any]:
    if api == "gemini":
        return [
            part
            for content in body.get("contents", [])
            for part in content.get("parts", [])
            if isinstance(part, dict) and "functionResponse" in part
        ]
    if api == "anthropic":
        return [
            block
            for message in body.get("messages", [])
            for block in (message.get("content") if isinstance(message.get("content"), list) else [])
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
    return [
        item
        for item in body.get("input", [])
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_output")
    ]


def install(world: World, client: str, env: dict[str, str]) -> None:
    out = subprocess.run(
        [RELAY, "install", client], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 0, out.stderr


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def delegate_args(world: World) -> dict[str, Any]:
    return {"prompt": INNER_TASK, "agent": "claude", "cwd": str(world.workdir), "mode": "sync"}


def claude_env(world: World, model: ClientModel) -> dict[str, str]:
    """Claude Code as the outer client: its own config folder, its model the mock `model`."""
    return {
        **world.relay_environ(),
        "CLAUDE_CONFIG_DIR": str(world.home / ".claude-outer"),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": MOCK_KEYS["claude"],
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }


def test_claude_code_after_relay_install_calls_delegate_headless(world: World) -> None:
    world.settings()  # relay's config.toml: the inner claude runs against the shared mock
    world.mock.always(Reply(text=INNER_ANSWER))
    calls = [ToolCall("mcp__relay__delegate", delegate_args(world))]
    with ClientModel(brain_for(calls)) as model:
        env = claude_env(world, model)
        install(world, "claude-code", env)
        out = run(
            [str(world.bin / "claude"), "-p", "OUTER: ask another agent", "--output-format", "json"], env, world.workdir
        )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["is_error"] is False, out.stdout + out.stderr
    assert "relay answered:" in result["result"] and "blue-7f3a" in result["result"], result["result"]


def codex_env(world: World, model: ClientModel) -> dict[str, str]:
    """Codex as the outer client: its config.toml points at `model` (relay install appends relay's table)."""
    config = world.home / ".codex" / "config.toml"
    config.write_text(config.read_text().replace(world.mock.url, model.url))
    return {**world.relay_environ(), "CODEX_HOME": str(world.home / ".codex"), CODEX_KEY_VAR: MOCK_KEYS["codex"]}


def test_codex_after_relay_install_finds_and_calls_delegate_headless(world: World) -> None:
    world.settings()
    world.mock.always(Reply(text=INNER_ANSWER))
    calls = [
        ToolCall("tool_search", {"query": "delegate to claude", "limit": 8}, kind="tool_search_call"),
        ToolCall("delegate", delegate_args(world), namespace="mcp__relay"),
    ]
    with ClientModel(brain_for(calls)) as model:
        env = codex_env(world, model)
        install(world, "codex", env)
        out = run([str(world.bin / "codex"), "exec", "--json", "OUTER: ask another agent"], env, world.workdir)
    searched = [
        item
        for _, body in model.requests
        for item in body.get("input", [])
        if isinstance(item, dict) and item.get("type") == "tool_search_output"
    ]
    assert searched and '"name": "delegate"' in json.dumps(searched[0]), "tool_search did not find delegate"
    messages = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    answers = [
        m["item"]["text"]
        for m in messages
        if m.get("type") == "item.completed" and m["item"]["type"] == "agent_message"
    ]
    assert answers and "relay answered:" in answers[-1] and "blue-7f3a" in answers[-1], (
        out.stdout[-3000:] + out.stderr[-3000:]
    )


# What a user types when they look for relay's delegation (issue: "relay delegate" once found eight
# relay tools but not delegate).
SEARCHES = ("relay delegate", "delegate to codex", "ask another agent")


def test_codex_tool_search_finds_delegate_for_the_words_people_use(world: World) -> None:
    world.settings()
    calls = [ToolCall("tool_search", {"query": q, "limit": 8}, kind="tool_search_call") for q in SEARCHES]
    with ClientModel(brain_for(calls)) as model:
        env = codex_env(world, model)
        install(world, "codex", env)
        out = run([str(world.bin / "codex"), "exec", "--json", "OUTER: find relay's delegation"], env, world.workdir)
    last = model.requests[-1][1]
    found = [
        item for item in last.get("input", []) if isinstance(item, dict) and item.get("type") == "tool_search_output"
    ]
    assert len(found) == len(SEARCHES), out.stdout[-3000:] + out.stderr[-3000:]
    for query, item in zip(SEARCHES, found, strict=True):
        names = [t.get("name") for t in _listed_tools(item.get("tools"))]
        assert "delegate" in names, f"tool_search({query!r}) listed {names}"


def _listed_tools(node: Any) -> list[dict[str, Any]]:
    """The tool entries in a tool_search output (a list of tools, or namespaces holding them)."""
    found: list[dict[str, Any]] = []
    for entry in node if isinstance(node, list) else []:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("tools"), list):
            found.extend(_listed_tools(entry["tools"]))
        elif "name" in entry:
            found.append(entry)
    return found


def test_gemini_after_relay_install_calls_delegate_headless(world: World) -> None:
    world.settings()
    world.mock.always(Reply(text=INNER_ANSWER))
    offered: list[list[str]] = []
    calls = [ToolCall("mcp_relay_delegate", delegate_args(world))]
    brain = brain_for(calls)

    def gemini_brain(api: str, body: dict[str, Any]) -> Turn:
        names = [f.get("name", "") for t in body.get("tools", []) for f in t.get("functionDeclarations", [])]
        offered.append(names)
        return brain(api, body)

    with ClientModel(gemini_brain) as model:
        env = {
            **world.relay_environ(),
            "GEMINI_CLI_HOME": str(world.home),
            "GOOGLE_GEMINI_BASE_URL": model.url,
            "GEMINI_API_KEY": MOCK_KEYS["gemini"],
            "GEMINI_CLI_TRUST_WORKSPACE": "true",  # Gemini's folder trust, not relay's business
        }
        install(world, "gemini", env)
        argv = [str(world.bin / "gemini"), "-p", "OUTER: ask another agent", "-m", GEMINI_MODEL, "-o", "json"]
        out = run(argv, env, world.workdir)
    assert offered and "mcp_relay_delegate" in offered[0], offered[:1]
    result = json.loads(out.stdout)
    assert "relay answered:" in result["response"] and "blue-7f3a" in result["response"], (
        out.stdout + out.stderr[-3000:]
    )


def test_headless_claude_code_asking_for_full_gets_the_refusal_and_its_next_call_at_edit_runs(world: World) -> None:
    """The default grant (edit) against the real Claude Code as the client: `claude -p` cancels relay's
    confirmation form without asking anyone, the refusal's text reaches its model, and its retry at edit runs."""
    from relay.audit import LOG_FILE, iter_lines, parse_loose
    from relay.store import Store

    world.settings()
    world.mock.always(Reply(text=INNER_ANSWER))
    calls = [
        ToolCall("mcp__relay__delegate", delegate_args(world) | {"permission": "full"}),
        ToolCall("mcp__relay__delegate", delegate_args(world) | {"permission": "edit"}),
    ]
    with ClientModel(brain_for(calls)) as model:
        env = claude_env(world, model)
        install(world, "claude-code", env)
        out = run(
            [str(world.bin / "claude"), "-p", "OUTER: ask another agent", "--output-format", "json"], env, world.workdir
        )
        seen = [json.dumps(r) for _, body in model.requests for r in _tool_results("anthropic", body)]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["is_error"] is False, out.stdout + out.stderr
    refusal = next((text for text in seen if "PERMISSION_NOT_GRANTED" in text), None)
    assert refusal is not None, seen
    assert "grant 'edit'" in refusal and "permission 'edit' or lower" in refusal and "claude -p" in refusal
    assert "blue-7f3a" in result["result"], result["result"]
    jobs = Store(world.relay_home / "relay.db").list_jobs(limit=10)
    assert [(j.status, j.request["permission"]) for j in jobs] == [("completed", "edit")]  # the full one never ran
    entries = [e for e in map(parse_loose, iter_lines(world.relay_home / LOG_FILE)) if e is not None]
    [refused] = [e for e in entries if e["event"] == "permission.refused"]
    assert refused["data"]["permission"] == "full" and refused["data"]["answer"] == "cancel"  # asked, cancelled unasked
    assert refused["data"]["principal"].startswith("local (claude-code")
