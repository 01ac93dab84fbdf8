"""Profile `powerspawn` (seed 004): CLI spawns on the fakes, API spawns on a mock vendor server, list/result/wait."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.audit import IAC_FILE, LOG_FILE, Views, iter_lines, parse_loose, verify, views_config
from relay.server.toolsets import powerspawn
from tests.api.mock_servers import MockServer, Recorded, Reply
from tests.argv import opt
from tests.compat.conftest import CALL_TIMEOUT_S, ProfileClient, call, data, logged, schemas, stdio_tool_names
from tests.conftest import FAKES

pytestmark = pytest.mark.anyio

SEED_TOOLS = [
    "list",
    "result",
    "spawn_claude",
    "spawn_codex",
    "spawn_copilot",
    "spawn_gemini",
    "spawn_grok",
    "spawn_mistral",
    "wait_for_agents",
]
XAI_KEY = "xai-test-0123456789abcdefghijkl"
GEMINI_KEY = "gemini-test-0123456789abcdefghij"
MISTRAL_KEY = "mistral-test-0123456789abcdefghi"
SPAWNED = "Agent spawned. Use 'list' to monitor, 'result' to get output."
AGENT_ID = re.compile(r"^[0-9a-f]{8}$")


@pytest.fixture
def api_mock() -> Iterator[MockServer]:
    with MockServer("openai") as server:
        yield server


@pytest.fixture
def copilot_config(argv_log: Path) -> str:
    return f'[agents.copilot]\ncommand = "{FAKES / "copilot"}"\n[agents.copilot.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'


@pytest.fixture
def spawner(profile_client: ProfileClient, api_mock: MockServer, copilot_config: str) -> Any:
    """A client of `relay serve --profile powerspawn`: fake CLIs, and the three APIs on the mock server."""

    def make(**env: str) -> Client:
        keys = {"XAI_API_KEY": XAI_KEY, "GEMINI_API_KEY": GEMINI_KEY, "MISTRAL_API_KEY": MISTRAL_KEY}
        urls = {f"RELAY_{p}_BASE_URL": api_mock.base_url for p in ("XAI", "GEMINI_API", "MISTRAL")}
        return profile_client("powerspawn", copilot_config, **(keys | urls | env))

    return make


def spawned(result: Any, agent_type: str, model: str | None) -> str:
    reply = data(result)
    assert not result.is_error, reply
    agent_id = reply["agent_id"]
    assert AGENT_ID.match(agent_id)
    expected: dict[str, Any] = {"agent_id": agent_id, "agent_type": agent_type}
    if model is not None:
        expected["model"] = model
    assert reply == expected | {"status": "running", "message": SPAWNED}
    return str(agent_id)


async def test_relay_serve_profile_powerspawn_lists_exactly_the_seeds_tools(relay_home: Path, workdir: Path) -> None:
    assert await stdio_tool_names("powerspawn", relay_home, workdir) == SEED_TOOLS


async def test_the_schemas_carry_the_seeds_parameters_enums_and_defaults(spawner: Any) -> None:
    async with spawner() as c:
        found = await schemas(c)
    assert sorted(found) == SEED_TOOLS
    props = {name: schema.get("properties", {}) for name, schema in found.items()}
    required = {name: schema.get("required", []) for name, schema in found.items()}
    assert required == {
        "spawn_claude": ["prompt"],
        "spawn_codex": ["prompt"],
        "spawn_copilot": ["prompt"],
        "spawn_grok": ["prompt"],
        "spawn_gemini": ["prompt"],
        "spawn_mistral": ["prompt"],
        "list": [],
        "result": ["agent_id"],
        "wait_for_agents": [],
    }
    assert {name: sorted(p) for name, p in props.items()} == {
        "spawn_claude": ["model", "prompt", "timeout"],
        "spawn_codex": ["prompt"],
        "spawn_copilot": ["model", "prompt"],
        "spawn_grok": ["model", "prompt", "system_prompt", "timeout"],
        "spawn_gemini": ["model", "prompt", "system_prompt"],
        "spawn_mistral": ["model", "prompt", "system_prompt"],
        "list": [],
        "result": ["agent_id"],
        "wait_for_agents": ["timeout"],
    }
    seed_models = {
        "spawn_claude": (["haiku", "sonnet", "opus"], "sonnet"),
        "spawn_copilot": (
            ["gpt-5.1", "gpt-5", "gpt-5-mini", "claude-sonnet", "claude-haiku", "claude-opus", "gemini"],
            "gpt-5.1",
        ),
        "spawn_grok": (["grok-3", "grok-3-fast"], "grok-3"),
        "spawn_gemini": (["gemini-2.0-flash", "gemini-1.5-pro", "gemini-1.5-flash"], "gemini-2.0-flash"),
        "spawn_mistral": (
            ["mistral-large-latest", "mistral-small-latest", "codestral-latest", "open-mistral-nemo"],
            "mistral-large-latest",
        ),
    }
    for tool, (models, default) in seed_models.items():
        model = props[tool]["model"]
        assert model["enum"][: len(models)] == models and model["default"] == default, tool
    assert props["spawn_claude"]["timeout"]["default"] == 300
    assert props["spawn_grok"]["timeout"]["default"] == 300
    assert props["wait_for_agents"]["timeout"]["default"] == 300


async def test_cli_spawns_return_at_once_and_run_with_the_seeds_flags(
    spawner: Any, argv_log: Path, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(powerspawn, "KEEPALIVE_S", 0.05)
    gate = tmp_path / "open"
    prompts = {agent: f"{agent} task [[fake:echo,until={gate}]]" for agent in ("claude", "codex", "copilot")}
    async with spawner() as c:
        claude = spawned(await call(c, "spawn_claude", prompt=prompts["claude"]), "claude", "sonnet")
        codex = spawned(await call(c, "spawn_codex", prompt=prompts["codex"]), "codex", None)
        copilot = spawned(await call(c, "spawn_copilot", prompt=prompts["copilot"], model="gpt-5"), "copilot", "gpt-5")
        done = await wait_opening(c, gate)
        records = {a: data(await call(c, "result", agent_id=a)) for a in (claude, codex, copilot)}
    assert done["status"] == "all_completed" and isinstance(done["elapsed_seconds"], float)
    assert sorted(done["results"], key=lambda r: r["type"]) == [
        {
            "id": claude,
            "type": "claude",
            "success": True,
            "result": records[claude]["result"],
            "error": None,
            "cost_usd": records[claude]["cost_usd"],
        },
        {
            "id": codex,
            "type": "codex",
            "success": True,
            "result": prompts["codex"],
            "error": None,
            "cost_usd": 0.005,
        },
        {
            "id": copilot,
            "type": "copilot",
            "success": True,
            "result": prompts["copilot"],
            "error": None,
            "cost_usd": 0.0,
        },
    ]
    assert "claude task" in records[claude]["result"]
    for agent_id, record in records.items():
        assert set(record) == {"agent_id", "agent_type", "success", "result", "cost_usd", "completed_at", "error"} | (
            set() if agent_id == codex else {"model"}
        )
        assert record["agent_id"] == agent_id and record["success"] is True
    runs = {str(r["prompt"]).split()[0]: r["argv"] for r in logged(argv_log)}
    assert "bypassPermissions" in runs["claude"]
    assert opt(runs["claude"], "--model") == "sonnet"
    assert opt(runs["copilot"], "--model") == "gpt-5"


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


async def test_cli_spawns_pass_every_flag_the_seed_lists(
    spawner: Any, argv_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(powerspawn, "KEEPALIVE_S", 0.05)
    gate = tmp_path / "open"
    prompts = {agent: f"{agent} task [[fake:echo,until={gate}]]" for agent in ("claude", "codex", "copilot")}
    async with spawner() as c:
        spawned(await call(c, "spawn_claude", prompt=prompts["claude"]), "claude", "sonnet")
        spawned(await call(c, "spawn_codex", prompt=prompts["codex"]), "codex", None)
        spawned(await call(c, "spawn_copilot", prompt=prompts["copilot"]), "copilot", "gpt-5.1")
        assert (await wait_opening(c, gate))["status"] == "all_completed"
    runs = {str(r["prompt"]).split()[0]: r["argv"] for r in logged(argv_log)}
    # claude: the seed's tool set (Bash, Read, Write, Edit, Glob, Grep), not every tool
    seed_tools = "Bash,Read,Write,Edit,Glob,Grep"
    assert (after(runs["claude"], "--tools"), after(runs["claude"], "--allowedTools")) == (seed_tools, seed_tools)
    assert "--dangerously-bypass-approvals-and-sandbox" in runs["codex"]
    # copilot: `-s -p <prompt> --allow-all-tools --allow-all-paths --allow-tool shell --allow-tool write`
    copilot = runs["copilot"]
    assert "-s" in copilot and after(copilot, "-p") == prompts["copilot"]
    assert {"--allow-all-tools", "--allow-all-paths"} <= set(copilot)
    allowed = [copilot[i + 1] for i, a in enumerate(copilot) if a == "--allow-tool"]
    assert {"shell", "write"} <= set(allowed)


async def test_api_spawns_ask_the_vendor_with_the_seeds_model_and_system_prompt(
    spawner: Any, api_mock: MockServer, relay_home: Path
) -> None:
    api_mock.script(Reply(text="grok says"), Reply(text="gemini says"), Reply(text="mistral says"))
    async with spawner() as c:
        grok = spawned(await call(c, "spawn_grok", prompt="q1", system_prompt="You audit code."), "grok", "grok-3")
        with anyio.fail_after(60):
            await call(c, "wait_for_agents", timeout=60)
        gemini = spawned(await call(c, "spawn_gemini", prompt="q2", model="gemini-1.5-pro"), "gemini", "gemini-1.5-pro")
        await call(c, "wait_for_agents", timeout=60)
        mistral = spawned(await call(c, "spawn_mistral", prompt="q3"), "mistral", "mistral-large-latest")
        await call(c, "wait_for_agents", timeout=60)
        records = [data(await call(c, "result", agent_id=a)) for a in (grok, gemini, mistral)]
    assert [(r["agent_type"], r["model"], r["success"], r["result"], r["error"]) for r in records] == [
        ("grok", "grok-3", True, "grok says", None),
        ("gemini", "gemini-1.5-pro", True, "gemini says", None),
        ("mistral", "mistral-large-latest", True, "mistral says", None),
    ]
    bodies = [r.body for r in api_mock.requests]
    assert [b["model"] for b in bodies] == ["grok-3", "gemini-1.5-pro", "mistral-large-latest"]
    assert bodies[0]["messages"][0] == {"role": "system", "content": "You audit code."}
    assert [r.headers["authorization"] for r in api_mock.requests] == [
        f"Bearer {XAI_KEY}",
        f"Bearer {GEMINI_KEY}",
        f"Bearer {MISTRAL_KEY}",
    ]
    # In-process API jobs are in the audit log like CLI jobs: queued, running, completed, with the answer.
    logged_events = [e for e in map(parse_loose, iter_lines(relay_home / LOG_FILE)) if e]
    per_job = {
        agent_id: [
            (e["event"], e["data"].get("output")) for e in logged_events if str(e["job_id"]).startswith(agent_id)
        ]
        for agent_id in (grok, gemini, mistral)
    }
    assert per_job == {
        grok: [("queued", None), ("running", None), ("completed", "grok says")],
        gemini: [("queued", None), ("running", None), ("completed", "gemini says")],
        mistral: [("queued", None), ("running", None), ("completed", "mistral says")],
    }


async def test_keys_come_from_api_keys_json_first_then_the_seeds_env_aliases(
    spawner: Any, api_mock: MockServer, relay_home: Path
) -> None:
    (relay_home / "api_keys.json").write_text(json.dumps({"XAI_API_KEY": "xai-from-file-0123456789abcdef"}))
    async with spawner(
        XAI_API_KEY="xai-from-env-0123456789abcdefg", GEMINI_API_KEY="", GOOGLE_AI_KEY="google-ai-key-0123456789abcd"
    ) as c:
        spawned(await call(c, "spawn_grok", prompt="q"), "grok", "grok-3")
        await call(c, "wait_for_agents", timeout=60)
        spawned(await call(c, "spawn_gemini", prompt="q"), "gemini", "gemini-2.0-flash")
        await call(c, "wait_for_agents", timeout=60)
    assert [r.headers["authorization"] for r in api_mock.requests] == [
        "Bearer xai-from-file-0123456789abcdef",
        "Bearer google-ai-key-0123456789abcd",
    ]


async def test_a_missing_key_gives_the_seeds_message(spawner: Any, relay_home: Path) -> None:
    async with spawner(MISTRAL_API_KEY="") as c:
        result = await call(c, "spawn_mistral", prompt="q")
    assert result.is_error
    reply = data(result)
    assert (reply["success"], reply["error_type"]) == (False, "ValueError")
    assert reply["error"] == (
        f"Mistral API key not found. Set it via: 1. Local file: {relay_home / 'api_keys.json'} (takes priority) "
        "2. Environment variable: MISTRAL_API_KEY Get your key from: https://console.mistral.ai/api-keys"
    )


async def test_result_list_and_wait_while_an_agent_runs(spawner: Any) -> None:
    async with spawner() as c:
        idle = data(await call(c, "wait_for_agents"))
        assert idle == {"status": "no_agents_running", "recent_results": []}
        quick = spawned(await call(c, "spawn_codex", prompt="quick [[fake:echo]]"), "codex", None)
        await call(c, "wait_for_agents", timeout=60)
        slow = spawned(await call(c, "spawn_claude", prompt="slow [[fake:sleep=4]]"), "claude", "sonnet")
        running = data(await call(c, "result", agent_id=slow))
        listed = data(await call(c, "list"))
        timed_out = data(await call(c, "wait_for_agents", timeout=1))
        unknown = data(await call(c, "result", agent_id="0badc0de"))
    assert set(running) == {"agent_id", "status", "elapsed_seconds", "message"}
    assert (running["agent_id"], running["status"], running["message"]) == (
        slow,
        "running",
        "Agent still running. Check back later.",
    )
    assert [r["id"] for r in listed["running"]] == [slow] and isinstance(listed["running"][0]["sec"], int)
    assert listed["completed_ids"] == [quick] and listed["tip"]
    assert timed_out["status"] == "timeout" and timed_out["still_running"] == [slow]
    assert timed_out["completed_results"] == [] and timed_out["elapsed_seconds"] >= 1
    assert unknown == {"agent_id": "0badc0de", "status": "not_found", "message": "No agent found with this ID."}


async def test_a_failed_agent_reports_its_error_and_iac_shows_every_agent(spawner: Any, relay_home: Path) -> None:
    async with spawner() as c:
        ok = spawned(await call(c, "spawn_codex", prompt="works [[fake:echo]]"), "codex", None)
        bad = spawned(
            await call(c, "spawn_claude", prompt="breaks [[fake:replay=claude_stream_error_500]]"), "claude", "sonnet"
        )
        await call(c, "wait_for_agents", timeout=60)
        failed = data(await call(c, "result", agent_id=bad))
        recent = data(await call(c, "wait_for_agents"))
    assert (failed["success"], bool(failed["error"])) == (False, True)
    assert recent["status"] == "no_agents_running"
    assert {r["id"]: r["success"] for r in recent["recent_results"]} == {ok: True, bad: False}
    Views(relay_home, views_config(relay_home)).render()
    iac = (relay_home / IAC_FILE).read_text()
    assert re.search(rf"✅ \*\*Done\*\* \([0-9.]+s, \$0\.0000\) \| `#{ok}` \| codex", iac)
    assert re.search(rf"❌ \*\*Failed\*\*: .+ \| `#{bad}` \| claude \(", iac)
    assert verify(relay_home).ok


class GatedMock(MockServer):
    """The mock vendor server, holding each answer until `gate` is set (each request has its own thread)."""

    def __init__(self, kind: Any) -> None:
        super().__init__(kind)
        self.gate = threading.Event()

    def _next(self, body: Recorded) -> Reply:
        reply = super()._next(body)
        self.gate.wait(CALL_TIMEOUT_S)
        return reply


async def test_six_agents_spawned_at_once_are_all_returned_by_wait_for_agents(
    profile_client: ProfileClient, copilot_config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No agent can finish before wait_for_agents has taken the running ones: the CLIs wait on a file and the
    # API on an event, both opened at wait_for_agents' first progress beat (it is waiting by then).
    monkeypatch.setattr(powerspawn, "KEEPALIVE_S", 0.05)
    cli_gate = tmp_path / "open"
    waiting = anyio.Event()

    async def beat(progress: float, total: float | None, message: str | None) -> None:
        cli_gate.touch()
        mock.gate.set()
        waiting.set()

    with GatedMock("openai") as mock:
        keys = {"XAI_API_KEY": XAI_KEY, "GEMINI_API_KEY": GEMINI_KEY, "MISTRAL_API_KEY": MISTRAL_KEY}
        urls = {f"RELAY_{p}_BASE_URL": mock.base_url for p in ("XAI", "GEMINI_API", "MISTRAL")}
        async with profile_client("powerspawn", copilot_config, **keys, **urls) as c:
            ids = await six_spawns(c, cli_gate)
            with anyio.fail_after(CALL_TIMEOUT_S):
                done = data(await c.call_tool("wait_for_agents", {"timeout": 60}, progress_callback=beat))
            records = [data(await call(c, "result", agent_id=a)) for a in ids]
    assert waiting.is_set()
    assert done["status"] == "all_completed"
    assert sorted(r["id"] for r in done["results"]) == sorted(ids)
    assert all(r["success"] for r in done["results"])
    assert [(r["agent_id"], r["success"]) for r in records] == [(a, True) for a in ids]


async def wait_opening(c: Client, gate: Path) -> dict[str, Any]:
    """wait_for_agents, its CLIs held until `gate` exists, made at the wait's first progress beat (it holds the
    running agents by then): none ends before the wait takes it. Its answer."""

    async def beat(progress: float, total: float | None, message: str | None) -> None:
        gate.touch()

    with anyio.fail_after(CALL_TIMEOUT_S):
        done = data(await c.call_tool("wait_for_agents", {"timeout": 60}, progress_callback=beat))
    assert gate.exists()
    return done


async def six_spawns(c: Client, gate: Path) -> list[str]:
    """One agent of each kind, none able to finish until the gates open (the CLIs wait for `gate`)."""
    return [
        spawned(await call(c, "spawn_claude", prompt=f"one [[fake:echo,until={gate}]]"), "claude", "sonnet"),
        spawned(await call(c, "spawn_codex", prompt=f"two [[fake:echo,until={gate}]]"), "codex", None),
        spawned(await call(c, "spawn_copilot", prompt=f"three [[fake:echo,until={gate}]]"), "copilot", "gpt-5.1"),
        spawned(await call(c, "spawn_grok", prompt="four"), "grok", "grok-3"),
        spawned(await call(c, "spawn_gemini", prompt="five"), "gemini", "gemini-2.0-flash"),
        spawned(await call(c, "spawn_mistral", prompt="six"), "mistral", "mistral-large-latest"),
    ]


def relay_config(argv_log: Path) -> str:
    blocks = [
        f'[agents.{name}]\ncommand = "{FAKES / name}"\n[agents.{name}.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
        for name in ("claude", "codex", "copilot")
    ]
    return "\n".join(blocks)


def relay_serve(relay_home: Path, workdir: Path, api_mock: MockServer) -> Client:
    import os
    import sys

    from mcp import StdioServerParameters

    env = {
        **os.environ,
        "RELAY_HOME": str(relay_home),
        "XAI_API_KEY": XAI_KEY,
        "GEMINI_API_KEY": GEMINI_KEY,
        "MISTRAL_API_KEY": MISTRAL_KEY,
        **{f"RELAY_{p}_BASE_URL": api_mock.base_url for p in ("XAI", "GEMINI_API", "MISTRAL")},
    }
    relay = str(Path(sys.executable).with_name("relay"))
    params = StdioServerParameters(command=relay, args=["serve", "--profile", "powerspawn"], env=env, cwd=str(workdir))
    return Client(params)


def owners(relay_home: Path) -> set[int]:
    import sqlite3

    with sqlite3.connect(relay_home / "relay.db") as db:
        return {int(row[0]) for row in db.execute("SELECT owner_pid FROM jobs WHERE owner_pid IS NOT NULL")}


async def test_agents_outlive_a_relay_killed_with_sigkill_and_iac_shows_them_done(
    relay_home: Path, workdir: Path, api_mock: MockServer, argv_log: Path
) -> None:
    import contextlib
    import os
    import signal

    (relay_home / "config.toml").write_text(relay_config(argv_log))
    cli = [
        ("spawn_claude", "claude", "sonnet"),
        ("spawn_codex", "codex", None),
        ("spawn_copilot", "copilot", "gpt-5.1"),
    ]
    api = [("spawn_grok", "grok", "grok-3"), ("spawn_gemini", "gemini", "gemini-2.0-flash")]
    api += [("spawn_mistral", "mistral", "mistral-large-latest")]
    ids: dict[str, str] = {}
    with contextlib.suppress(Exception, BaseExceptionGroup):
        async with relay_serve(relay_home, workdir, api_mock) as c:
            for tool, agent_type, model in cli:
                prompt = f"{agent_type} survives [[fake:sleep=4,echo]]"
                ids[agent_type] = spawned(await call(c, tool, prompt=prompt), agent_type, model)
            for tool, agent_type, model in api:
                ids[agent_type] = spawned(await call(c, tool, prompt=f"{agent_type} answers"), agent_type, model)
            with anyio.fail_after(60):  # the API agents answer at once; the CLI agents are still sleeping
                while {r["id"] for r in data(await call(c, "list"))["running"]} != {ids[a] for _, a, _ in cli}:
                    await anyio.sleep(0.1)
            (killed,) = owners(relay_home)
            os.kill(killed, signal.SIGKILL)
            await call(c, "list")  # the dead server cannot answer
    async with relay_serve(relay_home, workdir, api_mock) as c:
        done = data(await call(c, "wait_for_agents", timeout=60))
        records = {a: data(await call(c, "result", agent_id=i)) for a, i in ids.items()}
    # The CLI agents may have finished while relay was down (the new relay then finalizes them from their files).
    if done["status"] == "all_completed":
        assert {r["id"] for r in done["results"]} <= {ids[a] for _, a, _ in cli}
    else:
        assert done["status"] == "no_agents_running"
    assert {a: (r["success"], r["result"]) for a, r in records.items()} == {
        "claude": (True, records["claude"]["result"]),
        "codex": (True, "codex survives [[fake:sleep=4,echo]]"),
        "copilot": (True, "copilot survives [[fake:sleep=4,echo]]"),
        "grok": (True, "ok"),
        "gemini": (True, "ok"),
        "mistral": (True, "ok"),
    }
    assert "claude survives" in records["claude"]["result"]
    Views(relay_home, views_config(relay_home)).render()
    iac = (relay_home / IAC_FILE).read_text()
    for agent_id in ids.values():
        assert re.search(rf"✅ \*\*Done\*\* \([0-9.]+s, \$[0-9.]+\) \| `#{agent_id}`", iac), agent_id
    assert verify(relay_home).ok


async def test_iac_and_context_are_in_the_workspace_and_context_keeps_an_agent_that_outlived_its_server(
    profile_client: ProfileClient, copilot_config: str, workdir: Path, relay_home: Path
) -> None:
    from relay.audit import CONTEXT_FILE

    context = workdir / CONTEXT_FILE

    async def rendered(wanted: str) -> str:
        with anyio.fail_after(30):  # the views are rendered in a worker thread, half a second after a change
            while wanted not in (text := context.read_text() if context.exists() else ""):
                await anyio.sleep(0.05)
        return text

    async with profile_client(toolsets="core,powerspawn", config=copilot_config) as c:
        agent = spawned(await call(c, "spawn_codex", prompt="long task [[fake:sleep=20]]"), "codex", None)
        before = await rendered(f"`{agent}`")
        assert (workdir / IAC_FILE).exists() and not (relay_home / CONTEXT_FILE).exists()
    async with profile_client(toolsets="core,powerspawn", config=copilot_config) as c:
        after = context.read_text()  # written before the server answered anything
        listed = data(await call(c, "list"))
        assert [r["id"] for r in listed["running"]] == [agent]  # still running, though spawned before this server
        assert data(await call(c, "job_cancel", job_id=agent))["status"] == "cancelled"
    assert "long task" in before and f"`{agent}`" in after
