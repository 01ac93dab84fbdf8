"""The process of an ACP job: starts the agent's ACP server, drives one session with the official SDK, prints JSON lines.

    python -m relay.agents.acp.driver [--cwd DIR] [--session-id ID] [--mode ID] [--read-only] [--client-fs]
        [--permission-timeout S] [--job-dir DIR] -- AGENT_ARGV...

The runtime starts it like any print-mode CLI (its process group, shim, timeouts, kill); it starts the
agent (AGENT_ARGV) as its own child in the same group, reads the job's prompt from stdin, and prints one
JSON object per line on stdout, which the runtime keeps as the job's stdout:

    {"type": "session", "sessionId": ..., "run": ..., "modes": [...], "mode": ...}
    {"type": "update", "update": <the session/update params>}
    {"type": "permission_request", "id": <int>, "run": ..., "toolCall": {...}, "options": [...]}
    {"type": "permission_answer", "id": <int>, "run": ..., "outcome": ..., "optionId": ..., "by": ...}
    {"type": "sent", "id": ..., "text": ...}
    {"type": "notice", "message": ...}
    {"type": "result", "stopReason": ..., "sessionId": ..., "usage": {...} | null}
    {"type": "error", "message": ...}

While it runs it tails `<job folder>/inbox.jsonl` (relay.agents.acp.inbox; the folder from --job-dir or
RELAY_JOB_DIR) from its end, taking only the messages for this run (`run`: a fresh id per driver run,
written to the folder's `inbox.run`; a retry in the same folder never sees an earlier run's messages, and
its permission requests, numbered from 1 again, are told apart by their run): steering messages become new prompts after the current turn, permission answers answer
the pending session/request_permission, cancel sends session/cancel. A permission request nobody answers
within --permission-timeout is answered "cancelled" (deny), never allowed. SIGTERM and SIGINT send
session/cancel, then the driver leaves after a short grace.

With --client-fs the client offers the agent file reads and writes, inside the job's cwd only (paths
outside it are refused; writes too when --read-only); without it (the adapters' default: gemini 0.61.0
cannot create a new file through a client's fs/read_text_file) the agent reads and writes files itself,
as in print mode. The client never offers a terminal: the agent runs its commands itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO, cast

from acp import PROTOCOL_VERSION, Client, RequestError, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    SessionModeState,
    ToolCallUpdate,
    WriteTextFileResponse,
)
from pydantic import BaseModel

from relay.agents.acp.inbox import CANCEL, JOB_DIR_ENV, PERMISSION_ANSWER, SEND, Inbox, start_run

# A permission request nobody answers in this many seconds is denied.
DEFAULT_PERMISSION_TIMEOUT_S = 120.0
# How often the inbox is read (a steering message or an answer waits at most this long).
INBOX_POLL_S = 0.1
# After SIGTERM (or a cancel) the turn has this long to end on its own before the driver leaves.
CANCEL_GRACE_S = 3.0
# After session/load answered, its replayed history may still be arriving (gemini sends it after its answer): the
# first prompt goes once no update came for LOAD_SETTLE_S, or after LOAD_SETTLE_MAX_S in all.
LOAD_SETTLE_S = 0.2
LOAD_SETTLE_MAX_S = 5.0
# After the last turn the agent's stdin is closed; it has this long to save its session and exit (then SIGTERM).
AGENT_EXIT_S = 10.0
# The most one ACP message may be (the SDK's default for its own stdio).
STREAM_LIMIT = 50 * 1024 * 1024
# The largest file the client reads for the agent.
MAX_READ_BYTES = 16 * 1024 * 1024
# JSON-RPC's code for a resource that is not there (ACP's resource_not_found).
RESOURCE_NOT_FOUND = -32002


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Out:
    """The driver's stdout: one JSON object per line, flushed at once (the job's stdout is a file)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, obj: dict[str, Any]) -> None:
        self.stream.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.stream.flush()


def inside(root: Path, path: str) -> Path | None:
    """`path` (absolute, as ACP requires) resolved, when it lies inside `root`; else None."""
    if not os.path.isabs(path):
        return None
    resolved = Path(os.path.realpath(path))
    return resolved if resolved == root or root in resolved.parents else None


class RelayClient:
    """The ACP client side: prints updates, routes permission requests to the inbox, serves files in cwd."""

    def __init__(self, out: Out, cwd: Path, read_only: bool, permission_timeout_s: float, run: str = "") -> None:
        self.out = out
        self.run = run  # this driver run's id: its requests are told apart from an earlier run's of the same folder
        self.cwd = Path(os.path.realpath(cwd))
        self.read_only = read_only
        self.permission_timeout_s = permission_timeout_s
        self.pending: dict[int, tuple[asyncio.Future[dict[str, Any]], set[str]]] = {}
        self.next_id = 0
        self.quiet = False  # while a session is loaded, its replayed history is not this job's transcript
        self.kept_quiet = 0  # updates not printed while quiet (a replay still arriving keeps it counting)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.quiet:
            self.kept_quiet += 1
            return
        params: dict[str, Any] = {"sessionId": session_id, "update": dump(update)}
        self.out({"type": "update", "update": params})

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.next_id += 1
        rid = self.next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = (future, {o.option_id for o in options})
        self.out(
            {
                "type": "permission_request",
                "id": rid,
                "run": self.run,
                "sessionId": session_id,
                "toolCall": dump(tool_call),
                "options": [dump(o) for o in options],
            }
        )
        try:
            answer = await asyncio.wait_for(future, self.permission_timeout_s)
        except TimeoutError:
            answer = {"outcome": "cancelled", "by": "timeout"}
        finally:
            self.pending.pop(rid, None)
        option_id = answer.get("optionId")
        selected = answer.get("outcome") == "selected" and isinstance(option_id, str)
        self.out(
            {
                "type": "permission_answer",
                "id": rid,
                "run": self.run,
                "outcome": "selected" if selected else "cancelled",
                **({"optionId": option_id} if selected else {}),
                "by": answer.get("by", "inbox"),
            }
        )
        if selected:
            return RequestPermissionResponse(outcome=AllowedOutcome(option_id=str(option_id), outcome="selected"))
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def answer(self, message: dict[str, Any]) -> None:
        """An inbox answer to a pending request; an unknown id or an option not offered is ignored / denied."""
        rid = message.get("id")
        entry = self.pending.get(rid) if isinstance(rid, int) else None
        if entry is None:
            self.out({"type": "notice", "message": f"no pending permission request {rid!r}"})
            return
        future, offered = entry
        if future.done():
            return
        if message.get("outcome") == "selected" and message.get("optionId") in offered:
            future.set_result({"outcome": "selected", "optionId": message["optionId"], "by": "inbox"})
        else:
            future.set_result({"outcome": "cancelled", "by": "inbox"})

    def deny_all(self) -> None:
        """Cancelling a turn answers every pending request "cancelled" (as ACP asks of a client)."""
        for future, _ in list(self.pending.values()):
            if not future.done():
                future.set_result({"outcome": "cancelled", "by": "cancel"})

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        target = inside(self.cwd, path)
        if target is None:
            raise RequestError.invalid_params({"path": path, "reason": "outside the job's folder"})
        try:
            text = _read(target)
        except FileNotFoundError as exc:
            # The words agents look for to tell a missing file from a failed read (gemini: ENOENT).
            raise RequestError(
                RESOURCE_NOT_FOUND, f"ENOENT: no such file or directory: {path}", {"path": path}
            ) from exc
        except OSError as exc:
            raise RequestError.internal_error({"path": path, "reason": str(exc)}) from exc
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit if limit is not None else None])
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        target = inside(self.cwd, path)
        if target is None:
            raise RequestError.invalid_params({"path": path, "reason": "outside the job's folder"})
        if self.read_only:
            raise RequestError.invalid_params({"path": path, "reason": "the job is read-only"})
        try:
            _write(target, content)
        except OSError as exc:
            raise RequestError.internal_error({"path": path, "reason": str(exc)}) from exc
        return WriteTextFileResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


class Driver:
    """One job: a session, its prompts (the job's, then each steering message), and the inbox."""

    def __init__(self, args: argparse.Namespace, prompt: str, out: Out) -> None:
        self.args = args
        self.out = out
        job_dir = args.job_dir or os.environ.get(JOB_DIR_ENV) or ""
        self.inbox: Inbox | None = None
        run = ""
        if job_dir:
            with contextlib.suppress(OSError):
                run, offset = start_run(Path(job_dir))  # what earlier runs in this folder were sent stays theirs
                self.inbox = Inbox(Path(job_dir), offset, run)
        self.client = RelayClient(out, Path(args.cwd), args.read_only, args.permission_timeout, run)
        self.prompts: deque[tuple[str | None, str]] = deque([(None, prompt)])
        self.conn: ClientSideConnection | None = None
        self.session_id: str | None = None
        self.cancelled = False
        self.turn_running = False
        self.turn_done = asyncio.Event()
        self.tasks: set[asyncio.Future[None]] = set()

    def keep(self, task: asyncio.Future[None]) -> None:
        """Hold a background task until it ends (the loop keeps only weak references)."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self) -> int:
        argv: list[str] = self.args.agent
        env = {k: v for k, v in os.environ.items() if k != JOB_DIR_ENV}
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: self.keep(asyncio.ensure_future(self.cancel("signal"))))
        poller = asyncio.ensure_future(self.poll_inbox())
        try:
            async with spawn_agent_process(
                cast(Client, self.client),
                argv[0],
                *argv[1:],
                env=env,
                cwd=self.args.cwd,
                transport_kwargs={"stderr": None, "limit": STREAM_LIMIT, "shutdown_timeout": AGENT_EXIT_S},
            ) as (conn, _process):
                self.conn = conn
                return await self.drive(conn)
        except (RequestError, OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
            self.out({"type": "error", "message": _message(exc)})
            return 1
        finally:
            poller.cancel()

    async def drive(self, conn: ClientSideConnection) -> int:
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=self.args.client_fs, write_text_file=self.args.client_fs),
                terminal=False,
            ),
            client_info=Implementation(name="relay", title="relay", version="1"),
        )
        caps = init.agent_capabilities
        cwd = str(self.client.cwd)
        modes: SessionModeState | None
        if self.args.session_id:
            session_caps = caps.session_capabilities if caps else None
            if session_caps is not None and session_caps.resume is not None:  # no history replayed
                resumed = await conn.resume_session(cwd=cwd, session_id=self.args.session_id, mcp_servers=[])
                modes = resumed.modes
            elif caps is not None and caps.load_session:
                self.client.quiet = True  # the replayed history is the earlier jobs' transcript, not this one's
                try:
                    loaded = await conn.load_session(cwd=cwd, session_id=self.args.session_id, mcp_servers=[])
                    # The replay's notifications still being handled (the SDK's prompt() waits the same way).
                    await conn._session_updates.wait(self.args.session_id)  # pyright: ignore[reportPrivateUsage]
                    await self.replay_settled(conn)
                finally:
                    self.client.quiet = False
                modes = loaded.modes if loaded else None
            else:
                self.out({"type": "error", "message": "the agent cannot load or resume a session over ACP"})
                return 1
            self.session_id = self.args.session_id
        else:
            created = await conn.new_session(cwd=cwd, mcp_servers=[])
            self.session_id = created.session_id
            modes = created.modes
        mode = await self.set_mode(conn, modes)
        self.out(
            {
                "type": "session",
                "sessionId": self.session_id,
                "run": self.client.run or None,
                "agent": dump(init.agent_info) if init.agent_info else None,
                "modes": [m.id for m in modes.available_modes] if modes else [],
                "mode": mode,
            }
        )
        stop_reason = "cancelled" if self.cancelled else "end_turn"
        usage: dict[str, Any] | None = None
        session_id = self.session_id
        assert session_id is not None
        while self.prompts and not self.cancelled:
            self.take_inbox()
            sid, text = self.prompts.popleft()
            if sid is not None:
                self.out({"type": "sent", "id": sid, "text": text})
            self.turn_running = True
            self.turn_done.clear()
            try:
                response = await conn.prompt(session_id=session_id, prompt=[text_block(text)])
            finally:
                self.turn_running = False
                self.turn_done.set()
            stop_reason = response.stop_reason
            if response.usage is not None:
                usage = _add_usage(usage, dump(response.usage))
            self.take_inbox()  # a message posted while the turn ended is still delivered
        self.out({"type": "result", "stopReason": stop_reason, "sessionId": self.session_id, "usage": usage})
        return 0

    async def replay_settled(self, conn: ClientSideConnection) -> None:
        """Wait, still quiet, until the loaded session's replay stopped arriving: no update for LOAD_SETTLE_S (an agent
        may send its history after its answer to session/load: it would read as this job's own output)."""
        assert self.args.session_id
        deadline = time.monotonic() + LOAD_SETTLE_MAX_S
        seen = -1
        while seen != self.client.kept_quiet and time.monotonic() < deadline:
            seen = self.client.kept_quiet
            await asyncio.sleep(LOAD_SETTLE_S)
            await conn._session_updates.wait(self.args.session_id)  # pyright: ignore[reportPrivateUsage]

    async def set_mode(self, conn: ClientSideConnection, modes: SessionModeState | None) -> str | None:
        """The first of the modes relay's permission maps to that the agent offers (else its own default stays)."""
        wanted_list: list[str] = self.args.mode
        current = modes.current_mode_id if modes else None
        offered = {m.id for m in modes.available_modes} if modes else set[str]()
        wanted = next((m for m in wanted_list if m in offered), None)
        if wanted is None or wanted == current:
            if wanted_list and wanted is None:
                self.out(
                    {
                        "type": "notice",
                        "message": f"the agent offers none of the modes {wanted_list}; it stays in {current!r}",
                    }
                )
            return current
        assert self.session_id is not None
        await conn.set_session_mode(session_id=self.session_id, mode_id=wanted)
        return wanted

    def take_inbox(self) -> None:
        if self.inbox is None:
            return
        for message in self.inbox.read():
            kind = message.get("type")
            if kind == SEND and isinstance(message.get("text"), str) and message["text"]:
                self.prompts.append((str(message.get("id", "")), message["text"]))
            elif kind == PERMISSION_ANSWER:
                self.client.answer(message)
            elif kind == CANCEL:
                self.keep(asyncio.ensure_future(self.cancel("inbox")))

    async def poll_inbox(self) -> None:
        while True:
            self.take_inbox()
            await asyncio.sleep(INBOX_POLL_S)

    async def cancel(self, by: str) -> None:
        """ACP's cancel for the running turn (queued steering messages are dropped); leave after a grace."""
        if self.cancelled:
            return
        self.cancelled = True
        self.prompts.clear()
        self.out({"type": "notice", "message": f"cancel ({by})"})
        self.client.deny_all()
        if self.conn is not None and self.session_id is not None and self.turn_running:
            with contextlib.suppress(Exception):
                await self.conn.cancel(session_id=self.session_id)
        if by == "signal":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.turn_done.wait(), CANCEL_GRACE_S)
            if self.turn_running:
                self.out({"type": "error", "message": "the agent did not end its turn after cancel"})
                os._exit(143)


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(MAX_READ_BYTES)


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")


def _add_usage(total: dict[str, Any] | None, turn: dict[str, Any]) -> dict[str, Any]:
    if total is None:
        return dict(turn)
    summed = dict(total)
    for key, value in turn.items():
        if isinstance(value, int) and isinstance(summed.get(key, 0), int):
            summed[key] = summed.get(key, 0) + value
    return summed


def _message(exc: BaseException) -> str:
    if isinstance(exc, RequestError):
        data = f": {json.dumps(exc.data)}" if exc.data is not None else ""
        return f"ACP error {exc.code}: {exc}{data}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m relay.agents.acp.driver")
    parser.add_argument("--cwd", default=os.getcwd())
    parser.add_argument("--session-id", default=None)
    parser.add_argument("--mode", action="append", default=[])
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--client-fs", action="store_true")
    parser.add_argument("--permission-timeout", type=float, default=DEFAULT_PERMISSION_TIMEOUT_S)
    parser.add_argument("--job-dir", default=None)
    parser.add_argument("agent", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.agent and args.agent[0] == "--":
        args.agent = args.agent[1:]
    if not args.agent:
        parser.error("the agent's ACP command goes after --")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = Out(sys.stdout)
    prompt = sys.stdin.read() if not sys.stdin.isatty() else ""
    if not prompt.strip():
        out({"type": "error", "message": "no prompt on stdin"})
        return 2
    try:
        return asyncio.run(Driver(args, prompt, out).run())
    except Exception as exc:  # the last word goes to the job's stdout, where relay reads it
        out({"type": "error", "message": _message(exc)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
