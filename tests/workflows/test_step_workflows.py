"""planner, codereview, debug and thinkdeep through an MCP client: step rules, skip rules, expert analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api.mock_servers import Reply
from tests.workflows.conftest import SettingsFactory, SlowMock, call, error_message, request_text, zen_client

pytestmark = pytest.mark.anyio


def step(text: str, number: int, total: int, **extra: Any) -> dict[str, Any]:
    return {
        "step": text,
        "step_number": number,
        "total_steps": total,
        "next_step_required": number < total,
        "findings": f"findings of step {number}",
        **extra,
    }


@pytest.fixture
def code(workdir: Path) -> Path:
    path = workdir / "router.py"
    path.write_text("def route(path):\n    return eval(path)\n")
    return path


async def test_codereview_pauses_then_sends_the_consolidated_review_and_the_files_to_the_expert(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, code: Path
) -> None:
    anthropic_mock.script(Reply(text='```json\n{"status": "review_complete", "top": "eval"}\n```'))
    issue = {"severity": "critical", "description": "eval on user input"}
    async with zen_client(zen_settings()) as client:
        failed, first = await call(
            client, "codereview", step("Review code quality", 1, 2, relevant_files=[str(code)], model="sonnet")
        )
        assert not failed, first
        assert anthropic_mock.requests == []
        _, second = await call(
            client,
            "codereview",
            step(
                "Checked routing",
                2,
                2,
                continuation_id=first["continuation_id"],
                issues_found=[issue],
                files_checked=[str(code)],
                model="sonnet",
                review_type="security",
            ),
        )
    assert first["status"] == "pause_for_code_review" and first["code_review_required"] is True
    assert first["required_actions"] and first["file_context"]["type"] == "reference_only"
    assert first["code_review_status"] == {
        "files_checked": 0,
        "relevant_files": 1,
        "relevant_context": 0,
        "issues_found": 0,
        "images_collected": 0,
        "current_confidence": "low",
        "issues_by_severity": {},
        "review_validation_type": "external",
    }
    assert second["status"] == "calling_expert_analysis"
    assert second["expert_analysis"] == {"status": "review_complete", "top": "eval"}
    assert second["code_review_status"]["issues_by_severity"] == {"critical": 1}
    assert second["complete_code_review"]["issues_found"] == [issue]
    assert second["file_context"]["type"] == "fully_embedded"
    assert second["metadata"]["model_used"] == "claude-sonnet-4-5"
    sent = request_text(anthropic_mock.requests[0])
    assert "findings of step 1" in sent and "findings of step 2" in sent and "return eval(path)" in sent
    assert "review_type: security" in sent and "eval on user input" in sent


async def test_codereview_step_one_needs_relevant_files(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "codereview", step("Review code quality", 1, 2))
    assert failed
    assert error_message(out).startswith(
        "Add 'relevant_files' field in Step 1 to specify code files or directories to review."
    )


async def test_internal_review_skips_the_expert(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, code: Path
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(
            client,
            "codereview",
            step("Review", 1, 1, relevant_files=[str(code)], review_validation_type="internal"),
        )
    assert not failed, out
    assert out["status"] == "code_review_complete_ready_for_implementation"
    assert out["skip_expert_analysis"] is True
    assert out["expert_analysis"]["status"] == "skipped_due_to_internal_analysis_type"
    assert anthropic_mock.requests == []


async def test_use_assistant_model_false_finishes_locally(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, code: Path
) -> None:
    async with zen_client(zen_settings()) as client:
        _, out = await call(
            client, "codereview", step("Review", 1, 1, relevant_files=[str(code)], use_assistant_model=False)
        )
    assert out["status"] == "local_work_complete" and "complete_code_review" in out
    assert anthropic_mock.requests == []


@pytest.mark.parametrize("tool", ["codereview", "debug", "thinkdeep"])
async def test_workflow_tools_refuse_relative_paths(zen_settings: SettingsFactory, tool: str) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, tool, step("Look", 1, 2, relevant_files=["src/api/router.py"]))
    assert failed
    assert error_message(out).startswith("Error: All file paths must be FULL absolute paths")
    assert "src/api/router.py" in error_message(out)


@pytest.mark.parametrize("tool", ["codereview", "debug", "thinkdeep", "planner"])
async def test_a_step_too_long_is_refused(zen_settings: SettingsFactory, code: Path, tool: str) -> None:
    args = step("x" * 300_000, 1, 2, relevant_files=[str(code)])
    if tool == "planner":
        args = {k: v for k, v in args.items() if k not in ("findings", "relevant_files")}
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, tool, args)
    assert failed and error_message(out).startswith("Step instructions are too long.")


async def test_debug_with_certain_confidence_proceeds_with_the_fix_without_the_expert(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, code: Path
) -> None:
    async with zen_client(zen_settings()) as client:
        _, first = await call(
            client, "debug", step("Crash on /x", 1, 2, hypothesis="eval of the path", confidence="medium")
        )
        _, last = await call(
            client,
            "debug",
            step(
                "Confirmed",
                2,
                2,
                relevant_files=[str(code)],
                confidence="certain",
                hypothesis="eval of the path",
                continuation_id=first["continuation_id"],
            ),
        )
    assert first["status"] == "pause_for_investigation" and first["investigation_required"] is True
    assert first["investigation_status"]["hypotheses_formed"] == 1
    assert last["status"] == "certain_confidence_proceed_with_fix"
    assert last["expert_analysis"]["status"] == "skipped_due_to_certain_confidence"
    assert last["investigation_status"]["hypotheses_formed"] == 2
    assert last["complete_investigation"]["final_confidence"] == "certain"
    assert anthropic_mock.requests == []


async def test_debug_calls_the_expert_when_not_certain(
    zen_settings: SettingsFactory, openai_mock: SlowMock, code: Path
) -> None:
    openai_mock.script(Reply(text="Root cause: eval. Fix: a dict of routes."))
    async with zen_client(zen_settings()) as client:
        _, out = await call(
            client,
            "debug",
            step("Crash", 1, 1, relevant_files=[str(code)], confidence="high", hypothesis="eval", model="grok"),
        )
    assert out["status"] == "calling_expert_analysis"
    assert out["expert_analysis"] == {
        "status": "analysis_complete",
        "raw_analysis": "Root cause: eval. Fix: a dict of routes.",
        "format": "text",
    }
    assert out["metadata"]["provider_used"] == "xai"


async def test_thinkdeep_passes_temperature_and_focus_to_the_expert(
    zen_settings: SettingsFactory, openai_mock: SlowMock
) -> None:
    openai_mock.script(Reply(text="Consider a queue."))
    async with zen_client(zen_settings()) as client:
        _, paused = await call(client, "thinkdeep", step("Scale the ingest", 1, 2, focus_areas=["performance"]))
        _, out = await call(
            client,
            "thinkdeep",
            step(
                "Weighed options",
                2,
                2,
                continuation_id=paused["continuation_id"],
                model="grok",
                temperature=0.3,
                problem_context="10k events/s",
                confidence="high",
            ),
        )
    assert paused["status"] == "pause_for_thinkdeep" and paused["thinking_status"]["analysis_focus"] == ["performance"]
    assert out["status"] == "calling_expert_analysis" and out["thinking_complete"] is True
    assert out["complete_thinking"]["key_findings"] == ["Step 1: findings of step 1", "Step 2: findings of step 2"]
    body = openai_mock.requests[0].body
    assert body["temperature"] == 0.3 and "10k events/s" in request_text(openai_mock.requests[0])


async def test_thinkdeep_with_certain_confidence_skips_the_expert(
    zen_settings: SettingsFactory, openai_mock: SlowMock
) -> None:
    async with zen_client(zen_settings()) as client:
        _, out = await call(client, "thinkdeep", step("Done", 1, 1, confidence="certain"))
    assert out["status"] == "deep_thinking_complete_ready_for_implementation"
    assert out["expert_analysis"]["status"] == "skipped_due_to_certain_thinking_confidence"
    assert openai_mock.requests == []


async def test_planner_walks_through_deep_thinking_revisions_branches_and_completion(
    zen_settings: SettingsFactory,
) -> None:
    def plan(n: int, total: int, **extra: Any) -> dict[str, Any]:
        return {
            "step": f"plan step {n}",
            "step_number": n,
            "total_steps": total,
            "next_step_required": n < total,
        } | extra

    async with zen_client(zen_settings()) as client:
        _, first = await call(client, "planner", plan(1, 5))
        thread = first["continuation_id"]
        _, second = await call(
            client, "planner", plan(2, 5, continuation_id=thread, is_step_revision=True, revises_step_number=1)
        )
        _, fourth = await call(
            client,
            "planner",
            plan(4, 5, continuation_id=thread, is_branch_point=True, branch_from_step=2, branch_id="alt-db"),
        )
        _, last = await call(client, "planner", plan(5, 5, continuation_id=thread))
    assert first["status"] == "pause_for_deep_thinking" and first["thinking_required"] is True
    assert first["next_steps"].startswith("MANDATORY: DO NOT call the planner tool again immediately")
    assert second["metadata"]["is_step_revision"] is True and second["metadata"]["revises_step_number"] == 1
    assert fourth["status"] == "pause_for_planning" and fourth["metadata"]["branches"] == ["alt-db"]
    assert last["status"] == "planning_complete" and last["planning_complete"] is True
    assert last["plan_summary"] == "COMPLETE PLAN: plan step 5 (Total 5 steps completed)"
    assert last["output"]["format"] == "step_by_step_planning"
    assert last["metadata"]["step_history_length"] == 4


@pytest.mark.parametrize(
    ("extra", "missing"),
    [
        ({"is_step_revision": True}, "revises_step_number"),
        ({"is_branch_point": True, "branch_id": "b"}, "branch_from_step"),
        ({"is_branch_point": True, "branch_from_step": 1}, "branch_id"),
    ],
)
async def test_planner_refuses_a_revision_or_branch_without_its_fields(
    zen_settings: SettingsFactory, extra: dict[str, Any], missing: str
) -> None:
    args = {"step": "s", "step_number": 2, "total_steps": 3, "next_step_required": True, **extra}
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "planner", args)
    assert failed and error_message(out).startswith(f"'{missing}' is required when")


@pytest.mark.parametrize(
    ("tool", "changed", "message"),
    [
        ("planner", {"step_number": 0}, "step_number must be at least 1"),
        ("planner", {"total_steps": 0}, "total_steps must be at least 1"),
        ("planner", {"step_number": -3, "total_steps": -1}, "step_number must be at least 1"),
        ("planner", {"is_step_revision": True, "revises_step_number": 0}, "revises_step_number must be at least 1"),
        ("debug", {"total_steps": 0}, "total_steps must be at least 1"),
    ],
)
async def test_step_numbers_below_one_get_the_seeds_message(
    zen_settings: SettingsFactory, tool: str, changed: dict[str, Any], message: str
) -> None:
    args = {"step": "s", "step_number": 1, "total_steps": 2, "next_step_required": True, **changed}
    if tool != "planner":
        args["findings"] = "f"
    async with zen_client(zen_settings()) as client:
        schema = {t.name: t.input_schema for t in (await client.list_tools()).tools}[tool]
        failed, out = await call(client, tool, args)
    assert failed and error_message(out) == message
    assert schema["properties"]["step_number"]["minimum"] == schema["properties"]["total_steps"]["minimum"] == 1


async def test_a_codereview_continues_after_a_relay_restart(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, code: Path
) -> None:
    settings = zen_settings()
    async with zen_client(settings) as client:
        _, first = await call(
            client, "codereview", step("Review the router", 1, 2, relevant_files=[str(code)], model="sonnet")
        )
    async with zen_client(settings) as restarted:
        failed, second = await call(
            restarted,
            "codereview",
            step("Checked eval", 2, 2, continuation_id=first["continuation_id"], model="sonnet"),
        )
    assert not failed, second
    assert second["status"] == "calling_expert_analysis"
    assert second["code_review_status"]["relevant_files"] == 1
    assert second["complete_code_review"]["initial_request"] == "Review the router"
    sent = request_text(anthropic_mock.requests[0])
    assert "findings of step 1" in sent and "return eval(path)" in sent


async def test_the_workflow_schemas_expose_exactly_the_seeds_parameters(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings()) as client:
        tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    common = ["step", "step_number", "total_steps", "next_step_required", "findings"]
    for name in ("codereview", "debug", "thinkdeep"):
        assert tools[name]["required"] == common and tools[name]["additionalProperties"] is False
    assert tools["planner"]["required"] == common[:4]
    assert not {"temperature", "thinking_mode", "confidence"} & set(tools["codereview"]["properties"])
    assert "hypothesis" in tools["codereview"]["properties"]
    assert not {"temperature", "thinking_mode", "issues_found"} & set(tools["debug"]["properties"])
    assert {"images", "problem_context", "focus_areas", "temperature"} <= set(tools["thinkdeep"]["properties"])
    assert tools["planner"]["properties"]["use_assistant_model"]["default"] is False
    assert not {"findings", "images", "temperature", "relevant_files"} & set(tools["planner"]["properties"])
    assert tools["chat"]["required"] == ["prompt", "working_directory_absolute_path"]
    temperature = tools["chat"]["properties"]["temperature"]
    assert (temperature["minimum"], temperature["maximum"], temperature["type"]) == (0, 1, "number")
    assert tools["debug"]["properties"]["confidence"]["enum"][:7] == [
        "exploring", "low", "medium", "high", "very_high", "almost_certain", "certain"
    ]  # fmt: skip
    for name in ("challenge", "apilookup"):
        assert tools[name]["required"] == ["prompt"]
        assert set(tools[name]["properties"]) == {
            "prompt", "model", "temperature", "thinking_mode", "continuation_id", "images"
        }  # fmt: skip


async def test_files_outside_the_allowed_roots_are_neither_sent_to_the_expert_nor_kept_in_the_thread(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, tmp_path: Path, code: Path
) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("TOP-SECRET-VALUE\n")
    async with zen_client(zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,zen")) as client:
        _, out = await call(
            client, "codereview", step("Review", 1, 1, relevant_files=[str(code), str(secret)], model="sonnet")
        )
        _, shown = await call(client, "thread_show", {"continuation_id": out["continuation_id"]})
    assert out["file_context"] == {"type": "fully_embedded", "files_embedded": 1, "files_skipped": [str(secret)]}
    assert "TOP-SECRET-VALUE" not in request_text(anthropic_mock.requests[0])
    assert [t["files"] for t in shown["turns"]] == [[str(code)], []]
