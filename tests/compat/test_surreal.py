"""Profile `surreal`: surreal-mind's call_cc / call_gem / call_codex and job tools, over MCP, on the fake CLIs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from relay.server.toolsets.surreal import TEXTS
from tests.compat.conftest import (
    ProfileClient,
    call,
    data,
    error_message,
    logged,
    schemas,
    stdio_tool_names,
    wait_done,
)

pytestmark = pytest.mark.anyio

TOOLS = ["call_cancel", "call_cc", "call_codex", "call_gem", "call_jobs", "call_status"]
CLAUDE_SESSION = "b3af0212-3a6d-4156-a35c-cfab742dc56e"
GEMINI_SESSION = "dafb38c5-f1b6-4775-9507-815d99e08496"
ISO = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"


async def test_relay_serve_profile_surreal_lists_exactly_surreal_minds_tools(relay_home: Path, workdir: Path) -> None:
    assert await stdio_tool_names("surreal", relay_home, workdir) == TOOLS


async def test_the_tools_require_what_the_seeds_require(profile_client: ProfileClient) -> None:
    async with profile_client("surreal") as c:
        found = await schemas(c)
    assert sorted(found) == TOOLS
    assert {name: s.get("required", []) for name, s in found.items()} == {
        "call_cc": ["prompt", "cwd"],
        "call_gem": ["prompt"],
        "call_codex": ["prompt", "cwd"],
        "call_status": ["job_id"],
        "call_jobs": [],
        "call_cancel": ["job_id"],
    }
    cc = found["call_cc"]["properties"]
    assert list(cc)[:8] == [
        "prompt",
        "cwd",
        "model",
        "resume_session_id",
        "continue_latest",
        "timeout_ms",
        "tool_timeout_ms",
        "expose_stream",
    ]
    assert (cc["model"]["enum"], cc["model"]["default"]) == (
        ["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5"],
        "claude-sonnet-4-5",
    )
    assert (cc["timeout_ms"]["default"], cc["tool_timeout_ms"]["default"]) == (60000, 300000)
    assert found["call_gem"]["properties"]["fire_and_forget"]["default"] is False
    assert found["call_jobs"]["properties"]["status_filter"]["enum"] == [
        "queued",
        "running",
        "completed",
        "failed",
        "cancelled",
    ]


async def test_call_cc_models_come_from_anthropic_models_and_anthropic_model(profile_client: ProfileClient) -> None:
    async with profile_client("surreal", ANTHROPIC_MODELS="m-one, m-two,", ANTHROPIC_MODEL="m-two") as c:
        model = (await schemas(c))["call_cc"]["properties"]["model"]
    assert (model["enum"], model["default"]) == (["m-one", "m-two"], "m-two")


async def test_call_cc_runs_claude_synchronously_and_returns_the_response(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_cc", prompt="say hello", cwd=str(workdir))
    out = data(result)
    assert not result.is_error, out
    meta = out.pop("metadata")
    assert out == {"status": "completed", "response": "hi from mock", "session_id": CLAUDE_SESSION}
    assert set(meta) == {"job_id", "task_name", "model", "duration_ms", "usage", "cost_usd"}
    assert meta["task_name"] == "call_cc"
    run = logged(argv_log)[0]
    assert run["cwd"] == str(workdir)


async def test_call_cc_runs_claude_as_seed_001_builds_it(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_cc", prompt="  say hello ", cwd=str(workdir))
    assert not result.is_error, data(result)
    run = logged(argv_log)[0]
    argv = run["argv"]
    # `claude -p <prompt> --dangerously-skip-permissions --output-format stream-json`, the model in the env only
    assert argv[:2] == ["-p", "say hello"] and run["prompt"] == "say hello"
    assert "--dangerously-skip-permissions" in argv
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert "--model" not in argv and run["env"]["ANTHROPIC_MODEL"] == "claude-sonnet-4-5"


async def test_call_cc_accepts_the_short_model_names(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_cc", prompt="hi", cwd=str(workdir), model="h")
    assert not result.is_error, data(result)
    assert logged(argv_log)[0]["env"]["ANTHROPIC_MODEL"] == "haiku"


async def test_observe_mode_runs_read_only_and_says_so(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_cc", prompt="look", cwd=str(workdir), mode="observe")
    assert not result.is_error, data(result)
    run = logged(argv_log)[0]
    assert run["argv"][run["argv"].index("--permission-mode") + 1] == "default"
    assert TEXTS["observe"] in run["prompt"]


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("call_cc", {"prompt": "", "cwd": "/tmp"}, "prompt cannot be empty"),
        ("call_cc", {"prompt": "   ", "cwd": "/tmp"}, "prompt cannot be empty"),
        ("call_cc", {"prompt": "hi"}, "cwd is required and cannot be empty"),
        ("call_cc", {"prompt": "hi", "cwd": " "}, "cwd is required and cannot be empty"),
        (
            "call_cc",
            {"prompt": "hi", "cwd": "/tmp", "resume_session_id": "abc", "continue_latest": True},
            "resume_session_id and continue_latest cannot both be set",
        ),
        (
            "call_cc",
            {"prompt": "hi", "cwd": "/tmp", "model": "gpt-4"},
            "model must be one of claude-sonnet-4-5, claude-haiku-4-5, claude-opus-4-5",
        ),
        (
            "call_cc",
            {"prompt": "hi", "cwd": "/tmp", "fire_and_forget": True},
            "Invalid parameters: unknown field `fire_and_forget`, expected one of `prompt`, `cwd`, `model`,",
        ),
        ("call_codex", {"prompt": "hi"}, "cwd is required and cannot be empty"),
        ("call_codex", {"prompt": " ", "cwd": "/tmp"}, "prompt cannot be empty"),
        ("call_gem", {"prompt": ""}, "prompt cannot be empty"),
        ("call_gem", {"prompt": "hi", "cwd": "relative/dir"}, "Invalid parameters: cwd must be an absolute path"),
        ("call_status", {"job_id": " "}, "job_id cannot be empty"),
        ("call_status", {"job_id": "nope"}, "Job not found: nope"),
        ("call_cancel", {"job_id": ""}, "job_id cannot be empty"),
        ("call_cancel", {"job_id": "feedfacefeedface"}, "Job not found: feedfacefeedface"),
    ],
)
async def test_each_validation_message_of_the_seeds(
    profile_client: ProfileClient, tool: str, args: dict[str, Any], message: str
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, tool, **args)
    assert error_message(result).startswith(message)


async def test_call_cc_that_runs_past_timeout_ms_is_stopped_with_the_seeds_message(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_cc", prompt="slow [[fake:sleep=30]]", cwd=str(workdir), timeout_ms=500)
    assert error_message(result) == "Claude execution timed out after 500ms"
    assert data(result)["error"]["code"] == "TIMEOUT"


async def test_call_cc_stopped_by_tool_timeout_ms_names_the_idle_limit_and_its_value(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(
            c, "call_cc", prompt="quiet [[fake:sleep=30]]", cwd=str(workdir), timeout_ms=60000, tool_timeout_ms=700
        )
    assert error_message(result) == "Claude execution timed out after 700ms with no output (tool_timeout_ms)"
    assert data(result)["error"]["code"] == "TIMEOUT" and "tool_timeout_ms" in data(result)["error"]["hint"]


async def test_a_gemini_that_is_not_installed_gives_gemini_cli_not_found(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client("surreal", '[agents.gemini]\ncommand = "/nonexistent/gemini"\n', fakes=False) as c:
        result = await call(c, "call_gem", prompt="hi", cwd=str(workdir))
    assert error_message(result) == "Gemini CLI not found"


async def test_call_gem_synchronous_with_stream_and_a_response_limit(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_gem", prompt="hi", cwd=str(workdir), expose_stream=True, max_response_chars=7)
    out = data(result)
    assert not result.is_error, out
    assert (out["status"], out["response"], out["session_id"]) == ("completed", "hi from", GEMINI_SESSION)
    events = out["stream_events"]
    assert all(set(e) == {"type", "data"} for e in events)
    assert "hi from gemini mock" in [e["data"].get("text") for e in events if e["type"].startswith("message")]


async def test_call_codex_runs_codex_in_cwd(profile_client: ProfileClient, workdir: Path, argv_log: Path) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_codex", prompt="hi", cwd=str(workdir))
    out = data(result)
    assert (out["status"], out["response"]) == ("completed", "MOCK-OK: hello from the mock model"), out
    assert logged(argv_log)[0]["argv"][0] == "exec"


async def test_fire_and_forget_returns_the_job_and_call_status_returns_its_response(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client(toolsets="core,surreal") as c:
        queued = data(await call(c, "call_gem", prompt="hi", cwd=str(workdir), fire_and_forget=True, task_name="t1"))
        job_id = queued["job_id"]
        assert queued == {"status": "queued", "job_id": job_id, "message": TEXTS["queued"]}
        await wait_done(c, job_id)
        status = data(await call(c, "call_status", job_id=job_id))
        jobs = data(await call(c, "call_jobs", status_filter="completed"))
        none_running = data(await call(c, "call_jobs", status_filter="running"))
    times = {k: status.pop(k) for k in ("created_at", "started_at", "completed_at", "duration_ms", "metadata")}
    assert status == {
        "job_id": job_id,
        "status": "completed",
        "error": None,
        "session_id": GEMINI_SESSION,
        "exchange_id": None,
        "response": "hi from gemini mock",
        "prompt": "hi",
        "task_name": "t1",
        "model_override": "gemini-2.5-pro",
        "cwd": str(workdir),
        "timeout_ms": 60000,
    }
    assert all(isinstance(times[k], str) for k in ("created_at", "started_at", "completed_at"))
    assert times["metadata"]["tool_name"] == "call_gem"
    row = jobs["jobs"][0]
    assert (jobs["total"], row["job_id"], row["status"], row["tool_name"]) == (1, job_id, "completed", "call_gem")
    assert set(row) == {"job_id", "status", "tool_name", "created_at", "started_at", "completed_at", "duration_ms"}
    assert none_running == {"jobs": [], "total": 0}


async def test_call_cancel_kills_a_running_job_and_refuses_a_finished_one(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client(toolsets="core,surreal") as c:
        hung = data(await call(c, "call_gem", prompt="wait [[fake:hang]]", cwd=str(workdir), fire_and_forget=True))
        first = data(await call(c, "call_cancel", job_id=hung["job_id"]))
        again = data(await call(c, "call_cancel", job_id=hung["job_id"]))
        done = data(await call(c, "call_gem", prompt="hi", cwd=str(workdir)))
        refused = await call(c, "call_cancel", job_id=done["metadata"]["job_id"])
    assert first["previous_status"] in ("queued", "running")
    assert first == {
        "job_id": hung["job_id"],
        "previous_status": first["previous_status"],
        "new_status": "cancelled",
        "message": "Job cancelled.",
    }
    assert again == {
        "job_id": hung["job_id"],
        "previous_status": "cancelled",
        "new_status": "cancelled",
        "message": "Job already cancelled.",
    }
    assert error_message(refused) == "Cannot cancel job in 'completed' status"


async def test_a_fire_and_forget_job_survives_a_relay_restart(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client("surreal") as c:
        queued = data(await call(c, "call_gem", prompt="hi [[fake:sleep=2]]", cwd=str(workdir), fire_and_forget=True))
    async with profile_client(toolsets="core,surreal") as c:
        await wait_done(c, queued["job_id"])
        status = data(await call(c, "call_status", job_id=queued["job_id"]))
        listed = data(await call(c, "job_list"))
    assert (status["status"], status["response"]) == ("completed", "hi from gemini mock")
    assert queued["job_id"] in [j["job_id"] for j in listed["jobs"]]


async def test_call_jobs_filters_by_tool_name(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client("surreal") as c:
        await call(c, "call_gem", prompt="hi", cwd=str(workdir))
        await call(c, "call_codex", prompt="hi", cwd=str(workdir))
        gem = data(await call(c, "call_jobs", tool_name="call_gem"))
        every = data(await call(c, "call_jobs", limit=1))
    assert [j["tool_name"] for j in gem["jobs"]] == ["call_gem"]
    assert (every["total"], every["jobs"][0]["tool_name"]) == (1, "call_codex")


async def test_the_profile_is_reachable_through_relays_discovery_tools(profile_client: ProfileClient) -> None:
    async with profile_client() as c:  # relay's default tools: core plus discovery
        listed = await call(c, "get_tool_schema", server_name="surreal", tool_name="call_cc")
        jobs = await call(c, "call_tool", server_name="surreal", tool_name="call_jobs", arguments={})
    assert not listed.is_error and "cwd" in str(data(listed))
    assert data(jobs) == {"success": True, "result": {"jobs": [], "total": 0}}


async def test_a_misspelt_call_cc_model_is_refused_naming_the_nearest_model_and_the_choices(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client("surreal") as c:
        result = await call(c, "call_cc", prompt="hi", cwd=str(workdir), model="sonet")
    assert (result.is_error, data(result)["error"]) == (
        True,
        {
            "code": "INVALID_ARGUMENT",
            "message": "model must be one of claude-sonnet-4-5, claude-haiku-4-5, claude-opus-4-5; "
            "did you mean `sonnet`?",
            "hint": "pass one of claude-sonnet-4-5, claude-haiku-4-5, claude-opus-4-5, "
            "or a short name: h, s, o, haiku, sonnet, opus",
        },
    )


async def test_cancelling_a_finished_job_says_how_to_read_its_result(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client("surreal") as c:
        done = data(await call(c, "call_gem", prompt="hi", cwd=str(workdir)))
        job_id = done["metadata"]["job_id"]
        refused = await call(c, "call_cancel", job_id=job_id)
    assert data(refused)["error"] == {
        "code": "INVALID_ARGUMENT",
        "message": "Cannot cancel job in 'completed' status",
        "hint": f"the job already ended (completed); call_status {job_id} reads its result",
    }


async def test_a_resumed_call_cc_keeps_its_sessions_model_unless_the_call_names_one(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("surreal") as c:
        await call(c, "call_cc", prompt="one", cwd=str(workdir), model="claude-opus-4-5")
        kept = await call(c, "call_cc", prompt="two", cwd=str(workdir), resume_session_id=CLAUDE_SESSION)
        await call(c, "call_cc", prompt="three", cwd=str(workdir), resume_session_id=CLAUDE_SESSION, model="h")
        found = await schemas(c)
    assert not kept.is_error, data(kept)
    models = [run["env"]["ANTHROPIC_MODEL"] for run in logged(argv_log)]
    assert models == ["claude-opus-4-5", "claude-opus-4-5", "haiku"]
    model = found["call_cc"]["properties"]["model"]
    assert (model["type"], model["default"]) == ("string", "claude-sonnet-4-5") and None not in model["enum"]
