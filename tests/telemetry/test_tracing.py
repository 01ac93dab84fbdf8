"""OpenTelemetry traces of a job's life: the caller's trace context (W3C traceparent in the MCP request's `_meta`)
is continued by the submit span, stored with the job, and continued by the worker that runs it; the SDK is
loaded only when tracing is configured, and a missing SDK is a clear error."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.server.app import build_server
from relay.store import open_store
from relay.telemetry import tracing
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
LIFE = ["relay.job.submit", "relay.job.claim", "relay.job.spawn", "relay.job.first_output", "relay.job.end"]


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """relay's spans, recorded in memory by the OpenTelemetry SDK (the process's global provider is left alone)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    yield exporter
    tracing.stop()
    provider.shutdown()


def by_name(spans: tuple[ReadableSpan, ...], job_id: str) -> dict[str, ReadableSpan]:
    mine = [s for s in spans if (s.attributes or {}).get("relay.job.id") == job_id]
    assert len(mine) == len({s.name for s in mine}), [s.name for s in mine]  # each step once
    return {s.name: s for s in mine}


async def test_a_jobs_spans_continue_the_callers_trace_through_the_store_to_the_worker_that_runs_it(
    exported: InMemorySpanExporter, make_settings: SettingsFactory, workdir: Path
) -> None:
    front_settings = make_settings(RELAY_RUN_JOBS="0")  # the front only queues; the worker below runs the job
    worker_settings = front_settings.with_(runs_jobs=True, worker_name="w1")
    with anyio.fail_after(60):
        async with Client(build_server(front_settings)) as client, Engine(worker_settings).running():
            meta: Any = {"traceparent": TRACEPARENT}
            queued = await client.call_tool(
                "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "async"}, meta=meta
            )
            assert queued.structured_content is not None
            job_id = queued.structured_content["job_id"]
            waited = await client.call_tool("job_wait", {"job_ids": [job_id], "timeout_s": 30})
            assert waited.structured_content is not None
    assert [j["status"] for j in waited.structured_content["jobs"]] == ["completed"]
    spans = by_name(exported.get_finished_spans(), job_id)
    assert sorted(spans) == sorted(LIFE)
    submit = spans["relay.job.submit"]
    assert submit.context is not None and submit.parent is not None
    assert {name: format(s.context.trace_id, "032x") for name, s in spans.items() if s.context} == dict.fromkeys(
        LIFE, TRACE_ID
    )
    assert format(submit.parent.span_id, "016x") == CALLER_SPAN and submit.parent.is_remote
    assert {name: s.parent.span_id for name, s in spans.items() if s.parent and name != submit.name} == dict.fromkeys(
        LIFE[1:], submit.context.span_id
    )
    # A timeline: each step ends where the next one starts.
    steps = [spans[name] for name in LIFE[1:]]
    assert all(a.end_time == b.start_time for a, b in itertools.pairwise(steps))
    assert (spans["relay.job.claim"].attributes or {})["relay.worker"] == "w1"
    assert (spans["relay.job.end"].attributes or {})["relay.job.status"] == "completed"
    # The context the worker continued is the one stored with the job, in its request.
    store = open_store(front_settings.store_target, home=front_settings.home)
    stored = store.get_job(job_id)
    store.close()
    assert stored is not None
    assert stored.request["trace"]["traceparent"] == f"00-{TRACE_ID}-{submit.context.span_id:016x}-01"


async def test_a_failed_job_ends_its_trace_with_an_error_and_a_job_without_a_caller_context_starts_its_own_trace(
    exported: InMemorySpanExporter, make_settings: SettingsFactory, workdir: Path
) -> None:
    with anyio.fail_after(60):
        async with Client(build_server(make_settings())) as client:
            failed = await client.call_tool(
                "delegate",
                {"prompt": "x [[fake:replay=claude_stream_error_500]]", "cwd": str(workdir), "mode": "sync"},
            )
    assert failed.structured_content is not None and failed.is_error
    spans = by_name(exported.get_finished_spans(), failed.structured_content["job_id"])
    submit, end = spans["relay.job.submit"], spans["relay.job.end"]
    assert submit.parent is None and submit.context is not None and end.context is not None
    assert end.context.trace_id == submit.context.trace_id
    assert (end.status.status_code.name, (end.attributes or {})["relay.error.code"]) == ("ERROR", "UPSTREAM_ERROR")


async def test_with_tracing_off_nothing_is_stored_with_a_job_and_no_span_is_made(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    assert not tracing.enabled()
    settings = make_settings()
    async with Engine(settings).running() as engine:
        from relay.jobs.request import JobRequest

        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        done = await engine.wait_one(job_id, 30)
    assert done.status == "completed" and "trace" not in done.request


@pytest.mark.slow  # a fresh Python importing relay's surfaces
def test_relay_loads_no_opentelemetry_sdk_unless_tracing_is_configured() -> None:
    code = (
        "import sys, relay.cli.main, relay.server.app, relay.server.http, relay.jobs.engine, relay.cli.worker_cmd;"
        "import relay.telemetry.tracing, relay.telemetry.job, relay.telemetry.endpoint;"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_tracing_configured_without_the_otel_extra_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in ("opentelemetry.sdk", "opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(RelayError) as err:
        tracing.start("http://127.0.0.1:4318/v1/traces")
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert "relay-mcp-server[otel]" in err.value.hint and "otlp_endpoint" in err.value.hint
    assert not tracing.enabled()


@pytest.mark.parametrize(
    "sent",
    [
        {"traceparent": "00-zzzz-not-a-trace"},
        {"traceparent": f"00-{'0' * 32}-{CALLER_SPAN}-01"},  # the invalid all-zero trace id
        {"traceparent": "--flag", "tracestate": "x" * 10_000},
    ],
)
async def test_a_malformed_traceparent_is_ignored_and_the_job_stores_only_relays_own_context(
    exported: InMemorySpanExporter, make_settings: SettingsFactory, workdir: Path, sent: dict[str, str]
) -> None:
    settings = make_settings()
    with anyio.fail_after(60):
        async with Client(build_server(settings)) as client:
            meta: Any = sent
            done = await client.call_tool("delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"}, meta=meta)
    assert done.structured_content is not None and done.structured_content["status"] == "completed"
    job_id = done.structured_content["job_id"]
    submit = by_name(exported.get_finished_spans(), job_id)["relay.job.submit"]
    assert submit.parent is None and submit.context is not None  # a trace of its own
    store = open_store(settings.store_target, home=settings.home)
    stored = store.get_job(job_id)
    store.close()
    assert stored is not None
    ours = submit.context
    assert stored.request["trace"] == {
        "traceparent": f"00-{ours.trace_id:032x}-{ours.span_id:016x}-{ours.trace_flags:02x}"
    }
