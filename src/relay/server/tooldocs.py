"""Generates docs/tools.md from the live tool schemas of every toolset: `python -m relay.server.tooldocs > docs/tools.md`."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from relay.config import Settings
from relay.server.toolsets._registry import RegisteredTool


def render_tool(tool: dict[str, Any], level: str = "###") -> list[str]:
    """Markdown for one tool as sent on the wire (name, description, inputSchema, outputSchema)."""
    lines = [f"{level} `{tool['name']}`", "", str(tool.get("description", "")).strip(), ""]
    props: dict[str, Any] = tool.get("inputSchema", {}).get("properties", {})
    required = set(tool.get("inputSchema", {}).get("required", []))
    if props:
        lines += ["| argument | type | default | description |", "|---|---|---|---|"]
        for name, spec in props.items():
            raw_type: Any = spec.get("type") or [v.get("type", "?") for v in spec.get("anyOf", [])]
            types: list[Any] = raw_type if isinstance(raw_type, list) else [raw_type]  # pyright: ignore[reportUnknownVariableType]
            kind = " or ".join(str(t) for t in types)
            if "enum" in spec:
                kind = " or ".join(json.dumps(v) for v in spec["enum"])
            default = "required" if name in required else json.dumps(spec.get("default"))
            description = str(spec.get("description", "")).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{name}` | {kind} | {default} | {description} |")
        lines.append("")
    output = tool.get("outputSchema")
    if output:
        fields = ", ".join(f"`{k}`" for k in output.get("properties", {}))
        lines += [f"Returns: {fields}", ""]
    return lines


def render(
    toolsets: dict[str, list[dict[str, Any]]], profiles: dict[str, list[dict[str, Any]]], default: list[str]
) -> str:
    """Markdown for every toolset's tools, the profiles, and what a default relay exposes."""
    lines = [
        "# relay's MCP tools",
        "",
        "Generated from the live schemas by `python -m relay.server.tooldocs`; a test fails when it drifts.",
        "",
        "A default `relay serve` exposes: " + ", ".join(f"`{n}`" for n in default) + ". Every other tool is "
        "reachable through `list_tools` → `get_tool_schema` → `call_tool(server_name=TOOLSET, tool_name, "
        "arguments)`, or exposed directly with `relay serve --toolsets a,b` / `--profile NAME` (see README).",
        "",
        "Every tool refuses arguments it does not name (`INVALID_ARGUMENT`, with the closest valid name); an error "
        'result carries `{"error": {code, message, hint}}`, which every published output schema admits. The tools '
        'of `core`, `gateway` and `tasks` accept exactly what their input schema says (no `"5"` for 5, no '
        "`true` for 1), with one rule on top: `null` for an optional argument shown without a default is the same "
        "as leaving it out. The compat profiles keep their seed systems' own checks and messages.",
        "",
    ]
    if profiles:
        lines += ["## Profiles", "", "| profile | tools |", "|---|---|"]
        for name, tools in profiles.items():
            names = ", ".join("`" + str(t["name"]) + "`" for t in tools)
            lines.append(f"| `{name}` | {names} |")
        lines.append("")
    for name, tools in toolsets.items():
        lines += [f"## Toolset `{name}`", ""]
        for tool in tools:
            lines += render_tool(tool)
    return "\n".join(lines).rstrip() + "\n"


def wire_tool(t: RegisteredTool) -> dict[str, Any]:
    """A tool as tools/list sends it."""
    tool: dict[str, Any] = {"name": t.name, "title": t.tool.title, "description": t.description}
    tool["inputSchema"] = t.input_schema
    if t.output_schema:
        tool["outputSchema"] = t.output_schema
    if t.tool.annotations is not None:
        tool["annotations"] = t.tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
    return tool


def doc_settings(home: str) -> Settings:
    from relay.config import load_settings

    return load_settings({"RELAY_HOME": home, "PATH": "/usr/bin:/bin"}, cwd=Path(home))


def catalog_tools(
    settings: Settings,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]], list[str]]:
    """Every toolset's tools and every profile's tools as the wire shows them, and the default exposure's names."""
    from relay.jobs.engine import Engine
    from relay.server.catalog import Catalog
    from relay.server.toolsets import BUILTIN, DEFAULT_EXPOSURE, PROFILES
    from relay.server.toolsets._registry import Deps

    def no_engine() -> Engine:
        raise RuntimeError("documentation only")

    deps = Deps(settings, no_engine, time.time())
    deps.documenting = True
    catalog = Catalog(deps, DEFAULT_EXPOSURE)

    def wire(tools: list[RegisteredTool]) -> list[dict[str, Any]]:
        return [wire_tool(t) for t in tools]

    toolsets = {name: wire(list(catalog.registry(name).tools.values())) for name in BUILTIN}
    # A profile's own (toolset, subset) pairs: a toolset may share its name with a profile that shows more.
    profiles = {
        name: wire(
            [
                t
                for ts, subset in PROFILES[name]
                for n, t in catalog.registry(ts).tools.items()
                if subset is None or n in subset
            ]
        )
        for name in PROFILES
    }
    return toolsets, profiles, list(catalog.exposed)


def generate() -> str:
    with tempfile.TemporaryDirectory() as home:
        return render(*catalog_tools(doc_settings(home)))


async def live_tools() -> list[dict[str, Any]]:
    """The tools a default relay publishes, as a client sees them."""
    from mcp import Client

    from relay.server.app import build_server

    with tempfile.TemporaryDirectory() as home:
        async with Client(build_server(doc_settings(home))) as client:
            result = await client.list_tools()
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in result.tools]


def main() -> None:
    sys.stdout.write(generate())


if __name__ == "__main__":
    main()
