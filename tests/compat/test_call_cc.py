"""Profile `call-cc`: seed 000 §5's call_cc with its status, jobs, sessions and cancel tools, on the fake claude."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.server.toolsets.call_cc import TEXTS
from tests.argv import opt
from tests.compat.conftest import ProfileClient, call, data, logged, schemas, stdio_tool_names, wait_done

pytestmark = pytest.mark.anyio

TOOLS = ["call_cc", "call_cc_cancel", "call_cc_jobs", "call_cc_sessions", "call_cc_status"]
SESSION = "b3af0212-3a6d-4156-a35c-cfab742dc56e"


async def test_relay_serve_profile_call_cc_lists_exactly_the_seeds_tools(relay_home: Path, workdir: Path) -> None:
    assert await stdio_tool_names("call-cc", relay_home, workdir) == TOOLS


async def test_the_parameters_and_defaults_are_section_5_1s(profile_client: ProfileClient) -> None:
    async with profile_client("call-cc") as c:
        found = await schemas(c)
    assert sorted(found) == TOOLS
    cc = found["call_cc"]
    assert cc["required"] == ["prompt"]
    assert list(cc["properties"]) == [
        "prompt",
        "working_directory",
        "model",
        "session_id",
        "mode",
        "timeout_ms",
        "brainstorm",
    ]
    props = cc["properties"]
    assert (props["mode"]["enum"], props["mode"]["default"]) == (["sync", "async"], "sync")
    assert (props["timeout_ms"]["default"], props["brainstorm"]["default"]) == (120000, False)
    assert found["call_cc_status"]["required"] == ["job_id"]
    assert list(found["call_cc_jobs"]["properties"]) == ["limit", "status_filter"]
    assert list(found["call_cc_sessions"]["properties"]) == ["limit"]


async def test_sync_call_returns_the_output_with_haiku_by_default(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("call-cc") as c:
        result = await call(c, "call_cc", prompt="say hello", working_directory=str(workdir))
    out = data(result)
    assert not result.is_error, out
    job_id, duration, model = out.pop("job_id"), out.pop("duration_ms"), out.pop("model_used")
    assert out == {"status": "completed", "output": "hi from mock", "session_id": SESSION}
    assert isinstance(job_id, str) and isinstance(duration, int) and model
    run = logged(argv_log)[0]
    assert opt(run["argv"], "--model") == "haiku"
    # safe by default: relay's configured permission (read-only), not a skipped-permissions run
    assert run["argv"][run["argv"].index("--permission-mode") + 1] == "default"
    assert run["cwd"] == str(workdir) and run["prompt"] == "say hello"


@pytest.mark.parametrize(
    ("given", "passed"), [("o", "opus"), ("s", "sonnet"), ("opus", "opus"), ("claude-x-1", "claude-x-1")]
)
async def test_model_tiers_and_full_names(
    profile_client: ProfileClient, workdir: Path, argv_log: Path, given: str, passed: str
) -> None:
    async with profile_client("call-cc") as c:
        result = await call(c, "call_cc", prompt="hi", working_directory=str(workdir), model=given)
    assert not result.is_error, data(result)
    argv = logged(argv_log)[0]["argv"]
    assert opt(argv, "--model") == passed


async def test_brainstorm_adds_the_seeds_preamble(profile_client: ProfileClient, workdir: Path, argv_log: Path) -> None:
    async with profile_client("call-cc") as c:
        await call(c, "call_cc", prompt="ways to test", working_directory=str(workdir), brainstorm=True)
    assert logged(argv_log)[0]["prompt"] == (
        "BRAINSTORMING MODE: Generate creative, diverse ideas for the following:\n\nways to test"
    )


async def test_a_timeout_gives_the_seeds_timeout_error(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client("call-cc") as c:
        result = await call(c, "call_cc", prompt="[[fake:sleep=30]]", working_directory=str(workdir), timeout_ms=500)
    out = data(result)
    assert result.is_error
    assert out == {
        "status": "error",
        "error": "Task exceeded timeout",
        "code": "TIMEOUT",
        "timeout_ms": 500,
        "job_id": out["job_id"],
    }


async def test_a_failed_run_gives_execution_failed(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client("call-cc") as c:
        result = await call(
            c, "call_cc", prompt="[[fake:replay=claude_stream_error_500]]", working_directory=str(workdir)
        )
    out = data(result)
    assert result.is_error and out["status"] == "error" and out["code"] == "EXECUTION_FAILED", out
    assert out["error"]


async def test_an_empty_prompt_and_unknown_jobs_are_structured_errors(profile_client: ProfileClient) -> None:
    async with profile_client("call-cc") as c:
        empty = await call(c, "call_cc", prompt="  ")
        unknown = await call(c, "call_cc_status", job_id="nope")
        blank = await call(c, "call_cc_cancel", job_id="")
    assert data(empty) == {
        "status": "error",
        "error": TEXTS["prompt_empty"],
        "code": "INVALID_ARGUMENT",
        "hint": "pass the task for Claude as prompt",
    }
    assert data(unknown) == {
        "status": "error",
        "error": "Job not found: nope",
        "code": "JOB_NOT_FOUND",
        "hint": "call_cc_jobs lists the jobs",
    }
    assert data(blank) == {
        "status": "error",
        "error": "job_id cannot be empty",
        "code": "INVALID_ARGUMENT",
        "hint": "pass the job_id call_cc returned (call_cc_jobs lists them)",
    }
    assert empty.is_error and unknown.is_error and blank.is_error


async def test_an_unknown_argument_is_refused_as_the_rust_original_words_it(profile_client: ProfileClient) -> None:
    async with profile_client("call-cc") as c:
        result = await call(c, "call_cc", prompt="hi", cwd="/tmp")
    assert result.is_error and (data(result)["status"], data(result)["code"]) == ("error", "INVALID_ARGUMENT")
    assert data(result)["error"] == (
        "Invalid parameters: unknown field `cwd`, expected one of `prompt`, `working_directory`, `model`, "
        "`session_id`, `mode`, `timeout_ms`, `brainstorm`"
    )


async def test_async_returns_the_job_id_and_status_returns_the_full_output(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client(toolsets="core,call-cc") as c:
        started = data(await call(c, "call_cc", prompt="hi", working_directory=str(workdir), mode="async"))
        assert started == {"job_id": started["job_id"], "status": "queued"}
        await wait_done(c, started["job_id"])
        status = data(await call(c, "call_cc_status", job_id=started["job_id"]))
        jobs = data(await call(c, "call_cc_jobs", limit=5, status_filter="completed"))
        sessions = data(await call(c, "call_cc_sessions"))
    stamps = {k: status.pop(k) for k in ("created_at", "started_at", "completed_at", "duration_ms", "model_used")}
    assert status == {
        "job_id": started["job_id"],
        "status": "completed",
        "session_id": SESSION,
        "working_directory": str(workdir),
        "prompt_hash": "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4",
        "output": "hi from mock",
        "error": None,
    }
    assert all(stamps[k] for k in ("created_at", "started_at", "completed_at"))
    assert [j["job_id"] for j in jobs["jobs"]] == [started["job_id"]] and jobs["total"] == 1
    assert "output" not in jobs["jobs"][0]
    session = sessions["sessions"][0]
    assert (session["session_id"], session["agent_type"], session["turn_count"]) == (SESSION, "claude_code", 1)
    assert session["working_directory"] == str(workdir) and sessions["total"] == 1


async def test_session_id_continues_the_claude_session(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("call-cc") as c:
        await call(c, "call_cc", prompt="one", working_directory=str(workdir))
        second = data(await call(c, "call_cc", prompt="two", session_id=SESSION))
    argv = logged(argv_log)[1]["argv"]
    assert opt(argv, "--resume") == SESSION
    assert second["session_id"] == SESSION and logged(argv_log)[1]["cwd"] == str(workdir)


async def test_a_resumed_session_keeps_its_model_unless_the_call_names_one(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("call-cc") as c:
        await call(c, "call_cc", prompt="one", working_directory=str(workdir), model="o")
        await call(c, "call_cc", prompt="two", session_id=SESSION)
        await call(c, "call_cc", prompt="three", session_id=SESSION, model="s")
    models = [opt(run["argv"], "--model") for run in logged(argv_log)]
    assert models == ["opus", "opus", "sonnet"]


async def test_call_cc_cancel_kills_an_async_job(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client("call-cc") as c:
        started = data(await call(c, "call_cc", prompt="[[fake:hang]]", working_directory=str(workdir), mode="async"))
        cancelled = data(await call(c, "call_cc_cancel", job_id=started["job_id"]))
        status = data(await call(c, "call_cc_status", job_id=started["job_id"]))
        listed = data(await call(c, "call_cc_jobs", status_filter="cancelled"))
    assert cancelled == {
        "job_id": started["job_id"],
        "previous_status": cancelled["previous_status"],
        "new_status": "cancelled",
        "message": "Job cancelled.",
    }
    assert status["status"] == "cancelled" and status["output"] is not None
    assert [j["job_id"] for j in listed["jobs"]] == [started["job_id"]]


async def test_an_async_job_survives_a_relay_restart(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client("call-cc") as c:
        started = data(
            await call(c, "call_cc", prompt="hi [[fake:sleep=2]]", working_directory=str(workdir), mode="async")
        )
    async with profile_client(toolsets="core,call-cc") as c:
        await wait_done(c, started["job_id"])
        status = data(await call(c, "call_cc_status", job_id=started["job_id"]))
        listed = data(await call(c, "job_list"))
    assert (status["status"], status["output"]) == ("completed", "hi from mock")
    assert started["job_id"] in [j["job_id"] for j in listed["jobs"]]


async def test_cancelling_a_finished_job_is_refused_saying_how_to_read_it(
    profile_client: ProfileClient, workdir: Path
) -> None:
    async with profile_client("call-cc") as c:
        done = data(await call(c, "call_cc", prompt="hi", working_directory=str(workdir)))
        refused = await call(c, "call_cc_cancel", job_id=done["job_id"])
    assert refused.is_error
    assert data(refused) == {
        "status": "error",
        "error": "Cannot cancel job in 'completed' status",
        "code": "INVALID_ARGUMENT",
        "hint": "the job already ended (completed); call_cc_status reads its output",
    }
