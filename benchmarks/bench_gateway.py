"""Benchmark: the gateway's cost — call_tool overhead, list_tools over 10 servers, tools/list with servers attached.

1. call_tool overhead (warm). One SDK client calls the toy server's `echo` directly over stdio; another
   calls `relay serve` over stdio, which calls the same toy server through the gateway
   (`call_tool(server_name="toy", tool_name="echo", ...)`). Samples alternate between the two so
   machine load hits both alike; the overhead is the difference of the medians (target ≤ 2 ms). The
   gateway core's own share (Gateway.call_tool against a raw call on its connection, in one process)
   is reported beside it.
2. list_tools across 10 downstream servers: the first call (starts all ten, in parallel) and warm calls.
3. The default tools/list, byte for byte, with 0 and with 20 downstream servers configured and
   connected: attaching servers must not change what a client loads (target: identical).

The downstream server is tests/gateway/servers/toy_server.py (the official SDK's MCPServer).
Run alone: .venv/bin/python benchmarks/bench_gateway.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from _common import PYTHON, RELAY_BIN, REPO, Result, bench_env, main_for, median, ms, percentile

NAME = "gateway"
TOY = REPO / "tests" / "gateway" / "servers" / "toy_server.py"
TARGET_OVERHEAD_MS = 2.0
WARMUP = 30
SAMPLES = 300
LIST_SERVERS = 10
ATTACHED = 20
# Ceilings for a loaded machine: starting 20 SDK servers at once takes a while on 2 cores.
START_BOUND_S = 300.0


def _toy(name: str, state: Path, scope: str) -> Any:
    from relay.gateway import make_config

    return make_config(
        name=name,
        transport="stdio",
        command=str(PYTHON),
        args=[str(TOY)],
        env={"TOY_STATE_DIR": str(state)},
        scope=scope,
    )


def _register(home: Path, work: Path, names: list[str], scope: str | None = None) -> None:
    """Record toy servers for the project `work` belongs to (or for `scope`; "" is global)."""
    from relay.gateway import ServerRegistry, project_of

    registry = ServerRegistry(home / "relay.db", home)
    try:
        for name in names:
            registry.put(_toy(name, work, project_of(work) if scope is None else scope))
    finally:
        registry.close()


async def _overhead(results: list[Result]) -> None:
    with bench_env() as benv:
        _register(benv.home, benv.work, ["toy"])
        direct_params = StdioServerParameters(
            command=str(PYTHON), args=[str(TOY)], env={"TOY_STATE_DIR": str(benv.work)}
        )
        relay_params = StdioServerParameters(command=str(RELAY_BIN), args=["serve"], env=benv.env, cwd=benv.work)
        args = {"server_name": "toy", "tool_name": "echo", "arguments": {"text": "ping"}}
        async with (
            Client(direct_params, mode="legacy", cache=None) as direct,
            Client(relay_params, mode="legacy", cache=None) as via,
        ):
            with anyio.fail_after(START_BOUND_S):
                first = await via.call_tool("call_tool", args)
            assert first.structured_content is not None and first.structured_content.get("success"), first
            for _ in range(WARMUP):
                await direct.call_tool("echo", {"text": "ping"})
                await via.call_tool("call_tool", args)
            direct_times: list[float] = []
            via_times: list[float] = []
            hop_times: list[float] = []
            schema_args = {"server_name": "core", "tool_name": "status"}
            for _ in range(SAMPLES):
                t0 = time.perf_counter()
                await direct.call_tool("echo", {"text": "ping"})
                direct_times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await via.call_tool("call_tool", args)
                via_times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await via.call_tool("get_tool_schema", schema_args)  # relay's own round trip, no downstream
                hop_times.append(time.perf_counter() - t0)
    overhead = ms(median(via_times) - median(direct_times))
    results.append(
        Result(
            NAME,
            "call_tool overhead over a direct SDK call (median, warm, stdio)",
            overhead,
            "ms",
            f"≤ {TARGET_OVERHEAD_MS} ms",
            overhead <= TARGET_OVERHEAD_MS,
            {
                "direct_median_ms": ms(median(direct_times)),
                "via_relay_median_ms": ms(median(via_times)),
                "direct_p95_ms": ms(percentile(direct_times, 95)),
                "via_relay_p95_ms": ms(percentile(via_times, 95)),
                "relay_round_trip_without_downstream_median_ms": ms(median(hop_times)),
                "samples": SAMPLES,
            },
        )
    )


async def _core_share(results: list[Result]) -> None:
    """Gateway.call_tool against a raw session call on the same connection (one process, no relay server)."""
    from relay.gateway import Gateway, ServerRegistry
    from relay.gateway.connection import _call  # pyright: ignore[reportPrivateUsage]

    with bench_env() as benv:
        registry = ServerRegistry(benv.home / "relay.db", benv.home)
        gateway = Gateway(registry, benv.home, "/bench")
        try:
            await gateway.add(_toy("toy", benv.work, "/bench"))
            with anyio.fail_after(START_BOUND_S):
                client = await gateway.connection("toy").ensure()
            for _ in range(WARMUP):
                await gateway.call_tool("toy", "echo", {"text": "ping"})
            raw: list[float] = []
            core: list[float] = []
            for _ in range(SAMPLES):
                t0 = time.perf_counter()
                await _call(client, "echo", {"text": "ping"})
                raw.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await gateway.call_tool("toy", "echo", {"text": "ping"})
                core.append(time.perf_counter() - t0)
        finally:
            await gateway.aclose()
            registry.close()
    results.append(
        Result(
            NAME,
            "gateway core's share of it (Gateway.call_tool − raw session call, median)",
            ms(median(core) - median(raw)),
            "ms",
            details={"raw_median_ms": ms(median(raw)), "gateway_median_ms": ms(median(core))},
        )
    )


async def _list_tools(results: list[Result]) -> None:
    names = [f"toy{i:02d}" for i in range(LIST_SERVERS)]
    with bench_env() as benv:
        _register(benv.home, benv.work, names)
        relay_params = StdioServerParameters(command=str(RELAY_BIN), args=["serve"], env=benv.env, cwd=benv.work)
        async with Client(relay_params, mode="legacy", cache=None) as via:
            t0 = time.perf_counter()
            with anyio.fail_after(START_BOUND_S):
                first = await via.call_tool("list_tools", {})
            cold = time.perf_counter() - t0
            listed = first.structured_content or {}
            answered = [s for s in listed.get("servers", []) if s["name"] in names and s["tools"]]
            warm: list[float] = []
            for _ in range(50):
                t0 = time.perf_counter()
                await via.call_tool("list_tools", {})
                warm.append(time.perf_counter() - t0)
    results.append(
        Result(
            NAME,
            f"list_tools across {LIST_SERVERS} downstream servers, first call (starts them all)",
            ms(cold),
            "ms",
            details={"servers_with_tools": len(answered)},
        )
    )
    results.append(
        Result(NAME, f"list_tools across {LIST_SERVERS} downstream servers, warm (median)", ms(median(warm)), "ms")
    )


async def _tools_list_identical(results: list[Result]) -> None:
    from relay.server.app import build_server

    async def default_tools_list(benv: Any, attach: list[str]) -> tuple[bytes, int]:
        server = build_server(benv.settings())
        async with Client(server) as client:
            connected = 0
            with anyio.fail_after(START_BOUND_S):
                while connected < len(attach):  # every attached server started and answering
                    listed = await client.call_tool("list_tools", {})
                    servers = (listed.structured_content or {}).get("servers", [])
                    connected = sum(1 for s in servers if s["name"] in attach and s["tools"])
            tools = await client.list_tools()
            wire = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.tools]
            return json.dumps(wire, separators=(",", ":")).encode(), connected

    with bench_env() as benv:
        bare, _ = await default_tools_list(benv, [])
    names = [f"srv{i:02d}" for i in range(ATTACHED)]
    with bench_env() as benv:
        _register(benv.home, benv.work, names, scope="")  # global: this in-process server's cwd is elsewhere
        attached, connected = await default_tools_list(benv, names)
    same = bare == attached
    results.append(
        Result(
            NAME,
            f"default tools/list identical with 0 and {ATTACHED} downstream servers",
            1.0 if same else 0.0,
            "bool",
            "identical",
            same,
            {"bytes_without": len(bare), "bytes_with": len(attached), "servers_connected": connected},
        )
    )


async def run() -> list[Result]:
    results: list[Result] = []
    await _overhead(results)
    await _core_share(results)
    await _list_tools(results)
    await _tools_list_identical(results)
    return results


if __name__ == "__main__":
    sys.exit(main_for(NAME, run))
