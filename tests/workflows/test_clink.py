"""clink through an MCP client, running the fake agent CLIs as relay jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.argv import opt
from tests.workflows.conftest import SettingsFactory, call, error_message, logged, relay_error, zen_client

pytestmark = pytest.mark.anyio


async def test_clink_with_the_seeds_example_runs_codex_as_a_listed_job_and_continues_the_thread(
    zen_settings: SettingsFactory, argv_log: Path
) -> None:
    async with zen_client(zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,zen")) as client:
        failed, out = await call(client, "clink", {"prompt": "codex", "cli_name": "codex", "role": "codereviewer"})
        assert not failed, out
        assert out["status"] == "continuation_available"
        assert out["content"] == "MOCK-OK: hello from the mock model"
        meta = out["metadata"]
        assert (meta["cli_name"], meta["role"], meta["return_code"], meta["permission"]) == (
            "codex",
            "codereviewer",
            0,
            "read-only",
        )
        _, jobs = await call(client, "job_list", {})
        assert [(j["job_id"], j["agent"], j["status"]) for j in jobs["jobs"]] == [
            (meta["job_id"], "codex", "completed")
        ]
        thread = out["continuation_offer"]["continuation_id"]
        failed, again = await call(
            client,
            "clink",
            {"prompt": "[[fake:echo]] and now?", "cli_name": "codex", "continuation_id": thread},
        )
    assert not failed, again
    first, second = logged(argv_log)
    assert "code reviewer" in first["prompt"] and "=== USER REQUEST ===\ncodex" in first["prompt"]
    assert (
        "=== CONVERSATION HISTORY ===" in second["prompt"] and "MOCK-OK: hello from the mock model" in second["prompt"]
    )
    assert again["continuation_offer"]["continuation_id"] == thread
    assert again["continuation_offer"]["remaining_turns"] == 23


async def test_clink_resolves_claudes_short_model_name_from_config(
    zen_settings: SettingsFactory, argv_log: Path, workdir: Path
) -> None:
    settings = zen_settings('[zen.clink.claude]\nmodel = "o"\n[zen.roles]\nsecurity = "You audit security."\n')
    (workdir / "a.py").write_text("x = 1\n")
    async with zen_client(settings) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        failed, out = await call(
            client,
            "clink",
            {
                "prompt": "audit this",
                "cli_name": "claude",
                "role": "security",
                "absolute_file_paths": [str(workdir / "a.py")],
            },
        )
    assert not failed, out
    argv = logged(argv_log)[0]["argv"]
    assert opt(argv, "--model") == "opus"
    assert opt(argv, "--append-system-prompt") == "You audit security."
    schema = tools["clink"].input_schema["properties"]
    assert {"claude", "codex", "gemini", "copilot"} <= set(schema["cli_name"]["enum"])
    assert schema["role"]["enum"] == ["default", "planner", "codereviewer", "security"]
    assert tools["clink"].input_schema["required"] == ["prompt", "cli_name"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"working_directory": "/mnt/d/project"}, "Remove 'working_directory' parameter."),
        ({"working_directory_absolute_path": "/mnt/d/project"}, "does not support working directory"),
        ({"model": "gemini-2.5-pro", "temperature": 0.8}, "Remove 'model', 'temperature', 'thinking_mode' parameters."),
        ({"thinking_mode": "high"}, "these fields are not supported"),
        ({"args": "--skip-git-repo-check"}, "Remove 'args' parameter."),
    ],
)
async def test_clink_refuses_parameters_it_does_not_have_with_the_seeds_remedy(
    zen_settings: SettingsFactory, argv_log: Path, extra: dict[str, object], expected: str
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "clink", {"prompt": "codex", "cli_name": "codex", **extra})
    assert failed and expected in error_message(out)
    assert logged(argv_log) == []


async def test_clink_refuses_an_empty_prompt(zen_settings: SettingsFactory, argv_log: Path) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "clink", {"prompt": "", "cli_name": "codex"})
    assert failed
    assert error_message(out).startswith(
        "'prompt' parameter must be a non-empty string.\nCannot pass empty string or null value."
    )
    assert logged(argv_log) == []


async def test_a_failing_cli_is_an_error_result_naming_the_cli(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(
            client, "clink", {"prompt": "[[fake:replay=codex_exec_json_error_e401]] go", "cli_name": "codex"}
        )
    assert failed and out["status"] == "error"
    assert out["content"].startswith("CLI 'codex' execution failed: ")
    assert out["metadata"]["job_id"] and out["metadata"]["error"]["code"]


async def test_clink_refuses_a_misspelt_cli_naming_the_nearest_configured_one(
    zen_settings: SettingsFactory, argv_log: Path
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "clink", {"prompt": "hi", "cli_name": "claud"})
    assert failed
    assert relay_error(out) == {
        "code": "INVALID_ARGUMENT",
        "message": "CLI 'claud' is not configured. Available clients: claude, codex, copilot, gemini",
        "hint": "did you mean `claude`? cli_name is one of: claude, codex, copilot, gemini",
    }
    assert logged(argv_log) == []
