"""The ACP adapters: the driver's invocation each builds, and how config.toml picks ACP or print mode per agent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from relay.agents import get_adapter, known_agents, launch_command, protocol_of
from relay.agents.acp import AcpAdapter, acp_adapter
from relay.agents.base import AgentRequest, HostContext
from relay.config import AgentConfig, Settings, load_settings
from relay.errors import ErrorCode, RelayError

HOST = HostContext(
    command="/opt/bin/gemini",
    environ={"PATH": "/usr/bin", "HOME": "/home/u", "GEMINI_API_KEY": "k", "OPENAI_API_KEY": "other-vendor"},
    job_id="j-1",
    job_dir="/home/u/.relay/jobs/j-1",
)


def settings_with(tmp_path: Path, toml: str) -> Settings:
    (tmp_path / "config.toml").write_text(toml, encoding="utf-8")
    return load_settings({"RELAY_HOME": str(tmp_path), "PATH": "/usr/bin"}, cwd=tmp_path)


def gemini_acp() -> AcpAdapter:
    adapter = acp_adapter("gemini", AgentConfig(protocol="acp"))
    assert adapter is not None
    return adapter


def test_gemini_over_acp_runs_the_driver_with_the_agent_after_a_double_dash_and_the_prompt_on_stdin() -> None:
    request = AgentRequest(prompt="--yolo is a prompt here", cwd="/w", permission="edit", model="gemini-2.5-pro")
    inv = gemini_acp().build(request, HOST)
    assert inv.argv == (
        sys.executable,
        "-I",
        "-m",
        "relay.agents.acp.driver",
        "--cwd=/w",
        "--mode=autoEdit",
        "--job-dir=/home/u/.relay/jobs/j-1",
        "--",
        "/opt/bin/gemini",
        "--acp",
        "--model=gemini-2.5-pro",
    )
    assert inv.stdin_text == "--yolo is a prompt here" and inv.cwd == "/w"
    assert inv.env["RELAY_JOB_DIR"] == "/home/u/.relay/jobs/j-1" and inv.env["GEMINI_API_KEY"] == "k"
    assert "OPENAI_API_KEY" not in inv.env


def test_each_permission_maps_to_the_agents_own_modes_and_read_only_also_closes_client_writes() -> None:
    claude = acp_adapter("claude", AgentConfig(protocol="acp"))
    codex = acp_adapter("codex", AgentConfig(protocol="acp"))
    assert claude is not None and codex is not None

    def modes(adapter: AcpAdapter, permission: str) -> list[str]:
        inv = adapter.build(AgentRequest(prompt="p", cwd="/w", permission=permission), HOST)  # pyright: ignore[reportArgumentType]
        head = inv.argv[: inv.argv.index("--")]
        return [a for a in head if a.startswith("--mode=") or a == "--read-only"]

    assert modes(claude, "read-only") == ["--mode=default", "--read-only"]
    assert modes(claude, "full") == ["--mode=bypassPermissions", "--mode=acceptEdits"]
    assert modes(codex, "edit") == ["--mode=auto"]
    assert modes(gemini_acp(), "full") == ["--mode=yolo"]


def test_a_hostile_session_id_or_model_never_reaches_the_drivers_argv() -> None:
    for request in (
        AgentRequest(prompt="p", cwd="/w", session_id="-y"),
        AgentRequest(prompt="p", cwd="/w", model="--yolo"),
        AgentRequest(prompt="p", cwd="/w", model='x" --config=sandbox="danger'),
    ):
        with pytest.raises(RelayError) as caught:
            gemini_acp().build(request, HOST)
        assert caught.value.code == ErrorCode.INVALID_ARGUMENT


def test_a_resumed_session_and_a_system_prompt_travel_as_the_driver_takes_them() -> None:
    request = AgentRequest(
        prompt="go on", cwd="/w", session_id="0b6f7c4e-1d2a-4f3b-9c8d-7e6f5a4b3c2d", system_prompt="be brief"
    )
    inv = gemini_acp().build(request, HOST)
    assert "--session-id=0b6f7c4e-1d2a-4f3b-9c8d-7e6f5a4b3c2d" in inv.argv
    assert inv.stdin_text == "<instructions>\nbe brief\n</instructions>\n\ngo on"
    with pytest.raises(RelayError) as caught:
        gemini_acp().build(AgentRequest(prompt="p", cwd="/w", continue_latest=True), HOST)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT


def test_config_puts_an_agent_on_acp_print_stays_the_default_and_the_fallback(tmp_path: Path) -> None:
    settings = settings_with(
        tmp_path,
        """
[agents.claude]
command = "claude"
protocol = "acp"
acp_command = "/opt/acp/claude-agent-acp"

[agents.copilot]
protocol = "acp"

[agents.myagent]
protocol = "acp"
acp_command = "my-agent"
acp_args = ["--stdio"]
""",
    )
    claude = get_adapter("claude", settings)
    assert protocol_of(claude) == "acp"
    assert launch_command(claude, settings.agents["claude"]) == "/opt/acp/claude-agent-acp"
    assert protocol_of(get_adapter("gemini", settings)) == "print"
    # copilot has no ACP adapter here: it stays on print mode.
    assert protocol_of(get_adapter("copilot", settings)) == "print"
    mine = get_adapter("myagent", settings)
    assert "myagent" in known_agents(settings)
    inv = mine.build(AgentRequest(prompt="p", cwd="/w"), HostContext(command="/usr/bin/my-agent"))
    assert inv.argv[inv.argv.index("--") :] == ("--", "/usr/bin/my-agent", "--stdio")


def test_an_unknown_protocol_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(RelayError) as caught:
        settings_with(tmp_path, '[agents.gemini]\nprotocol = "websocket"\n')
    assert caught.value.code == ErrorCode.CONFIG_INVALID
