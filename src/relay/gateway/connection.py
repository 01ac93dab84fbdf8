"""One downstream MCP server, reached with the official SDK client: started on first use, kept open, shared.

Each connection has an owner task (in the gateway's `TaskHost`) that enters `Client(...)`, lists
the tools and then holds the session open until relay closes it or the server goes away. Every
caller shares that one session (one process per stdio server). A server that dies is started
again on the next use (or at once after a call it broke); one that keeps failing waits longer
before each start (`DEFAULT_RESTART_BACKOFF_S`, doubling). Lines on its stdout that are not
JSON-RPC are skipped (`_stream.py`), so no output of the server can wedge the session.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    ReadResourceResult,
    Tool,
    ToolListChangedNotification,
)

from relay.errors import ErrorCode, RelayError
from relay.gateway._host import TaskHost
from relay.gateway._http import http_client
from relay.gateway._spill import Spilled, Spiller
from relay.gateway._stdio import stdio_transport
from relay.gateway._stream import LOST_ANSWER, watched
from relay.gateway.bounded import DEFAULT_RESULT_CAP_CHARS
from relay.gateway.config import ServerConfig
from relay.gateway.websocket import WebSocketError, websocket_client
from relay.secrets import redact

# Starting a server includes `npx -y` fetching a package on first use: be generous.
DEFAULT_CONNECT_TIMEOUT_S = 60.0
# One downstream tool call; the seed's message is "Tool call timed out after N seconds".
DEFAULT_CALL_TIMEOUT_S = 60.0
# How much of a failed server's stderr an error carries.
STDERR_TAIL_CHARS = 1500
# Pages of tools/list followed before giving up on a server that never stops paginating.
MAX_TOOL_PAGES = 50
# JSON-RPC error code the SDK reports when the peer went away.
CONNECTION_CLOSED = -32000
# A server that failed (did not start, or died) again right after a restart waits this long before the
# next start, doubling with each further failure up to the maximum; a call that goes through resets it.
DEFAULT_RESTART_BACKOFF_S = 1.0
DEFAULT_RESTART_BACKOFF_MAX_S = 60.0

STATES = ("configured", "connecting", "connected", "failed", "closed")


class _Lost(Exception):
    """The session ended under a request (the server died or closed the connection)."""


@dataclass
class _Attempt:
    done: anyio.Event
    error: RelayError | None = None


@dataclass
class _Session:
    """One run of the server: its client once open, and whether its stream has ended."""

    stop: anyio.Event
    done: anyio.Event
    client: Client | None = None
    eof: bool = False
    # The owner task's scope: cancelled when the session is closed while the server is still starting.
    scope: anyio.CancelScope | None = None

    def saw_eof(self) -> None:
        self.eof = True


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType, reportUnknownArgumentType]
    return [exc]


def _describe(exc: BaseException) -> str:
    leaves = _leaves(exc)
    leaf = next((e for e in leaves if not isinstance(e, anyio.get_cancelled_exc_class())), leaves[0])
    if isinstance(leaf, MCPError):
        return leaf.error.message
    if isinstance(leaf, httpx2.HTTPStatusError):
        return f"HTTP {leaf.response.status_code} from {leaf.request.url}"
    if isinstance(leaf, WebSocketError):
        return str(leaf)
    return f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__


def _is_lost(exc: BaseException) -> bool:
    for leaf in _leaves(exc):
        if isinstance(leaf, MCPError) and leaf.error.code == CONNECTION_CLOSED:
            return True
        if isinstance(leaf, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
            return True
    return False


class Connection:
    """The live link to one downstream server: state, last error, cached tools, and calls."""

    def __init__(
        self,
        config: ServerConfig,
        host: TaskHost,
        log_dir: Path,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        on_tools: Callable[[Connection, list[Tool]], None] | None = None,
        on_state: Callable[[Connection], None] | None = None,
        backoff_s: tuple[float, float] = (DEFAULT_RESTART_BACKOFF_S, DEFAULT_RESTART_BACKOFF_MAX_S),
        result_cap_chars: int = DEFAULT_RESULT_CAP_CHARS,
    ) -> None:
        self.config = config
        self.state = "configured"
        self.last_error: str | None = None
        self.tools: list[Tool] = []
        self.starts = 0
        self.connected_at: float | None = None
        self.failed_at: float | None = None
        # Failures (starts that failed, deaths) since the last call that went through, and the earliest next start.
        self.streak = 0
        self.retry_at = 0.0
        # Lines from the server that were not JSON-RPC (undecodable bytes, noise), skipped; the last one shown.
        self.skipped_lines = 0
        self.last_skipped: str | None = None
        self._backoff_s = backoff_s
        self._on_state = on_state
        self._host = host
        self._log_path = log_dir / f"{config.name}.stderr.log"
        # An answer longer than the cap is spilled to a file (one folder per process and server), whatever the transport.
        self.spiller = Spiller(log_dir / "spill" / f"{os.getpid()}-{config.name}", result_cap_chars)
        self._connect_timeout_s = connect_timeout_s
        self._on_tools = on_tools
        self._session: _Session | None = None
        self._attempt: _Attempt | None = None
        self._tools_stale = False
        self._by_name: dict[str, Tool] = {}

    # lifecycle ----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        session = self._session
        return session is not None and session.client is not None and not session.eof and self.state == "connected"

    async def ensure(self) -> Client:
        """The open session, starting the server first when needed; a start failure is an UPSTREAM_ERROR."""
        session = self._session
        if self.alive and session is not None and session.client is not None:
            if self._tools_stale:
                await self.refresh_tools()
            return session.client
        attempt = await self.start_in_background()
        await attempt.done.wait()
        if attempt.error is not None:
            raise attempt.error
        session = self._session
        assert session is not None and session.client is not None
        return session.client

    async def start_in_background(self) -> _Attempt:
        """Begin connecting without waiting (or join the attempt under way)."""
        if self._attempt is not None and not self._attempt.done.is_set():
            return self._attempt
        attempt = _Attempt(anyio.Event())
        if self.alive:
            attempt.done.set()
            return attempt
        wait = self.retry_at - anyio.current_time()
        if wait > 0:
            attempt.error = RelayError(
                ErrorCode.UPSTREAM_ERROR,
                f"{self.config.name} failed {self.streak} times in a row (last: {self.last_error});"
                f" relay starts it again in {wait:.1f} seconds",
                "call again after that; add the server again (add_mcp_server or relay mcp add) once it is fixed",
            )
            attempt.done.set()
            return attempt
        # Everything up to the first await happens at once, so concurrent callers share this attempt.
        self._attempt = attempt
        self.state = "connecting"
        self.starts += 1
        self._note()
        old, session = self._session, _Session(stop=anyio.Event(), done=anyio.Event())
        self._session = session
        if old is not None:
            old.stop.set()
            await old.done.wait()
        await self._host.start_soon(self._own, attempt, session)
        return attempt

    async def _own(self, attempt: _Attempt, session: _Session) -> None:
        """Owner task: open the session, publish it, hold it until told to stop or the server goes away."""
        # One scope around the whole session (the client's own scopes must nest inside it); its
        # deadline bounds the start and is lifted once the server has answered.
        scope = anyio.CancelScope(deadline=anyio.current_time() + self._connect_timeout_s)
        session.scope = scope
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    try:
                        session.client = await self._open(stack, session)
                        await self._list_tools(session.client)
                    except Exception as exc:
                        session.client = None
                        self._failed(attempt, self._start_error(exc))
                        return
                    scope.deadline = math.inf
                    self.state = "connected"
                    self.last_error = None
                    self.connected_at = anyio.current_time()
                    self._note()
                    attempt.done.set()
                    await session.stop.wait()
                    session.client = None
            if scope.cancelled_caught and not attempt.done.is_set():
                self._failed(attempt, self._start_error(TimeoutError()))
        except Exception as exc:  # an error while shutting the session down must not reach the host
            if self._session is session and self.state == "connected":
                self.state = "failed"
                self.last_error = f"closing failed: {_describe(exc)}"
        finally:
            session.client = None
            if not attempt.done.is_set():  # cancelled with relay
                self._failed(attempt, RelayError(ErrorCode.UPSTREAM_ERROR, f"{self.config.name}: closed", ""))
            session.done.set()

    def _failed(self, attempt: _Attempt, error: RelayError) -> None:
        attempt.error = error
        self.state = "failed"
        self.last_error = error.message
        self._count_failure()
        attempt.done.set()

    def _count_failure(self) -> None:
        """One more failure in a row: the next start waits 0, then backoff, 2 x backoff, ... up to the maximum."""
        self.failed_at = now = anyio.current_time()
        self.streak += 1
        first, most = self._backoff_s
        self.retry_at = now + (0.0 if self.streak <= 1 else min(first * 2 ** (self.streak - 2), most))
        self._note()

    def _went_through(self) -> None:
        if self.streak:
            self.streak, self.retry_at = 0, 0.0
            self._note()

    def _skipped(self, shown: str) -> None:
        self.skipped_lines += 1
        self.last_skipped = shown
        self._note()

    def _note(self) -> None:
        """Tell the gateway the state changed (it records it for `relay mcp list`); never fails the caller."""
        if self._on_state is not None:
            with contextlib.suppress(Exception):
                self._on_state(self)

    async def _open(self, stack: AsyncExitStack, session: _Session) -> Client:
        cfg = self.config
        if cfg.transport == "stdio":
            assert cfg.command is not None
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            errlog: TextIO = stack.enter_context(self._log_path.open("w", encoding="utf-8"))
            # Undecodable bytes become U+FFFD: a broken line is then skipped as not JSON-RPC instead of
            # stopping the reader (strict decoding would stall every later answer until the server exits).
            params = StdioServerParameters(
                command=cfg.command,
                args=list(cfg.args),
                env=dict(cfg.env) or None,
                cwd=cfg.cwd or None,
                encoding_error_handler="replace",
            )
            posix = sys.platform != "win32"
            transport = stdio_transport(params, errlog, self.spiller) if posix else stdio_client(params, errlog=errlog)
            return await self._enter(stack, transport, session)
        if cfg.transport == "http":
            return await self._open_http(stack, session)
        assert cfg.transport == "websocket" and cfg.url is not None
        # No handshake timeout of its own: the start's deadline (connect_timeout_s) bounds it.
        transport = websocket_client(cfg.url, dict(cfg.headers) or None, open_timeout_s=None, spiller=self.spiller)
        return await self._enter(stack, transport, session)

    async def _open_http(self, stack: AsyncExitStack, session: _Session) -> Client:
        """Streamable HTTP first; a server that refuses it is tried over the older HTTP+SSE transport."""
        cfg = self.config
        assert cfg.url is not None
        headers = dict(cfg.headers)
        try:
            async with AsyncExitStack() as attempt:
                http = await attempt.enter_async_context(http_client(self.spiller, headers or None))
                # No limit of the SDK's on an event: an over-cap one reaches it already cut (`_http.py`).
                transport = streamable_http_client(cfg.url, http_client=http, max_sse_event_size=None)
                client = await self._enter(attempt, transport, session)
                stack.push_async_exit(attempt.pop_all())
                return client
        except TimeoutError:
            raise
        except Exception as first:
            if isinstance(first, RelayError):
                raise
            for url in _sse_urls(cfg.url):
                with contextlib.suppress(Exception):
                    async with AsyncExitStack() as attempt:
                        old = sse_client(url, headers=headers or None, httpx_client_factory=self._http_client)
                        client = await self._enter(attempt, old, session)
                        stack.push_async_exit(attempt.pop_all())
                        return client
            raise

    def _http_client(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return http_client(self.spiller, headers, timeout, auth)

    async def _enter(self, stack: AsyncExitStack, transport: Any, session: _Session) -> Client:
        # The handshake era (2025-11-25) is what published servers speak, and its list_changed
        # notifications arrive on the open connection.
        client = Client(
            watched(transport, session.saw_eof, self._skipped),
            mode="legacy",
            cache=None,
            message_handler=self._on_message,
        )
        return await stack.enter_async_context(client)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._tools_stale = True

    def _start_error(self, exc: BaseException) -> RelayError:
        cfg = self.config
        if isinstance(exc, RelayError):
            return exc
        tail = self.stderr_tail()
        where = f"; its stderr ends with: {tail}" if tail else ""
        if isinstance(exc, TimeoutError) or any(isinstance(e, TimeoutError) for e in _leaves(exc)):
            message = f"{cfg.name} did not finish starting within {self._connect_timeout_s:g} seconds{where}"
            hint = (
                "check the server's command and that it speaks MCP on stdout; relay keeps its other servers"
                if cfg.transport == "stdio"
                else f"check that the server at {cfg.url} speaks MCP; relay keeps its other servers"
            )
        elif any(isinstance(e, FileNotFoundError) for e in _leaves(exc)):
            message = f"{cfg.name}: command {cfg.command!r} was not found"
            hint = "install it or give its absolute path (remove_mcp_server, then add_mcp_server again)"
        elif cfg.transport != "stdio":
            message = f"{cfg.name} failed to start: {_describe(exc)}"
            hint = f"check that the server is up at {cfg.url} and that url and headers are right, then add it again"
        else:
            message = f"{cfg.name} failed to start: {_describe(exc)}{where}"
            hint = "read the server's stderr above; fix its command, env or url and add it again"
        return RelayError(ErrorCode.UPSTREAM_ERROR, redact(message, cfg.secret_values()), hint)

    def stderr_tail(self) -> str:
        if self.config.transport != "stdio":
            return ""
        try:
            with self._log_path.open("rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - STDERR_TAIL_CHARS))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return redact(text.strip(), self.config.secret_values())

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.stop.set()
            if session.client is None and session.scope is not None:
                session.scope.cancel()  # still starting (perhaps hung): nothing to close gracefully, stop waiting
            await session.done.wait()
        self.spiller.clear()
        self.state = "closed"
        self._note()

    def _lost(self, exc: BaseException) -> str:
        """Mark the session dead (the next use starts the server again); returns what happened."""
        tail = self.stderr_tail()
        detail = _describe(exc) + (f"; its stderr ends with: {tail}" if tail else "")
        self.state = "failed"
        self.last_error = f"connection lost: {detail}"
        self._count_failure()
        session = self._session
        if session is not None:
            session.eof = True
            session.stop.set()
        return detail

    # tools --------------------------------------------------------------------------------

    async def _list_tools(self, client: Client) -> None:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._tools_stale = False
        self.tools = tools
        self._by_name = {t.name: t for t in tools}
        if self._on_tools is not None:
            self._on_tools(self, tools)

    async def refresh_tools(self) -> None:
        client = self._session.client if self._session is not None else None
        if client is None:
            return
        try:
            with anyio.fail_after(self._connect_timeout_s):
                await self._list_tools(client)
        except Exception as exc:
            if _is_lost(exc):
                detail = self._lost(exc)
                raise RelayError(ErrorCode.UPSTREAM_ERROR, f"{self.config.name} died: {detail}", "try again") from None
            raise RelayError(
                ErrorCode.UPSTREAM_ERROR, f"{self.config.name}: tools/list failed: {_describe(exc)}", ""
            ) from None

    def tool(self, name: str) -> Tool | None:
        return self._by_name.get(name)

    # calls --------------------------------------------------------------------------------

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float) -> CallToolResult:
        """Call a tool; a server found dead is started again first, and a read-only call it broke is repeated."""
        client = await self.ensure()
        try:
            result = await self._request(lambda: _call(client, name, arguments), timeout_s)
            self._went_through()
            return result
        except _Lost as lost:
            detail = self._lost(lost.__cause__ or lost)
            tool = self._by_name.get(name)
            hints = tool.annotations if tool is not None else None
            repeatable = hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)
            if not repeatable:
                await self.start_in_background()
                raise RelayError(
                    ErrorCode.UPSTREAM_ERROR,
                    f"{self.config.name} died during {name} ({detail}); relay is starting it again",
                    f"the call was not repeated because {name} may have had effects; call it again if it is safe",
                ) from None
            client = await self.ensure()
            try:
                return await self._request(lambda: _call(client, name, arguments), timeout_s)
            except _Lost as again:
                raise self._died(name, again) from None

    async def read_resource(self, uri: str, timeout_s: float) -> ReadResourceResult:
        client = await self.ensure()
        try:
            return await self._request(lambda: client.read_resource(uri), timeout_s)
        except _Lost:
            client = await self.ensure()  # reading is safe to repeat
            try:
                return await self._request(lambda: client.read_resource(uri), timeout_s)
            except _Lost as again:
                raise self._died(uri, again) from None

    def claim(self, result: CallToolResult) -> Spilled | None:
        """The whole of a result this connection's transport capped as it arrived (None for a result it did not)."""
        return self.spiller.claim(result)

    def _died(self, during: str, lost: _Lost) -> RelayError:
        detail = self._lost(lost.__cause__ or lost)
        return RelayError(
            ErrorCode.UPSTREAM_ERROR,
            f"{self.config.name} died during {during} twice ({detail})",
            "the server crashes on this request; check its stderr and arguments",
        )

    async def _request(self, send: Callable[[], Any], timeout_s: float) -> Any:
        try:
            with anyio.fail_after(timeout_s):
                return await send()
        except TimeoutError:
            raise RelayError(
                ErrorCode.TIMEOUT,
                f"Tool call timed out after {timeout_s:g} seconds",
                f"{self.config.name} did not answer in time; try again, or pass a longer timeout",
            ) from None
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                raise _Lost() from exc
            if exc.error.code == LOST_ANSWER:
                raise RelayError(
                    ErrorCode.UPSTREAM_ERROR,
                    redact(f"{self.config.name}: {exc.error.message}", self.config.secret_values()),
                    "the server wrote a broken answer; relay skipped it and keeps the connection: call again",
                ) from None
            raise RelayError(
                ErrorCode.UPSTREAM_ERROR,
                redact(f"{self.config.name}: {exc.error.message}", self.config.secret_values()),
                "check the arguments against get_tool_schema",
            ) from None
        except Exception as exc:
            if _is_lost(exc):
                raise _Lost() from exc
            raise RelayError(
                ErrorCode.UPSTREAM_ERROR,
                redact(f"{self.config.name}: {_describe(exc)}", self.config.secret_values()),
                "",
            ) from None


async def _call(client: Client, name: str, arguments: dict[str, Any]) -> CallToolResult:
    """tools/call with the result passed on as the server sent it.

    A gateway forwards, it does not judge: `Client.call_tool` would turn a result that does not
    match the tool's output schema into an exception, so the request goes out one level down.
    """
    request = CallToolRequest(params=CallToolRequestParams(name=name, arguments=arguments))
    return await client.session.send_request(request, CallToolResult)


def _sse_urls(url: str) -> list[str]:
    """Where an old HTTP+SSE server may listen, given the URL the user configured."""
    urls = [url]
    base = url.rstrip("/")
    if base.endswith("/mcp"):
        urls.append(base[: -len("/mcp")] + "/sse")
    return urls
