"""Every tool accepts exactly what its published input schema says.

Every tool of every toolset and profile: each default is a valid value of its own schema, a value the
schema accepts passes the tool's argument validation, and a value the schema rejects is refused with an
error result. Relay's own toolsets (core, gateway, tasks, workspaces) refuse with the one error shape
(INVALID_ARGUMENT with a message and a hint) before the tool runs. One published rule on top of the
schema: an explicit null for an optional argument whose default is null (published as its plain type,
without a default) is the same as leaving it out. The compat profiles' tools keep their seed systems'
own checks and messages (tests/compat): each is called, as a client would, on a relay serving its
profile with the fake agent CLIs, and must answer a value its schema rejects with an error result.
Where a seed's published schema is itself the contract and its tool takes more, the tool is listed in
SEED_SCHEMA_EXCEPTIONS with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.types import CallToolResult
from pydantic import ValidationError

from relay.server.app import build_server
from relay.server.catalog import Catalog
from relay.server.toolsets import BUILTIN, PROFILES, RegisteredTool
from tests.compat.conftest import argv_log, fakes_config, recordings  # noqa: F401  (fixtures)
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

# Values of every JSON type and the usual near misses ("5" for 5, "true" for true, JSON inside a string).
# "h" and "sonnet": the model tiers some seeds take besides the names they publish.
PROBES: list[Any] = [None, "x", "", "5", "true", "[]", '{"a":1}', "h", "sonnet", 5, 0, -1, 1.5, True, False]
PROBES += [[], ["x"], {}, {"a": 1}]

# Tools whose seed publishes a schema that is itself the contract, while the seed's tool takes more.
SEED_SCHEMA_EXCEPTIONS: dict[str, str] = {
    "surreal/call_cc.model": "seed 001 publishes the enum of three full model names (default claude-sonnet-4-5), "
    "and its tool also takes the tiers h/s/o/haiku/sonnet/opus (seed-decisions 20; tests/compat/test_surreal.py), "
    "and null as left out (the default, or on a resume the session's own model)",
    "surreal/call_gem.model": "seed 000 publishes model as a string with the default gemini-2.5-pro (seed-decisions "
    "21), and its tool takes null as left out (the default, or on a resume the session's own model)",
    "zen/clink.cli_name": "Zen publishes cli_name as the enum of configured CLIs, and its clink takes an empty "
    "cli_name as the default CLI (seed-decisions 10)",
}


def every_tool(catalog: Catalog, *, schema_first_only: bool = False) -> list[RegisteredTool]:
    seen: dict[int, RegisteredTool] = {}
    for server in [*BUILTIN, *PROFILES]:
        for tool in catalog.tools_of(server):
            if tool.schema_first or not schema_first_only:
                seen.setdefault(id(tool), tool)
    return list(seen.values())


def example(schema: dict[str, Any]) -> Any:
    """A value the schema accepts (its default, its first enum member, or one made from its type and bounds)."""
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "array":
        item = schema.get("items", {})
        return [example(item) for _ in range(int(schema.get("minItems", 0)))] if isinstance(item, dict) else []
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {})
        return {k: example(props[k]) for k in schema.get("required", []) if k in props}
    variants = schema.get("anyOf") or schema.get("oneOf")
    if variants:
        return example(variants[0])
    return "x"


def probes(schema: dict[str, Any]) -> list[Any]:
    """PROBES plus the schema's own values and the values just past its bounds."""
    values = [*PROBES, *schema.get("enum", [])]
    if "default" in schema:
        values.append(schema["default"])
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if isinstance(schema.get(key), int | float):
            values += [schema[key], schema[key] - 1, schema[key] + 1]
    if isinstance(schema.get("minLength"), int) and schema["minLength"] > 0:
        values.append("x" * (schema["minLength"] - 1))
    if isinstance(schema.get("maxLength"), int):
        values.append("x" * (schema["maxLength"] + 1))
    unique: dict[str, Any] = {json.dumps(v, sort_keys=True): v for v in values}
    return list(unique.values())


def schema_accepts(tool: RegisteredTool, name: str, value: Any) -> bool:
    spec: dict[str, Any] = tool.input_schema["properties"][name]
    optional_null = name not in tool.input_schema.get("required", []) and "default" not in spec
    if value is None and optional_null:
        return True  # the one rule on top of the schema: null means left out
    return Draft202012Validator({**spec, "$defs": tool.input_schema.get("$defs", {})}).is_valid(value)


def tool_accepts(tool: RegisteredTool, arguments: dict[str, Any]) -> bool:
    """Whether relay's checks and the tool's own argument validation let `arguments` through (nothing runs)."""
    if tool.schema_first and tool.schema_error(arguments) is not None:
        return False
    try:
        tool.tool.fn_metadata.validate_arguments(arguments)
    except ValidationError:
        return False
    return True


def base_arguments(tool: RegisteredTool) -> dict[str, Any]:
    props: dict[str, Any] = tool.input_schema.get("properties", {})
    return {k: example(props[k]) for k in tool.input_schema.get("required", [])}


def test_every_default_is_a_valid_value_of_its_own_schema(make_settings: SettingsFactory) -> None:
    tools = every_tool(build_server(make_settings()).catalog)
    invalid = [
        f"{t.toolset}/{t.name}.{name} = {spec['default']!r}"
        for t in tools
        for name, spec in t.input_schema.get("properties", {}).items()
        if "default" in spec and not schema_accepts(t, name, spec["default"])
    ]
    assert len(tools) > 80 and invalid == []


def test_every_tool_accepts_exactly_the_values_its_schema_accepts(make_settings: SettingsFactory) -> None:
    """Without running anything; a compat tool's own refusals run inside it (the client test below checks them)."""
    tools = every_tool(build_server(make_settings()).catalog)
    disagreements: list[str] = []
    checked = 0
    for tool in tools:
        base = base_arguments(tool)
        assert tool_accepts(tool, base), f"{tool.toolset}/{tool.name} refuses its schema's own example {base}"
        for name, spec in tool.input_schema.get("properties", {}).items():
            for value in probes(spec):
                checked += 1
                published, actual = schema_accepts(tool, name, value), tool_accepts(tool, {**base, name: value})
                if published != actual and (published or tool.schema_first):
                    said = "accepts" if published else "refuses"
                    disagreements.append(f"{tool.toolset}/{tool.name}.{name} = {value!r}: the schema {said} it")
    assert len(tools) > 90 and checked > 4000 and disagreements == []


async def test_a_value_the_schema_refuses_gets_the_one_error_shape_from_every_tool(
    make_settings: SettingsFactory,
) -> None:
    catalog = build_server(make_settings()).catalog
    for tool in every_tool(catalog, schema_first_only=True):
        props: dict[str, Any] = tool.input_schema.get("properties", {})
        if not props:
            continue
        name = next(iter(props))
        wrong = next(v for v in probes(props[name]) if not schema_accepts(tool, name, v))
        result = await catalog.run(tool, {**base_arguments(tool), name: wrong}, None)
        assert not hasattr(result, "result_type") or result.result_type != "input_required"
        assert getattr(result, "is_error", False), (tool.name, name, wrong)
        error = result.structured_content["error"]  # pyright: ignore[reportOptionalSubscript, reportAttributeAccessIssue]
        assert error["code"] == "INVALID_ARGUMENT" and name in error["message"] and error["hint"], error


def error_of(result: CallToolResult) -> Any:
    """The error a result carries, in whichever envelope its profile answers with."""
    carried: Any = result.structured_content
    if carried is None:
        text = "".join(str(getattr(block, "text", "")) for block in result.content)
        try:
            carried = json.loads(text)
        except ValueError:
            return text or None
    if not isinstance(carried, dict):
        return None
    zen_tool_output = carried.get("status") == "error"  # Zen's ToolOutput: the message is its content
    return carried.get("content") if zen_tool_output and "content" in carried else carried.get("error")


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_every_compat_tool_refuses_with_an_error_each_value_its_schema_rejects(
    profile: str,
    make_settings: SettingsFactory,
    fakes_config: str,  # noqa: F811
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through a client of a relay serving the profile; a value the tool wrongly took would run (on the fakes)."""
    monkeypatch.chdir(workdir)  # the tools whose working directory is optional run in one relay allows
    server = build_server(make_settings(fakes_config, RELAY_PROFILE=profile))
    tools = {t.name: t for t in server.catalog.tools_of(profile)}
    disagreements: list[str] = []
    excepted: set[str] = set()
    checked = 0
    async with Client(server) as client:
        for listed in (await client.list_tools()).tools:
            tool = tools[listed.name]
            assert listed.input_schema == tool.input_schema
            base = {
                k: str(workdir) if "dir" in k or k in ("cwd", "workFolder") else v
                for k, v in base_arguments(tool).items()
            }
            for name, spec in tool.input_schema.get("properties", {}).items():
                for value in probes(spec):
                    if schema_accepts(tool, name, value):
                        continue
                    checked += 1
                    with anyio.fail_after(60):
                        result = await client.call_tool(tool.name, {**base, name: value})
                    where = f"{tool.toolset}/{tool.name}.{name}"
                    if result.is_error and error_of(result):
                        continue
                    if where in SEED_SCHEMA_EXCEPTIONS:
                        excepted.add(where)
                        continue
                    disagreements.append(f"{where} = {value!r}: the schema refuses it, the tool answers {result}")
    assert checked > 20 and disagreements == []
    assert excepted == {w for w in SEED_SCHEMA_EXCEPTIONS if w.split("/")[0] in {t.toolset for t in tools.values()}}
