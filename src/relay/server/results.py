"""Tool results every toolset builds on: errors, models, job envelopes, and running a job per its mode."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from relay.errors import RelayError
from relay.jobs.engine import Engine
from relay.server.clientinfo import auto_threshold_for, cancelled_by_client_timeout
from relay.server.models import Envelope
from relay.store import JobRecord

FAILED_STATUSES = frozenset({"failed", "cancelled", "timed_out", "interrupted"})


def json_result(data: dict[str, Any], is_error: bool = False) -> CallToolResult:
    """A tool result carrying `data` both as structured content and as its JSON text."""
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data))], structured_content=data, is_error=is_error
    )


# An error's message and hint quote the caller's input at most this long: a 10 MB argument must not
# come back as a 10 MB error (twice: as text and as structured content).
ERROR_TEXT_LIMIT = 2000


def clip(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """`text`, or its first `limit` characters and how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def error_result(err: RelayError) -> CallToolResult:
    """An `isError` result with `{"error": {code, message, hint}}`; every published output schema admits it."""
    body = err.to_dict()
    body["message"], body["hint"] = clip(body["message"]), clip(body["hint"])
    return json_result({"error": body}, is_error=True)


def model_result(model: BaseModel, is_error: bool = False) -> CallToolResult:
    return json_result(model.model_dump(mode="json"), is_error=is_error)


def envelope_result(env: dict[str, Any]) -> CallToolResult:
    """A job envelope as a tool result; a failed job is an `isError` result that still carries the envelope."""
    return model_result(Envelope.model_validate(env), is_error=env["status"] in FAILED_STATUSES)


async def run_guarded(fn: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
    """Run a tool body; a `RelayError` it raises becomes the tool's error result."""
    try:
        return await fn()
    except RelayError as err:
        return error_result(err)


async def wait_with_progress(engine: Engine, job_id: str, timeout: float, ctx: Context[Any, Any] | None) -> JobRecord:
    """Wait for a job while turning its events into MCP progress notifications (when asked for); its record as the
    wait left it (final, or still running at `timeout`)."""
    events = engine.subscribe(job_id)
    waited: list[JobRecord] = []
    async with anyio.create_task_group() as tg:

        async def forward() -> None:
            async with events:
                async for seq, event in events:
                    if ctx is None:
                        continue
                    text = str(event.data.get("text") or event.data.get("name") or event.data.get("message") or "")
                    message = f"{event.type}: {text[:200]}" if text else event.type
                    try:
                        await ctx.report_progress(seq + 1, None, message)
                    except Exception:  # a client that went away must not fail the job
                        return

        tg.start_soon(forward)
        waited.append(rec := await engine.wait_one(job_id, timeout))
        if not rec.is_final:
            # Handing back a still-running job: stop forwarding; a finished job's stream closes itself.
            tg.cancel_scope.cancel()
    return waited[0]


async def run_job(
    engine: Engine, submit: Callable[[], Awaitable[str]], mode: str, ctx: Context[Any, Any] | None
) -> CallToolResult:
    """Submit, then wait as the mode says; a caller that goes away during a sync/auto wait cancels its job."""
    job_id = await submit()
    waited = await wait_for_mode(engine, job_id, mode, ctx)
    return envelope_result(engine.envelope(job_id, waited))


async def wait_for_mode(engine: Engine, job_id: str, mode: str, ctx: Context[Any, Any] | None) -> JobRecord | None:
    """Wait for a submitted job as `mode` says (auto: up to the auto threshold; sync: to the end; async: not); its
    record as the wait left it (None: not waited on)."""
    if mode == "async":
        return None
    # auto: hand the job back well before this client's own tool timeout (relay.clients.timeouts).
    limit = auto_threshold_for(engine.settings, ctx) if mode == "auto" else float("inf")
    try:
        return await wait_with_progress(engine, job_id, limit, ctx)
    except anyio.get_cancelled_exc_class():
        # A user interrupt stops the work; a client whose own timeout ran out only stopped waiting,
        # so the job runs on and its result stays readable (job_list, job_result).
        if not cancelled_by_client_timeout(ctx):
            with anyio.CancelScope(shield=True):
                await engine.cancel(job_id)
        raise
