"""execute_code and process_large_dataset over MCP: seed 003's shapes, jobs, built-in operations, model-written code."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.sandbox import datasets
from relay.server.app import build_server
from tests.api.mock_servers import MockServer, Reply
from tests.conftest import SettingsFactory

from .conftest import FAKE_CODEX, tool

pytestmark = pytest.mark.anyio
ROWS = [{"user_id": i, "value": (i * 37) % 200, "team": ["red", "blue", "green"][i % 3]} for i in range(1000)]


@pytest.fixture
def anthropic_mock() -> Iterator[MockServer]:
    with MockServer("anthropic") as server:
        yield server


async def test_execute_code_returns_the_seeds_shape_and_is_a_listed_job(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        out = await tool(c, "execute_code", code="print(sum(i * i for i in range(1, 100001)))")
        bash = await tool(c, "execute_code", code="echo $((2 + 3))", language="bash", context="add numbers")
        jobs = await tool(c, "call_tool", server_name="core", tool_name="job_list", arguments={"agent": "sandbox"})
        job = await tool(
            c, "call_tool", server_name="core", tool_name="job_result", arguments={"job_id": out["job_id"]}
        )
    assert {k: out[k] for k in ("success", "result", "language")} == {
        "success": True,
        "result": "333338333350000",
        "language": "python",
    }
    assert isinstance(out["execution_time"], float) and out["execution_time"] >= 0
    assert out["isolation"] in ("bubblewrap", "rlimits+nobody", "rlimits")
    assert (bash["success"], bash["result"], bash["language"]) == (True, "5", "bash")
    assert {j["job_id"] for j in jobs["result"]["jobs"]} == {out["job_id"], bash["job_id"]}
    assert all(j["status"] == "completed" for j in jobs["result"]["jobs"])
    assert job["result"]["text"] == "333338333350000"


async def test_execute_code_cannot_see_a_secret_relay_was_started_with(
    make_settings: SettingsFactory, project_dir: Path
) -> None:
    secret = "sk-live-planted-7d1e"
    settings = make_settings(OPENAI_API_KEY=secret, RELAY_TEST_TOKEN=secret).with_(profile="gobby")
    os.environ["RELAY_TEST_TOKEN"] = secret
    try:
        async with Client(build_server(settings)) as c:
            out = await tool(c, "execute_code", code="import os; print(sorted(os.environ.items()))")
            sh = await tool(c, "execute_code", code="env; cat /proc/$PPID/environ 2>&1 || true", language="bash")
    finally:
        del os.environ["RELAY_TEST_TOKEN"]
    assert out["success"] is True and sh["success"] is True
    assert secret not in out["result"] and secret not in sh["result"]


async def test_a_failing_run_carries_stderr_and_the_exit_code(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        failed = await tool(c, "execute_code", code="console.error('no such thing'); process.exit(3)", language="node")
        slow = await tool(c, "execute_code", code="sleep 30", language="bash", timeout=1)
        bad = await tool(c, "execute_code", code="print(1)", language="cobol")
    assert (failed["success"], failed["exit_code"], failed["error_type"]) == (False, 3, "ExecutionError")
    assert "no such thing" in failed["stderr"]
    assert (slow["success"], slow["timed_out"], slow["error_type"]) == (False, True, "TimeoutError")
    assert slow["error"] == "Execution timed out after 1 seconds"
    assert (bad["success"], bad["error_type"]) == (False, "ValueError")
    assert "python, bash, node" in bad["hint"]


def test_built_in_operations_reduce_the_data_as_their_parameters_say() -> None:
    run = datasets.run_builtin
    big = run("filter", ROWS, {"field": "value", "op": ">", "value": 190})
    assert big and all(r["value"] > 190 for r in big)
    assert run("filter", ROWS, {"where": {"team": "red"}, "limit": 2}) == ROWS[0:1] + ROWS[3:4]
    assert run("select", ROWS[:2], {"fields": ["user_id"]}) == [{"user_id": 0}, {"user_id": 1}]
    assert [r["value"] for r in run("top_k", ROWS, {"field": "value", "k": 3})] == [199, 199, 199]
    assert [r["user_id"] for r in run("sort", ROWS[:3], {"field": "value", "order": "desc"})] == [2, 1, 0]
    assert run("group_count", ROWS, {"field": "team"}) == [
        {"team": "red", "count": 334},
        {"team": "blue", "count": 333},
        {"team": "green", "count": 333},
    ]
    assert run("sample", ROWS, {"n": 5, "seed": 1}) == run("sample", ROWS, {"n": 5, "seed": 1})
    assert len(run("sample", ROWS, {"n": 5})) == 5
    assert run("dedupe", ROWS, {"fields": ["team"]}) == ROWS[:3]
    stats = run("stats", ROWS, {"fields": ["value", "team"]})
    assert stats["count"] == 1000
    assert (stats["fields"]["value"]["min"], stats["fields"]["value"]["max"]) == (0, 199)
    assert stats["fields"]["team"]["distinct"] == 3
    assert run("head", {"a": 1, "b": 2}, {"n": 1}) == [{"key": "a", "value": 1}]
    assert run("head", {"rows": ROWS}, {"path": "rows", "n": 2}) == ROWS[:2]
    with pytest.raises(RelayError) as caught:
        run("filter", ROWS, {})
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


async def test_process_large_dataset_built_in_returns_the_seeds_sizes(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        top = await tool(
            c, "process_large_dataset", data=ROWS, operation="top_k", parameters={"field": "value", "k": 10}
        )
        counted = await tool(c, "process_large_dataset", data=ROWS, operation="group count", parameters={"by": "team"})
        bad = await tool(c, "process_large_dataset", data=ROWS, operation="select", parameters={})
    assert {k: top[k] for k in ("success", "original_size", "processed_size", "reduction_percent")} == {
        "success": True,
        "original_size": 1000,
        "processed_size": 10,
        "reduction_percent": 99.0,
    }
    assert len(top["result"]) == 10 and top["method"] == "builtin:top_k"
    assert isinstance(top["execution_time"], float)
    assert (counted["processed_size"], counted["reduction_percent"]) == (3, 99.7)
    assert (bad["success"], bad["error_type"]) == (False, "ValueError")


async def test_a_plain_language_operation_runs_model_written_code_in_the_sandbox(
    make_settings: SettingsFactory, project_dir: Path, anthropic_mock: MockServer
) -> None:
    function = (
        "```python\n"
        "def process(data, parameters):\n"
        "    kept = [r for r in data if r['value'] > parameters['threshold']]\n"
        "    return sorted(kept, key=lambda r: -r['value'])[: parameters['limit']]\n"
        "```"
    )
    anthropic_mock.script(Reply(text=function))
    settings = make_settings(
        f'[agents.codex]\ncommand = "{FAKE_CODEX}"\n',
        RELAY_ANTHROPIC_BASE_URL=anthropic_mock.base_url,
        ANTHROPIC_API_KEY="sk-ant-test-0123456789abcdefghij",
        RELAY_ASK_MODEL="sonnet",
    ).with_(profile="gobby")
    async with Client(build_server(settings)) as c:
        out = await tool(
            c,
            "process_large_dataset",
            data=ROWS,
            operation="Filter rows where value > 100 and return top 10",
            parameters={"threshold": 100, "limit": 10},
        )
        jobs = await tool(c, "call_tool", server_name="core", tool_name="job_list", arguments={"agent": "sandbox"})
    assert out["success"] is True, out
    assert (out["original_size"], out["processed_size"], out["reduction_percent"], out["method"]) == (
        1000,
        10,
        99.0,
        "model",
    )
    assert out["result"] == sorted((r for r in ROWS if r["value"] > 100), key=lambda r: -r["value"])[:10]
    assert out["job_id"] in {j["job_id"] for j in jobs["result"]["jobs"]}
    asked: dict[str, Any] = anthropic_mock.requests[-1].body
    assert "Filter rows where value > 100" in str(asked)


async def test_a_plain_language_operation_without_a_model_names_the_built_ins(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        out = await tool(c, "process_large_dataset", data=ROWS, operation="find the odd one out")
    assert (out["success"], out["error_type"]) == (False, "AUTH_MISSING")
    assert "filter, select, sort, top_k" in out["hint"]


async def test_a_misspelt_language_is_refused_naming_the_nearest_one(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        bad = await tool(c, "execute_code", code="print(1)", language="pyton")
    assert bad == {
        "success": False,
        "language": "pyton",
        "error": "language 'pyton' is not supported",
        "error_type": "ValueError",
        "hint": "did you mean `python`? use one of: python, bash, node",
    }
