"""The seed's limits and enums are enforced on the server, whatever the client checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.workflows.conftest import SettingsFactory, SlowMock, call, error_message, relay_error, zen_client

pytestmark = pytest.mark.anyio

STEP = {"step": "s", "step_number": 1, "total_steps": 1, "next_step_required": False, "findings": "f"}


def cases(workdir: Path) -> list[tuple[str, dict[str, Any], str]]:
    chat = {"prompt": "hi", "working_directory_absolute_path": str(workdir)}
    return [
        ("chat", chat | {"temperature": 1.5}, "temperature"),
        ("chat", chat | {"thinking_mode": "extreme"}, "thinking_mode"),
        ("challenge", {"prompt": "x", "temperature": -0.1}, "temperature"),
        ("thinkdeep", STEP | {"step_number": 0}, "step_number"),
        ("debug", STEP | {"total_steps": 0}, "total_steps"),
        ("debug", STEP | {"confidence": "sure"}, "confidence"),
        ("codereview", STEP | {"review_type": "style", "relevant_files": ["/x"]}, "review_type"),
        ("codereview", STEP | {"severity_filter": "urgent", "relevant_files": ["/x"]}, "severity_filter"),
        ("codereview", STEP | {"confidence": "high", "relevant_files": ["/x"]}, "confidence"),
        ("debug", STEP | {"issues_found": []}, "issues_found"),
        ("consensus", STEP | {"models": [{"model": "a", "stance": "maybe"}, {"model": "b"}]}, "stance"),
        ("consensus", STEP | {"current_model_index": -1}, "current_model_index"),
        ("planner", {k: v for k, v in STEP.items() if k != "findings"} | {"revises_step_number": 0}, "revises_step"),
    ]


@pytest.mark.parametrize("index", range(13))
async def test_out_of_range_values_and_unknown_enum_members_are_refused_before_any_model_call(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, openai_mock: SlowMock, workdir: Path, index: int
) -> None:
    tool, args, field = cases(workdir)[index]
    async with zen_client(zen_settings()) as client:
        failed, out = await call(client, tool, args)
    assert failed and relay_error(out)["code"] == "INVALID_ARGUMENT"
    assert field in error_message(out)
    assert anthropic_mock.requests == [] and openai_mock.requests == []
