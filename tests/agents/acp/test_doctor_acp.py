"""`relay doctor` says for each agent whether it runs over print mode or ACP, and whether its ACP command is found."""

from __future__ import annotations

from pathlib import Path

from relay.config import load_settings
from relay.doctor import diagnose

FOUND = {"gemini": "/bin/gemini", "claude": "/bin/claude", "claude-agent-acp": "/acp/claude-agent-acp"}


def test_doctor_reports_each_agents_protocol_and_where_its_acp_command_is(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[agents.claude]\nprotocol = "acp"\n\n[agents.codex]\nprotocol = "acp"\n', encoding="utf-8"
    )
    settings = load_settings({"RELAY_HOME": str(tmp_path), "PATH": "/bin"}, cwd=tmp_path)
    reports = {r.name: r for r in diagnose(settings, which=FOUND.get, version_of=lambda path, env: "0.61.0")}
    gemini, claude, codex = reports["gemini"], reports["claude"], reports["codex"]
    assert (gemini.protocol, gemini.found, gemini.acp_command) == ("print", True, "/bin/gemini")
    assert (claude.protocol, claude.found, claude.path, claude.acp_command) == (
        "acp",
        True,
        "/acp/claude-agent-acp",
        "/acp/claude-agent-acp",
    )
    assert "over ACP" in claude.note
    assert (codex.protocol, codex.found, codex.version_status, codex.acp_command) == ("acp", False, "missing", None)
    assert "codex-acp" in codex.note
    assert reports["copilot"].acp_command is None and reports["copilot"].protocol == "print"
