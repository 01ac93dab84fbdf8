"""One call per step of a job's life, for the job engine's sites: each records its metrics and its span."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from relay.telemetry import metrics, tracing

# An engine's slots and its store's queue on /metrics while it runs (metrics.Watch).
watching = metrics.WATCH.watching


def submitted(job_id: str, agent: str) -> tracing.Submit:
    """A job about to be queued here: counted, and its submit span opened (`.stored` goes into its request)."""
    metrics.job_submitted(agent)
    return tracing.submitting(job_id, agent)


def claimed(job_id: str, agent: str, request: Mapping[str, Any], queued_at: float, worker: str) -> None:
    """This process won the claim on a job queued at `queued_at` and starts it now."""
    metrics.job_claimed(agent, time.time() - queued_at)
    tracing.claimed(job_id, agent, request.get(tracing.TRACE_KEY), queued_at, worker)


def spawned(job_id: str, pid: int | None) -> None:
    tracing.spawned(job_id, pid)


def output(job_id: str) -> None:
    """The agent printed something (only the first time counts)."""
    tracing.first_output(job_id)


def ended(
    job_id: str,
    agent: str,
    status: str,
    error_code: str | None,
    started_at: float | None,
    request: Mapping[str, Any],
) -> None:
    """This process recorded a job's end (`started_at` None: it never ran)."""
    metrics.job_ended(agent, status, None if started_at is None else time.time() - started_at)
    tracing.ended(job_id, agent, status, error_code, request.get(tracing.TRACE_KEY))
