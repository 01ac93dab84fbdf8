"""Benchmark 2: size of relay's `tools/list` answer, in bytes and estimated tokens (bytes / 4).

The tools are listed through the in-memory SDK client; each tool is dumped with
`model_dump(mode="json", by_alias=True, exclude_none=True)` and the list is serialised as compact
JSON (no spaces, as on the wire). Target: ≤ 3,000 tokens.

Run alone: .venv/bin/python benchmarks/bench_tools_list.py
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp import Client

from _common import Result, bench_env, main_for

NAME = "tools_list"
TARGET_TOKENS = 3000
# The job tools of the core toolset (the rest of core are the model-API tools).
CORE_TOOLS = frozenset(
    {"delegate", "job_status", "job_result", "job_wait", "job_cancel", "job_list", "session_list", "status"}
)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def run() -> list[Result]:
    from relay.server.app import build_server

    with bench_env() as benv:
        server = build_server(benv.settings())
        with anyio.fail_after(30):
            async with Client(server) as client:
                listed = await client.list_tools()
    tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
    size = len(dumps(tools).encode("utf-8"))
    tokens = size / 4
    per_tool = {
        t["name"]: {
            "bytes": len(dumps(t).encode("utf-8")),
            "input_schema_bytes": len(dumps(t.get("inputSchema", {})).encode("utf-8")),
            "output_schema_bytes": len(dumps(t.get("outputSchema", {})).encode("utf-8")) if "outputSchema" in t else 0,
            "description_bytes": len(t.get("description", "").encode("utf-8")),
        }
        for t in tools
    }
    without_output = [{k: v for k, v in t.items() if k != "outputSchema"} for t in tools]
    core = [t for t in tools if t["name"] in CORE_TOOLS]
    details: dict[str, Any] = {
        "tools": len(tools),
        "output_schema_bytes_total": sum(v["output_schema_bytes"] for v in per_tool.values()),
        "projection_without_output_schemas_tokens": round(len(dumps(without_output).encode("utf-8")) / 4),
        "projection_core_tools_only_tokens": round(len(dumps(core).encode("utf-8")) / 4),
        "core_tools": sorted(CORE_TOOLS),
        "bytes_compact": size,
        "bytes_indented_2": len(json.dumps(tools, indent=2, ensure_ascii=False).encode("utf-8")),
        "bytes_default_separators": len(json.dumps(tools, ensure_ascii=False).encode("utf-8")),
        "per_tool": dict(sorted(per_tool.items(), key=lambda kv: -kv[1]["bytes"])),
    }
    from relay.cli.toolsets_cmd import toolset_rows

    # Every toolset and profile as `relay toolsets` reports it; "full" = every toolset's tools once.
    rows = toolset_rows()
    details["toolsets_and_profiles_tokens"] = {r["name"]: r["tokens"] for r in rows}
    full_tokens = sum(r["tokens"] for r in rows if r["kind"] == "toolset")
    zen_tokens = next(r["tokens"] for r in rows if r["name"] == "zen" and r["kind"] == "profile")
    return [
        Result(NAME, "tools/list JSON", size, "bytes", details=details),
        Result(NAME, "every toolset's tools, each once (tokens)", full_tokens, "tokens"),
        Result(
            NAME,
            "tools/list tokens of --profile zen",
            zen_tokens,
            "tokens",
            target="≤ 3,500",
            passed=zen_tokens <= 3500,
        ),
        Result(
            NAME,
            f"tools/list tokens ({len(tools)} tools, bytes/4)",
            round(tokens),
            "tokens",
            target=f"≤ {TARGET_TOKENS:,} tokens",
            passed=tokens <= TARGET_TOKENS,
        ),
    ]


if __name__ == "__main__":
    sys.exit(main_for(NAME, run))
