"""One call per step of a job's life, for the job engine's sites: each records its metrics and its span."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from relay.telemetry import metrics, tracing

# An engine's slots and its store's queue on /metrics while it runs (metrics.Watch).
watching = metrics.WATCH.watching

# The jobs this process claimed whose agent printed nothing yet: their agent, and when their process started
# (None until it has). A job that ends elsewhere (its claim taken over) is forgotten past this many.
MAX_WATCHED_JOBS = 10_000
_silent: OrderedDict[str, tuple[str, float | None]] = OrderedDict()


def submitted(job_id: str, agent: str) -> tracing.Submit:
    """A job about to be queued here: counted, and its submit span opened (`.stored` goes into its request)."""
    metrics.job_submitted(agent)
    return tracing.submitting(job_id, agent)


def claimed(job_id: str, agent: str, request: Mapping[str, Any], queued_at: float, worker: str) -> None:
    """This process won the claim on a job queued at `queued_at` and starts it now."""
    metrics.job_claimed(agent, time.time() - queued_at)
    _silent[job_id] = (agent, None)
    while len(_silent) > MAX_WATCHED_JOBS:
        _silent.popitem(last=False)
    tracing.claimed(job_id, agent, request.get(tracing.TRACE_KEY), queued_at, worker)


def spawned(job_id: str, pid: int | None) -> None:
    if job_id in _silent:
        _silent[job_id] = (_silent[job_id][0], time.monotonic())
    tracing.spawned(job_id, pid)


def output(job_id: str) -> None:
    """The agent printed something (only the first time counts)."""
    silent = _silent.pop(job_id, None)
    if silent is not None and silent[1] is not None:
        metrics.job_first_output(silent[0], time.monotonic() - silent[1])
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
    _silent.pop(job_id, None)
    metrics.job_ended(agent, status, None if started_at is None else time.time() - started_at)
    tracing.ended(job_id, agent, status, error_code, request.get(tracing.TRACE_KEY))
