"""recommend_tools' model reranker: the answer's parsing, the config, the time bound, the cache, and the
plumbing through relay's `ask` path against the mock Anthropic server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.errors import ErrorCode, RelayError
from relay.gateway.rerank import (
    ModelAnswer,
    RerankConfig,
    Reranker,
    engine_asker,
    parse_rerank,
    rerank_config,
    rerank_prompt,
)
from relay.gateway.search import Ranked, ToolDoc, catalog_version, rank
from relay.jobs.engine import Engine
from relay.server.app import build_server
from tests.api.mock_servers import MockServer, Reply
from tests.conftest import SettingsFactory
from tests.gateway.conftest import GATEWAY_ENV

pytestmark = pytest.mark.anyio

ANTHROPIC_KEY = "sk-ant-test-0123456789abcdefghij"
BOUND_S = 60.0  # a ceiling for a loaded machine, not an expected time

DOCS = [
    ToolDoc("filesystem", "read_text_file", "Read the complete contents of a file as text", ["path"]),
    ToolDoc("filesystem", "write_file", "Create a new file or overwrite a file", ["path", "content"]),
    ToolDoc("datadog", "schedule_downtime", "Schedule a downtime in Datadog", ["scope", "start", "end"]),
    ToolDoc("datadog", "mute_host", "Mute a host in Datadog", ["hostname", "end"]),
    ToolDoc("slack", "slack_post_message", "Post a new message to a Slack channel", ["channel_id", "text"]),
]
TASK = "set a maintenance window on the db hosts so nobody gets paged"


def keys(ranked: list[Ranked]) -> list[str]:
    return [f"{r.doc.server}/{r.doc.name}" for r in ranked]


def candidates() -> list[Ranked]:
    return [Ranked(d, 1.0 / (i + 1)) for i, d in enumerate(DOCS)]


def answer(*tools: str, sentence: str = "Call datadog/schedule_downtime with scope host:db.") -> str:
    return json.dumps({"tools": list(tools), "recommendation": sentence})


@pytest.fixture
def anthropic_mock() -> Iterator[MockServer]:
    with MockServer("anthropic") as server:
        yield server


# --- the answer --------------------------------------------------------------------------------


def test_the_models_order_is_applied_and_the_candidates_it_left_out_follow_in_keyword_order() -> None:
    text = "```json\n" + answer("datadog/schedule_downtime", "nowhere/made_up", "datadog/mute_host") + "\n```"
    order, sentence = parse_rerank(text, candidates())
    assert keys(order) == [
        "datadog/schedule_downtime",
        "datadog/mute_host",
        "filesystem/read_text_file",
        "filesystem/write_file",
        "slack/slack_post_message",
    ]
    assert sentence == "Call datadog/schedule_downtime with scope host:db."


def test_an_answer_that_is_not_the_json_asked_for_or_names_no_candidate_is_an_upstream_error() -> None:
    for text in ("I would use the downtime tool.", answer("nowhere/made_up"), '{"tools": "datadog/mute_host"}'):
        with pytest.raises(RelayError) as caught:
            parse_rerank(text, candidates())
        assert caught.value.code == ErrorCode.UPSTREAM_ERROR


def test_the_prompt_carries_the_task_and_every_candidate_with_its_arguments() -> None:
    prompt = rerank_prompt(TASK, candidates())
    assert TASK in prompt
    assert all(k in prompt for k in keys(candidates()))
    assert "(arguments: scope, start, end)" in prompt


# --- the config --------------------------------------------------------------------------------


def test_reranking_is_off_by_default_and_configured_in_gateway_search(make_settings: SettingsFactory) -> None:
    assert rerank_config(make_settings()) == RerankConfig()
    assert RerankConfig().model is None
    config = rerank_config(make_settings('[gateway.search]\nrerank_model = "haiku"\nrerank_timeout_s = 5\n'))
    assert config == RerankConfig("haiku", 5.0, 30)
    assert rerank_config(make_settings(RELAY_RECOMMEND_MODEL="sonnet")).model == "sonnet"


def test_a_bad_gateway_search_setting_is_a_config_error_with_a_hint(make_settings: SettingsFactory) -> None:
    for text in ('rerank_model = ""', "rerank_timeout_s = -1", "rerank_candidates = 0", 'rerank_timeout_s = "x"'):
        with pytest.raises(RelayError) as caught:
            rerank_config(make_settings(f"[gateway.search]\n{text}\n"))
        assert caught.value.code == ErrorCode.CONFIG_INVALID
        assert "config.toml" in caught.value.hint


# --- the reranker with a scripted model ----------------------------------------------------------


async def test_a_repeated_task_over_the_same_tools_is_answered_from_the_cache() -> None:
    asked: list[str] = []

    async def ask(prompt: str, system: str, model: str) -> ModelAnswer:
        asked.append(prompt)
        return ModelAnswer(answer("datadog/schedule_downtime"), "job-1", model, 0.002)

    reranker = Reranker()
    config = RerankConfig("haiku")
    first = await reranker.rerank(TASK, candidates(), "v1", config, ask)
    again = await reranker.rerank(f"  {TASK.upper()} ", candidates(), "v1", config, ask)
    assert (first.ranked_by, first.cached, first.cost_usd, first.job_id) == ("model", False, 0.002, "job-1")
    assert (again.ranked_by, again.cached, again.cost_usd) == ("model", True, 0.0)
    assert keys(again.tools) == keys(first.tools) and keys(first.tools)[0] == "datadog/schedule_downtime"
    assert len(asked) == 1
    changed = await reranker.rerank(TASK, candidates(), "v2", config, ask)  # the catalog changed
    assert not changed.cached and len(asked) == 2


async def test_a_model_slower_than_the_bound_leaves_the_keyword_order() -> None:
    release = anyio.Event()

    async def ask(prompt: str, system: str, model: str) -> ModelAnswer:
        await release.wait()  # never set: only the time bound ends this
        raise AssertionError("unreachable")

    reranker = Reranker()
    with anyio.fail_after(BOUND_S):
        result = await reranker.rerank(TASK, candidates(), "v1", RerankConfig("haiku", timeout_s=0.05), ask)
    assert result.ranked_by == "keywords"
    assert keys(result.tools) == keys(candidates())
    assert result.note is not None and "0.05 s" in result.note


async def test_a_failing_model_leaves_the_keyword_order_and_says_why() -> None:
    async def ask(prompt: str, system: str, model: str) -> ModelAnswer:
        return ModelAnswer("no JSON here", "job-9", model, 0.001)

    result = await Reranker().rerank(TASK, candidates(), "v1", RerankConfig("haiku"), ask)
    assert (result.ranked_by, result.job_id, result.cost_usd) == ("keywords", "job-9", 0.001)
    assert keys(result.tools) == keys(candidates())
    assert result.note is not None and "JSON" in result.note


async def test_only_the_configured_number_of_candidates_goes_to_the_model() -> None:
    prompts: list[str] = []

    async def ask(prompt: str, system: str, model: str) -> ModelAnswer:
        prompts.append(prompt)
        return ModelAnswer(answer("filesystem/write_file"))

    result = await Reranker().rerank(TASK, candidates(), "v1", RerankConfig("haiku", candidates=2), ask)
    assert keys(result.tools) == ["filesystem/write_file", "filesystem/read_text_file"]
    assert "datadog" not in prompts[0]


# --- through relay's ask path, against the mock Anthropic server -------------------------------------


async def test_the_reranker_asks_through_an_ask_job_whose_cost_is_recorded(
    make_settings: SettingsFactory, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(text=answer("datadog/schedule_downtime", "datadog/mute_host"), usage=(900, 40, 0)))
    settings = make_settings(RELAY_ANTHROPIC_BASE_URL=anthropic_mock.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY)
    reranker = Reranker()
    async with Engine(settings) as engine:
        ask = engine_asker(engine, BOUND_S)
        with anyio.fail_after(BOUND_S):
            result = await reranker.rerank(TASK, candidates(), "v1", RerankConfig("sonnet"), ask)
            again = await reranker.rerank(TASK, candidates(), "v1", RerankConfig("sonnet"), ask)
        assert result.ranked_by == "model"
        assert keys(result.tools)[:2] == ["datadog/schedule_downtime", "datadog/mute_host"]
        assert result.recommendation == "Call datadog/schedule_downtime with scope host:db."
        assert result.job_id is not None
        job = engine.envelope(result.job_id)
        assert job["status"] == "completed"
        assert job["cost_usd"] == pytest.approx((900 * 3.0 + 40 * 15.0) / 1e6)
        assert result.cost_usd == job["cost_usd"]
        assert engine.get(result.job_id).request.get("tool") == "recommend_tools"
    assert again.cached and len(anthropic_mock.requests) == 1
    (request,) = anthropic_mock.requests
    assert TASK in json.dumps(request.body["messages"]) and "JSON only" in request.body["system"]


async def test_a_model_that_hangs_is_cut_off_at_the_bound_and_its_job_cancelled(
    make_settings: SettingsFactory, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(hang=True))
    settings = make_settings(RELAY_ANTHROPIC_BASE_URL=anthropic_mock.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY)
    async with Engine(settings) as engine:
        with anyio.fail_after(BOUND_S):
            result = await Reranker().rerank(
                TASK, candidates(), "v1", RerankConfig("sonnet", timeout_s=1.0), engine_asker(engine, BOUND_S)
            )
        assert result.ranked_by == "keywords" and keys(result.tools) == keys(candidates())
        (job,) = engine.list()
        with anyio.fail_after(BOUND_S):
            final = await engine.wait_one(job.id, BOUND_S)
        assert final.status == "cancelled"
    assert anthropic_mock.streaming.is_set()


async def test_recommend_tools_applies_the_configured_models_order_and_reports_it(
    make_settings: SettingsFactory, anthropic_mock: MockServer
) -> None:
    # The scripted model puts core's `ask` first, where the keyword search did not (checked below).
    task = "get a second opinion on this design"
    anthropic_mock.script(Reply(text=answer("core/ask", sentence="Call core/ask with the design as prompt.")))
    settings = make_settings(
        '[gateway.search]\nrerank_model = "sonnet"\n',
        RELAY_ANTHROPIC_BASE_URL=anthropic_mock.base_url,
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
        **GATEWAY_ENV,
    )
    async with Client(build_server(settings)) as c:
        with anyio.fail_after(BOUND_S):
            first = (await c.call_tool("recommend_tools", {"task_description": task})).structured_content
            again = (await c.call_tool("recommend_tools", {"task_description": task})).structured_content
    assert first is not None and again is not None
    top: list[dict[str, Any]] = first["tools"]
    assert (top[0]["server"], top[0]["name"]) == ("core", "ask")
    assert first["recommendation"] == "Call core/ask with the design as prompt."
    assert first["ranking"]["ranked_by"] == "model" and first["ranking"]["cost_usd"] > 0
    assert again["ranking"]["cached"] is True and again["tools"] == first["tools"]
    (request,) = anthropic_mock.requests
    prompt = request.body["messages"][0]["content"][0]["text"]
    keyword_first = next(line for line in prompt.splitlines() if line.startswith("- "))
    assert not keyword_first.startswith("- core/ask")  # so the order above is the model's, not the keywords'
    assert "- core/ask" in prompt


def test_the_catalog_version_changes_when_a_tool_does() -> None:
    changed = [*DOCS[:-1], ToolDoc("slack", "slack_post_message", "Post a message", ["channel_id", "text"])]
    assert catalog_version(DOCS) == catalog_version(list(DOCS))
    assert catalog_version(DOCS) != catalog_version(changed)
    assert rank("mute a host", DOCS, 1)[0].doc.name == "mute_host"
