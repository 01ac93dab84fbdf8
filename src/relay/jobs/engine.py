"""The job engine: every delegation is a durable job that can be waited on, cancelled and read back."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import weakref
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from relay.agents import get_adapter
from relay.agents.base import Adapter, AgentRequest, HostContext, Invocation, Parser
from relay.agents.models import resolve_model
from relay.config import PERMISSIONS, Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.events import AgentResult, Event
from relay.jobs.envelope import clip_event, envelope, job_title, render_event
from relay.jobs.output import LineReader, read_bytes_page, read_text_page
from relay.runtime import procinfo, supervisor
from relay.runtime.supervisor import JobFiles, JobProcess
from relay.secrets import redact, redact_value, secret_values
from relay.store import JobRecord, Store

Mode = Literal["sync", "async", "auto"]
SpawnFn = Callable[[Invocation, JobFiles], JobProcess]
# An in-process job (a model API call): it reports events through `emit` and returns the result.
TaskFn = Callable[[Callable[[Event], None]], Awaitable[AgentResult]]

# How often a waiter re-reads the store for jobs run by another relay process (the CLI, another
# client's server); jobs of this process wake waiters at once.
REMOTE_POLL_S = 0.25
# Buffer of events per progress listener; a slow listener misses events rather than stalling a job.
LISTENER_BUFFER = 256
# Longest a single wait call may block, whatever the caller asks.
MAX_WAIT_S = 3600.0
# Events are stored and forwarded in batches bounded in count and in text, so a flood of output
# never sits in memory at once.
PUBLISH_BATCH_EVENTS = 200
PUBLISH_BATCH_CHARS = 1 << 20
# `git status` of a job's cwd, before and after, must not hold a job up for long.
GIT_TIMEOUT_S = 5.0
# A file written just before a job's process is spawned, and how long a restarted relay waits for
# that process's shim to record its pid before concluding the spawn never happened.
SPAWN_MARKER = "spawning"
SPAWN_SETTLE_S = 2.0
# How far apart a shim's start time and its pid file's mtime may be and still be the same process.
PID_FILE_SLACK_S = 2.0
# Agents whose CLI takes a system prompt / a turn limit as flags.
SYSTEM_PROMPT_AGENTS = ("claude",)
MAX_TURNS_AGENTS = ("claude",)
# Events that do not count as activity for the idle timeout: an agent that only reports
# retries (codex's endless "Reconnecting..." when its upstream is down) is not making progress.
NOT_ACTIVITY = frozenset({"retry"})


@dataclass(frozen=True)
class JobRequest:
    """A delegation to an agent CLI, as the MCP tools and the CLI submit it."""

    agent: str
    prompt: str
    cwd: str | None = None
    model: str | None = None
    session_id: str | None = None
    continue_latest: bool = False
    permission: str | None = None
    system_prompt: str | None = None
    max_turns: int | None = None
    timeout_s: float | None = None
    idle_timeout_s: float | None = None
    reasoning_effort: str | None = None


@dataclass
class _Prepared:
    adapter: Adapter
    agent_request: AgentRequest
    invocation: Invocation
    timeout_s: float
    idle_timeout_s: float


@dataclass
class _Live:
    """In-memory state of a job this process is running."""

    done: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: str | None = None
    # `git status` of the job's cwd before it ran (None: not a git repository).
    git_before: dict[str, str] | None = None
    listeners: list[MemoryObjectSendStream[tuple[int, Event]]] = field(default_factory=lambda: [])


# Engines running in this process; a job owned by this process is only "owned" if one of them runs it.
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()


def new_job_id() -> str:
    return secrets.token_hex(8)


class Engine:
    """Runs jobs in a task group it owns; use as `async with Engine(settings) as engine`."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        spawn: SpawnFn = supervisor.spawn,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self.settings = settings
        self.store = store or Store(settings.db_path)
        self._spawn = spawn
        self._which = which
        self._tg: TaskGroup | None = None
        self._live: dict[str, _Live] = {}
        self._prepared: dict[str, _Prepared] = {}
        self._queue: deque[str] = deque()
        self._running: dict[str, str] = {}
        self._changed = anyio.Event()
        self._secrets = secret_values(settings.environ, _api_key_values(settings.home))
        self._my_pid = os.getpid()
        self._my_start = procinfo.start_ticks(self._my_pid)
        self.started_at = time.time()

    # lifecycle ----------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[Engine]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            _ENGINES.add(self)
            self.recover()
            try:
                yield self
            finally:
                # Leaving: monitors stop, processes keep running; the next relay re-attaches.
                tg.cancel_scope.cancel()
                self._tg = None
                _ENGINES.discard(self)

    async def __aenter__(self) -> Engine:
        self._cm = self.running()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        await self._cm.__aexit__(*exc)  # pyright: ignore[reportArgumentType]

    def _task_group(self) -> TaskGroup:
        if self._tg is None:
            raise RelayError(ErrorCode.INTERNAL, "the job engine is not running", "start relay with `relay serve`")
        return self._tg

    # preparing ----------------------------------------------------------------------------

    def _resolve_cwd(self, raw: str | None) -> str:
        path = Path(raw).expanduser() if raw else Path.cwd()
        if not path.is_absolute():
            raise invalid(
                f"cwd must be an absolute path, got {raw!r}",
                "pass the absolute path of the project directory",
            )
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            raise invalid(f"cwd {raw!r} does not exist", "pass an existing directory") from None
        if not resolved.is_dir():
            raise invalid(f"cwd {raw!r} is not a directory", "pass a directory, not a file")
        roots = self.settings.allowed_roots
        if roots and not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            raise RelayError(
                ErrorCode.CWD_NOT_ALLOWED,
                f"cwd {str(resolved)!r} is outside the allowed roots",
                f"use a directory under {', '.join(map(str, roots))}, or add it to security.allowed_roots in config.toml",
            )
        return str(resolved)

    def _prepare(self, req: JobRequest, job_id: str) -> _Prepared:
        settings = self.settings
        if settings.depth >= settings.max_depth:
            raise RelayError(
                ErrorCode.LIMIT_REACHED,
                f"delegation depth {settings.depth} reached the limit of {settings.max_depth}",
                "do the work yourself instead of delegating further, or raise RELAY_MAX_DEPTH",
            )
        if not req.prompt.strip():
            raise invalid("prompt is empty", "pass the task to delegate as prompt")
        for name in ("prompt", "model", "session_id", "system_prompt", "cwd", "agent"):
            value = getattr(req, name)
            if isinstance(value, str) and "\x00" in value:
                raise invalid(f"{name} contains a NUL byte", f"remove the \\x00 character from {name}")
        adapter = get_adapter(req.agent, settings)
        cfg = settings.agent(req.agent)
        model, permission, cwd_raw = req.model, req.permission, req.cwd
        if req.session_id:
            session = self.store.get_session(req.session_id, req.agent)
            if session is not None:
                # A CLI resumes only from the cwd that started the session; keep its settings.
                if cwd_raw and self._resolve_cwd(cwd_raw) != session.cwd:
                    raise invalid(
                        f"session {req.session_id} started in {session.cwd}, not {cwd_raw}",
                        "omit cwd to resume in the session's own directory, or start a new session",
                    )
                cwd_raw = session.cwd
                model = model or session.model
                permission = permission or session.permission
                cap = settings.max_session_cost_usd
                if cap is not None and session.total_cost_usd >= cap:
                    raise RelayError(
                        ErrorCode.LIMIT_REACHED,
                        f"session {req.session_id} has cost ${session.total_cost_usd:.4f}, at its cap of ${cap:.4f}",
                        "start a new session, or raise jobs.max_session_cost_usd in config.toml",
                    )
        permission = permission or settings.default_permission
        if permission not in PERMISSIONS:
            raise invalid(
                f"permission {permission!r} is not one of {', '.join(PERMISSIONS)}",
                "use read-only, edit or full",
            )
        model = resolve_model(req.agent, model or cfg.default_model, cfg.aliases)
        cwd = self._resolve_cwd(cwd_raw)
        if req.max_turns is not None and req.max_turns < 1:
            raise invalid("max_turns must be at least 1", "omit max_turns or pass a positive number")
        if req.max_turns is not None and req.agent not in MAX_TURNS_AGENTS:
            raise invalid(
                f"{req.agent} has no way to limit its turns",
                f"omit max_turns for {req.agent}, or use one of: {', '.join(MAX_TURNS_AGENTS)}",
            )
        prompt = req.prompt
        system_prompt = req.system_prompt
        if system_prompt and req.agent not in SYSTEM_PROMPT_AGENTS:
            # No flag for it: the instructions travel at the head of the prompt instead.
            prompt = f"<instructions>\n{system_prompt}\n</instructions>\n\n{prompt}"
            system_prompt = None
        for name, value in (("timeout_s", req.timeout_s), ("idle_timeout_s", req.idle_timeout_s)):
            if value is not None and not (0 < value <= 7 * 86400):
                raise invalid(f"{name} must be between 0 and 604800 seconds", f"omit {name} for the default")
        command = cfg.command or adapter.executable
        resolved = self._which(command)
        if resolved is None:
            raise RelayError(
                ErrorCode.AGENT_NOT_INSTALLED,
                f"{req.agent} is not installed ({command!r} not found)",
                adapter.install_hint,
            )
        agent_request = AgentRequest(
            prompt=prompt,
            cwd=cwd,
            model=model,
            session_id=req.session_id,
            continue_latest=req.continue_latest,
            permission=permission,  # pyright: ignore[reportArgumentType]
            system_prompt=system_prompt,
            max_turns=req.max_turns,
            reasoning_effort=req.reasoning_effort,
            max_budget_usd=settings.max_cost_usd if req.agent == "claude" else None,
        )
        host = HostContext(
            command=resolved,
            environ=settings.environ,
            extra_args=cfg.extra_args,
            agent_env=cfg.env,
            is_root=os.geteuid() == 0,
            depth=settings.depth,
            job_id=job_id,
        )
        invocation = adapter.build(agent_request, host)
        return _Prepared(
            adapter=adapter,
            agent_request=agent_request,
            invocation=invocation,
            timeout_s=req.timeout_s or cfg.timeout_s or settings.job_timeout_s,
            idle_timeout_s=req.idle_timeout_s or cfg.idle_timeout_s or settings.idle_timeout_s,
        )

    def files(self, job_id: str) -> JobFiles:
        return JobFiles(self.settings.jobs_dir / job_id)

    # submitting ---------------------------------------------------------------------------

    def submit(self, req: JobRequest) -> str:
        """Validate, record and queue a job; returns its id. Raises RelayError on bad input."""
        self._task_group()
        job_id = new_job_id()
        prepared = self._prepare(req, job_id)
        ar = prepared.agent_request
        stored = asdict(req) | {
            "cwd": ar.cwd,
            "model": ar.model,
            "permission": ar.permission,
            "timeout_s": prepared.timeout_s,
            "idle_timeout_s": prepared.idle_timeout_s,
        }
        self.store.insert_job(job_id, req.agent, "cli", self._redacted(stored), ar.model, ar.cwd)
        self.files(job_id).dir.mkdir(parents=True, exist_ok=True)
        self._prepared[job_id] = prepared
        self._live[job_id] = _Live()
        self._queue.append(job_id)
        self._pump()
        return job_id

    def submit_task(
        self,
        agent: str,
        request: dict[str, Any],
        task: TaskFn,
        *,
        model: str | None = None,
        timeout_s: float | None = None,
    ) -> str:
        """Run an in-process job (e.g. a model API call) with the same lifecycle as a CLI job.

        The task gets an `emit(event)` callback and returns an AgentResult; it is cancelled on
        job_cancel and on timeout. It cannot outlive relay: after a restart it is `interrupted`.
        """
        tg = self._task_group()
        if self.settings.depth >= self.settings.max_depth:
            raise RelayError(
                ErrorCode.LIMIT_REACHED,
                f"delegation depth {self.settings.depth} reached the limit of {self.settings.max_depth}",
                "do the work yourself instead of delegating further, or raise RELAY_MAX_DEPTH",
            )
        job_id = new_job_id()
        self.store.insert_job(job_id, agent, "task", self._redacted(request), model, None)
        self.files(job_id).dir.mkdir(parents=True, exist_ok=True)
        live = self._live[job_id] = _Live()
        tg.start_soon(self._run_task, job_id, live, task, timeout_s or self.settings.job_timeout_s)
        return job_id

    async def _run_task(self, job_id: str, live: _Live, task: TaskFn, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        self.store.mark_running(
            job_id,
            pid=None,
            pid_start_ticks=None,
            boot_id=None,
            owner_pid=self._my_pid,
            owner_start_ticks=self._my_start,
            deadline_at=deadline,
            idle_timeout_s=None,
        )
        self._notify()
        seq = -1
        outcome: AgentResult | None = None
        stop: str | None = None
        stdout = self.files(job_id).stdout

        def emit(event: Event) -> None:
            nonlocal seq
            seq += 1
            with stdout.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"type": event.type, **event.data}, default=str) + "\n")
            self._publish(job_id, live, [(seq, event)])

        try:
            async with anyio.create_task_group() as inner:

                async def watch_stop() -> None:
                    await live.stop.wait()
                    inner.cancel_scope.cancel()

                inner.start_soon(watch_stop)
                with anyio.move_on_after(timeout_s) as scope:
                    try:
                        outcome = await task(emit)
                    except RelayError as err:
                        outcome = AgentResult(ok=False, error=err)
                    except Exception as exc:  # translate at the edge: nothing escapes untranslated
                        outcome = AgentResult(
                            ok=False,
                            error=RelayError(
                                ErrorCode.INTERNAL,
                                f"{type(exc).__name__}: {exc}",
                                "report this as a relay bug",
                            ),
                        )
                if scope.cancelled_caught:
                    stop = "timed_out:wall"
                inner.cancel_scope.cancel()
        finally:
            if live.stop.is_set():
                stop = live.stop_reason or "cancelled"
            rec = self.store.get_job(job_id)
            if rec is not None and not rec.is_final:
                if stop == "cancelled":
                    err = RelayError(
                        ErrorCode.CANCELLED, "the job was cancelled", "its output so far is kept: job_result"
                    )
                    self._store_result(rec, "cancelled", outcome or AgentResult(ok=False, error=err), err, None)
                elif stop:
                    err = RelayError(
                        ErrorCode.TIMEOUT, "the job ran past its timeout and was stopped", "raise timeout_s"
                    )
                    self._store_result(rec, "timed_out", outcome or AgentResult(ok=False, error=err), err, None)
                elif outcome is not None:
                    self._store_result(rec, "completed" if outcome.ok else "failed", outcome, outcome.error, None)
            self._job_ended(job_id)

    def _agent_limit(self, agent: str) -> int:
        return self.settings.agent(agent).max_concurrent or self.settings.max_concurrent_per_agent

    def _pump(self) -> None:
        tg = self._task_group()
        for job_id in list(self._queue):
            if len(self._running) >= self.settings.max_concurrent:
                return
            rec = self.store.get_job(job_id)
            if rec is None or rec.is_final:
                self._queue.remove(job_id)
                continue
            busy = sum(1 for a in self._running.values() if a == rec.agent)
            if busy >= self._agent_limit(rec.agent):
                continue
            self._queue.remove(job_id)
            self._running[job_id] = rec.agent
            tg.start_soon(self._run_job, job_id)

    async def _run_job(self, job_id: str) -> None:
        try:
            await self._run_job_guarded(job_id)
        finally:
            self._job_ended(job_id)

    def _job_ended(self, job_id: str) -> None:
        """Free the job's slot, wake its waiters and listeners, and start what was queued behind it."""
        self._running.pop(job_id, None)
        live = self._live.get(job_id)
        if live is not None:
            live.done.set()
            for listener in live.listeners:
                listener.close()
        self._notify()
        if self._tg is not None:
            self._pump()

    async def _run_job_guarded(self, job_id: str) -> None:
        """Run one job; a bug here fails this job with INTERNAL instead of taking the server down."""
        try:
            await self._start_and_monitor(job_id)
        except Exception as exc:
            rec = self.store.get_job(job_id)
            if rec is not None and not rec.is_final:
                self._fail(
                    rec, RelayError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}", "report this as a relay bug")
                )

    async def _start_and_monitor(self, job_id: str) -> None:
        live = self._live.setdefault(job_id, _Live())
        rec = self.store.get_job(job_id)
        if rec is None or rec.is_final:
            return
        if live.stop_reason:
            self._finish_without_process(rec)
            return
        prepared = self._prepared.pop(job_id, None)
        try:
            if prepared is None:
                prepared = self._prepare(_request_from(rec), job_id)
            files = self.files(job_id)
            live.git_before = git_status(prepared.invocation.cwd)
            # Mark the spawn before it happens: a relay killed between here and the shim writing
            # its pid must not run the job a second time after a restart.
            files.dir.mkdir(parents=True, exist_ok=True)
            (files.dir / SPAWN_MARKER).touch()
            proc = self._spawn(prepared.invocation, files)
        except RelayError as err:
            self._fail(rec, err)
            return
        except (OSError, ValueError) as exc:
            self._fail(
                rec,
                RelayError(
                    ErrorCode.AGENT_FAILED,
                    f"could not start {rec.agent}: {exc}",
                    "check the agent's command in config.toml",
                ),
            )
            return
        deadline = time.time() + prepared.timeout_s
        self.store.mark_running(
            job_id,
            pid=proc.pid,
            pid_start_ticks=proc.start_ticks,
            boot_id=procinfo.boot_id(),
            owner_pid=self._my_pid,
            owner_start_ticks=self._my_start,
            deadline_at=deadline,
            idle_timeout_s=prepared.idle_timeout_s,
        )
        self._notify()
        await self._monitor(job_id, proc, prepared.adapter.parser(), deadline, prepared.idle_timeout_s)

    # monitoring ---------------------------------------------------------------------------

    async def _monitor(
        self,
        job_id: str,
        proc: JobProcess,
        parser: Parser,
        deadline: float,
        idle_timeout_s: float,
        last_output: float | None = None,
    ) -> None:
        files = self.files(job_id)
        live = self._live.setdefault(job_id, _Live())
        reader = LineReader(files.stdout)
        stored_seq = self.store.max_event_seq(job_id)
        seq = -1
        last_output = last_output or time.time()
        stop_reason: str | None = None
        try:
            while True:
                exited = await proc.wait_exit(supervisor.POLL_INTERVAL_S)
                seq, active = self._consume(job_id, live, reader, parser, seq, stored_seq, final=exited)
                now = time.time()
                if active:
                    last_output = now
                if exited:
                    break
                if stop_reason is None:
                    if live.stop.is_set():
                        stop_reason = live.stop_reason or "cancelled"
                    elif now >= deadline:
                        stop_reason = "timed_out:wall"
                    elif now - last_output >= idle_timeout_s:
                        stop_reason = "timed_out:idle"
                    if stop_reason is not None:
                        self.store.set_stop_reason(job_id, stop_reason)
                        with anyio.CancelScope(shield=True):
                            await proc.kill_group(self.settings.kill_grace_s)
            proc.reap_group()
            self._finalize(job_id, parser, proc.exit_code(), stop_reason)
        finally:
            proc.close()

    def _redacted(self, value: dict[str, Any]) -> dict[str, Any]:
        return redact_value(value, self._secrets)  # pyright: ignore[reportReturnType]

    def _consume(
        self, job_id: str, live: _Live, reader: LineReader, parser: Parser, seq: int, stored_seq: int, *, final: bool
    ) -> tuple[int, bool]:
        """Feed new output lines to the parser; store and forward events past `stored_seq` in bounded batches.

        Returns the last event sequence number and whether any event showed activity.
        """
        batch: list[tuple[int, Event]] = []
        batch_chars = 0
        active = False
        for line in reader.read(final=final):
            for event in parser.feed(line):
                active = active or event.type not in NOT_ACTIVITY
                seq += 1
                if seq > stored_seq:
                    batch.append((seq, event))
            batch_chars += len(line)
            if len(batch) >= PUBLISH_BATCH_EVENTS or batch_chars >= PUBLISH_BATCH_CHARS:
                self._publish(job_id, live, batch)
                batch, batch_chars = [], 0
        self._publish(job_id, live, batch)
        return seq, active

    def _publish(self, job_id: str, live: _Live, events: list[tuple[int, Event]]) -> None:
        if not events:
            return
        events = [(seq, Event(e.type, self._redacted(e.data))) for seq, e in events]
        self.store.add_events(job_id, events[0][0], [clip_event(e) for _, e in events])
        with self.files(job_id).dir.joinpath("transcript.txt").open("a", encoding="utf-8") as fh:
            for _, event in events:
                fh.write(render_event(event) + "\n")
        cap = self.settings.max_cost_usd
        if cap is not None and not live.stop.is_set():
            for _, event in events:
                cost = event.data.get("cost_usd")
                if isinstance(cost, int | float) and cost > cap:
                    live.stop_reason = "limit:cost"
                    live.stop.set()
        for seq, event in events:
            if event.type == "session.started" and event.data.get("session_id"):
                self.store.set_session(job_id, str(event.data["session_id"]))
            for listener in list(live.listeners):
                try:
                    listener.send_nowait((seq, event))
                except anyio.WouldBlock:
                    pass
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    live.listeners.remove(listener)

    def _finalize(self, job_id: str, parser: Parser, exit_code: int | None, stop_reason: str | None) -> None:
        rec = self.store.get_job(job_id)
        if rec is None or rec.is_final:
            return
        files = self.files(job_id)
        stop = stop_reason or rec.stop_reason
        result = parser.finish(exit_code, files.stderr_tail())
        live = self._live.get(job_id)
        if live is not None and live.git_before is not None and rec.cwd:
            # Agents do not always report edits (codex's shell writes, sandbox refusals): ask git.
            after = git_status(rec.cwd) or {}
            changed = {path for path, state in after.items() if live.git_before.get(path) != state}
            result = replace(result, files_changed=tuple(sorted(changed | set(result.files_changed))))
        error = result.error
        if stop == "cancelled":
            status = "cancelled"
            error = RelayError(ErrorCode.CANCELLED, "the job was cancelled", "its output so far is kept: job_result")
        elif stop == "limit:cost":
            status = "failed"
            error = RelayError(
                ErrorCode.LIMIT_REACHED,
                f"the job's reported cost passed the cap of ${self.settings.max_cost_usd}",
                "raise jobs.max_cost_usd in config.toml, or give the agent a smaller task",
            )
        elif stop and stop.startswith("timed_out"):
            status = "timed_out"
            what = "printed nothing for its idle timeout" if stop.endswith("idle") else "ran past its timeout"
            error = RelayError(
                ErrorCode.TIMEOUT,
                f"the job {what} and was stopped",
                "raise timeout_s / idle_timeout_s, or split the task",
            )
        elif result.ok:
            status, error = "completed", None
        elif exit_code is None:
            status = "interrupted"
            error = error or RelayError(
                ErrorCode.INTERRUPTED, "the job's process ended without an exit status", "run it again"
            )
        else:
            status = "failed"
        self._store_result(rec, status, result, error, exit_code)

    def _store_result(
        self,
        rec: JobRecord,
        status: str,
        result: AgentResult,
        error: RelayError | None,
        exit_code: int | None,
    ) -> None:
        files = self.files(rec.id)
        files.result.write_text(redact(result.text, self._secrets), encoding="utf-8")
        payload = self._redacted(
            {
                "usage": result.usage.to_dict(),
                "cost_usd": result.cost_usd,
                "num_turns": result.num_turns,
                "tool_uses": list(result.tool_uses),
                "permission_denials": list(result.permission_denials),
                "files_changed": list(result.files_changed),
            }
        )
        if error is not None:
            error = RelayError(error.code, redact(error.message, self._secrets), redact(error.hint, self._secrets))
        if not self.store.finish_job(
            rec.id,
            status,
            exit_code=exit_code,
            result=payload,
            error=error.to_dict() if error else None,
            session_id=result.session_id,
            model=result.model if result.model else None,
        ):
            return
        if result.session_id:
            req = rec.request
            title = job_title(req)
            self.store.upsert_session(
                rec.agent,
                result.session_id,
                cwd=str(req.get("cwd") or rec.cwd or ""),
                model=str(req.get("model")) if req.get("model") else result.model,
                permission=str(req.get("permission") or self.settings.default_permission),
                title=title,
                cost=result.cost_usd or 0.0,
            )

    def _fail(self, rec: JobRecord, err: RelayError) -> None:
        self._store_result(rec, "failed", AgentResult(ok=False, error=err), err, None)

    def _finish_without_process(self, rec: JobRecord) -> None:
        err = RelayError(ErrorCode.CANCELLED, "the job was cancelled before it started", "submit it again if needed")
        self._store_result(rec, "cancelled", AgentResult(ok=False, error=err), err, None)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # recovery -----------------------------------------------------------------------------

    def _owner_alive(self, rec: JobRecord) -> bool:
        if rec.owner_pid is None:
            return False
        if rec.owner_pid == self._my_pid and rec.owner_start_ticks == self._my_start:
            return any(e._tg is not None and rec.id in e._live for e in list(_ENGINES))
        return procinfo.is_alive(rec.owner_pid, rec.owner_start_ticks)

    def recover(self) -> list[str]:
        """Adopt jobs whose relay died: re-attach live processes, finalize ended ones, re-queue queued ones."""
        adopted: list[str] = []
        for rec in self.store.list_jobs(statuses=("queued", "running"), limit=100_000):
            if rec.id in self._live or self._owner_alive(rec):
                continue
            adopted.append(rec.id)
            self.store.set_owner(rec.id, self._my_pid, self._my_start)
            if rec.kind != "cli":
                err = RelayError(
                    ErrorCode.INTERRUPTED, "relay stopped while this job ran in its process", "run it again"
                )
                self._store_result(rec, "interrupted", AgentResult(ok=False, error=err), err, None)
                continue
            if rec.status == "queued":
                started = self._started_before_recorded(rec)
                if started is None:
                    self._live[rec.id] = _Live()
                    self._queue.append(rec.id)
                    continue
                rec = started
            self._reattach_or_finalize(rec)
        if self._queue:
            self._pump()
        return adopted

    def _started_before_recorded(self, rec: JobRecord) -> JobRecord | None:
        """A `queued` job whose shim already ran (relay died between spawn and recording it).

        Running it again would run the agent twice; record it as running instead, with the pid the
        shim wrote if that process is still the shim (it started when the pid file was written).
        """
        files = self.files(rec.id)
        pid = files.read_pid()
        if pid is None and (files.dir / SPAWN_MARKER).exists():
            # Spawned (or about to be) when relay died: give the shim a moment to record its pid.
            deadline = time.monotonic() + SPAWN_SETTLE_S
            while pid is None and not files.exit.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
                pid = files.read_pid()
        if pid is None and not files.exit.exists():
            return None
        ticks: int | None = None
        if pid is not None:
            started = procinfo.start_epoch(pid)
            written = _mtime(files.pid)
            if started is not None and abs(started - written) <= PID_FILE_SLACK_S:
                ticks = procinfo.start_ticks(pid)
        self.store.mark_running(
            rec.id,
            pid=pid if ticks is not None else None,
            pid_start_ticks=ticks,
            boot_id=procinfo.boot_id(),
            owner_pid=self._my_pid,
            owner_start_ticks=self._my_start,
            deadline_at=rec.created_at + float(rec.request.get("timeout_s") or self.settings.job_timeout_s),
            idle_timeout_s=float(rec.request.get("idle_timeout_s") or self.settings.idle_timeout_s),
        )
        return self.get(rec.id)

    def reconcile(self) -> list[str]:
        """Finalize jobs whose relay died and whose process has ended (for CLI readers; adopts nothing alive)."""
        finalized: list[str] = []
        for rec in self.store.list_jobs(statuses=("running",), limit=100_000):
            if rec.kind != "cli" or rec.id in self._live or self._owner_alive(rec):
                continue
            if rec.pid is not None and procinfo.is_alive(rec.pid, rec.pid_start_ticks, rec.boot_id):
                continue
            self._reattach_or_finalize(rec)
            finalized.append(rec.id)
        return finalized

    def _reattach_or_finalize(self, rec: JobRecord) -> None:
        files = self.files(rec.id)
        try:
            adapter = get_adapter(rec.agent, self.settings)
        except RelayError as err:
            self._fail(rec, err)
            return
        alive = rec.pid is not None and procinfo.is_alive(rec.pid, rec.pid_start_ticks, rec.boot_id)
        if alive and rec.pid is not None and self._tg is not None:
            proc = supervisor.attach(rec.pid, rec.pid_start_ticks, files)
            self._live[rec.id] = _Live()
            self._running[rec.id] = rec.agent
            last_output = max(_mtime(files.stdout), _mtime(files.stderr), rec.started_at or 0.0)
            self._tg.start_soon(self._run_attached, rec, proc, adapter.parser(), last_output)
            return
        # The process ended while no relay watched it: its files hold everything.
        parser = adapter.parser()
        stored_seq = self.store.max_event_seq(rec.id)
        self._consume(rec.id, _Live(), LineReader(files.stdout), parser, -1, stored_seq, final=True)
        self._finalize(rec.id, parser, files.read_exit_code(), None)

    async def _run_attached(self, rec: JobRecord, proc: JobProcess, parser: Parser, last_output: float) -> None:
        try:
            await self._monitor(
                rec.id,
                proc,
                parser,
                rec.deadline_at or (time.time() + self.settings.job_timeout_s),
                rec.idle_timeout_s or self.settings.idle_timeout_s,
                last_output=last_output,
            )
        finally:
            self._job_ended(rec.id)

    # queries ------------------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord:
        rec = self.store.get_job(job_id)
        if rec is None:
            plausible = 4 <= len(job_id) <= 32 and all(c in "0123456789abcdef" for c in job_id)
            matches = self.store.find_jobs(job_id) if plausible else []
            if len(matches) == 1:
                return matches[0]
            raise RelayError(ErrorCode.JOB_NOT_FOUND, f"no job {job_id!r}", "list jobs with job_list (or `relay jobs`)")
        return rec

    def envelope(self, job_id: str) -> dict[str, Any]:
        rec = self.get(job_id)
        return envelope(rec, self.files(rec.id), self.settings.output_limit_chars)

    def list(
        self,
        *,
        statuses: Iterable[str] = (),
        agent: str | None = None,
        since: float | None = None,
        session_id: str | None = None,
        limit: int = 50,
    ) -> list[JobRecord]:
        return self.store.list_jobs(statuses=statuses, agent=agent, since=since, session_id=session_id, limit=limit)

    def read_output(self, job_id: str, view: str, offset: int, limit: int) -> dict[str, Any]:
        """A page of a job's full output: final text, transcript, raw stdout events, or stderr."""
        rec = self.get(job_id)
        files = self.files(rec.id)
        paths = {
            "final": files.result,
            "transcript": files.dir / "transcript.txt",
            "events": files.stdout,
            "stderr": files.stderr,
        }
        if view not in paths:
            raise invalid(f"view {view!r} is not one of {', '.join(paths)}", "use final, transcript, events or stderr")
        if offset < 0 or limit < 1:
            raise invalid("offset must be >= 0 and limit >= 1", "page with offset=0, then offset += len(text)")
        if view == "final" and not rec.is_final:
            text, total = "", 0
        else:
            text, total = read_text_page(paths[view], offset, limit)
        end = offset + len(text)
        return {
            "job_id": rec.id,
            "status": rec.status,
            "view": view,
            "offset": offset,
            "text": text,
            "total_chars": total,
            "next_offset": end if end < total else None,
            "complete": rec.is_final and end >= total,
        }

    def read_raw(self, job_id: str, offset: int, limit: int) -> tuple[bytes, int]:
        rec = self.get(job_id)
        return read_bytes_page(self.files(rec.id).stdout, offset, limit)

    def events(self, job_id: str, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, float, Event]]:
        return self.store.events(self.get(job_id).id, after_seq, limit)

    # waiting and cancelling ---------------------------------------------------------------

    def subscribe(self, job_id: str) -> MemoryObjectReceiveStream[tuple[int, Event]]:
        send, receive = anyio.create_memory_object_stream[tuple[int, Event]](LISTENER_BUFFER)
        live = self._live.get(job_id)
        if live is None or live.done.is_set():
            send.close()
        else:
            live.listeners.append(send)
        return receive

    async def wait(
        self, job_ids: list[str], mode: Literal["any", "all"] = "any", timeout: float = 30.0
    ) -> list[JobRecord]:
        """Block until any/all of the jobs are final or `timeout` passes; returns their records."""
        if not job_ids:
            raise invalid("job_ids is empty", "pass the ids returned by delegate")
        if timeout < 0:
            raise invalid("timeout must be >= 0", "pass seconds to wait, e.g. 30")
        ids = [self.get(j).id for j in job_ids]
        with anyio.move_on_after(min(timeout, MAX_WAIT_S)):
            while True:
                records = [self.get(j) for j in ids]
                finals = [r.is_final for r in records]
                if (mode == "any" and any(finals)) or all(finals):
                    return records
                changed = self._changed
                remote = any(j not in self._live for j in ids)
                with anyio.move_on_after(REMOTE_POLL_S if remote else MAX_WAIT_S):
                    await changed.wait()
        return [self.get(j) for j in ids]

    async def wait_one(self, job_id: str, timeout: float) -> JobRecord:
        live = self._live.get(job_id)
        if live is not None:
            with anyio.move_on_after(timeout):
                await live.done.wait()
            return self.get(job_id)
        return (await self.wait([job_id], "all", timeout))[0]

    async def cancel(self, job_id: str) -> JobRecord:
        """Stop a job: kill its whole process group (SIGTERM, grace, SIGKILL) and mark it cancelled."""
        rec = self.get(job_id)
        if rec.is_final:
            return rec
        self.store.set_stop_reason(rec.id, "cancelled")
        self.store.request_cancel(rec.id)
        live = self._live.get(rec.id)
        if live is not None:
            live.stop_reason = "cancelled"
            live.stop.set()
            if rec.id in self._queue:
                self._queue.remove(rec.id)
                self._finish_without_process(rec)
                self._job_ended(rec.id)
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(self.settings.kill_grace_s + supervisor.KILL_CONFIRM_S + 2),
            ):
                await live.done.wait()
            return self.get(rec.id)
        # Run by another relay process (or by none): kill the group ourselves if it is still ours to kill.
        if rec.pid is not None and procinfo.is_alive(rec.pid, rec.pid_start_ticks, rec.boot_id):
            proc = supervisor.attach(rec.pid, rec.pid_start_ticks, self.files(rec.id))
            with anyio.CancelScope(shield=True):
                await proc.kill_group(self.settings.kill_grace_s)
            proc.close()
        if rec.status == "queued" or not self._owner_alive(rec):
            self._reattach_or_finalize_stopped(rec)
        else:
            await self.wait([rec.id], "all", self.settings.kill_grace_s + supervisor.KILL_CONFIRM_S)
        return self.get(rec.id)

    def _reattach_or_finalize_stopped(self, rec: JobRecord) -> None:
        if rec.status == "queued":
            self._finish_without_process(rec)
        else:
            self._reattach_or_finalize(self.get(rec.id))
        self._notify()

    def running_count(self) -> int:
        return len(self._running)


def _request_from(rec: JobRecord) -> JobRequest:
    fields = JobRequest.__dataclass_fields__
    return JobRequest(**{k: v for k, v in rec.request.items() if k in fields})


def git_status(cwd: str) -> dict[str, str] | None:
    """Path -> porcelain status (with size and mtime) of a git work tree (None when cwd is not in one, or git is missing)."""
    # Most job folders are not repositories: look for .git before paying for a git process.
    if not any((folder / ".git").exists() for folder in (Path(cwd), *Path(cwd).parents)) or not shutil.which("git"):
        return None
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all", "-z"],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    entries: dict[str, str] = {}
    for item in out.stdout.decode("utf-8", "replace").split("\0"):
        if len(item) > 3:
            path = item[3:]
            try:
                st = os.stat(os.path.join(cwd, path))
                stamp = f"{st.st_size}:{st.st_mtime_ns}"
            except OSError:
                stamp = "gone"
            # Status plus size and mtime: an already-dirty file edited again still counts as changed.
            entries[path] = f"{item[:2]} {stamp}"
    return entries


def _api_key_values(home: Path) -> list[str]:
    """Values in RELAY_HOME/api_keys.json, so they are redacted like keys from the environment."""
    try:
        data = json.loads((home / "api_keys.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    return [str(v) for v in data.values() if isinstance(v, str)]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
