"""`relay install|uninstall CLIENT`: each client's files get relay's entry, nothing else changes, no secret is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from relay.cli.main import main
from relay.clients import CLIENTS, check_client, client_spec, make_context, plan_changes
from relay.clients.specs import CREDENTIAL_VARS, INSTALL_TOOL_TIMEOUT_S

RELAY = str(Path(sys.executable).with_name("relay"))
SECRET = "sk-ant-api03-never-write-me-0123456789"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME and project folder; the environment holds a real-looking key that must never be written."""
    home = tmp_path / "home"
    project = tmp_path / "project"
    home.mkdir()
    project.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.chdir(project)
    return home


def every_file(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


EXISTING = {
    "claude-code": {
        ".claude.json": '{\n  "numStartups": 7,\n  "mcpServers": {\n    "docs": {\n      "command": "docs"\n    }\n  }\n}\n',
        ".claude/settings.json": '{\n  "permissions": {\n    "allow": [\n      "Bash(ls:*)"\n    ]\n  },\n  "theme": "dark"\n}\n',
    },
    "codex": {".codex/config.toml": 'model = "gpt-5.5" # mine\n\n[mcp_servers.docs]\ncommand = "docs"\n'},
    "gemini": {
        ".gemini/settings.json": '{\n  "general": {"vimMode": true},\n  "mcpServers": {"docs": {"command": "docs"}}\n}\n'
    },
    "cursor": {".cursor/mcp.json": '{"mcpServers": {"docs": {"command": "docs"}}}'},
    "vscode": {".config/Code/User/mcp.json": '{\n\t// mine\n\t"inputs": []\n}\n'},
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_is_idempotent_and_uninstall_restores_every_byte(
    client: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for rel, text in EXISTING[client].items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    original = every_file(home)

    assert main(["install", client]) == 0
    installed = every_file(home)
    assert installed != original
    assert all(SECRET.encode() not in data for data in installed.values())
    capsys.readouterr()
    assert main(["install", client]) == 0
    assert every_file(home) == installed
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("note:")]
    assert lines and all(line.startswith("unchanged") for line in lines)

    report = check_client(client_spec(client), make_context(os.environ, Path.cwd(), 45.0), "user")
    assert report is not None and (report.status, report.problems) == ("ok", ())

    assert main(["uninstall", client]) == 0
    assert every_file(home) == original


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_into_an_empty_home_creates_the_files_and_uninstall_removes_them(client: str, home: Path) -> None:
    assert main(["install", client]) == 0
    assert every_file(home)
    assert main(["uninstall", client]) == 0
    assert every_file(home) == {}


def test_dry_run_prints_the_diff_and_writes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "codex", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert every_file(home) == {}
    assert out.startswith("--- /dev/null\n+++ " + str(home / ".codex" / "config.toml"))
    assert "+[mcp_servers.relay]" in out and "+required = true" in out


def test_codex_gets_approval_required_start_timeouts_and_key_names_only(home: Path) -> None:
    assert main(["install", "codex"]) == 0
    table = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]["relay"]
    command = table.pop("command")
    env_vars = table.pop("env_vars")
    assert os.access(command, os.X_OK)
    assert set(CREDENTIAL_VARS) <= set(env_vars) and "RELAY_HOME" in env_vars
    assert table == {
        "args": ["serve"],
        "env": {"RELAY_HOME": os.environ["RELAY_HOME"]},
        "required": True,
        "startup_timeout_sec": 30,
        "tool_timeout_sec": INSTALL_TOOL_TIMEOUT_S,
        "default_tools_approval_mode": "approve",
    }


def test_gemini_gets_trust_a_timeout_and_key_references_not_values(home: Path) -> None:
    assert main(["install", "gemini"]) == 0
    entry = json.loads((home / ".gemini" / "settings.json").read_text())["mcpServers"]["relay"]
    assert entry["trust"] is True and entry["timeout"] == INSTALL_TOOL_TIMEOUT_S * 1000
    assert entry["env"]["ANTHROPIC_API_KEY"] == "$ANTHROPIC_API_KEY"
    assert {k: v for k, v in entry["env"].items() if not v.startswith("$")} == {"RELAY_HOME": os.environ["RELAY_HOME"]}


def test_claude_code_gets_the_entry_that_waits_and_relays_tools_allowed(home: Path) -> None:
    assert main(["install", "claude-code"]) == 0
    entry = json.loads((home / ".claude.json").read_text())["mcpServers"]["relay"]
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert {k: v for k, v in entry.items() if k not in ("command", "env")} == {
        "args": ["serve"],
        "type": "stdio",
        "timeout": INSTALL_TOOL_TIMEOUT_S * 1000,
        "alwaysLoad": True,
    }
    assert settings == {"permissions": {"allow": ["mcp__relay"]}}


def test_claude_code_honours_claude_config_dir(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / "cc"))
    assert main(["install", "claude"]) == 0
    assert sorted(every_file(home)) == ["cc/.claude.json", "cc/settings.json"]


def test_project_scope_writes_into_the_current_folder(home: Path) -> None:
    project = Path.cwd()
    assert main(["install", "claude-code", "--scope", "project"]) == 0
    assert every_file(home) == {}
    assert json.loads((project / ".mcp.json").read_text())["mcpServers"]["relay"]["args"] == ["serve"]
    assert json.loads((project / ".claude" / "settings.json").read_text()) == {
        "permissions": {"allow": ["mcp__relay"]},
        "enabledMcpjsonServers": ["relay"],
    }


def test_an_unknown_client_is_an_error_with_the_known_names(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "notepad"]) != 0
    err = capsys.readouterr().err
    assert "INVALID_ARGUMENT" in err and "claude-code, codex, gemini, cursor, vscode" in err


def test_doctor_reports_missing_then_ok_then_problems_per_client(home: Path) -> None:
    ctx = make_context(os.environ, Path.cwd(), 45.0)
    assert check_client(client_spec("codex"), ctx, "user") is None  # no config file: not reported
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model = "m"\n')
    report = check_client(client_spec("codex"), ctx, "user")
    assert report is not None and report.status == "missing"
    changes = plan_changes(client_spec("codex"), ctx, "user")
    assert [c.changed for c in changes] == [True]
    assert main(["install", "codex"]) == 0
    report = check_client(client_spec("codex"), ctx, "user")
    assert report is not None and report.status == "ok"
    path = home / ".codex" / "config.toml"
    path.write_text(path.read_text().replace("required = true", "required = false").replace("3600", "20"))
    report = check_client(client_spec("codex"), ctx, "user")
    assert report is not None and report.status == "problems"
    assert report.problems == (
        "required is False, relay install writes True",
        "tool_timeout_sec is 20, relay install writes 3600",
    )


def test_relay_doctor_prints_each_clients_entry(home: Path) -> None:
    env = {**os.environ, "HOME": str(home)}
    subprocess.run([RELAY, "install", "gemini"], env=env, check=True, capture_output=True, timeout=60)
    out = subprocess.run([RELAY, "doctor"], env=env, capture_output=True, text=True, timeout=120)
    clients = out.stdout.split("\nCLIENT ", 1)[1].splitlines()[1:]
    assert [line.split()[:3] for line in clients] == [["gemini", "user", "ok"]]


def test_relay_doctor_json_holds_each_clients_entry_and_fails_on_a_bad_one(home: Path) -> None:
    env = {**os.environ, "HOME": str(home)}
    subprocess.run([RELAY, "install", "codex"], env=env, check=True, capture_output=True, timeout=60)
    out = subprocess.run([RELAY, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert set(report) == {
        "agents",
        "clients",
        "store",
        "runtime",
        "worktrees",
        "sandbox",
        "audit",
        "allowed_roots",
        "queue",
        "repos",
    }
    assert report["allowed_roots"] == [{"path": str(Path.cwd().resolve()), "source": "the folder relay started in"}]
    assert [(c["client"], c["scope"], c["status"]) for c in report["clients"]] == [("codex", "user", "ok")]
    assert out.returncode == 0 and report["store"]["ok"] is True
    path = home / ".codex" / "config.toml"
    path.write_text(path.read_text().replace("required = true", "required = false"))
    out = subprocess.run([RELAY, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120)
    (codex,) = json.loads(out.stdout)["clients"]
    assert codex["status"] == "problems" and codex["problems"] == ["required is False, relay install writes True"]
    assert out.returncode == 1


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_with_a_grant_writes_it_into_the_clients_relay_entry(client: str, home: Path) -> None:
    assert main(["install", client, "--grant", "read-only"]) == 0
    written = "\n".join(p.read_text() for p in home.rglob("*") if p.is_file())
    assert "RELAY_GRANT" in written and "read-only" in written
    assert main(["install", client]) == 0  # installed again without --grant: the entry no longer sets one
    assert "RELAY_GRANT" not in "\n".join(p.read_text() for p in home.rglob("*") if p.is_file())


def test_the_grant_in_codexs_entry_is_the_grant_of_the_relay_it_starts(home: Path) -> None:
    from relay.config import load_settings

    assert main(["install", "codex", "--grant", "full"]) == 0
    table = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]["relay"]
    assert table["env"]["RELAY_GRANT"] == "full"
    settings = load_settings({"RELAY_HOME": os.environ["RELAY_HOME"], **table["env"]})
    assert (settings.grant, settings.grant_source) == ("full", "RELAY_GRANT")


def test_install_refuses_a_grant_that_is_not_a_permission(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["install", "codex", "--grant", "root"])
    assert "read-only" in capsys.readouterr().err
    assert not (home / ".codex" / "config.toml").exists()
