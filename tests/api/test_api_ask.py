"""ask end to end: relay's code drives the real anthropic/openai SDKs against mock vendor servers."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mock_servers import MockServer, Reply

from conftest import ANTHROPIC_KEY, XAI_KEY, SettingsFactory
from relay.ask import AskArgs, ask_envelope, list_models, submit_ask
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.threads import Threads

pytestmark = pytest.mark.anyio

WAIT_S = 20.0


async def run_ask(settings: Settings, args: AskArgs) -> tuple[dict[str, Any], list[Any]]:
    """Submit an ask, wait for it, return its envelope and stored events."""
    async with Engine(settings) as engine:
        job_id = await submit_ask(engine, args)
        with anyio.fail_after(WAIT_S):
            await engine.wait_one(job_id, WAIT_S)
        env = ask_envelope(engine, job_id)
        events = [e for _, _, e in engine.events(job_id)]
    return env, events


async def test_an_anthropic_ask_streams_text_and_reports_usage_and_cost(
    make_settings: SettingsFactory, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(text="Hello from the mock", usage=(1000, 200, 500)))
    env, events = await run_ask(make_settings(), AskArgs(prompt="Say hello", model="sonnet", system_prompt="Be brief."))

    assert env["status"] == "completed"
    assert env["output"] == "Hello from the mock"
    assert env["model"] == "anthropic:claude-sonnet-4-5"
    assert env["usage"] == {"input": 1000, "output": 200, "cached": 500}
    assert env["cost_usd"] == pytest.approx((1000 * 3.0 + 500 * 0.30 + 200 * 15.0) / 1e6)
    assert env["error"] is None
    assert "".join(e.data["text"] for e in events if e.type == "message.delta") == "Hello from the mock"
    assert env["continuation_id"] and env["remaining_turns"] == 48

    (request,) = anthropic_mock.requests
    assert request.path == "/v1/messages"
    assert ANTHROPIC_KEY in (
        request.headers.get("x-api-key"),
        request.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert request.body["model"] == "claude-sonnet-4-5"
    assert request.body["stream"] is True
    assert request.body["system"] == "Be brief."
    assert request.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}]


async def test_an_openai_compatible_ask_streams_text_and_reports_usage_from_the_last_chunk(
    make_settings: SettingsFactory, openai_mock: MockServer
) -> None:
    openai_mock.script(Reply(text="Grok says hi", usage=(300, 40, 100)))
    env, _ = await run_ask(make_settings(), AskArgs(prompt="hi", model="grok", temperature=0.2))

    assert (env["status"], env["output"], env["model"]) == ("completed", "Grok says hi", "xai:grok-4")
    assert env["usage"] == {"input": 200, "output": 40, "cached": 100}
    assert env["cost_usd"] == pytest.approx((200 * 3.0 + 100 * 0.75 + 40 * 15.0) / 1e6)
    (request,) = openai_mock.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {XAI_KEY}"
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["temperature"] == 0.2
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]


async def test_a_continuation_on_another_provider_carries_the_history(
    make_settings: SettingsFactory, anthropic_mock: MockServer, openai_mock: MockServer
) -> None:
    settings = make_settings()
    anthropic_mock.script(Reply(text="Four."))
    first, _ = await run_ask(settings, AskArgs(prompt="What is 2+2?", model="sonnet"))
    thread_id = first["continuation_id"]
    openai_mock.script(Reply(text="Yes, 4."))
    second, _ = await run_ask(settings, AskArgs(prompt="Do you agree?", model="xai:grok-4", continuation_id=thread_id))

    assert second["status"] == "completed"
    assert second["continuation_id"] == thread_id
    assert second["remaining_turns"] == 46
    (request,) = openai_mock.requests
    assert request.body["messages"] == [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "Do you agree?"},
    ]
    threads = Threads.open(settings)
    thread = threads.get(thread_id)
    threads.close()
    assert [(t.role, t.content, t.model) for t in thread.turns] == [
        ("user", "What is 2+2?", None),
        ("assistant", "Four.", "anthropic:claude-sonnet-4-5"),
        ("user", "Do you agree?", None),
        ("assistant", "Yes, 4.", "xai:grok-4"),
    ]


async def test_a_thread_continued_without_a_model_keeps_its_model(
    make_settings: SettingsFactory, openai_mock: MockServer
) -> None:
    settings = make_settings()
    first, _ = await run_ask(settings, AskArgs(prompt="one", model="xai:grok-3"))
    second, _ = await run_ask(settings, AskArgs(prompt="two", continuation_id=first["continuation_id"]))
    assert second["model"] == "xai:grok-3"
    assert [r.body["model"] for r in openai_mock.requests] == ["grok-3", "grok-3"]


async def test_a_429_is_retried_after_retry_after_then_succeeds(
    make_settings: SettingsFactory, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(status=429, headers={"retry-after": "0"}), Reply(text="after retry"))
    env, events = await run_ask(make_settings(), AskArgs(prompt="x", model="haiku"))
    assert (env["status"], env["output"]) == ("completed", "after retry")
    assert len(anthropic_mock.requests) == 2
    retries = [e.data for e in events if e.type == "retry"]
    assert retries == [{"attempt": 1, "status": 429, "message": retries[0]["message"], "wait_s": 0.0}]


async def test_429_on_every_attempt_fails_as_rate_limited(
    make_settings: SettingsFactory, openai_mock: MockServer
) -> None:
    openai_mock.script(*[Reply(status=429, headers={"retry-after-ms": "0"}) for _ in range(4)])
    env, _ = await run_ask(make_settings(), AskArgs(prompt="x", model="grok"))
    assert env["status"] == "failed"
    assert env["error"]["code"] == ErrorCode.RATE_LIMITED
    assert len(openai_mock.requests) == 4


async def test_a_500_is_retried(make_settings: SettingsFactory, openai_mock: MockServer) -> None:
    openai_mock.script(Reply(status=503, headers={"retry-after": "0"}), Reply(text="fine"))
    env, _ = await run_ask(make_settings(), AskArgs(prompt="x", model="grok"))
    assert (env["status"], env["output"], len(openai_mock.requests)) == ("completed", "fine", 2)


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_fails_as_auth_invalid_without_retrying(
    make_settings: SettingsFactory, anthropic_mock: MockServer, status: int
) -> None:
    anthropic_mock.script(Reply(status=status, error_message="invalid x-api-key"))
    env, _ = await run_ask(make_settings(), AskArgs(prompt="x", model="sonnet"))
    assert env["status"] == "failed"
    assert env["error"]["code"] == ErrorCode.AUTH_INVALID
    assert "ANTHROPIC_API_KEY" in env["error"]["hint"]
    assert len(anthropic_mock.requests) == 1
    assert env["continuation_id"] is None  # a failed first ask leaves no thread behind


async def test_an_unknown_model_upstream_fails_as_model_not_found(
    make_settings: SettingsFactory, openai_mock: MockServer
) -> None:
    openai_mock.script(Reply(status=404, error_message="The model grok-9 does not exist"))
    env, _ = await run_ask(make_settings(), AskArgs(prompt="x", model="xai:grok-9"))
    assert env["error"]["code"] == ErrorCode.MODEL_NOT_FOUND
    assert "grok-9 does not exist" in env["error"]["hint"]


async def test_other_upstream_errors_carry_the_provider_message(
    make_settings: SettingsFactory, openai_mock: MockServer
) -> None:
    openai_mock.script(Reply(status=400, error_message="messages: too many images"))
    env, _ = await run_ask(make_settings(), AskArgs(prompt="x", model="grok"))
    assert env["error"]["code"] == ErrorCode.UPSTREAM_ERROR
    assert "too many images" in env["error"]["hint"]


async def test_the_configured_fallback_model_answers_and_is_reported(
    make_settings: SettingsFactory, openai_mock: MockServer
) -> None:
    settings = make_settings(config='[providers.xai]\nfallback_model = "xai:grok-3"\n')
    openai_mock.script(Reply(status=404, error_message="no such model"), Reply(text="from grok-3"))
    env, events = await run_ask(settings, AskArgs(prompt="x", model="grok"))
    assert (env["status"], env["output"]) == ("completed", "from grok-3")
    assert env["model"] == "xai:grok-3 (fallback from xai:grok-4)"
    assert [r.body["model"] for r in openai_mock.requests] == ["grok-4", "grok-3"]
    (warning,) = [e.data for e in events if e.type == "warning"]
    assert warning["fallback_used"] == {"from": "xai:grok-4", "to": "xai:grok-3", "reason": "MODEL_NOT_FOUND"}


async def test_cancelling_an_ask_closes_the_upstream_stream(
    make_settings: SettingsFactory, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(text="never finished", hang=True))
    async with Engine(make_settings()) as engine:
        job_id = await submit_ask(engine, AskArgs(prompt="x", model="sonnet"))
        with anyio.fail_after(WAIT_S):
            await anyio.to_thread.run_sync(anthropic_mock.streaming.wait, WAIT_S)
            rec = await engine.cancel(job_id)
            assert rec.status == "cancelled"
            assert await anyio.to_thread.run_sync(anthropic_mock.disconnected.wait, WAIT_S)
        env = ask_envelope(engine, job_id)
    assert env["error"]["code"] == ErrorCode.CANCELLED
    assert env["continuation_id"] is None


async def test_a_missing_key_is_auth_missing_before_any_job(make_settings: SettingsFactory) -> None:
    settings = make_settings(XAI_API_KEY="")
    async with Engine(settings) as engine:
        with pytest.raises(RelayError) as caught:
            await submit_ask(engine, AskArgs(prompt="x", model="grok"))
        assert engine.list() == []
    assert caught.value.code == ErrorCode.AUTH_MISSING
    assert "XAI_API_KEY or GROK_API_KEY or X_API_KEY" in caught.value.hint


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (AskArgs(prompt="  "), ErrorCode.INVALID_ARGUMENT),
        (AskArgs(prompt="x", model="sonnet", temperature=3.0), ErrorCode.INVALID_ARGUMENT),
        (AskArgs(prompt="x", model="sonnet", thinking_mode="huge"), ErrorCode.INVALID_ARGUMENT),
        (AskArgs(prompt="x", model="sonnet", files=("relative.py",)), ErrorCode.INVALID_ARGUMENT),
        (AskArgs(prompt="x", model="nosuch:model"), ErrorCode.MODEL_NOT_FOUND),
        (AskArgs(prompt="x", model="totally-unknown"), ErrorCode.MODEL_NOT_FOUND),
        (AskArgs(prompt="x", model="sonnet", continuation_id="not-a-thread"), ErrorCode.SESSION_NOT_FOUND),
    ],
)
async def test_bad_arguments_are_refused_before_any_job(
    make_settings: SettingsFactory, args: AskArgs, code: ErrorCode
) -> None:
    async with Engine(make_settings()) as engine:
        with pytest.raises(RelayError) as caught:
            await submit_ask(engine, args)
        assert engine.list() == []
    assert caught.value.code == code


async def test_files_are_inlined_with_line_numbers_once_per_conversation(
    make_settings: SettingsFactory, openai_mock: MockServer, tmp_path: Path
) -> None:
    source = tmp_path / "calc.py"
    source.write_text("def add(a, b):\n    return a + b\n", encoding="utf-8")
    settings = make_settings()
    first, _ = await run_ask(settings, AskArgs(prompt="review", model="grok", files=(str(source),)))
    await run_ask(settings, AskArgs(prompt="and now?", continuation_id=first["continuation_id"]))
    await run_ask(settings, AskArgs(prompt="again", continuation_id=first["continuation_id"], files=(str(source),)))

    first_text = openai_mock.requests[0].body["messages"][-1]["content"]
    assert f"--- BEGIN FILE: {source} ---" in first_text
    assert "   1│ def add(a, b):\n   2│     return a + b" in first_text
    for request in openai_mock.requests[1:]:
        whole = json.dumps(request.body["messages"])
        assert whole.count("BEGIN FILE") == 1
        assert request.body["messages"][0] == {"role": "user", "content": "review"}


async def test_images_are_sent_as_base64_blocks(
    make_settings: SettingsFactory, anthropic_mock: MockServer, openai_mock: MockServer, tmp_path: Path
) -> None:
    image = tmp_path / "pixel.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\nfake")
    data = base64.b64encode(image.read_bytes()).decode()
    settings = make_settings()
    await run_ask(settings, AskArgs(prompt="what is this?", model="sonnet", images=(str(image),)))
    await run_ask(settings, AskArgs(prompt="and this?", model="grok", images=(str(image),)))

    content = anthropic_mock.requests[0].body["messages"][0]["content"]
    assert content[0] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    parts = openai_mock.requests[0].body["messages"][0]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


async def test_thinking_mode_becomes_a_budget_or_an_effort(
    make_settings: SettingsFactory, anthropic_mock: MockServer, openai_mock: MockServer
) -> None:
    settings = make_settings(OPENAI_API_KEY="sk-test-openai-0123456789")
    await run_ask(settings, AskArgs(prompt="x", model="sonnet", thinking_mode="high"))
    await run_ask(settings, AskArgs(prompt="x", model="gpt5", thinking_mode="max", temperature=0.5))
    body = anthropic_mock.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert body["max_tokens"] == 16384 + 8192
    openai_body = openai_mock.requests[0].body
    assert openai_body["reasoning_effort"] == "high"
    assert "temperature" not in openai_body  # gpt-5 takes none


async def test_list_models_shows_only_models_with_a_key(make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings(config='[providers.ollama]\nmodels = ["llama3.1"]\n')
    models = {m["id"]: m for m in list_models(settings)}
    assert "anthropic:claude-sonnet-4-5" in models and "xai:grok-4" in models
    assert not any(m.startswith(("openai:", "mistral:", "gemini-api:")) for m in models)
    assert models["xai:grok-4"]["aliases"] == ["grok", "grok4"]
    assert models["xai:grok-4"]["key_source"] == "XAI_API_KEY"
    assert models["ollama:llama3.1"]["input_per_mtok"] == 0.0
    assert ANTHROPIC_KEY not in json.dumps(models)


@pytest.mark.parametrize("field", ["files", "images"])
async def test_a_nul_byte_in_a_path_is_an_invalid_argument(make_settings: SettingsFactory, field: str) -> None:
    args = AskArgs(prompt="x", model="sonnet", **{field: ("/tmp/a\x00b.png",)})  # type: ignore[arg-type]
    async with Engine(make_settings()) as engine:
        with pytest.raises(RelayError) as caught:
            await submit_ask(engine, args)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
