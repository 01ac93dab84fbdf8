"""OpenTelemetry traces of a job's life: submit, claim, spawn, first output, end. Off unless configured.

The OpenTelemetry SDK and its OTLP exporter are the optional 'otel' extra: they are imported only by
`start` (tracing configured) and `use` (a test's own provider). While tracing is off every function
here returns at its first line.

A job's trace continues its caller's: the MCP SDK's middleware makes the context a request carries in
`_meta` (W3C `traceparent`, the 2026-07-28 revision) the current one while the tool runs, and the submit
span is its child. The submit span's context is stored with the job (`trace` in its request JSON), so the
worker that claims it, on any host, makes its spans children of the same submit. Each span after the
submit runs from the step before it to its own moment, so a trace reads as the job's timeline: claim
(queued), spawn (placed and started), first_output (the agent's start-up), end (running to its end).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import ErrorCode, RelayError

SERVICE_NAME = "relay"
# What a job's request JSON holds its trace context under: {"traceparent": ..., "tracestate": ...}.
TRACE_KEY = "trace"
# Jobs of this process whose spans are under way; a job that ends elsewhere (its claim taken over) is
# forgotten past this many.
MAX_TRACED_JOBS = 10_000
INSTALL_HINT = "pip install 'relay-mcp-server[otel]' (the OpenTelemetry SDK and its OTLP exporter)"

_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_provider: Any = None  # the TracerProvider `start` made (flushed by `stop`)


@dataclass
class _Job:
    context: Any  # the submit span's context, the parent of every later span
    mark_ns: int  # when the last step ended: the next span starts there
    output_seen: bool = False


_jobs: OrderedDict[str, _Job] = OrderedDict()


def enabled() -> bool:
    return _tracer is not None


def start(endpoint: str, service_name: str = SERVICE_NAME) -> None:
    """Export spans over OTLP/HTTP to `endpoint` (the traces URL); the provider also becomes the process's global
    one when none was set, so the MCP SDK's own span of each request is exported too."""
    global _provider
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"tracing is configured (OTLP endpoint {endpoint}) but OpenTelemetry is not installed ({exc.name})",
            f"{INSTALL_HINT}; or remove [telemetry] otlp_endpoint and OTEL_EXPORTER_OTLP_ENDPOINT",
        ) from None
    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, as the SDK reads them
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service_name}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":  # nobody set one: ours
        trace.set_tracer_provider(provider)
    use(provider)
    _provider = provider


def use(provider: Any) -> None:
    """Record relay's spans with `provider` (an opentelemetry-sdk TracerProvider), leaving the global one alone."""
    global _tracer
    _tracer = provider.get_tracer("relay")
    _jobs.clear()


def stop() -> None:
    """Tracing off; spans `start` recorded are exported first."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    _jobs.clear()
    if provider is not None:
        provider.shutdown()


class Submit:
    """The submit span of one job: `stored` goes into its request JSON, `end()` when it is queued."""

    def __init__(self, span: Any = None, stored: Mapping[str, Any] | None = None) -> None:
        self.span = span
        self.stored: dict[str, Any] = dict(stored or {})

    def end(self) -> None:
        if self.span is not None:
            self.span.end()


def submitting(job_id: str, agent: str) -> Submit:
    """Open a job's submit span as a child of the current context (the caller's, from the request's `_meta`)."""
    if _tracer is None:
        return Submit()
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    span = _tracer.start_span("relay.job.submit", attributes={"relay.job.id": job_id, "relay.job.agent": agent})
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
    return Submit(span, {TRACE_KEY: carrier})


def _parent(stored: Any) -> Any:
    """The context a stored `trace` names, or None (the job was submitted while tracing was off)."""
    if not isinstance(stored, dict) or "traceparent" not in stored:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {str(k): str(v) for k, v in stored.items()}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    context = TraceContextTextMapPropagator().extract(carrier)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def _span(name: str, job: _Job, end_ns: int, attributes: Mapping[str, Any], error: str | None = None) -> None:
    span = _tracer.start_span(name, context=job.context, start_time=min(job.mark_ns, end_ns), attributes=attributes)
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=end_ns)
    job.mark_ns = end_ns


def claimed(job_id: str, agent: str, stored: Any, queued_at: float, worker: str) -> None:
    """The claim span: from the job's submit (`queued_at`) to now, when this process won its claim."""
    if _tracer is None:
        return
    context = _parent(stored)
    if context is None:
        return
    job = _jobs[job_id] = _Job(context, int(queued_at * 1e9))
    while len(_jobs) > MAX_TRACED_JOBS:
        _jobs.popitem(last=False)
    _span(
        "relay.job.claim",
        job,
        time.time_ns(),
        {"relay.job.id": job_id, "relay.job.agent": agent, "relay.worker": worker},
    )


def spawned(job_id: str, pid: int | None) -> None:
    """The spawn span: from the claim to the agent's process recorded running."""
    job = _jobs.get(job_id) if _tracer is not None else None
    if job is not None:
        _span("relay.job.spawn", job, time.time_ns(), {"relay.job.id": job_id, "process.pid": pid or 0})


def first_output(job_id: str) -> None:
    """The first_output span, once a job: from its spawn to the first output the agent printed."""
    job = _jobs.get(job_id) if _tracer is not None else None
    if job is not None and not job.output_seen:
        job.output_seen = True
        _span("relay.job.first_output", job, time.time_ns(), {"relay.job.id": job_id})


def ended(job_id: str, agent: str, status: str, error_code: str | None, stored: Any) -> None:
    """The end span: from the step before to the job's final row (a job ended by a process that did not run it,
    e.g. cancelled while queued, gets an end span of its own under the same submit)."""
    if _tracer is None:
        return
    job = _jobs.pop(job_id, None)
    if job is None:
        context = _parent(stored)
        if context is None:
            return
        job = _Job(context, time.time_ns())
    attributes = {"relay.job.id": job_id, "relay.job.agent": agent, "relay.job.status": status}
    if error_code:
        attributes["relay.error.code"] = error_code
    _span("relay.job.end", job, time.time_ns(), attributes, error=None if status == "completed" else status)
