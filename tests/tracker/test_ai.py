"""expand_task and validate_task through relay's ask core, against mock Anthropic and OpenAI-style servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from relay.config import Settings, load_settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.tracker import Project, TaskStore
from relay.tracker.ai import EXPAND_SYSTEM, VALIDATE_SYSTEM, engine_asker, expand_task, parse_expansion, validate_task
from tests.api.mock_servers import MockServer, Reply

pytestmark = pytest.mark.anyio
WAIT_S = 60.0


@pytest.fixture
def anthropic_mock() -> Iterator[MockServer]:
    with MockServer("anthropic") as server:
        yield server


@pytest.fixture
def openai_mock() -> Iterator[MockServer]:
    with MockServer("openai") as server:
        yield server


def settings_for(home: Path, cwd: Path, **env: str) -> Settings:
    return load_settings({"RELAY_HOME": str(home), **env}, cwd=cwd)


async def test_expand_task_creates_the_models_subtasks_under_the_task_with_their_dependencies(
    relay_home: Path, repo: Path, store: TaskStore, project: Project, anthropic_mock: MockServer
) -> None:
    answer = {
        "subtasks": [
            {"title": "Design the schema", "description": "tables", "priority": 1, "task_type": "task"},
            {"title": "Write the API", "priority": 2, "depends_on": [0]},
            {"title": "Add tests", "priority": 2, "depends_on": [0, 1, 7]},
        ]
    }
    anthropic_mock.script(Reply(text="```json\n" + json.dumps(answer) + "\n```"))
    settings = settings_for(
        relay_home,
        repo,
        RELAY_ANTHROPIC_BASE_URL=anthropic_mock.base_url,
        ANTHROPIC_API_KEY="sk-ant-test-0123456789abcdefghij",
        RELAY_ASK_MODEL="sonnet",
    )
    epic = store.create(project, "Implement authentication", task_type="epic", description="login and sessions")
    with anyio.fail_after(WAIT_S):
        async with Engine(settings) as engine:
            result = await expand_task(store, project, epic.id, engine_asker(engine, "expand_task"), "use JWT")
    subs = result["subtasks"]
    assert [s["title"] for s in subs] == ["Design the schema", "Write the API", "Add tests"]
    assert {s["parent_task_id"] for s in subs} == {epic.id}
    assert [(d["task_id"], d["depends_on"]) for d in result["dependencies"]] == [
        (subs[1]["id"], subs[0]["id"]),
        (subs[2]["id"], subs[0]["id"]),
        (subs[2]["id"], subs[1]["id"]),
    ]
    assert [t.id for t in store.ready(project)] == [subs[0]["id"], epic.id]
    (request,) = anthropic_mock.requests
    assert request.body["system"] == EXPAND_SYSTEM
    assert "Implement authentication" in json.dumps(request.body["messages"])
    assert "use JWT" in json.dumps(request.body["messages"])


async def test_validate_task_records_the_models_verdict(
    relay_home: Path, repo: Path, store: TaskStore, project: Project, openai_mock: MockServer
) -> None:
    openai_mock.script(Reply(text='{"valid": false, "feedback": "no tests for the logout path"}'))
    settings = settings_for(
        relay_home,
        repo,
        RELAY_XAI_BASE_URL=openai_mock.base_url,
        XAI_API_KEY="xai-test-0123456789abcdefghijkl",
        RELAY_ASK_MODEL="grok",
    )
    task = store.create(project, "Add logout", description="logout clears the session; tested")
    store.close_task(project, task.id, "completed")
    with anyio.fail_after(WAIT_S):
        async with Engine(settings) as engine:
            result = await validate_task(
                store, project, task.id, "added /logout", engine_asker(engine, "validate_task")
            )
    assert result == {
        "task_id": task.id,
        "is_valid": False,
        "validation_status": "invalid",
        "feedback": "no tests for the logout path",
    }
    stored = store.get(project, task.id)
    assert (stored.validation_status, stored.validation_feedback) == ("invalid", "no tests for the logout path")
    (request,) = openai_mock.requests
    assert request.body["messages"][0] == {"role": "system", "content": VALIDATE_SYSTEM}
    assert "Closing reason: completed" in request.body["messages"][-1]["content"]


async def test_without_a_model_key_both_tools_say_which_key_to_set(
    relay_home: Path, repo: Path, store: TaskStore, project: Project
) -> None:
    task = store.create(project, "t")
    settings = settings_for(relay_home, repo)
    with anyio.fail_after(WAIT_S):
        async with Engine(settings) as engine:
            with pytest.raises(RelayError) as expand_err:
                await expand_task(store, project, task.id, engine_asker(engine, "expand_task"))
            with pytest.raises(RelayError) as validate_err:
                await validate_task(store, project, task.id, "done", engine_asker(engine, "validate_task"))
    for err, tool in ((expand_err, "expand_task"), (validate_err, "validate_task")):
        assert err.value.code is ErrorCode.AUTH_MISSING
        assert err.value.message.startswith(f"{tool} needs a model")
        assert "ANTHROPIC_API_KEY" in err.value.hint
    assert store.list(project) == [task]


def test_an_answer_that_is_not_the_json_asked_for_is_an_upstream_error() -> None:
    for text in ("I think you should split it in three.", '{"subtasks": []}', '{"subtasks": [{"x": 1}]}'):
        with pytest.raises(RelayError) as err:
            parse_expansion(text)
        assert err.value.code is ErrorCode.UPSTREAM_ERROR


async def test_a_caller_that_goes_away_cancels_the_models_job(
    relay_home: Path, repo: Path, store: TaskStore, project: Project, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(hang=True))
    settings = settings_for(
        relay_home,
        repo,
        RELAY_ANTHROPIC_BASE_URL=anthropic_mock.base_url,
        ANTHROPIC_API_KEY="sk-ant-test-0123456789abcdefghij",
        RELAY_ASK_MODEL="sonnet",
    )
    task = store.create(project, "slow")
    with anyio.fail_after(WAIT_S):
        async with Engine(settings) as engine:
            async with anyio.create_task_group() as tg:

                async def expand() -> None:
                    await expand_task(store, project, task.id, engine_asker(engine, "expand_task"))

                tg.start_soon(expand)
                await anyio.to_thread.run_sync(anthropic_mock.streaming.wait, WAIT_S)
                tg.cancel_scope.cancel()
            (job,) = engine.list()
    assert job.status == "cancelled"
    assert store.list(project) == [task]
