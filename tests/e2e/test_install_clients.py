"""The README's client story, verbatim: in a temp HOME, `relay install CLIENT`, then the real client, headless,
calls relay's `delegate`, which runs a real inner claude against the mock model, and the answer comes back.

Nothing but what `relay install` wrote tells the client about relay: no --mcp-config, no
--allowedTools, no MCP_CONNECTION_NONBLOCKING, no approval flags. Claude Code runs in each pinned
version (fixture `claude_client`: the 2025 era's `initialize` and the 2026-07-28 era's
`server/discover`). `wiretap.py` sits in front of the installed `relay` command (same command line,
same environment), so each test sees which era its client spoke.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.client_mock import ClientModel, ToolCall, Turn
from tests.e2e.conftest import CODEX_KEY_VAR, GEMINI_MODEL, MOCK_KEYS, ClaudeClient, World
from tests.e2e.mocks import Reply, tool_output

pytestmark = pytest.mark.e2e

RELAY = str(Path(sys.executable).with_name("relay"))
WIRETAP = Path(__file__).with_name("wiretap.py")
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


# The protocol revision each pinned client other than Claude Code asks for in its `initialize` (the 2025 era).
INITIALIZE_VERSIONS = {"codex": "2025-06-18", "gemini": "2025-06-18"}


def tap_relay(world: World, client: str, env: dict[str, str]) -> Path:
    """Put wiretap.py in front of the `relay` that `relay install CLIENT` wrote; returns the wire's log."""
    log = world.root / "relay-wire.log"

    def tapped(entry: dict[str, Any]) -> tuple[str, list[str]]:
        return sys.executable, [str(WIRETAP), str(log), "--", entry["command"], *entry.get("args", [])]

    if client == "codex":
        path = Path(env["CODEX_HOME"]) / "config.toml"
        text = path.read_text(encoding="utf-8")
        entry = tomllib.loads(text)["mcp_servers"]["relay"]
        command, args = tapped(entry)
        written = f"command = {json.dumps(entry['command'])}\nargs = {json.dumps(entry['args'])}\n"
        assert text.count(written) == 1, text
        path.write_text(text.replace(written, f"command = {json.dumps(command)}\nargs = {json.dumps(args)}\n"))
        return log
    path = (
        Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json"
        if client == "claude-code"
        else Path(env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json"
    )
    config = json.loads(path.read_text(encoding="utf-8"))
    entry = config["mcpServers"]["relay"]
    entry["command"], entry["args"] = tapped(entry)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return log


def read_wire(log: Path) -> list[tuple[str, dict[str, Any]]]:
    """The messages wiretap.py logged: ('>' client to relay, or '<'), each a JSON-RPC message."""
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [(line[0], json.loads(line[2:])) for line in lines if line[:2] in ("> ", "< ") and line[2:].startswith("{")]


def opening(wire: list[tuple[str, dict[str, Any]]]) -> tuple[str, str | None]:
    """The client's first message to relay and the protocol revision it names (initialize's, or the _meta one)."""
    first = wire[0][1] if wire else {}
    params = first.get("params", {})
    version = params.get("protocolVersion") or params.get("_meta", {}).get("io.modelcontextprotocol/protocolVersion")
    return str(first.get("method")), version


@dataclass
class ClaudeRun:
    """One headless `claude -p` run with relay installed: its JSON result and relay's side of the wire."""

    result: dict[str, Any]
    out: subprocess.CompletedProcess[str]
    wire: list[tuple[str, dict[str, Any]]]

    def methods(self, direction: str = ">") -> list[str]:
        return [str(msg["method"]) for way, msg in self.wire if way == direction and "method" in msg]

    def dump(self) -> str:
        """relay's side of the wire, a line a message: direction, id, method, what it carried (cut short)."""
        lines: list[str] = []
        for way, msg in self.wire:
            body = msg.get("params", msg.get("result", msg.get("error", {})))
            shown = {k: v for k, v in body.items() if k not in ("_meta", "tools", "instructions")}
            lines.append(f"{way} {msg.get('id', '')} {msg.get('method', '')} {json.dumps(shown)[:300]}")
        return "\n".join(lines)[:12000]


def run_claude(world: World, claude: ClaudeClient, model: ClientModel, prompt: str) -> ClaudeRun:
    """`relay install claude-code`, then `claude -p PROMPT` with that Claude Code version as relay's client."""
    env = claude_env(world, model)
    install(world, "claude-code", env)
    log = tap_relay(world, "claude-code", env)
    out = run([str(claude.bin), "-p", prompt, "--output-format", "json"], env, world.workdir)
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    return ClaudeRun(result, out, read_wire(log))


def assert_era(run: ClaudeRun, claude: ClaudeClient) -> None:
    """The client opened relay's connection the way its era does (2025: initialize; 2026-07-28: server/discover)."""
    methods = run.methods()
    assert methods, (
        f"no message crossed relay's stdio (exit {run.out.returncode}): {run.out.stdout[-3000:]}{run.out.stderr[-2000:]}"
    )
    method, version = opening(run.wire)
    assert method == claude.opening, f"Claude Code {claude.version} opened with {method}:\n{run.dump()}"
    assert version is not None and version.startswith("2025-" if method == "initialize" else "2026-"), version
    if claude.opening == "server/discover":
        # When the probe's answer is slow to come (a loaded machine), the client races an `initialize`
        # after it; relay, already serving 2026-07-28, refuses it, and no 2025 handshake completes.
        raced = {msg.get("id") for way, msg in run.wire if way == ">" and msg.get("method") == "initialize"}
        answers = [msg for way, msg in run.wire if way == "<" and "method" not in msg and msg.get("id") in raced]
        assert all("error" in msg for msg in answers), f"relay answered a raced initialize:\n{run.dump()}"
        assert "notifications/initialized" not in methods, run.dump()


def confirmation_answers(run: ClaudeRun) -> list[dict[str, Any]]:
    """The client's answers to relay's confirmation forms, as they crossed the wire.

    2025 era: relay sends `elicitation/create` and the client answers that request. 2026-07-28:
    a `tools/call` result asks for the form among its `inputRequests`, with a sealed `requestState`,
    and the client's retry carries the answer in `inputResponses` and the state unchanged.
    """
    answers: list[dict[str, Any]] = []
    asked: set[Any] = set()
    sealed: dict[str, str] = {}
    for way, msg in run.wire:
        if way == "<" and msg.get("method") == "elicitation/create":
            asked.add(msg.get("id"))
        elif way == ">" and "method" not in msg and msg.get("id") in asked:
            answers.append(msg.get("result", {}))
        elif way == "<" and isinstance(msg.get("result"), dict):
            requests = msg["result"].get("inputRequests") or {}
            for key, request in requests.items():
                if request.get("method") == "elicitation/create":
                    sealed[key] = msg["result"].get("requestState", "")
        elif way == ">" and msg.get("method") == "tools/call":
            params = msg.get("params", {})
            for key, answer in (params.get("inputResponses") or {}).items():
                if key in sealed:
                    assert sealed[key] and params.get("requestState") == sealed[key], f"{key}: state not returned"
                    answers.append(answer)
    return answers


def test_claude_code_after_relay_install_sees_relays_tools_on_its_first_turn_and_calls_delegate_headless(
    world: World, claude_client: ClaudeClient
) -> None:
    world.settings()  # relay's config.toml: the inner claude runs against the shared mock
    world.mock.always(Reply(text=INNER_ANSWER))
    calls = [ToolCall("mcp__relay__delegate", delegate_args(world))]
    with ClientModel(brain_for(calls)) as model:
        ran = run_claude(world, claude_client, model, "OUTER: ask another agent")
        first_tools = [t.get("name") for t in model.requests[0][1].get("tools", [])] if model.requests else []
    assert_era(ran, claude_client)
    assert "mcp__relay__delegate" in first_tools, first_tools
    assert ran.result.get("is_error") is False, ran.out.stdout + ran.out.stderr[-3000:] + ran.dump()
    assert "relay answered:" in ran.result["result"] and "blue-7f3a" in ran.result["result"], ran.result["result"]


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
        log = tap_relay(world, "codex", env)
        out = run([str(world.bin / "codex"), "exec", "--json", "OUTER: ask another agent"], env, world.workdir)
    assert opening(read_wire(log)) == ("initialize", INITIALIZE_VERSIONS["codex"]), read_wire(log)[:2]
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
        log = tap_relay(world, "gemini", env)
        argv = [str(world.bin / "gemini"), "-p", "OUTER: ask another agent", "-m", GEMINI_MODEL, "-o", "json"]
        out = run(argv, env, world.workdir)
    assert opening(read_wire(log)) == ("initialize", INITIALIZE_VERSIONS["gemini"]), read_wire(log)[:2]
    assert offered and "mcp_relay_delegate" in offered[0], offered[:1]
    result = json.loads(out.stdout)
    assert "relay answered:" in result["response"] and "blue-7f3a" in result["response"], (
        out.stdout + out.stderr[-3000:]
    )


def test_headless_claude_code_asking_for_full_gets_the_refusal_and_its_next_call_at_edit_runs(
    world: World, claude_client: ClaudeClient
) -> None:
    """The default grant (edit) against the real Claude Code as the client: relay's confirmation form reaches
    `claude -p` (an elicitation on the 2025 era, an input request on 2026-07-28), which declines it without
    asking anyone; the refusal's text reaches its model, the refusal is on record, and its retry at edit runs."""
    from relay.audit import LOG_FILE, iter_lines, parse_loose
    from relay.store import Store

    world.settings()
    world.mock.always(Reply(text=INNER_ANSWER))
    calls = [
        ToolCall("mcp__relay__delegate", delegate_args(world) | {"permission": "full"}),
        ToolCall("mcp__relay__delegate", delegate_args(world) | {"permission": "edit"}),
    ]
    with ClientModel(brain_for(calls)) as model:
        ran = run_claude(world, claude_client, model, "OUTER: ask another agent")
        seen = [json.dumps(r) for _, body in model.requests for r in _tool_results("anthropic", body)]
    assert_era(ran, claude_client)
    assert ran.result.get("is_error") is False, ran.out.stdout + ran.out.stderr[-3000:] + ran.dump()
    assert confirmation_answers(ran) == [{"action": "cancel"}], ran.dump()  # the form reached it; it cancelled
    refusal = next((text for text in seen if "PERMISSION_NOT_GRANTED" in text), None)
    assert refusal is not None, seen
    assert "grant 'edit'" in refusal and "permission 'edit' or lower" in refusal and "claude -p" in refusal
    assert "blue-7f3a" in ran.result["result"], ran.result["result"]
    jobs = Store(world.relay_home / "relay.db").list_jobs(limit=10)
    assert [(j.status, j.request["permission"]) for j in jobs] == [("completed", "edit")]  # the full one never ran
    entries = [e for e in map(parse_loose, iter_lines(world.relay_home / LOG_FILE)) if e is not None]
    [refused] = [e for e in entries if e["event"] == "permission.refused"]
    assert refused["data"]["permission"] == "full" and refused["data"]["answer"] == "cancel"  # asked, cancelled unasked
    assert refused["data"]["principal"].startswith("local (claude-code")
