"""A real `relay serve --http` configured with `[telemetry] otlp_endpoint` exports a job's spans over OTLP/HTTP to
a collector (here a small receiver that decodes the protobuf requests), under the trace id the MCP client sent."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.conftest import SettingsFactory
from tests.reliability.conftest import free_port, wait_for
from tests.reliability.test_http_guardrails import listening, serving
from tests.telemetry.test_tracing import CALLER_SPAN, LIFE, TRACE_ID, TRACEPARENT

pytestmark = pytest.mark.anyio

# (name, trace id, span id, parent span id) of every span the collector received, hex.
Received = list[tuple[str, str, str, str]]


@pytest.fixture
def collector() -> Iterator[tuple[int, Received, set[str]]]:
    """An OTLP/HTTP traces receiver on 127.0.0.1: its port, the spans it decoded, and the services that sent them."""
    received: Received = []
    services: set[str] = set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                named = [a.value.string_value for a in resource.resource.attributes if a.key == "service.name"]
                services.update(named)
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        ids = (span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex())
                        received.append((span.name, *ids))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1]), received, services
    server.shutdown()
    server.server_close()


@pytest.mark.slow  # a real relay serve --http exporting to a collector
async def test_relay_serve_exports_a_jobs_spans_over_otlp_under_the_callers_trace(
    collector: tuple[int, Received, set[str]],
    make_settings: SettingsFactory,
    relay_home: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collector_port, received, services = collector
    make_settings(f'[telemetry]\notlp_endpoint = "http://127.0.0.1:{collector_port}"\n')
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # the SDK's batch is sent every 50 ms, not every 5 s
    port = free_port()
    with serving(relay_home, workdir, "--port", str(port)):
        await wait_for(lambda: listening(port), 30, step=0.05)
        with anyio.fail_after(60):
            async with (
                create_mcp_http_client() as http,
                Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
            ):
                meta: Any = {"traceparent": TRACEPARENT}
                done = await client.call_tool(
                    "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"}, meta=meta
                )
        assert done.structured_content is not None and done.structured_content["status"] == "completed"
        await wait_for(lambda: any(name == "relay.job.end" for name, *_ in received), 30)
    ours = {name: (span, parent) for name, trace, span, parent in received if trace == TRACE_ID}
    assert set(LIFE) <= set(ours) and services == {"relay"}
    # relay set its provider as the process's: the MCP SDK's own span of the call is exported too, between the
    # caller's span and the job's submit.
    call_span, call_parent = ours["tools/call delegate"]
    assert call_parent == CALLER_SPAN and ours["relay.job.submit"][1] == call_span
