"""Fuzzed input: every MCP tool relay lists, called with generated arguments, answers with a result or a
coded error (never INTERNAL, always a hint), and the server keeps answering."""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError

from relay.errors import ErrorCode
from relay.server.app import build_server
from relay.server.toolsets import BUILTIN
from tests.reliability.conftest import AdvSettings, quick_agent, record

pytestmark = pytest.mark.anyio

# Cases across the default toolset's tools; each tool gets an equal share, and at least MIN_PER_TOOL.
TOTAL_CASES = 1200
MIN_PER_TOOL = 60
# Every other built-in toolset (enabled beside core, as a client enables it): this many cases per tool of its own.
PER_EXTRA_TOOL = 30
CALL_TIMEOUT_S = 30
CODES = {c.value for c in ErrorCode} - {ErrorCode.INTERNAL.value}

# Huge strings travel as markers through hypothesis (so a failing example prints short) and are expanded
# just before the call.
HUGE = {"<HUGE-60K>": "x" * 60_000, "<HUGE-1M>": "é" * 1_000_000}


def expand(value: Any) -> Any:
    if isinstance(value, str):
        return HUGE.get(value, value)
    if isinstance(value, list):
        return [expand(v) for v in value]
    if isinstance(value, dict):
        return {expand(k): expand(v) for k, v in value.items()}
    return value


def tricky_strings(workdir: Path, outside: Path) -> list[str]:
    """Path tricks and hostile text. Endless device files (/dev/zero) are left to a bounded test of their own."""
    return [
        "",
        " ",
        "../..",
        "../../../../etc/passwd",
        f"{workdir}/../..",
        f"{workdir}/../../../..",
        str(workdir / "link-out"),
        str(workdir / "link-out" / "etc"),
        str(workdir / "loop"),
        str(outside),
        "/",
        "//",
        "/proc/self/cwd",
        "/proc/self/root",
        "/proc/self/environ",
        "/proc/1/environ",
        "/etc/passwd",
        "/dev/null",
        "/nonexistent/dir",
        "\x00",
        f"{workdir}\x00",
        f"{workdir}/\x00/x",
        "a\x00b",
        "~",
        "~root",
        "~nobody-such-user/x",
        "file:///etc/passwd",
        "C:\\Windows\\System32",
        "-rf",
        "--help",
        "--output-format=text",
        "--dangerously-skip-permissions",
        "$(touch /tmp/relay-pwned)",
        "`id`",
        "; rm -rf / #",
        "%s%n%x",
        "\r\n\r\n",
        "\u202e\u200b\ufeff",
        "😀" * 500,
        "ünïcödé ☃ 中文 العربية",
        "\ud800",  # lone surrogates: valid in JSON ("\\ud800"), not in UTF-8
        "half \udfff pair",
        "\udc80\udcff",  # bytes a shell passed as-is, as Python decodes them
        "[[fake:hang]]",
        "a" * 5000,
        *HUGE,
        "null",
        "0",
        "-1",
        "NaN",
        "job_id",
        "' OR 1=1 --",
        "%",
        "_",
    ]


def junk(strings: list[str]) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.sampled_from([-1, 0, 1, 2**31, -(2**31), 2**63, -(2**63), 10**30, -(10**30)]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([1e308, -1e308, 5e-324, -0.0]),
        st.text(max_size=40),
        st.sampled_from(strings),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
        max_leaves=6,
    )


def plausible(
    name: str, schema: dict[str, Any], strings: list[str], ids: list[str], workdir: Path
) -> st.SearchStrategy[Any]:
    """A value of the right type (often hostile within it) for one property of a tool's input schema."""
    if name == "mode":
        # Jobs go async so the fuzz never waits on one; the waiting modes are covered elsewhere.
        return st.sampled_from([m for m in schema.get("enum", []) if m in ("async", "any", "all")] or ["async"])
    if name == "duration":  # gemini-mcp's timeout-test sleeps this many ms, as its seed does: no more than 50
        return st.floats(min_value=10, max_value=50) | st.sampled_from([0, -1, 9.99])
    if name == "timeout_s":
        return st.floats(min_value=0.001, max_value=1) | st.sampled_from([0, -1, 3601, 1e300])
    if name == "agent":
        return st.sampled_from(["claude", "claude", "claude", "codex", "nobody", "../claude", "claude\x00"])
    if name == "cwd":
        return st.just(str(workdir)) | st.sampled_from(strings) | st.builds(lambda s: f"{workdir}/{s}", st.text())
    if name in ("files", "images"):
        return st.lists(st.sampled_from(strings) | st.just(str(workdir)), max_size=3)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    options: list[st.SearchStrategy[Any]] = []
    if "string" in kinds:
        options += [st.text(max_size=60), st.sampled_from(strings)]
        if "id" in name:
            options.append(st.sampled_from(ids))
    if "integer" in kinds:
        options.append(st.integers(min_value=-(2**40), max_value=2**40) | st.sampled_from([0, 1, 2**63, -(2**63)]))
    if "number" in kinds:
        options.append(st.floats(allow_nan=False, allow_infinity=False) | st.integers())
    if "boolean" in kinds:
        options.append(st.booleans())
    if "array" in kinds:
        item = schema.get("items", {})
        options.append(st.lists(plausible(name.rstrip("s"), item, strings, ids, workdir), min_size=1, max_size=4))
    if "null" in kinds:
        options.append(st.none())
    return st.one_of(options) if options else junk(strings)


def arguments(
    schema: dict[str, Any], strings: list[str], ids: list[str], workdir: Path
) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for name, prop in props.items():
            present = draw(st.integers(0, 11))
            if present <= 3 and name not in required:
                continue
            if present == 4 and name in required:
                continue  # a missing required field
            hostile = draw(st.integers(0, 14)) == 0
            args[name] = draw(junk(strings) if hostile else plausible(name, prop, strings, ids, workdir))
        if draw(st.integers(0, 14)) == 0:
            args.update(draw(st.dictionaries(st.text(max_size=12), junk(strings), min_size=1, max_size=2)))
        return args

    return build()


def classify(result: Any) -> str:
    """'ok', or the error code; raises AssertionError for anything that is not a coded error with a hint."""
    if not result.is_error:
        return "ok"
    content = result.structured_content
    assert isinstance(content, dict), f"an error result without structured content: {result.content}"
    if content.get("success") is False:
        # The gateway's, gobby's and powerspawn's tools answer in their seeds' shape ({success: false, error: text,
        # error_type}) plus relay's hint (and its code, where the seed's error_type is not relay's code).
        assert isinstance(content.get("error"), str) and content["error"], f"no error text: {content}"
        code = content.get("code", content.get("error_type"))
        assert code != ErrorCode.INTERNAL.value and ("code" in content) <= (code in CODES), f"code {code!r}: {content}"
        assert isinstance(content.get("hint"), str) and content["hint"].strip(), f"no hint: {content}"
        return str(code)
    error = content.get("error")
    if isinstance(error, str) and "code" in content:  # a compat profile's flat shape, plus relay's code and hint
        assert content.get("code") in CODES, f"code {content.get('code')!r}: {error}"
        assert isinstance(content.get("hint"), str) and content["hint"].strip(), f"no hint: {content}"
        return str(content["code"])
    assert isinstance(error, dict), f"an error result without error: {content}"
    assert error.get("code") in CODES, f"error code {error.get('code')!r}: {error.get('message')}"
    assert isinstance(error.get("hint"), str) and error["hint"].strip(), f"no hint: {error}"
    return str(error["code"])


def shorten(args: dict[str, Any]) -> str:
    text = json.dumps(args, default=str)
    return text if len(text) < 300 else text[:300] + "..."


@pytest.mark.parametrize("toolset", ["core", *sorted(set(BUILTIN) - {"core"})])
async def test_every_tool_answers_generated_arguments_with_a_result_or_a_coded_error(
    toolset: str,
    adv_settings: AdvSettings,
    workdir: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workdir / "link-out").symlink_to("/")
    (workdir / "loop").symlink_to(workdir / "loop")
    strings = tricky_strings(workdir, outside)
    agent = quick_agent(tmp_path / "bin")
    async with Client(build_server(adv_settings(command=agent))) as core_only:
        core_tools = {tool.name for tool in (await core_only.list_tools()).tools}
    extra = {} if toolset == "core" else {"RELAY_TOOLSETS": f"core,{toolset}"}
    settings_ = adv_settings(command=agent, RELAY_KILL_GRACE_S="0.2", **extra)
    counts: dict[str, Counter[str]] = {}
    violations: list[tuple[str, str, str]] = []
    started = time.monotonic()

    async with Client(build_server(settings_)) as client:
        with anyio.fail_after(CALL_TIMEOUT_S):
            seeded = await client.call_tool("delegate", {"prompt": "seed", "cwd": str(workdir), "mode": "sync"})
            listed = await client.list_tools()
        assert seeded.structured_content is not None and seeded.structured_content["status"] == "completed"
        job_id = seeded.structured_content["job_id"]
        session = seeded.structured_content["session_id"]
        ids = [job_id, job_id[:6], job_id.upper(), session, "0" * 16]
        tools = [tool for tool in listed.tools if (tool.name in core_tools) == (toolset == "core")]
        per_tool = max(MIN_PER_TOOL, math.ceil(TOTAL_CASES / len(tools))) if toolset == "core" else PER_EXTRA_TOOL

        async def call(name: str, args: dict[str, Any]) -> Any:
            with anyio.fail_after(CALL_TIMEOUT_S):
                return await client.call_tool(name, args)

        def fuzz(name: str, schema: dict[str, Any]) -> None:
            tally = counts.setdefault(name, Counter())

            @settings(
                max_examples=per_tool,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(args=arguments(schema, strings, ids, workdir))
            def prop(args: dict[str, Any]) -> None:
                # Violations are collected, not raised, so one run counts every outcome and finds every bug;
                # only a server that stops answering ends the run early.
                try:
                    result = anyio.from_thread.run(call, name, expand(args))
                except MCPError as exc:
                    tally["protocol_error"] += 1
                    violations.append((name, f"protocol error: {exc}", shorten(args)))
                    return
                try:
                    tally[classify(result)] += 1
                except AssertionError as exc:
                    tally["violation"] += 1
                    violations.append((name, str(exc).splitlines()[0], shorten(args)))

            prop()

        for tool in tools:
            await anyio.to_thread.run_sync(fuzz, tool.name, tool.input_schema)
            with anyio.fail_after(CALL_TIMEOUT_S):
                alive = await client.call_tool("status", {})
            assert not alive.is_error, f"the server stopped answering after fuzzing {tool.name}"
        with anyio.fail_after(CALL_TIMEOUT_S):
            final = await client.call_tool("job_status", {"job_id": job_id})
    assert final.structured_content is not None and final.structured_content["status"] == "completed"

    elapsed = time.monotonic() - started
    total = sum(sum(c.values()) for c in counts.values())
    outcomes: Counter[str] = Counter()
    for tally in counts.values():
        outcomes.update(tally)
    summary = {
        "tools": len(counts),
        "cases": total,
        "seconds": round(elapsed, 1),
        "outcomes": dict(sorted(outcomes.items())),
        "per_tool": {name: dict(sorted(c.items())) for name, c in sorted(counts.items())},
    }
    path = tmp_path_factory.getbasetemp() / f"fuzz-counts-{toolset}.json"
    path.write_text(json.dumps(summary, indent=2))
    print(f"fuzz counts ({path}):\n{json.dumps(summary, indent=2)}")
    record("fuzz", "summary" if toolset == "core" else f"summary {toolset}", summary)
    assert total >= (1000 if toolset == "core" else PER_EXTRA_TOOL * len(tools)) and tools
    distinct: dict[tuple[str, str], str] = {}
    for tool_name, problem, example in violations:
        key = (tool_name, problem[:90])
        if key not in distinct or len(example) < len(distinct[key]):
            distinct[key] = example
    report = "\n".join(f"{t}: {p}\n    e.g. {t}({e})" for (t, p), e in sorted(distinct.items()))
    assert not violations, f"{len(violations)} calls broke the contract, {len(distinct)} distinct:\n{report}"
    assert not (Path("/tmp") / "relay-pwned").exists()
    assert os.path.isdir(workdir)
