"""Generates docs/tools.md from the live tool schemas: `python -m relay.server.tooldocs > docs/tools.md`."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def render(tools: list[dict[str, Any]]) -> str:
    """Markdown for a tools/list result (a list of tool dicts as sent on the wire)."""
    lines = [
        "# relay's MCP tools",
        "",
        "Generated from the live schemas by `python -m relay.server.tooldocs`; a test fails when it drifts.",
        "",
    ]
    for tool in tools:
        lines += [f"## `{tool['name']}`", "", str(tool.get("description", "")).strip(), ""]
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
                lines.append(f"| `{name}` | {kind} | {default} | {spec.get('description', '')} |")
            lines.append("")
        output = tool.get("outputSchema")
        if output:
            fields = ", ".join(f"`{k}`" for k in output.get("properties", {}))
            lines += [f"Returns: {fields}", ""]
    return "\n".join(lines).rstrip() + "\n"


async def live_tools() -> list[dict[str, Any]]:
    """The tools a default relay publishes, as a client sees them."""
    from mcp import Client

    from relay.config import load_settings
    from relay.server.app import build_server

    with tempfile.TemporaryDirectory() as home:
        settings = load_settings({"RELAY_HOME": home, "PATH": "/usr/bin:/bin"}, cwd=Path(home))
        async with Client(build_server(settings)) as client:
            result = await client.list_tools()
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in result.tools]


def main() -> None:
    import anyio

    sys.stdout.write(render(anyio.run(live_tools)))


if __name__ == "__main__":
    main()
