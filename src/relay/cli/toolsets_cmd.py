"""`relay toolsets`: every toolset and profile, its tools, and what exposing it costs in tools/list tokens."""

from __future__ import annotations

import json
import tempfile
from typing import Any

# tools/list cost is estimated as bytes / 4, as benchmarks/bench_tools_list.py measures it.
BYTES_PER_TOKEN = 4


def _tokens(tools: list[dict[str, Any]]) -> int:
    wire = json.dumps(tools, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return round(len(wire) / BYTES_PER_TOKEN)


def toolset_rows() -> list[dict[str, Any]]:
    """One row per toolset and profile: name, kind, aliases, tools, tokens."""
    from relay.server.tooldocs import catalog_tools, doc_settings
    from relay.server.toolsets import BUILTIN, DEFAULT_EXPOSURE, load_toolset

    with tempfile.TemporaryDirectory() as home:
        toolsets, profiles, default = catalog_tools(doc_settings(home))
    by_name = {t["name"]: t for tools in toolsets.values() for t in tools}
    rows: list[dict[str, Any]] = []
    default_tools = [by_name[n] for n in default]
    rows.append(
        {
            "name": "(default)",
            "kind": "exposure",
            "aliases": [],
            "description": " + ".join(t if s is None else f"{t}:{','.join(sorted(s))}" for t, s in DEFAULT_EXPOSURE),
            "tools": default,
            "tokens": _tokens(default_tools),
        }
    )
    for name in BUILTIN:
        ts = load_toolset(name)
        tools = toolsets[name]
        rows.append(
            {
                "name": name,
                "kind": "toolset",
                "aliases": list(ts.aliases),
                "description": ts.description,
                "tools": [t["name"] for t in tools],
                "tokens": _tokens(tools),
            }
        )
    for name, profile_tools in profiles.items():
        rows.append(
            {
                "name": name,
                "kind": "profile",
                "aliases": [],
                "description": "relay serve --profile " + name,
                "tools": [t["name"] for t in profile_tools],
                "tokens": _tokens(profile_tools),
            }
        )
    return rows


def toolsets_command(as_json: bool) -> int:
    rows = toolset_rows()
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        alias = f" (alias {', '.join(row['aliases'])})" if row["aliases"] else ""
        print(
            f"{row['name']}{alias} — {row['kind']}, {len(row['tools'])} tool{'' if len(row['tools']) == 1 else 's'}, ~{row['tokens']:,} tokens"
        )
        print(f"  {row['description']}")
        print(f"  {', '.join(row['tools'])}")
    return 0
