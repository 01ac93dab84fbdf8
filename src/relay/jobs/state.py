"""What every room of the job engine shares: settings, store, the jobs this process runs, change notices."""

from __future__ import annotations

import json
import os
import secrets
import socket
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from relay.agents.acp.inbox import CANCEL, post_if_open
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.events import Event
from relay.jobs.bounds import limit_worker_threads, spare_folders
from relay.jobs.fence import Fence
from relay.jobs.mirror import store_text_page
from relay.jobs.output import read_text_page
from relay.principal import current
from relay.runtime import procinfo
from relay.runtime.fencing import FENCED_MARK
from relay.runtime.folders import SparePool
from relay.runtime.supervisor import JobFiles
from relay.secrets import redact_value, secret_values
from relay.store import JobRecord, JobStore, NewJob, WorkerInfo
from relay.store.health import make_reserve
from relay.store.jobwrite import Written
from relay.text import is_utf8
from relay.workspaces import Workspaces

# A job's stop reason when this process lost its claim (another worker took it over): the process is
# stopped and nothing more of the job is written by this one.
LEASE_LOST = "lease_lost"


@dataclass
class Live:
    """In-memory state of a job this process is running."""

    done: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: str | None = None
    # `git status` of the job's cwd before it ran (None: not a git repository).
    git_before: dict[str, str] | None = None
    listeners: list[MemoryObjectSendStream[tuple[int, Event]]] = field(default_factory=lambda: [])

    def written(self, done: Written) -> None:
        """After a write of the job: its claim was lost when the write was refused (the job is not ours now)."""
        if not done.held:
            self.stop_reason = LEASE_LOST
            self.stop.set()


# Job states of running engines in this process: a job recorded as owned by this process is only
# "owned" if one of them runs it.
_ACTIVE: weakref.WeakSet[JobState] = weakref.WeakSet()


class Epochs(dict[str, int]):
    """The fencing epoch of each claim this process holds; while it holds one, its fence guards the job's folder
    (the keeper kills that job's processes once the lease may have run out)."""

    def __init__(self, state: JobState) -> None:
        super().__init__()
        self._state = state

    def __setitem__(self, job_id: str, epoch: int) -> None:
        super().__setitem__(job_id, epoch)
        folder = self._state.files(job_id).dir
        if self._state.fence.marked:
            (folder / FENCED_MARK).unlink(missing_ok=True)
        self._state.fence.guard(job_id, folder)

    def pop(self, job_id: str, default: int | None = None, /) -> int | None:  # pyright: ignore[reportIncompatibleMethodOverride]
        fence = self._state.fence
        epoch = self.get(job_id)
        if epoch is not None and fence.cut(job_id, self._state.files(job_id).dir):
            fence.lost_claims[job_id] = epoch
        fence.release(job_id)
        return super().pop(job_id, default)


def new_job_id() -> str:
    return secrets.token_hex(8)


# How many jobs' JobFiles `files` keeps; how many result texts `keep_result` keeps, of at most how many characters.
KEPT_FILES = 256
KEPT_RESULTS = 32
KEPT_RESULT_CHARS = 64 * 1024
# How long an engine's end waits for the job folders being made ahead.
FILL_WAIT_S = 10.0


class JobState:
    """The engine's shared state. Rooms read and change it; only `Engine.running()` opens and closes it."""

    def __init__(self, settings: Settings, store: JobStore) -> None:
        self.settings = settings
        self._files: dict[str, tuple[Settings, JobFiles]] = {}
        self._results: dict[str, str] = {}
        self.store = store
        self.tg: TaskGroup | None = None
        # Jobs this process runs (or has queued), and the agent of each one holding a slot.
        self.live: dict[str, Live] = {}
        self.running: dict[str, str] = {}
        self._changed = anyio.Event()
        # Keys and the HTTP bearer tokens: redacted from what relay records and returns.
        tokens = [t.token for t in settings.tokens]
        self.secrets = secret_values(settings.environ, [*_api_key_values(settings.home), *tokens])
        self.my_pid = os.getpid()
        self.my_start = procinfo.start_ticks(self.my_pid)
        # Job folders made ahead of time, so a job's files cost a rename on its way (runtime/folders.py):
        # as many as may start at once, so a burst of jobs finds its folders made.
        self.spares = SparePool(settings.jobs_dir, spare_folders(settings))
        # Git worktrees of `workspace="worktree"` jobs (opened on first use).
        self.workspaces = Workspaces(settings)
        # This process as a worker of the store's queue, and the fencing epoch of each claim it holds.
        self.worker = worker_info(settings, self.my_pid, self.my_start)
        # Its own view of its lease (jobs/fence.py): timed where other hosts judge it by its lease (PostgreSQL).
        timed = settings.runs_jobs and store.spans_hosts
        self.fence = Fence(settings.lease_s, settings.home, timed=timed, marked=store.spans_hosts)
        self.epochs = Epochs(self)
        self.draining = False  # a worker stopping: it claims nothing more
        # In-process jobs (model calls) this process runs: they hold no slot, and no other process can run them.
        self.tasks: set[str] = set()

    def open(self, tg: TaskGroup) -> None:
        limit_worker_threads()  # every pool that grows has a bound (jobs/bounds.py)
        self.tg = tg
        make_reserve(self.settings.home)
        _ACTIVE.add(self)

    def close(self) -> None:
        self.tg = None
        self.fence.close()  # its keeper too, even when the tending loop never ran
        self.workspaces.close()
        self.spares.wait_filled(FILL_WAIT_S)
        _ACTIVE.discard(self)

    def task_group(self) -> TaskGroup:
        if self.tg is None:
            raise RelayError(ErrorCode.INTERNAL, "the job engine is not running", "start relay with `relay serve`")
        return self.tg

    def files(self, job_id: str) -> JobFiles:
        """Where the job's process writes (kept for the jobs looked at last: a job's way asks a dozen times)."""
        found = self._files.get(job_id)
        if found is None or found[0] is not self.settings:
            found = self._files[job_id] = (self.settings, JobFiles(self.settings.jobs_dir / job_id))
            if len(self._files) > KEPT_FILES:
                del self._files[next(iter(self._files))]
        return found[1]

    def post_cancel(self, job_id: str) -> None:
        """An ACP job's driver (the one with an inbox) sends its agent session/cancel on this (docs/acp.md)."""
        post_if_open(self.files(job_id).dir, {"type": CANCEL})

    def refill_spares(self) -> None:
        """Make spare job folders in a thread of low priority (called once a job has ended: off every job's way)."""
        if self.tg is not None:
            self.spares.fill_behind()

    def keep_result(self, job_id: str, text: str) -> None:
        """The result text a job's end just wrote to its file, kept for the reply that follows (when small)."""
        if len(text) <= KEPT_RESULT_CHARS:
            self._results[job_id] = text
            if len(self._results) > KEPT_RESULTS:
                del self._results[next(iter(self._results))]

    def text_page(self, job_id: str, stream: str, path: Path, offset: int, limit: int) -> tuple[str, int]:
        """A page of characters of one of a job's outputs: from its file, or from the store when the job ran on
        another host (its file is there, its copy in the store: jobs/mirror.py); a result this process just
        wrote, from memory."""
        kept = self._results.get(job_id) if stream == "result" else None
        if kept is not None and path == self.files(job_id).result:
            return kept[offset : offset + limit], len(kept)
        if self.store.spans_hosts and not path.exists():
            return store_text_page(self.store, job_id, stream, offset, limit)
        return read_text_page(path, offset, limit)

    def runs_here(self, job_id: str) -> bool:
        """Whether this process runs the job (holds its claim, or runs it as an in-process task)."""
        return job_id in self.running or job_id in self.tasks

    @property
    def changed(self) -> anyio.Event:
        """Set at the next change of any job of this process (take it before checking, then wait)."""
        return self._changed

    def notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def new_job(
        self, job_id: str, agent: str, kind: str, request: dict[str, Any], model: str | None, cwd: str | None
    ) -> NewJob:
        """A queued job of the principal acting now, its request redacted: a CLI job waits in the store's queue for
        a worker's claim; an in-process task is this process's from the start."""
        labels = request.get("labels") or ()
        return NewJob(
            job_id,
            agent,
            kind,
            self.redacted(request),
            model,
            cwd,
            owner=self.owner if kind == "task" else None,
            principal=current().name,
            labels=[str(label) for label in labels],
            retry=request.get("retry"),
        )

    def redacted(self, value: dict[str, Any]) -> dict[str, Any]:
        return redact_value(value, self.secrets)  # pyright: ignore[reportReturnType]

    def get(self, job_id: str, principal: str | None = None) -> JobRecord:
        """A job by id, or by a unique prefix of one; JOB_NOT_FOUND otherwise. With `principal`, only its
        own jobs are found (another's id or prefix answers as if no such job existed)."""
        # An id no job can have (a lone surrogate is not text to look up) is simply not found.
        rec = self.store.get_job(job_id, principal=principal) if is_utf8(job_id) else None
        if rec is None:
            plausible = 4 <= len(job_id) <= 32 and all(c in "0123456789abcdef" for c in job_id)
            matches = self.store.find_jobs(job_id, principal=principal) if plausible else []
            if len(matches) == 1:
                return matches[0]
            raise RelayError(ErrorCode.JOB_NOT_FOUND, f"no job {job_id!r}", "list jobs with job_list (or `relay jobs`)")
        return rec

    @property
    def owner(self) -> tuple[int, int | None]:
        """This relay process as a job's owner: its pid and start time (so a reused pid is not it)."""
        return (self.my_pid, self.my_start)

    def owner_alive(self, rec: JobRecord) -> bool:
        """Whether the relay recorded as the job's owner still runs it."""
        if rec.owner_pid is None:
            return False
        if rec.owner_pid == self.my_pid and rec.owner_start_ticks == self.my_start:
            return any(s.tg is not None and rec.id in s.live for s in list(_ACTIVE))
        return procinfo.is_alive(rec.owner_pid, rec.owner_start_ticks)


def worker_info(settings: Settings, pid: int, start: int | None) -> WorkerInfo:
    """This process as a worker: named by `relay worker --name` or by its host and pid, with a unique id."""
    host = socket.gethostname()
    name = settings.worker_name or f"{host}:{pid}"
    return WorkerInfo(
        id=f"{name}/{secrets.token_hex(4)}",
        name=name,
        host=host,
        pid=pid,
        start_ticks=start,
        boot_id=procinfo.host_id(),
        agents=settings.worker_agents,
        labels=settings.worker_labels,
        slots=settings.worker_slots or settings.max_concurrent,
        lease_s=settings.lease_s,
    )


def _api_key_values(home: Path) -> list[str]:
    """Values in RELAY_HOME/api_keys.json, so they are redacted like keys from the environment."""
    try:
        data = json.loads((home / "api_keys.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    return [str(v) for v in data.values() if isinstance(v, str)]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]


def mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
