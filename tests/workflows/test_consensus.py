"""consensus through an MCP client: every model starts at step 1, in parallel; each step reports the next answer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.api.mock_servers import Reply
from tests.argv import opt
from tests.workflows.conftest import SettingsFactory, SlowMock, call, error_message, logged, request_text, zen_client

pytestmark = pytest.mark.anyio

# Three mock models answer after 2 s each: consulted one after another that is 6 s or more, in parallel
# about 2 s (3.3 s measured on this shared 2-core machine under load; the bound leaves room for that).
MODEL_DELAY_S = 2.0
PARALLEL_BOUND_S = 4.5


def step(number: int, total: int, **extra: Any) -> dict[str, Any]:
    return {
        "step": "Should we migrate the public API from REST to GraphQL?",
        "step_number": number,
        "total_steps": total,
        "next_step_required": number < total,
        "findings": f"notes after step {number}",
        **extra,
    }


async def test_three_slow_models_answer_in_about_the_time_of_one(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, openai_mock: SlowMock
) -> None:
    anthropic_mock.delay_s = openai_mock.delay_s = MODEL_DELAY_S
    anthropic_mock.default = Reply(text="Claude says: worth it for clients with varied needs.")
    openai_mock.default = Reply(text="An OpenAI-style model weighs in.")
    models = [
        {"model": "sonnet", "stance": "for"},
        {"model": "grok", "stance": "against"},
        {"model": "gpt5", "stance": "neutral"},
    ]
    # The vendor SDKs load on first use; load them first so the clock measures the models, not the imports.
    import anthropic  # noqa: F401
    import openai  # noqa: F401

    async with zen_client(zen_settings()) as client:
        started = time.monotonic()
        failed, first = await call(client, "consensus", step(1, 3, models=models))
        assert not failed, first
        thread = first["continuation_id"]
        _, second = await call(client, "consensus", step(2, 3, continuation_id=thread))
        _, third = await call(client, "consensus", step(3, 3, continuation_id=thread))
        elapsed = time.monotonic() - started
    durations = [r["model_response"]["metadata"]["duration_s"] for r in (first, second, third)]
    arrivals = sorted(anthropic_mock.arrivals + openai_mock.arrivals)
    assert len(arrivals) == 3 and arrivals[-1] - arrivals[0] < MODEL_DELAY_S, "a model started after another ended"
    assert elapsed < PARALLEL_BOUND_S, f"took {elapsed:.2f}s; each model {durations}"
    assert [first["status"], second["status"], third["status"]] == [
        "analysis_and_first_model_consulted",
        "model_consulted",
        "consensus_workflow_complete",
    ]
    consulted = {(r["model_consulted"], r["model_stance"]) for r in (first, second, third)}
    assert consulted == {("sonnet", "for"), ("grok", "against"), ("gpt5", "neutral")}
    assert all(r["model_response"]["status"] == "success" for r in (first, second, third))
    assert first["agent_analysis"] == {"initial_analysis": "notes after step 1"}
    assert [first["next_step_required"], second["next_step_required"], third["next_step_required"]] == [
        True,
        True,
        False,
    ]
    assert third["consensus_complete"] is True
    assert third["complete_consensus"] == {
        "initial_prompt": "Should we migrate the public API from REST to GraphQL?",
        "models_consulted": ["sonnet:for", "grok:against", "gpt5:neutral"],
        "total_responses": 3,
        "consensus_confidence": "high",
    }
    assert third["continuation_offer"]["note"].startswith("Consensus workflow can continue for")
    stances = [request_text(r) for r in openai_mock.requests]
    assert any("AGAINST" in s for s in stances) and all("Claude says" not in s for s in stances)


async def test_an_api_model_and_two_cli_agents_run_at_once_and_a_failing_one_is_reported(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, openai_mock: SlowMock, argv_log: Path
) -> None:
    anthropic_mock.default = Reply(text="API model verdict.")
    openai_mock.script(Reply(status=401, error_message="bad key"))
    models = [
        {"model": "sonnet", "stance": "for"},
        {"model": "cli:codex", "stance": "against"},
        {"model": "cli:claude/s", "stance": "neutral", "stance_prompt": "Judge it as an operator."},
        {"model": "grok", "stance": "neutral"},
    ]
    async with zen_client(zen_settings()) as client:
        failed, first = await call(client, "consensus", step(1, 4, models=models))
        thread = first["continuation_id"]
        answers = [first]
        for n in (2, 3, 4):
            answers.append((await call(client, "consensus", step(n, 4, continuation_id=thread)))[1])
    assert not failed, first
    by_model = {a["model_consulted"]: a["model_response"] for a in answers}
    assert by_model["sonnet"]["status"] == "success" and by_model["sonnet"]["verdict"] == "API model verdict."
    assert by_model["cli:codex"] == by_model["cli:codex"] | {
        "status": "success",
        "verdict": "MOCK-OK: hello from the mock model",
    }
    assert by_model["cli:claude/s"]["status"] == "success"
    assert by_model["grok"]["status"] == "error" and "refused the API key" in by_model["grok"]["error"]
    assert by_model["grok"]["metadata"]["error"]["code"] == "AUTH_INVALID"
    assert answers[-1]["status"] == "consensus_workflow_complete"
    assert answers[-1]["complete_consensus"]["total_responses"] == 4
    claude_argv = next(e["argv"] for e in logged(argv_log) if "--verbose" in e["argv"])  # claude's run
    assert opt(claude_argv, "--model") == "sonnet"
    assert opt(claude_argv, "--append-system-prompt").startswith("Judge it as an operator.")


async def test_step_one_without_models_is_refused_with_the_seeds_message(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "consensus", step(1, 3))
        failed_one, one = await call(client, "consensus", step(1, 3, models=[{"model": "sonnet"}]))
    assert failed and error_message(out).startswith(
        "Add 'models' field in Step 1 with at least 2 model configurations."
    )
    assert failed_one and "at least 2" in error_message(one)


async def test_a_duplicate_model_and_stance_is_refused(zen_settings: SettingsFactory, anthropic_mock: SlowMock) -> None:
    models = [{"model": "sonnet", "stance": "for"}, {"model": "sonnet", "stance": "for"}]
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "consensus", step(1, 2, models=models))
    assert failed
    assert error_message(out) == (
        "Duplicate model + stance combination found: sonnet with stance 'for'. "
        "Each model + stance combination must be unique."
    )
    assert anthropic_mock.requests == []


async def test_the_consensus_schema_carries_the_seeds_limits(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings()) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "consensus")
    schema = tool.input_schema
    assert schema["required"] == ["step", "step_number", "total_steps", "next_step_required", "findings"]
    props = schema["properties"]
    assert props["models"]["minItems"] == 2 and props["step_number"]["minimum"] == 1
    assert not {"temperature", "thinking_mode", "files_checked", "relevant_context", "issues_found"} & set(props)
    assert not {"hypothesis", "confidence", "model"} & set(props)


async def test_the_seeds_models_example_consults_both_gemini_models_with_their_stance_prompts(
    zen_settings: SettingsFactory, openai_mock: SlowMock
) -> None:
    models = [
        {"model": "gemini-2.5-pro", "stance": "for", "stance_prompt": "Argue for GraphQL migration..."},
        {"model": "gemini-2.0-flash", "stance": "against", "stance_prompt": "Argue against migration..."},
    ]
    async with zen_client(zen_settings()) as client:
        failed, first = await call(client, "consensus", step(1, 2, models=models) | {"step": "Evaluate API migration"})
        _, last = await call(client, "consensus", step(2, 2, continuation_id=first["continuation_id"]))
    assert not failed, first
    assert first["total_steps"] == 2 and last["status"] == "consensus_workflow_complete"
    sent = {r.body["model"]: request_text(r) for r in openai_mock.requests}
    assert set(sent) == {"gemini-2.5-pro", "gemini-2.0-flash"}
    assert "Argue for GraphQL migration..." in sent["gemini-2.5-pro"]
    assert "Argue against migration..." in sent["gemini-2.0-flash"]
    assert all("Evaluate API migration" in text for text in sent.values())


async def test_a_consensus_continues_after_a_relay_restart(zen_settings: SettingsFactory) -> None:
    settings = zen_settings()
    models = [{"model": "cli:codex", "stance": "for"}, {"model": "cli:gemini", "stance": "against"}]
    async with zen_client(settings) as client:
        failed, first = await call(client, "consensus", step(1, 2, models=models))
    async with zen_client(settings) as restarted:
        _, last = await call(restarted, "consensus", step(2, 2, continuation_id=first["continuation_id"]))
    assert not failed, first
    assert {first["model_consulted"], last["model_consulted"]} == {"cli:codex", "cli:gemini"}
    assert last["model_response"]["status"] == "success"
    assert last["status"] == "consensus_workflow_complete"
