"""One error shape per profile: every profile tool answers bad arguments in its seed's error shape.

For each profile, a server serving it is asked for its live tools/list, and every tool is called with an
unknown argument, a wrong-typed value, a required argument missing and a value outside an enum. Each
answer must be an error in the shape that profile's seed gives its errors (the table below), and so must
one runtime error of the same profile and a call to a tool it does not have. A tool added to a profile
later is walked without a change here; a profile added without a row in the table fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from relay.server.toolsets import PROFILES
from tests.compat.conftest import ProfileClient, call, text

pytestmark = pytest.mark.anyio

UNKNOWN_ARGUMENT = "zz_not_an_argument"
NOT_IN_ANY_ENUM = "zz-not-a-value"


def _structured(result: CallToolResult) -> dict[str, Any]:
    return result.structured_content or {}


def _text_is_json(result: CallToolResult) -> bool:
    try:
        json.loads(text(result))
    except ValueError:
        return False
    return True


def relay_shape(result: CallToolResult) -> bool:
    """relay's own `{"error": {code, message, hint}}`, as structured content and as its JSON text."""
    error = _structured(result).get("error")
    return (
        isinstance(error, dict)
        and {"code", "message", "hint"} <= set(error)  # pyright: ignore[reportUnknownArgumentType]
        and json.loads(text(result)) == result.structured_content
    )


def zen_shape(result: CallToolResult) -> bool:
    """Zen's ToolOutput with status "error": the message in `content` (a workflow step's in `error`)."""
    data = _structured(result)
    message = data.get("content", data.get("error"))
    return data.get("status") == "error" and isinstance(message, str) and bool(message)


def success_false_shape(result: CallToolResult) -> bool:
    """Gobby's and PowerSpawn's `{success: false, error, error_type}`."""
    data = _structured(result)
    return (
        data.get("success") is False
        and isinstance(data.get("error"), str)
        and bool(data["error"])
        and isinstance(data.get("error_type"), str)
    )


def status_error_shape(result: CallToolResult) -> bool:
    """Seed 000 §4.2's `{status: "error", error, code}`."""
    data = _structured(result)
    return data.get("status") == "error" and isinstance(data.get("error"), str) and isinstance(data.get("code"), str)


def natural_language_shape(result: CallToolResult) -> bool:
    """Seed 000's small CLI wrappers: the error is words in the text, not a JSON object."""
    words = text(result)
    return bool(words.strip()) and not _text_is_json(result)


@dataclass(frozen=True)
class Shape:
    """How to recognise a profile's error shape, and one call of that profile that fails at run time."""

    recognise: Callable[[CallToolResult], bool]
    runtime_tool: str
    runtime_args: dict[str, Any]


SHAPES: dict[str, Shape] = {
    "zen": Shape(zen_shape, "chat", {"prompt": "hi", "working_directory_absolute_path": "not/absolute", "model": "x"}),
    "gobby": Shape(success_false_shape, "call_hook", {"hook_type": "NoSuchHook"}),
    "powerspawn": Shape(success_false_shape, "spawn_mistral", {"prompt": "hi"}),  # no Mistral key is set
    "surreal": Shape(relay_shape, "call_status", {"job_id": "no-such-job"}),
    "call-cc": Shape(status_error_shape, "call_cc_status", {"job_id": "no-such-job"}),
    # Without a workFolder Claude would run in the home folder, which is outside the allowed roots.
    "claude-code-mcp": Shape(natural_language_shape, "claude_code", {"prompt": "hi"}),
    "gemini-mcp": Shape(natural_language_shape, "ask-gemini", {"prompt": "   "}),
    "codex-mcp": Shape(natural_language_shape, "codex", {"prompt": "hi", "workingDirectory": "/"}),
}

WRONG_TYPED: dict[str, Any] = {
    "string": 12345,
    "integer": "not a number",
    "number": "not a number",
    "boolean": "not a boolean",
    "array": "not a list",
    "object": "not an object",
}


def _kinds(spec: dict[str, Any]) -> list[str]:
    kind = spec.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    return [k for k in kinds if isinstance(k, str) and k != "null"]


def _fitting(spec: dict[str, Any]) -> Any:
    """A value of the type (and enum) an argument's schema asks for."""
    enum = [v for v in spec.get("enum") or [] if v is not None]
    if enum:
        return enum[0]
    kinds = _kinds(spec) or ["string"]
    return {"integer": spec.get("minimum", 1), "number": spec.get("minimum", 1), "boolean": False, "array": []}.get(
        kinds[0], {} if kinds[0] == "object" else "x"
    )


def bad_calls(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what is wrong, arguments) for one tool's input schema: the required arguments fit, but for one fault."""
    props: dict[str, dict[str, Any]] = schema.get("properties", {})
    required: list[str] = schema.get("required", [])
    fitting = {name: _fitting(props.get(name, {})) for name in required}
    calls: list[tuple[str, dict[str, Any]]] = [("an unknown argument", fitting | {UNKNOWN_ARGUMENT: 1})]
    typed = [(name, _kinds(spec)) for name, spec in props.items() if _kinds(spec)]
    if typed:
        name, kinds = typed[0]
        calls.append((f"a wrong-typed {name}", fitting | {name: WRONG_TYPED[kinds[0]]}))
    if required:
        calls.append((f"no {required[0]} (required)", {k: v for k, v in fitting.items() if k != required[0]}))
    for name, spec in props.items():
        items: Any = spec.get("items")
        if isinstance(spec.get("enum"), list):
            calls.append((f"{name} outside its enum", fitting | {name: NOT_IN_ANY_ENUM}))
        elif isinstance(items, dict) and isinstance(items.get("enum"), list):  # pyright: ignore[reportUnknownMemberType]
            calls.append((f"{name} outside its items' enum", fitting | {name: [NOT_IN_ANY_ENUM]}))
    return calls


def test_every_profile_has_a_row_in_the_shape_table() -> None:
    assert sorted(SHAPES) == sorted(PROFILES)


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_every_tool_of_a_profile_answers_bad_arguments_in_its_seeds_error_shape(
    profile: str, profile_client: ProfileClient
) -> None:
    shape = SHAPES[profile]
    wrong: list[str] = []

    async def expect_error(c: Client, tool: str, what: str, args: dict[str, Any]) -> None:
        result = await call(c, tool, **args)
        if not (result.is_error and shape.recognise(result)):
            wrong.append(f"{tool} with {what}: is_error={result.is_error} {text(result)[:300]}")

    async with profile_client(profile) as c:
        tools = (await c.list_tools()).tools
        for tool in tools:
            for what, args in bad_calls(tool.input_schema):
                await expect_error(c, tool.name, what, args)
        await expect_error(c, shape.runtime_tool, "a failure at run time", shape.runtime_args)
        await expect_error(c, "zz_no_such_tool", "no such tool", {})
    assert len(tools) > 0 and wrong == [], "\n".join(wrong)
