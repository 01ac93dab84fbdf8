"""A job as MCP resources: its envelope, transcript, log and diff under `relay://jobs/{job_id}`, followed on both eras.

- `resources/templates/list` names the four URIs; `resources/list` lists those of the caller's newest jobs
  (`LISTED_JOBS`; the engine's principal-filtered queries, so a `user` token lists only its own).
- `resources/read` returns the content, the first `READ_LIMIT_CHARS` characters of it with a note naming the
  `job_result` call that pages the rest. Another principal's job answers exactly as an unknown URI does.
- A change is pushed as `notifications/resources/updated`: on the 2025 era to a session that sent
  `resources/subscribe`, on the 2026-07-28 era on a `subscriptions/listen` stream that named the URI. relay follows
  a subscribed job (`Engine.subscribe`) while it runs in this process: when its output grows (at most one update
  per `UPDATE_INTERVAL_S`) and when it ends.

This module is the MCP face only: every read and every check of who may see what is a call into the engine.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import ListenHandler, ResourceUpdated, SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    BlobResourceContents,
    EmptyResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    TextResourceContents,
    UnsubscribeRequestParams,
)

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.jobs.workspace import owner_of
from relay.store import JobRecord

logger = logging.getLogger(__name__)

SCHEME = "relay://jobs/"
# The parts of a job: URI suffix -> (job_result view, MIME type, what it holds). "" is the envelope itself.
# `log` is the agent CLI's stderr (redacted as job_result's stderr view); its event stream is job_result view='events'.
PARTS: dict[str, tuple[str, str, str]] = {
    "": ("envelope", "application/json", "the job's envelope (status, output, cost, workspace), as job_status gives"),
    "transcript": ("transcript", "text/plain", "the job's transcript: what the agent said and did, as it happens"),
    "log": ("stderr", "text/plain", "the agent CLI's stderr (its log), redacted"),
    "diff": ("diff", "text/x-diff", "a worktree job's branch against its base, once the job has ended"),
}
# How many of the caller's newest jobs resources/list shows (each with its parts).
LISTED_JOBS = 20
# Characters a read returns; the rest pages through job_result.
READ_LIMIT_CHARS = 100_000
# A running job's updates come at most this often (an agent can print many lines a second).
UPDATE_INTERVAL_S = 0.5
# Resource subscriptions held at once for 2025-era sessions, and URIs one listen stream may name.
MAX_SUBSCRIPTIONS = 4096
MAX_LISTEN_URIS = 256


def uri_of(job_id: str, part: str = "") -> str:
    return f"{SCHEME}{job_id}" + (f"/{part}" if part else "")


def parse(uri: str) -> tuple[str, str] | None:
    """(job id, part) of a `relay://jobs/...` URI, or None when it names none."""
    if not uri.startswith(SCHEME):
        return None
    job_id, _, part = uri.removeprefix(SCHEME).partition("/")
    return (job_id, part) if job_id and part in PARTS else None


def unknown(uri: str) -> MCPError:
    """The one answer to a URI that names nothing the caller may see (unknown, another's, or no such part)."""
    return MCPError(INVALID_PARAMS, f"Unknown resource: {uri[:200]}", {"uri": uri[:200]})


class JobResources:
    """relay's resources: answers the resources/* requests and pushes a followed job's updates to both eras."""

    def __init__(self, engine: Callable[[], Engine], bus: SubscriptionBus) -> None:
        self._engine = engine
        self._bus = bus
        self._group: TaskGroup | None = None
        self._followed: set[str] = set()  # jobs being followed now
        self._sessions: dict[str, list[ServerSession]] = {}  # 2025-era subscriptions: uri -> sessions

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[JobResources]:
        """While the server runs: the task group in which followed jobs are watched."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield self
            finally:
                self._group = None
                group.cancel_scope.cancel()

    def install(self, lowlevel: Any) -> None:
        """Serve resources/* and subscriptions/listen on the SDK's kernel (replacing MCPServer's defaults)."""
        lowlevel.add_request_handler("resources/list", PaginatedRequestParams, self._list)
        lowlevel.add_request_handler("resources/templates/list", PaginatedRequestParams, self._templates)
        lowlevel.add_request_handler("resources/read", ReadResourceRequestParams, self._read)
        lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, self._subscribe)
        lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, self._unsubscribe)
        lowlevel.add_request_handler(
            "subscriptions/listen", SubscriptionsListenRequestParams, _OwnUrisOnly(self, ListenHandler(self._bus))
        )

    # listing and reading --------------------------------------------------------------------

    async def _templates(self, _: ServerRequestContext[Any, Any], __: PaginatedRequestParams) -> Any:
        templates = [
            ResourceTemplate(
                uri_template=uri_of("{job_id}", part), name=f"job {view}", description=what, mime_type=mime
            )
            for part, (view, mime, what) in PARTS.items()
        ]
        return ListResourceTemplatesResult(resource_templates=templates, ttl_ms=0, cache_scope="private")

    async def _list(self, _: ServerRequestContext[Any, Any], __: PaginatedRequestParams) -> Any:
        listed = [r for rec in self._engine().list(limit=LISTED_JOBS) for r in _resources(rec)]
        return ListResourcesResult(resources=listed, ttl_ms=0, cache_scope="private")

    async def _read(self, _: ServerRequestContext[Any, Any], params: ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        rec, part = self._visible(uri)
        view, mime, _what = PARTS[part]
        engine = self._engine()
        try:
            if view == "envelope":
                text, meta = json.dumps(engine.envelope(rec.id), indent=1, default=str), {"relay/status": rec.status}
            else:  # the diff runs git (and may fetch a branch): off the event loop, as job_result does
                page = await anyio.to_thread.run_sync(engine.read_output, rec.id, view, 0, READ_LIMIT_CHARS)
                text, meta = _bounded(rec.id, view, page)
        except RelayError as err:
            if err.code == ErrorCode.JOB_NOT_FOUND:
                raise unknown(uri) from None
            raise _failed(err, uri) from None
        contents: list[TextResourceContents | BlobResourceContents] = [
            TextResourceContents(uri=uri, text=text, mime_type=mime, _meta=meta)
        ]
        return ReadResourceResult(contents=contents, ttl_ms=0, cache_scope="private")

    def _visible(self, uri: str) -> tuple[JobRecord, str]:
        """The caller's job a URI names and its part; else the unknown-resource error (another's job included)."""
        parsed = parse(uri)
        if parsed is None:
            raise unknown(uri)
        job_id, part = parsed
        try:
            rec = self._engine().get(job_id)
        except RelayError as err:
            if err.code in (ErrorCode.JOB_NOT_FOUND, ErrorCode.INVALID_ARGUMENT):  # none, another's, not an id
                raise unknown(uri) from None
            raise _failed(err, uri) from None
        if rec.id != job_id or (part == "diff" and owner_of(rec.request) is None):  # full ids only; diffs of worktrees
            raise unknown(uri)
        return rec, part

    # following --------------------------------------------------------------------------------

    def follow(self, uri: str) -> bool:
        """Watch the caller's job `uri` names while it runs here; False when it has ended (nothing more will change).
        The unknown-resource error when `uri` names nothing the caller may see."""
        rec, _ = self._visible(uri)
        if rec.is_final or self._group is None:
            return False
        if rec.id not in self._followed:
            self._followed.add(rec.id)
            self._group.start_soon(self._watch, rec.id)
        return True

    async def _watch(self, job_id: str) -> None:
        """Announce the job's parts as updated when its output grows (coalesced) and once when it ends."""
        try:
            stream = self._engine().subscribe(job_id)  # closed at once when the job is not live in this process
            async with stream:
                ended = False
                while not ended:
                    try:
                        await stream.receive()
                    except anyio.EndOfStream:
                        break
                    while True:  # everything already waiting is one update
                        try:
                            stream.receive_nowait()
                        except anyio.WouldBlock:
                            break
                        except anyio.EndOfStream:
                            ended = True
                            break
                    await self._announce(job_id)
                    if not ended:
                        await anyio.sleep(UPDATE_INTERVAL_S)
            await self._announce(job_id)  # it ended: its status changed
        except Exception:  # one job's watch must not end the server's task group
            logger.exception("following job %s ended early", job_id)
        finally:
            self._followed.discard(job_id)
            for part in PARTS:  # nothing more will change: its 2025-era subscriptions end here
                self._sessions.pop(uri_of(job_id, part), None)

    async def _announce(self, job_id: str) -> None:
        for part in PARTS:
            uri = uri_of(job_id, part)
            await self._bus.publish(ResourceUpdated(uri=uri))  # 2026-07-28: listen streams naming the uri
            for session in list(self._sessions.get(uri, ())):  # 2025: sessions that subscribed to it
                try:
                    with anyio.fail_after(5):
                        await session.send_resource_updated(uri)
                except Exception:  # a session gone (closed, or stuck): it is followed no more
                    self._drop(uri, session)

    def _drop(self, uri: str, session: ServerSession) -> None:
        held = self._sessions.get(uri, [])
        if session in held:
            held.remove(session)
        if not held:
            self._sessions.pop(uri, None)

    async def _subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        """Hold the session's subscription while the job runs (a job that has ended will not change: none held)."""
        uri = str(params.uri)
        held = self._sessions.get(uri, [])
        if ctx.session in held:
            return EmptyResult()
        if sum(len(s) for s in self._sessions.values()) >= MAX_SUBSCRIPTIONS:
            raise MCPError(INTERNAL_ERROR, "Too many resource subscriptions held; unsubscribe from some first")
        if self.follow(uri):
            self._sessions.setdefault(uri, []).append(ctx.session)
        return EmptyResult()

    async def _unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        self._drop(str(params.uri), ctx.session)
        return EmptyResult()


class _OwnUrisOnly:
    """`subscriptions/listen` keeping only the URIs of jobs the caller may see (another's drops as an unknown one
    does, so the ack tells nothing of it), and following those jobs; the SDK's handler serves the stream."""

    def __init__(self, resources: JobResources, inner: ListenHandler) -> None:
        self._resources = resources
        self._inner = inner

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        wanted = params.notifications.resource_subscriptions or []
        kept: list[str] = []
        for uri in wanted[:MAX_LISTEN_URIS]:
            try:
                self._resources.follow(uri)
            except MCPError:
                continue
            kept.append(uri)
        notifications = params.notifications.model_copy(update={"resource_subscriptions": kept or None})
        return await self._inner(ctx, params.model_copy(update={"notifications": notifications}))


def _failed(err: RelayError, uri: str) -> MCPError:
    return MCPError(INTERNAL_ERROR, f"{err.code}: {err.message} ({err.hint})", {"uri": uri[:200]})


def _resources(rec: JobRecord) -> list[Resource]:
    """The parts of one job as listed: the envelope, transcript and log, and the diff of a worktree job."""
    parts = [p for p in PARTS if p != "diff" or owner_of(rec.request) is not None]
    return [
        Resource(
            uri=uri_of(rec.id, part),
            name=f"job {rec.id}" + (f" {part}" if part else ""),
            title=f"{rec.agent} job {rec.id[:8]} ({rec.status})" + (f": {part}" if part else ""),
            description=PARTS[part][2],
            mime_type=PARTS[part][1],
        )
        for part in parts
    ]


def _bounded(job_id: str, view: str, page: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A read's text (with a note naming the job_result call for the rest when there is more) and its _meta."""
    text: str = page["text"]
    rest = page["next_offset"]
    if rest is not None:
        text += (
            f"\n\n[relay: characters 0-{rest} of {page['total_chars']} shown; read on with "
            f"job_result(job_id='{job_id}', view='{view}', offset={rest})]"
        )
    meta = {
        "relay/status": page["status"],
        "relay/total_chars": page["total_chars"],
        "relay/next_offset": rest,
        "relay/complete": page["complete"],
    }
    return text, meta
