"""What the compat profiles share: a seed's call as a relay job, waiting on it, and the seed's view of it.

Every profile tool that delegates submits a `JobRequest` to the engine, so each call is a durable job
(listed by `job_list`, readable after a restart). What the seed's own tools need beyond the request
(which tool started the job, the seed's task name, its session id) is kept next to the job's files in
`compat.json`, written once when the job is submitted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.events import Event
from relay.jobs.engine import Engine, JobRequest
from relay.server.results import clip, json_result, wait_for_mode
from relay.server.toolsets._registry import ToolRegistry
from relay.store import JobRecord

ORIGIN_FILE = "compat.json"
# How many recent jobs a profile's list tools look through for the ones it started.
SCAN_LIMIT = 2000
# Read at most this much of a job's final text when a seed asks for "no limit".
FULL_OUTPUT_CHARS = 50_000_000
# Longest a CLI's own quick answer (its --help) may take.
CLI_QUERY_TIMEOUT_S = 30.0
# Seed job statuses: relay's timed_out and interrupted are the seeds' "failed".
SEED_STATUSES: dict[str, tuple[str, ...]] = {
    "queued": ("queued",),
    "running": ("running",),
    "completed": ("completed",),
    "failed": ("failed", "timed_out", "interrupted"),
    "cancelled": ("cancelled",),
}


@dataclass(frozen=True)
class Origin:
    """What a profile remembers about a job it started: its profile, its tool and the seed's own fields."""

    profile: str
    tool: str
    fields: dict[str, Any]


async def start(engine: Engine, req: JobRequest, *, profile: str, tool: str, **fields: Any) -> str:
    """Submit the job (asking the person when it is above the grant) and record which profile tool started it."""
    job_id = await engine.submit_confirmed(req)
    remember(engine, job_id, profile=profile, tool=tool, **fields)
    return job_id


def remember(engine: Engine, job_id: str, *, profile: str, tool: str, **fields: Any) -> None:
    """Record which profile tool started a job submitted some other way (e.g. an ask)."""
    path = engine.files(job_id).dir / ORIGIN_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"profile": profile, "tool": tool, "fields": fields}), encoding="utf-8")
    os.replace(tmp, path)


def origin(engine: Engine, job_id: str) -> Origin | None:
    """The profile and tool that started a job (None for a job started some other way)."""
    try:
        data = json.loads((engine.files(job_id).dir / ORIGIN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    fields: Any = data.get("fields")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return Origin(
        profile=str(data.get("profile", "")),  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        tool=str(data.get("tool", "")),  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        fields=fields if isinstance(fields, dict) else {},  # pyright: ignore[reportUnknownArgumentType]
    )


def profile_jobs(
    engine: Engine,
    profile: str,
    *,
    statuses: Iterable[str] = (),
    tools: Iterable[str] = (),
    agent: str | None = None,
    since: float | None = None,
    limit: int = 20,
) -> list[tuple[JobRecord, Origin]]:
    """The newest jobs a profile started (optionally only these relay statuses / tools), newest first."""
    wanted_tools = set(tools)
    found: list[tuple[JobRecord, Origin]] = []
    for rec in engine.list(statuses=tuple(statuses), agent=agent, since=since, limit=SCAN_LIMIT):
        org = origin(engine, rec.id)
        if org is None or org.profile != profile or (wanted_tools and org.tool not in wanted_tools):
            continue
        found.append((rec, org))
        if len(found) >= limit:
            break
    return found


def find_job(engine: Engine, job_id: str) -> JobRecord | None:
    """The job with this id (or unique prefix), or None when there is none."""
    try:
        return engine.get(job_id)
    except RelayError:
        return None


async def wait_sync(
    engine: Engine,
    job_id: str,
    ctx: Context[Any, Any] | None,
    *,
    keepalive_s: float | None = None,
    keepalive_message: str = "still running",
) -> JobRecord:
    """Wait for the job to end, forwarding its events as progress (and a keepalive every `keepalive_s`).

    A caller that goes away cancels its job, as relay's own sync mode does.
    """
    if keepalive_s is None or ctx is None:
        await wait_for_mode(engine, job_id, "sync", ctx)
        return engine.get(job_id)
    async with anyio.create_task_group() as tg:

        async def keepalive() -> None:
            beats = 0
            while True:
                await anyio.sleep(keepalive_s)
                beats += 1
                try:
                    await ctx.report_progress(beats, None, keepalive_message)
                except Exception:  # a client that went away must not fail the job
                    return

        tg.start_soon(keepalive)
        await wait_for_mode(engine, job_id, "sync", ctx)
        tg.cancel_scope.cancel()
    return engine.get(job_id)


def output_text(engine: Engine, job_id: str, max_chars: int | None = None) -> str:
    """The job's final text, whole or cut to `max_chars` (None or 0: whole)."""
    limit = max_chars if max_chars else FULL_OUTPUT_CHARS
    page = engine.read_output(job_id, "final", 0, limit)
    return str(page["text"])


def stream_events(engine: Engine, job_id: str, limit: int = 1000) -> list[dict[str, Any]]:
    """The job's normalized events, as `{type, data}` objects."""
    return [event_dict(ev) for _, _, ev in engine.events(job_id, -1, limit)]


def event_dict(event: Event) -> dict[str, Any]:
    return {"type": event.type, "data": dict(event.data)}


def seed_status(status: str) -> str:
    """A relay job status in the seeds' vocabulary (queued, running, completed, failed, cancelled)."""
    for seed, mine in SEED_STATUSES.items():
        if status in mine:
            return seed
    return status


def relay_statuses(seed: str | None) -> tuple[str, ...]:
    """The relay statuses a seed's status filter means (none: all)."""
    return SEED_STATUSES.get(seed, (seed,)) if seed else ()


def iso(ts: float | None) -> str | None:
    """A unix time as the seeds print it: ISO 8601 in UTC with microseconds and a Z."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_ms(ts: float | None) -> str | None:
    """A unix time as JavaScript's toISOString prints it (milliseconds)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(ts * 1000) % 1000:03d}Z"


def duration_ms(rec: JobRecord) -> int | None:
    if rec.started_at is None or rec.finished_at is None:
        return None
    return int((rec.finished_at - rec.started_at) * 1000)


def error_message(rec: JobRecord) -> str:
    """Why a job did not complete, in one line (the agent's error, or its status)."""
    err = rec.error or {}
    message = str(err.get("message") or "").strip()
    return message or f"job {rec.status}"


def timed_out(rec: JobRecord) -> bool:
    return rec.status == "timed_out"


def idle_stopped(rec: JobRecord) -> bool:
    """The job was stopped by its idle limit (no output for that long), not by its wall-clock limit."""
    return (rec.stop_reason or "").endswith(":idle")


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def env_list(environ: dict[str, str] | Any, name: str, fallback: str) -> list[str]:
    """A comma-separated list from the environment (blank entries dropped), or the fallback list."""
    raw = str(environ.get(name) or fallback)
    return [item.strip() for item in raw.split(",") if item.strip()]


def blank(value: str | None) -> bool:
    return value is None or not value.strip()


def ms_to_s(ms: float | None) -> float | None:
    """Milliseconds from a seed's timeout as relay's seconds (None stays None)."""
    return None if ms is None else ms / 1000.0


def cancel_shape(previous: str, new: str, job_id: str, message: str) -> dict[str, Any]:
    return {"job_id": job_id, "previous_status": previous, "new_status": new, "message": message}


async def cancel(engine: Engine, rec: JobRecord) -> JobRecord:
    """Cancel a running or queued job (killing its process group); a final job is returned as it is."""
    with contextlib.suppress(RelayError):
        return await engine.cancel(rec.id)
    return engine.get(rec.id)


async def cancel_as_seed(
    engine: Engine, rec: JobRecord, texts: Mapping[str, str], refuse: Callable[[str, str], CallToolResult]
) -> CallToolResult:
    """The seeds' cancel tool: an already cancelled job says so, an ended one is refused, any other is cancelled.

    `texts` holds the profile's already_cancelled / cannot_cancel / cancelled messages; `refuse(message,
    previous_status)` builds the profile's own error for a job that already ended.
    """
    previous = seed_status(rec.status)
    if previous == "cancelled":
        return json_result(cancel_shape(previous, "cancelled", rec.id, texts["already_cancelled"]))
    if rec.is_final:
        return refuse(texts["cannot_cancel"].format(status=previous), previous)
    done = await cancel(engine, rec)
    return json_result(cancel_shape(previous, seed_status(done.status), done.id, texts["cancelled"]))


def seed_required(reg: ToolRegistry, tool: str, *names: str) -> None:
    """Publish `names` as required strings although the function takes them as optional.

    The seed's own message for a missing value (not the generic validation error) then comes
    from the tool, which sees the missing value as None.
    """
    schema = reg.tools[tool].input_schema
    props: dict[str, Any] = schema.get("properties", {})
    for name in names:
        spec: dict[str, Any] = props[name]
        spec["type"] = "string"
        spec.pop("default", None)
        if isinstance(spec.get("enum"), list):
            spec["enum"] = [v for v in spec["enum"] if v is not None]
    schema["required"] = [*schema.get("required", []), *[n for n in names if n not in schema.get("required", [])]]


def seed_default(reg: ToolRegistry, tool: str, name: str, value: str) -> None:
    """Publish `value` as the default of string argument `name` although the function defaults it to None.

    The tool then tells a value the caller left out (None: e.g. a resumed session keeps its own model)
    from the seed's default.
    """
    spec: dict[str, Any] = reg.tools[tool].input_schema["properties"][name]
    kind = spec.get("type")
    spec["type"] = "string" if isinstance(kind, list) else kind or "string"
    spec["default"] = value
    if isinstance(spec.get("enum"), list):
        spec["enum"] = [v for v in spec["enum"] if v is not None]


async def cli_output(settings: Settings, agent: str, args: list[str]) -> str:
    """What the agent's CLI prints for `args` (e.g. its help): a quick local query, not a job."""
    cfg = settings.agent(agent)
    command = shutil.which(cfg.command or agent, path=settings.environ.get("PATH"))
    if command is None:
        raise RelayError(
            ErrorCode.AGENT_NOT_INSTALLED,
            f"{agent} is not installed ({cfg.command or agent!r} not found)",
            f"install the {agent} CLI, or set agents.{agent}.command in config.toml",
        )
    env = {**settings.environ, **cfg.env}
    with anyio.fail_after(CLI_QUERY_TIMEOUT_S):
        done = await anyio.run_process(
            [command, *args], stdin=subprocess.DEVNULL, env=env, cwd=str(settings.home), check=False
        )
    out, err = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        raise RelayError(
            ErrorCode.AGENT_FAILED,
            f"`{agent} {' '.join(args)}` exited with {done.returncode}: {(err or out).strip()[:500]}",
            f"check that {command} is the {agent} CLI",
        )
    return out or err


def serde_unknown_field(tool: str, unknown: list[str], valid: list[str]) -> RelayError:
    """Unknown arguments as the Rust originals (serde) word them: "unknown field `x`, expected one of ..."."""
    expected = ", ".join(f"`{name}`" for name in valid)
    return RelayError(
        ErrorCode.INVALID_ARGUMENT,
        f"Invalid parameters: unknown field `{unknown[0]}`, expected one of {expected}",
        f"{tool} takes: {', '.join(valid)}",
    )


def words_error(err: RelayError) -> CallToolResult:
    """The error shape of seed 000's CLI wrappers (claude-code-mcp, gemini-mcp, codex-mcp): words, not an object.

    The text is the message, then relay's hint on its own line; relay's `{"error": {code, message, hint}}`
    rides along as structured content, for programs.
    """
    message, hint = clip(err.message), clip(err.hint)
    words = f"{message}\nHint: {hint}" if hint else message
    return CallToolResult(
        content=[TextContent(type="text", text=words)],
        structured_content={"error": {"code": err.code.value, "message": message, "hint": hint}},
        is_error=True,
    )
