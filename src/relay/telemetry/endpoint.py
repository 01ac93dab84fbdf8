"""GET /metrics: relay's registry in Prometheus' text format (or OpenMetrics, as the scraper asks).

Who may read it: anyone who reaches it while no token is configured (the HTTP front then listens on
loopback only), else only a request whose bearer token is an admin's or the metrics token
(`[telemetry] metrics_token`): a `user` token is refused 403, since the queue's depth and the job
counts tell of every principal's work. The front serves it as an ASGI app on its own HTTP server;
`relay worker --metrics-port` serves it alone, from a thread (serve_metrics).
"""

from __future__ import annotations

import hmac
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import choose_encoder

from relay.errors import ErrorCode, RelayError
from relay.telemetry.metrics import REGISTRY

METRICS_PATH = "/metrics"
REFUSED_401 = b'{"error":"missing or wrong bearer token","hint":"send an admin token or the metrics token"}'
REFUSED_403 = (
    b'{"error":"this token may not read /metrics",'
    b'"hint":"use an admin token or [telemetry] metrics_token: a user token sees only its own jobs"}'
)


def exposition(accept: str) -> tuple[bytes, str]:
    """The registry's samples, encoded as the `Accept` header asks, and their content type."""
    encode, content_type = choose_encoder(accept)
    return encode(REGISTRY), content_type


class Readers:
    """Who may read /metrics: `allowed` tokens (admins', the metrics token); `known` ones are refused 403, any
    other 401. `guarded` False (no token configured anywhere): everyone who reaches it."""

    def __init__(self, allowed: Iterable[str], known: Iterable[str] = (), *, guarded: bool | None = None) -> None:
        self._allowed = [f"Bearer {t}".encode() for t in allowed]
        self._known = [f"Bearer {t}".encode() for t in known]
        self.guarded = bool(self._allowed or self._known) if guarded is None else guarded

    def status(self, authorization: bytes) -> int:
        """200, 401 or 403 for a request carrying this Authorization header; every token is compared (in constant
        time), so timing tells nothing."""
        if not self.guarded:
            return 200
        allowed = [hmac.compare_digest(authorization, t) for t in self._allowed]
        known = [hmac.compare_digest(authorization, t) for t in self._known]
        return 200 if any(allowed) else 403 if any(known) else 401


def _refusal(status: int) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = [("content-type", "application/json")]
    if status == 401:
        return 401, [*headers, ("www-authenticate", "Bearer")], REFUSED_401
    return status, headers, REFUSED_403 if status == 403 else b'{"error":"use GET"}'


def answer(
    method: str, authorization: bytes, accept: str, readers: Readers
) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of one request to /metrics (called off the event loop: collecting reads the store)."""
    if method not in ("GET", "HEAD"):
        return 405, [("content-type", "application/json"), ("allow", "GET, HEAD")], b'{"error":"use GET"}'
    status = readers.status(authorization)
    if status != 200:
        return _refusal(status)
    body, content_type = exposition(accept)
    return 200, [("content-type", content_type)], b"" if method == "HEAD" else body


class MetricsApp:
    """The ASGI app of GET /metrics; the registry is collected in a worker thread, off the event loop."""

    def __init__(self, readers: Readers) -> None:
        self.readers = readers

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        import anyio

        headers = dict(scope.get("headers") or [])
        status, out, body = await anyio.to_thread.run_sync(
            answer,
            str(scope.get("method", "GET")),
            headers.get(b"authorization", b""),
            headers.get(b"accept", b"").decode("latin-1"),
            self.readers,
        )
        raw = [(k.encode(), v.encode()) for k, v in out]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every 15 s is not news: nothing on the worker's stderr."""


def _wsgi(readers: Readers) -> Callable[..., Iterator[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            status, headers, body = 404, [("content-type", "application/json")], b'{"error":"only /metrics here"}'
        else:
            status, headers, body = answer(
                str(environ.get("REQUEST_METHOD", "GET")),
                str(environ.get("HTTP_AUTHORIZATION", "")).encode("latin-1"),
                str(environ.get("HTTP_ACCEPT", "")),
                readers,
            )
        reason = {200: "OK", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed"}
        start_response(f"{status} {reason.get(status, '')}", headers)
        yield body

    return app


class MetricsServer:
    """/metrics served from a thread of its own (a `relay worker`): `port` is the one bound, `close()` stops it."""

    def __init__(self, host: str, port: int, readers: Readers) -> None:
        try:
            server = _Server6 if ":" in host else _Server  # "::1", "::"
            self._httpd = make_server(host, port, _wsgi(readers), server, handler_class=_Quiet)
        except OSError as exc:
            raise RelayError(
                ErrorCode.INVALID_ARGUMENT,
                f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}",
                "choose another port with --metrics-port (or [telemetry] metrics_port), or 0 for any free one",
            ) from None
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="relay-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
