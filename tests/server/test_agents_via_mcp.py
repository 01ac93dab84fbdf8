"""Every built-in agent CLI (and a config-declared one) through `delegate`, driven by the project's fakes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.agents.copilot import session_id_for
from relay.server.app import build_server
from tests.argv import opt
from tests.conftest import FAKES, SettingsFactory

pytestmark = pytest.mark.anyio


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "argv.jsonl"


@pytest.fixture
def agents_config(argv_log: Path) -> str:
    blocks = [
        f'[agents.{name}]\ncommand = "{FAKES / name}"\n[agents.{name}.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
        for name in ("codex", "gemini", "copilot")
    ]
    generic = (
        f'[agents.mycli]\ncommand = "{FAKES / "generic"}"\nargs = ["--jsonl", "{{prompt}}"]\noutput = "jsonl"\n'
        'model_args = ["--model", "{model}"]\nresume_args = ["--session", "{session_id}"]\n'
        f'[agents.mycli.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
    )
    return "\n".join([*blocks, generic])


async def delegate(c: Client, **args: Any) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(30):
        result = await c.call_tool("delegate", {"mode": "sync", **args})
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


def logged(argv_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in argv_log.read_text().splitlines()]


@pytest.mark.parametrize(
    ("agent", "text", "session", "usage"),
    [
        (
            "codex",
            "MOCK-OK: hello from the mock model",
            "01a1fdea-b50b-74e3-a908-2db5de7dba18",
            {"input": 11, "output": 7, "cached": 0},
        ),
        (
            "gemini",
            "hi from gemini mock",
            "dafb38c5-f1b6-4775-9507-815d99e08496",
            {"input": 10, "output": 5, "cached": 0},
        ),
        ("copilot", "MOCK-OK: hello from the mock model", None, {"input": 0, "output": 0, "cached": 0}),
    ],
)
async def test_a_text_answer_from_each_cli(
    make_settings: SettingsFactory,
    agents_config: str,
    workdir: Path,
    agent: str,
    text: str,
    session: str | None,
    usage: dict[str, int],
) -> None:
    async with Client(build_server(make_settings(agents_config))) as c:
        failed, env = await delegate(c, agent=agent, prompt="say hello", cwd=str(workdir))
    assert not failed, env
    assert env["output"] == text and env["usage"] == usage and env["status"] == "completed"
    # Copilot names its session only at the end; relay chose it up front with --session-id.
    assert env["session_id"] == (session or session_id_for(env["job_id"]))


@pytest.mark.parametrize(
    ("agent", "replay", "tool"),
    [
        ("codex", "codex_exec_json_shell_workspace_write", 1),
        ("gemini", "gemini_stream_tool_write", 1),
        ("copilot", "copilot_json_create_allow_write", 1),
    ],
)
async def test_tool_use_is_reported_in_the_envelope(
    make_settings: SettingsFactory, agents_config: str, workdir: Path, agent: str, replay: str, tool: int
) -> None:
    async with Client(build_server(make_settings(agents_config))) as c:
        failed, env = await delegate(
            c, agent=agent, prompt=f"write [[fake:replay={replay}]]", cwd=str(workdir), permission="edit"
        )
    assert not failed and env["tool_uses"] == tool


@pytest.mark.parametrize(
    ("agent", "model", "flag"),
    [("codex", "gpt-5.5", "-m"), ("gemini", "pro", "-m"), ("copilot", "gpt-5", "--model")],
)
async def test_resuming_reapplies_the_sessions_cwd_model_and_permission(
    make_settings: SettingsFactory, agents_config: str, workdir: Path, argv_log: Path, agent: str, model: str, flag: str
) -> None:
    async with Client(build_server(make_settings(agents_config))) as c:
        _, first = await delegate(c, agent=agent, prompt="start", cwd=str(workdir), model=model, permission="edit")
        failed, second = await delegate(c, agent=agent, prompt="go on", session_id=first["session_id"])
        listed = await c.call_tool("job_list", {"session_id": first["session_id"]})
    assert not failed
    assert second["session_id"] == first["session_id"]
    first_run, resumed = logged(argv_log)
    assert resumed["cwd"] == str(workdir)
    argv = resumed["argv"]
    expected_model = {"pro": "gemini-2.5-pro"}.get(model, model)
    assert opt(argv, "--model", flag) == expected_model
    assert first["session_id"] in " ".join(argv)
    edit_flag = {"codex": 'sandbox_mode="workspace-write"', "gemini": "auto_edit", "copilot": "write"}[agent]
    assert any(edit_flag in a for a in argv), argv
    assert listed.structured_content is not None and len(listed.structured_content["jobs"]) == 2
    assert first_run["argv"] != argv


@pytest.mark.parametrize(
    ("agent", "prompt", "code"),
    [
        ("codex", "[[fake:replay=codex_exec_json_error_e401]]", "AUTH_INVALID"),
        ("codex", "[[fake:replay=codex_exec_json_error_e429]]", "RATE_LIMITED"),
        ("codex", "[[fake:replay=codex_exec_json_error_e500]]", "UPSTREAM_ERROR"),
        ("codex", "[[fake:replay=codex_exec_json_error_e400]]", "MODEL_NOT_FOUND"),
        ("codex", "[[fake:replay=codex_exec_json_error_badsse]]", "UPSTREAM_ERROR"),
        ("codex", "[[fake:replay=codex_exec_json_error_failed]]", "UPSTREAM_ERROR"),
        ("codex", "[[fake:replay=codex_exec_json_error_missing_key]]", "AUTH_MISSING"),
        ("codex", "[[fake:missing_session]]", "SESSION_NOT_FOUND"),
        ("gemini", "[[fake:fail=401]]", "AUTH_INVALID"),
        ("gemini", "[[fake:fail=429]]", "RATE_LIMITED"),
        ("gemini", "[[fake:fail=500]]", "UPSTREAM_ERROR"),
        ("gemini", "[[fake:untrusted]]", "CONFIG_INVALID"),
        ("gemini", "[[fake:missing_session]]", "SESSION_NOT_FOUND"),
        ("copilot", "[[fake:replay=copilot_json_error_e401]]", "AUTH_INVALID"),
        ("copilot", "[[fake:replay=copilot_json_error_e500]]", "UPSTREAM_ERROR"),
        ("copilot", "[[fake:replay=copilot_json_error_conn_refused]]", "UPSTREAM_ERROR"),
        ("copilot", "[[fake:replay=copilot_error_no_login]]", "AUTH_MISSING"),
        ("copilot", "[[fake:replay=copilot_error_no_model]]", "CONFIG_INVALID"),
        ("copilot", "[[fake:missing_session]]", "SESSION_NOT_FOUND"),
    ],
)
async def test_recorded_failures_map_to_relay_error_codes_with_hints(
    make_settings: SettingsFactory, agents_config: str, workdir: Path, agent: str, prompt: str, code: str
) -> None:
    async with Client(build_server(make_settings(agents_config))) as c:
        failed, env = await delegate(c, agent=agent, prompt=f"fail {prompt}", cwd=str(workdir))
    assert failed and env["status"] == "failed"
    assert env["error"]["code"] == code, env["error"]
    assert env["error"]["message"] and env["error"]["hint"]


async def test_a_cli_declared_only_in_config_runs_through_delegate(
    make_settings: SettingsFactory, agents_config: str, workdir: Path, argv_log: Path
) -> None:
    async with Client(build_server(make_settings(agents_config))) as c:
        failed, env = await delegate(c, agent="mycli", prompt="do it", cwd=str(workdir), model="m1")
        _, again = await delegate(c, agent="mycli", prompt="more", session_id=env["session_id"])
    assert not failed and env["status"] == "completed"
    assert env["output"] == "answer: do it" and env["session_id"] == "generic-session-1"
    first, second = logged(argv_log)
    assert first["argv"] == ["--jsonl", "do it", "--model", "m1"]
    assert second["argv"] == ["--jsonl", "more", "--model", "m1", "--session", "generic-session-1"]
    assert again["status"] == "completed"


@pytest.mark.parametrize(
    ("agent", "effort", "expected"),
    [
        ("codex", "high", ['--config=model_reasoning_effort="high"']),
        ("codex", "max", ['--config=model_reasoning_effort="xhigh"']),
        ("claude", "minimal", ["--effort=low"]),
        ("claude", "xhigh", ["--effort=xhigh"]),
        ("copilot", "minimal", ["--reasoning-effort=low"]),
    ],
)
async def test_delegate_passes_reasoning_effort_as_each_clis_nearest_setting(
    make_settings: SettingsFactory,
    agents_config: str,
    workdir: Path,
    argv_log: Path,
    agent: str,
    effort: str,
    expected: list[str],
) -> None:
    config = agents_config + f'\n[agents.claude.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
    async with Client(build_server(make_settings(config))) as c:
        failed, env = await delegate(
            c, agent=agent, prompt="think [[fake:echo]]", cwd=str(workdir), reasoning_effort=effort
        )
    assert not failed, env
    argv = logged(argv_log)[0]["argv"]
    at = argv.index(expected[0])
    assert argv[at : at + len(expected)] == expected


async def test_reasoning_effort_for_a_cli_without_one_is_refused_with_a_hint(
    make_settings: SettingsFactory, agents_config: str, workdir: Path, argv_log: Path
) -> None:
    async with Client(build_server(make_settings(agents_config))) as c:
        failed, env = await delegate(c, agent="gemini", prompt="think", cwd=str(workdir), reasoning_effort="high")
    assert failed and env["error"]["code"] == "INVALID_ARGUMENT"
    assert env["error"]["message"] == "gemini has no reasoning effort setting"
    assert "claude, codex, copilot" in env["error"]["hint"]
    assert not argv_log.exists()


async def test_delegate_maps_claudes_h_s_o_shorthand_to_its_models(
    make_settings: SettingsFactory, agents_config: str, workdir: Path, argv_log: Path
) -> None:
    config = agents_config + f'\n[agents.claude.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
    async with Client(build_server(make_settings(config))) as c:
        for short in ("h", "s", "o"):
            failed, env = await delegate(c, agent="claude", prompt="hi [[fake:echo]]", cwd=str(workdir), model=short)
            assert not failed, env
    models = [opt(run["argv"], "--model") for run in logged(argv_log)]
    assert models == ["haiku", "sonnet", "opus"]


@pytest.mark.parametrize(("agent", "flag"), [("codex", "-m"), ("gemini", "-m"), ("copilot", "--model")])
async def test_continuing_the_latest_session_keeps_its_model_and_permission(
    make_settings: SettingsFactory, agents_config: str, workdir: Path, argv_log: Path, agent: str, flag: str
) -> None:
    model = {"codex": "gpt-5.5", "gemini": "gemini-2.5-flash", "copilot": "gpt-5"}[agent]
    async with Client(build_server(make_settings(agents_config))) as c:
        await delegate(c, agent=agent, prompt="start", cwd=str(workdir), model=model, permission="edit")
        failed, env = await delegate(c, agent=agent, prompt="go on", cwd=str(workdir), continue_latest=True)
    assert not failed, env
    argv = logged(argv_log)[1]["argv"]
    assert opt(argv, "--model", flag) == model
    edit_flag = {"codex": 'sandbox_mode="workspace-write"', "gemini": "auto_edit", "copilot": "write"}[agent]
    assert any(edit_flag in a for a in argv), argv
