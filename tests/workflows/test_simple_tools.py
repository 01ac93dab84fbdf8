"""chat, challenge and apilookup through an MCP client, with the seed's examples and messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.mock_servers import Reply
from tests.workflows.conftest import (
    SettingsFactory,
    SlowMock,
    call,
    error_message,
    relay_error,
    request_text,
    zen_client,
)

pytestmark = pytest.mark.anyio


async def test_chat_with_the_seeds_example_answers_and_offers_a_continuation(
    zen_settings: SettingsFactory, openai_mock: SlowMock, workdir: Path
) -> None:
    openai_mock.script(Reply(text="Use a generator here."))
    args = {
        "prompt": "How should I stream a large Python file?",
        "working_directory_absolute_path": str(workdir),
        "model": "gemini-2.5-pro",
        "temperature": 0.7,
        "thinking_mode": "high",
    }
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "chat", args)
    assert not failed, out
    offer = out["continuation_offer"]
    assert out["status"] == "continuation_available"
    assert out["content"].startswith("Use a generator here.") and "AGENT'S TURN" in out["content"]
    assert out["metadata"]["model_used"] == "gemini-2.5-pro" and out["metadata"]["provider_used"] == "gemini-api"
    assert offer["remaining_turns"] == 24 and offer["note"].endswith("24 more exchanges.")
    sent = openai_mock.requests[0].body
    assert sent["model"] == "gemini-2.5-pro" and sent["temperature"] == 0.7
    assert "senior engineer" in request_text(openai_mock.requests[0])


async def test_chat_saves_generated_code_in_the_working_directory(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, workdir: Path
) -> None:
    anthropic_mock.script(Reply(text="Here:\n<GENERATED-CODE>\nprint('hi')\n</GENERATED-CODE>\nDone."))
    async with zen_client(zen_settings()) as client:
        failed, out = await call(
            client,
            "chat",
            {"prompt": "write hello", "working_directory_absolute_path": str(workdir), "model": "sonnet"},
        )
    saved = workdir / "zen_generated.code"
    assert not failed, out
    assert saved.read_text() == "print('hi')\n"
    assert out["metadata"]["generated_code_file"] == str(saved)
    assert "<GENERATED-CODE>" not in out["content"] and str(saved) in out["content"]


async def test_chat_continued_by_codereview_with_another_model_sees_the_history(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, openai_mock: SlowMock, workdir: Path
) -> None:
    code = workdir / "app.py"
    code.write_text("def f(x):\n    return x / 0\n")
    anthropic_mock.script(Reply(text="The division is suspicious."))
    openai_mock.script(Reply(text='{"status": "analysis_complete", "issues": ["division by zero"]}'))
    async with zen_client(zen_settings()) as client:
        _, first = await call(
            client,
            "chat",
            {"prompt": "Is PINEAPPLE-42 safe?", "working_directory_absolute_path": str(workdir), "model": "sonnet"},
        )
        thread = first["continuation_offer"]["continuation_id"]
        failed, review = await call(
            client,
            "codereview",
            {
                "step": "Review app.py",
                "step_number": 1,
                "total_steps": 1,
                "next_step_required": False,
                "findings": "f divides by zero",
                "relevant_files": [str(code)],
                "model": "gpt5",
                "continuation_id": thread,
            },
        )
    assert not failed, review
    assert review["continuation_id"] == thread
    assert review["status"] == "calling_expert_analysis"
    assert review["expert_analysis"] == {"status": "analysis_complete", "issues": ["division by zero"]}
    sent = request_text(openai_mock.requests[0])
    assert "PINEAPPLE-42" in sent and "The division is suspicious." in sent and "return x / 0" in sent


@pytest.mark.parametrize(
    ("directory", "expected"),
    [
        ("relative/dir", "'working_directory_absolute_path' must be an absolute path"),
        ("/no/such/dir/anywhere", "'working_directory_absolute_path' must reference an existing directory"),
    ],
)
async def test_chat_refuses_a_working_directory_that_is_relative_or_missing(
    zen_settings: SettingsFactory, directory: str, expected: str
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "chat", {"prompt": "hi", "working_directory_absolute_path": directory})
    assert failed and expected in error_message(out) and directory in error_message(out)


async def test_chat_refuses_relative_file_paths(zen_settings: SettingsFactory, workdir: Path) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(
            client,
            "chat",
            {"prompt": "hi", "working_directory_absolute_path": str(workdir), "absolute_file_paths": ["src/a.py"]},
        )
    assert failed
    assert error_message(out) == (
        "Error: All file paths must be FULL absolute paths to real files / folders - DO NOT SHORTEN. Received: src/a.py"
    )


async def test_an_unknown_model_names_the_available_ones_and_a_suggestion(
    zen_settings: SettingsFactory, workdir: Path
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(
            client, "chat", {"prompt": "hi", "working_directory_absolute_path": str(workdir), "model": "nosuch-9"}
        )
    message = error_message(out)
    assert failed and relay_error(out)["code"] == "MODEL_NOT_FOUND"
    assert message.startswith("Model 'nosuch-9' is not available with current API keys. Available models: ")
    assert "xai:grok-4" in message and "Suggested model for chat: 'anthropic:claude-sonnet-4-5'" in message


async def test_auto_picks_a_model_by_the_tools_category(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, workdir: Path
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(
            client, "chat", {"prompt": "hi", "working_directory_absolute_path": str(workdir), "model": "auto"}
        )
    assert not failed, out
    assert out["metadata"]["model_used"] == "claude-sonnet-4-5" and len(anthropic_mock.requests) == 1


async def test_challenge_returns_its_reassessment_payload_without_calling_a_model(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, openai_mock: SlowMock
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(
            client, "challenge", {"prompt": "Tabs are always better than spaces", "model": "sonnet", "temperature": 0.2}
        )
    assert not failed
    assert set(out) == {"status", "original_statement", "challenge_prompt", "instructions"}
    assert out["status"] == "challenge_accepted" and out["original_statement"] == "Tabs are always better than spaces"
    assert out["challenge_prompt"].startswith("CRITICAL REASSESSMENT")
    assert "Tabs are always better than spaces" in out["challenge_prompt"]
    assert anthropic_mock.requests == [] and openai_mock.requests == []


async def test_apilookup_returns_search_instructions_without_calling_a_model(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, openai_mock: SlowMock
) -> None:
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "apilookup", {"prompt": "latest httpx AsyncClient timeout API"})
    assert not failed
    assert out["status"] == "web_lookup_needed" and out["user_prompt"] == "latest httpx AsyncClient timeout API"
    assert "Do not call apilookup again" in out["instructions"]
    assert anthropic_mock.requests == [] and openai_mock.requests == []


async def test_a_continuation_id_relay_never_issued_is_refused_with_what_to_do(
    zen_settings: SettingsFactory, workdir: Path
) -> None:
    args = {"prompt": "hi", "working_directory_absolute_path": str(workdir), "continuation_id": "conv-123"}
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "chat", args)
    assert failed and relay_error(out)["code"] == "SESSION_NOT_FOUND"
    assert "without continuation_id" in relay_error(out)["hint"]


# A 1x1 png, as raw base64 (no data: prefix).
PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


async def test_chat_takes_an_image_as_raw_base64_and_sends_it_to_the_model(
    zen_settings: SettingsFactory, openai_mock: SlowMock, workdir: Path
) -> None:
    openai_mock.script(Reply(text="A single pixel."))
    args = {
        "prompt": "What is in this image?",
        "working_directory_absolute_path": str(workdir),
        "model": "gemini-2.5-pro",
        "images": [PNG_BASE64],
    }
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "chat", args)
    assert not failed, out
    assert f"data:image/png;base64,{PNG_BASE64}" in request_text(openai_mock.requests[0])


@pytest.mark.parametrize("image", ["pictures/cat.png", "bm90IGFuIGltYWdl"])
async def test_an_image_in_no_accepted_form_names_the_accepted_forms(
    zen_settings: SettingsFactory, workdir: Path, image: str
) -> None:
    args = {"prompt": "look", "working_directory_absolute_path": str(workdir), "model": "gemini-2.5-pro"}
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, "chat", args | {"images": [image]})
    assert failed
    assert error_message(out) == (
        "Error: each image must be a FULL absolute path, a data URL (data:image/png;base64,...) or base64-encoded "
        f"png, jpeg, gif or webp data. Received: {image}"
    )


async def test_the_continuation_offer_counts_exchanges_and_ends_when_the_thread_refuses_the_next(
    zen_settings: SettingsFactory, openai_mock: SlowMock, workdir: Path
) -> None:
    openai_mock.script(*(Reply(text=f"answer {i}") for i in range(4)))
    args = {"prompt": "go on", "working_directory_absolute_path": str(workdir), "model": "gemini-2.5-pro"}
    offers: list[int | None] = []
    async with zen_client(zen_settings(MAX_CONVERSATION_TURNS="6")) as client:
        failed, out = await call(client, "chat", args)
        thread = out["continuation_offer"]["continuation_id"]
        offers.append(out["continuation_offer"]["remaining_turns"])
        for _ in range(2):
            failed, out = await call(client, "chat", args | {"continuation_id": thread})
            assert not failed, out
            offer = out["continuation_offer"]
            offers.append(offer["remaining_turns"] if offer else None)
        refused, last = await call(client, "chat", args | {"continuation_id": thread})
    # six turns: three exchanges; after the first the offer says two more, and exactly two more fit
    assert offers == [2, 1, None] and out["status"] == "success"
    assert refused and relay_error(last)["code"] == "MAX_TURNS"
