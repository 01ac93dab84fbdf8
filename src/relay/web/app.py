"""The dashboard's routes: read-mostly pages, SSE feeds, and guarded actions (cancel, land, discard, task status)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.principal import acting_as
from relay.web import security
from relay.web.chart import color, stacked_bars
from relay.web.live import FEED_MAX_S, NOTICE_WAITERS, JobFeed, JobsFeed, WorkersFeed, parse_since
from relay.web.security import Access
from relay.web.views import (
    STATUSES,
    JobFilter,
    Sources,
    audit_view,
    costs,
    job_detail,
    job_row,
    jobs_page,
    land_from_page,
    servers_view,
    set_task_status,
    tasks_view,
    thread_view,
    threads_view,
    transcript_page,
)
from relay.web.workers import worker_fact, workers_view

HERE = Path(__file__).resolve().parent
NOT_FOUND = (ErrorCode.JOB_NOT_FOUND, ErrorCode.TASK_NOT_FOUND, ErrorCode.SESSION_NOT_FOUND, ErrorCode.SERVER_NOT_FOUND)


def _ago(ts: float | None) -> str:
    if ts is None:
        return "-"
    delta = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{int(delta // size)}{unit} ago"
    return f"{int(delta)}s ago"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    if seconds >= 60:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{seconds:.1f}s"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _public(path: str) -> bool:
    """The login form and the static files (nothing secret in them): the only paths served before a login."""
    return path == "/login" or path.startswith("/static/")


class Guard:
    """ASGI middleware: Host and Origin checks on every request and WebSocket, the login on every one but the login
    form and the static files, and each request run as the principal that logged in."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        base = scope.get("root_path", "")
        path = conn.url.path[len(base) :] or "/"
        who = security.login_of(self.access, conn)
        if not security.host_ok(self.access, conn):
            response: Response = PlainTextResponse("Invalid Host header", status_code=421)
        elif not security.origin_ok(self.access, conn):
            response = PlainTextResponse("Cross-origin request refused", status_code=403)
        elif who is not None:
            with acting_as(who):  # what the page reads and changes is this principal's doing
                await self.app(scope, receive, send)
            return
        elif _public(path) and scope["type"] == "http":
            await self.app(scope, receive, send)
            return
        elif conn.scope.get("method") == "GET" and "text/html" in conn.headers.get("accept", ""):
            target = quote(path + (f"?{conn.url.query}" if conn.url.query else ""), safe="")
            response = RedirectResponse(f"{base}/login?next={target}", status_code=303)
        else:
            response = _refusal(conn, self.access)
        if scope["type"] == "websocket":  # refused before it is accepted, whatever the reason
            await WebSocketClose(code=1008, reason="refused: log in first")(scope, receive, send)
            return
        await response(scope, receive, send)


def _refusal(conn: HTTPConnection, access: Access) -> Response:
    """401, saying why: no login, a wrong token, or a `user` token (right, but the dashboard is admin-only)."""
    auth = conn.headers.get("authorization", "")
    if auth.startswith("Bearer ") and access.is_user_token(auth[len("Bearer ") :]):
        err = RelayError(ErrorCode.AUTH_INVALID, "a user token does not open the dashboard", ADMIN_ONLY_HINT)
    elif auth:
        err = RelayError(ErrorCode.AUTH_INVALID, "that token does not open the dashboard", LOGIN_HINT)
    else:
        err = RelayError(ErrorCode.AUTH_MISSING, "log in first: the dashboard needs relay's token", LOGIN_HINT)
    if "application/json" in conn.headers.get("accept", ""):
        return JSONResponse({"error": err.to_dict()}, status_code=401)
    return PlainTextResponse(f"{err.message}: {err.hint}", status_code=401)


LOGIN_HINT = "log in on /login, or send Authorization: Bearer with an admin's token or relay's --token"
ADMIN_ONLY_HINT = (
    "the dashboard shows every principal's work, so it is admin-only: use an admin's token"
    ' ([server.tokens.NAME] role = "admin"); a user reads its own jobs through the MCP tools'
)


class Dashboard:
    """The pages and feeds over one set of sources."""

    def __init__(self, sources: Sources, access: Access, feed_max_s: float = FEED_MAX_S) -> None:
        self.sources = sources
        self.access = access
        self.feed_max_s = feed_max_s
        # The feeds' waits for a PostgreSQL store's change notices: threads of their own, not the pages'.
        self.feed_waiters = anyio.CapacityLimiter(NOTICE_WAITERS)
        self._tracker: Any | None = None
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        filters: dict[str, Any] = env.filters  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        filters.update(ago=_ago, duration=_duration, usd=_usd, when=_when)
        env_globals: dict[str, Any] = env.globals  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        env_globals["series_color"] = color

    @property
    def settings(self) -> Settings:
        return self.sources.settings

    def tracker(self) -> Any:
        if self._tracker is None:
            from relay.tracker.service import Tracker

            self._tracker = Tracker(self.settings)
        return self._tracker

    def close(self) -> None:
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None
        self.sources.close()

    # rendering ----------------------------------------------------------------------------

    def render(self, request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> Response:
        csrf = request.cookies.get(security.CSRF_COOKIE) or security.new_csrf_token()
        base = request.scope.get("root_path", "")
        full = {
            "base": base,
            "csrf": csrf,
            "needs_login": self.access.needs_login,
            "view": name.removesuffix(".html"),
            **context,
        }
        response = self.templates.TemplateResponse(request, name, full, status_code=status_code)
        if request.cookies.get(security.CSRF_COOKIE) != csrf:
            response.set_cookie(security.CSRF_COOKIE, csrf, httponly=True, samesite="strict", path=base or "/")
        return response

    def error(self, request: Request, err: RelayError) -> Response:
        status = 404 if err.code in NOT_FOUND else 400
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"error": err.to_dict()}, status_code=status)
        return self.render(request, "error.html", {"error": err}, status_code=status)

    async def _guarded(self, request: Request, fn: Callable[[], Awaitable[Response]]) -> Response:
        try:
            return await fn()
        except RelayError as err:
            return self.error(request, err)

    async def _form_csrf(self, request: Request) -> tuple[dict[str, str], bool]:
        form = await request.form()
        values = {k: str(v) for k, v in form.items()}
        return values, security.csrf_ok(request, values.get(security.CSRF_FIELD))

    async def _posted(self, request: Request, fn: Callable[[dict[str, str]], Awaitable[Response]]) -> Response:
        """An action's form: refused (403) without its CSRF token, else `fn(form)` with relay's errors as a page."""
        form, ok = await self._form_csrf(request)
        if not ok:
            return PlainTextResponse("CSRF check failed: reload the page and try again", status_code=403)
        return await self._guarded(request, lambda: fn(form))

    @staticmethod
    def _to_job(request: Request, done: dict[str, Any], job_id: str) -> Response:
        """What an action on a job answers: `done` as JSON when asked for, else back to the job's page."""
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse(done)
        base = request.scope.get("root_path", "")
        return RedirectResponse(f"{base}/jobs/{job_id}", status_code=303)

    # login --------------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        base = request.scope.get("root_path", "")
        nxt = request.query_params.get("next", "/jobs")
        shown = {"next": nxt, "failed": False, "user_token": False, "closed": self.access.closed}
        if request.method in ("GET", "HEAD"):
            return self.render(request, "login.html", shown)
        form = await request.form()
        token = str(form.get("token", ""))
        nxt = str(form.get("next", "/jobs"))
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/jobs"
        if not self.access.needs_login:
            return RedirectResponse(base + nxt, status_code=303)
        matched = self.access.matching_token(token)
        if matched is None:
            user = self.access.is_user_token(token)  # right, but the dashboard is admin-only
            return self.render(
                request,
                "login.html",
                shown | {"next": nxt, "failed": not user, "user_token": user},
                status_code=401,
            )
        response = RedirectResponse(base + nxt, status_code=303)
        response.set_cookie(
            security.SESSION_COOKIE,
            self.access.session_value(matched),
            httponly=True,
            samesite="strict",
            path=base or "/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        base = request.scope.get("root_path", "")
        _, ok = await self._form_csrf(request)
        if not ok:
            return PlainTextResponse("CSRF check failed", status_code=403)
        response = RedirectResponse(f"{base}/login", status_code=303)
        response.delete_cookie(security.SESSION_COOKIE, path=base or "/")
        return response

    # jobs ---------------------------------------------------------------------------------

    async def jobs(self, request: Request) -> Response:
        q = request.query_params
        statuses = tuple(s for s in q.getlist("status") if s in STATUSES)
        flt = JobFilter(
            statuses=statuses,
            agent=q.get("agent") or None,
            text=q.get("q") or None,
            principal=q.get("principal") or None,
            worker=q.get("worker") or None,
        )
        try:
            page = int(q.get("page", "1"))
        except ValueError:
            page = 1
        await anyio.to_thread.run_sync(self.sources.reconcile)
        data = await anyio.to_thread.run_sync(jobs_page, self.sources.engine(), self.sources.queries(), flt, page)
        if flt.worker:  # the page says whose jobs these are
            data["worker"] = await anyio.to_thread.run_sync(worker_fact, self.sources.queries(), flt.worker)
        query = "&".join(f"{k}={quote(v)}" for k, v in q.multi_items() if k != "page")
        return self.render(
            request, "jobs.html", data | {"filter": flt, "statuses": STATUSES, "query": query, "page_title": "Jobs"}
        )

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        return await self._guarded(request, lambda: self._job_page(request, job_id))

    async def _job_page(
        self, request: Request, job_id: str, extra: dict[str, Any] | None = None, status_code: int = 200
    ) -> Response:
        data = await anyio.to_thread.run_sync(job_detail, self.sources.engine(), self.sources.queries(), job_id)
        shown = data | {"page_title": f"Job {data['row']['id']}", "test_commands": self.settings.test_commands}
        return self.render(request, "job.html", shown | (extra or {}), status_code=status_code)

    async def transcript(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]

        async def go() -> Response:
            try:
                offset = int(request.query_params.get("offset", "0"))
                limit = int(request.query_params.get("limit", "65536"))
            except ValueError as exc:
                raise RelayError(ErrorCode.INVALID_ARGUMENT, "offset and limit are numbers", "e.g. ?offset=0") from exc
            page = await anyio.to_thread.run_sync(transcript_page, self.sources.engine(), job_id, offset, limit)
            return JSONResponse(page)

        return await self._guarded(request, go)

    async def cancel(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]

        async def go(_: dict[str, str]) -> Response:
            engine = self.sources.engine()
            rec = await engine.cancel(job_id)
            return self._to_job(request, job_row(engine.get(rec.id)), rec.id)

        return await self._posted(request, go)

    async def land(self, request: Request) -> Response:
        """Land a worktree job's branch through the gate (a test command the person configured, or none); the job's
        page shows what the land did: the gate's output, or why nothing changed."""
        job_id = request.path_params["job_id"]

        async def go(form: dict[str, str]) -> Response:
            engine = self.sources.engine()
            rec = await anyio.to_thread.run_sync(engine.get, job_id)
            outcome = await land_from_page(engine, self.settings, rec.id, form)
            status = 200 if outcome["landed"] else 409
            if "application/json" in request.headers.get("accept", ""):
                return JSONResponse(outcome, status_code=status)
            return await self._job_page(request, rec.id, {"land": outcome}, status)

        return await self._posted(request, go)

    async def discard(self, request: Request) -> Response:
        """Remove a worktree job's worktree and branch; back to its page, which says so."""
        job_id = request.path_params["job_id"]

        async def go(_: dict[str, str]) -> Response:
            done = await self.sources.engine().discard(job_id)
            return self._to_job(request, done, done["job_id"])

        return await self._posted(request, go)

    async def jobs_events(self, request: Request) -> Response:
        since = parse_since(request.headers.get("last-event-id")) or parse_since(request.query_params.get("since"))
        feed = JobsFeed(self.sources.engine, since, self.feed_max_s, self.feed_waiters)
        return StreamingResponse(feed.events(), media_type="text/event-stream", headers=_SSE_HEADERS)

    async def workers_events(self, request: Request) -> Response:
        show_all = bool(request.query_params.get("all"))
        feed = WorkersFeed(lambda: self.sources.engine().store, show_all, self.feed_max_s, self.feed_waiters)
        return StreamingResponse(feed.events(), media_type="text/event-stream", headers=_SSE_HEADERS)

    async def job_events(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]

        async def go() -> Response:
            rec = await anyio.to_thread.run_sync(self.sources.engine().get, job_id)
            raw = request.headers.get("last-event-id") or request.query_params.get("offset") or "0"
            offset = int(raw) if raw.isdigit() else 0
            feed = JobFeed(self.sources.engine, rec.id, offset, self.feed_max_s, self.feed_waiters)
            return StreamingResponse(feed.events(), media_type="text/event-stream", headers=_SSE_HEADERS)

        return await self._guarded(request, go)

    # other pages --------------------------------------------------------------------------

    async def costs(self, request: Request) -> Response:
        try:
            days = max(1, min(90, int(request.query_params.get("days", "14"))))
        except ValueError:
            days = 14
        data = await anyio.to_thread.run_sync(costs, self.sources.engine(), self.sources.queries(), self.settings, days)
        chart = Markup(stacked_bars(data["days"], data["by_day"], data["series"]))  # chart.py escapes every label
        return self.render(request, "costs.html", data | {"chart": chart, "days_n": days, "page_title": "Costs"})

    async def threads(self, request: Request) -> Response:
        data = await anyio.to_thread.run_sync(threads_view, self.settings, self.sources.engine())
        return self.render(request, "threads.html", data | {"page_title": "Sessions and threads"})

    async def thread(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]

        async def go() -> Response:
            data = await anyio.to_thread.run_sync(thread_view, self.settings, thread_id)
            return self.render(request, "thread.html", {"thread": data, "page_title": f"Thread {data['title']}"})

        return await self._guarded(request, go)

    async def tasks(self, request: Request) -> Response:
        project = request.query_params.get("project") or None

        async def go() -> Response:
            data = await anyio.to_thread.run_sync(tasks_view, self.tracker(), project)
            return self.render(request, "tasks.html", data | {"page_title": "Tasks"})

        return await self._guarded(request, go)

    async def task_status(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]

        async def go(form: dict[str, str]) -> Response:
            project, status = form.get("project") or None, form.get("status", "")
            await anyio.to_thread.run_sync(set_task_status, self.tracker(), project, task_id, status)
            base = request.scope.get("root_path", "")
            target = f"{base}/tasks" + (f"?project={quote(project)}" if project else "")
            return RedirectResponse(target, status_code=303)

        return await self._posted(request, go)

    async def workers(self, request: Request) -> Response:
        show_all = bool(request.query_params.get("all"))
        data = await anyio.to_thread.run_sync(workers_view, self.sources.engine().store, show_all)
        return self.render(request, "workers.html", data | {"page_title": "Workers"})

    async def servers(self, request: Request) -> Response:
        provider = self.sources.gateway_provider
        live = provider() if provider is not None else None
        data = await anyio.to_thread.run_sync(servers_view, self.settings, live)
        return self.render(request, "servers.html", {"servers": data, "page_title": "MCP servers"})

    async def audit(self, request: Request) -> Response:
        data = await anyio.to_thread.run_sync(audit_view, self.settings)
        return self.render(request, "audit.html", data | {"page_title": "Audit"})

    async def home(self, request: Request) -> Response:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/jobs", status_code=303)


_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def build_app(
    settings: Settings,
    *,
    access: Access | None = None,
    engine_provider: Callable[[], Any] | None = None,
    gateway_provider: Callable[[], Any] | None = None,
    feed_max_s: float = FEED_MAX_S,
) -> ASGIApp:
    """The dashboard as an ASGI app; `access` says where it is served and whether it asks for the token (config's
    named tokens always make it ask: then only an admin's token, or `access.token`, opens it)."""
    access = security.with_config(access or Access(), settings)
    if not access.loopback and not access.needs_login:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"refusing to serve the dashboard on {access.host} without a token",
            "pass --token SECRET (or set RELAY_TOKEN), or bind 127.0.0.1",
        )
    dash = Dashboard(Sources(settings, engine_provider, gateway_provider), access, feed_max_s)
    routes = [
        Route("/", dash.home),
        Route("/login", dash.login, methods=["GET", "POST"]),
        Route("/logout", dash.logout, methods=["POST"]),
        Route("/jobs", dash.jobs),
        Route("/jobs/{job_id}", dash.job),
        Route("/jobs/{job_id}/transcript", dash.transcript),
        Route("/jobs/{job_id}/cancel", dash.cancel, methods=["POST"]),
        Route("/jobs/{job_id}/land", dash.land, methods=["POST"]),
        Route("/jobs/{job_id}/discard", dash.discard, methods=["POST"]),
        Route("/events/jobs", dash.jobs_events),
        Route("/events/jobs/{job_id}", dash.job_events),
        Route("/workers", dash.workers),
        Route("/events/workers", dash.workers_events),
        Route("/costs", dash.costs),
        Route("/threads", dash.threads),
        Route("/threads/{thread_id}", dash.thread),
        Route("/tasks", dash.tasks),
        Route("/tasks/{task_id}/status", dash.task_status, methods=["POST"]),
        Route("/servers", dash.servers),
        Route("/audit", dash.audit),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncGenerator[None]:
        try:
            yield
        finally:
            dash.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.dashboard = dash
    return Guard(app, access)
