"""IAC.md and CONTEXT.md: human views of the audit log (seed 004's format), rendered from it, never edited back.

IAC.md lists the newest jobs first (15 by default, as the seed), each with a status line, its input and
its output in collapsible blocks; CONTEXT.md is the table of jobs still queued or running (with
`context_since`: those queued since then, and the `carried` ones the store still had queued or running then,
which outlived the last relay; not a job whose end a killed relay stored but never logged). Both are
written to a temporary file and renamed over the old one, so a crash mid-render leaves the previous
view whole; both are created readable by relay's user only (0600: they hold prompts and outputs, and a
profile may write them into a project folder others can read). `ViewsConfig.principals` keeps the views to
some principals' jobs (powerspawn on a relay serving `user` tokens: the local person's only). Rendering runs
in a worker thread, batched (RENDER_DELAY_S), never in a job's way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from relay.audit.log import LOG_FILE, parse_loose
from relay.osfiles import lock as lock_fd
from relay.osfiles import write_all
from relay.principal import LOCAL_NAME

IAC_FILE = "IAC.md"
CONTEXT_FILE = "CONTEXT.md"
LOCK_FILE = "audit.views.lock"
# Seed 004: "Limited to last 15 entries".
DEFAULT_IAC_ENTRIES = 15
# Heading: the first 50 characters of the prompt (seed 004).
SUMMARY_CHARS = 50
FINAL_EVENTS = ("completed", "failed", "cancelled", "timed_out", "interrupted")
# Changes are rendered together this long after the first one (each render writes two files: ~1 ms or more).
RENDER_DELAY_S = 0.5
# An idle worker thread waits this long for the next change before it ends.
WORKER_LINGER_S = 30.0
# The views hold prompts and outputs: readable by relay's user only, from their first byte.
VIEW_MODE = 0o600

logger = logging.getLogger("relay.audit")


@dataclass(frozen=True)
class ViewsConfig:
    """Where the views go (None: not rendered) and how many IAC entries they keep."""

    out_dir: Path | None
    iac_entries: int = DEFAULT_IAC_ENTRIES
    # CONTEXT.md shows only the jobs queued since then (seed 004: it resets when the server restarts) and the
    # `carried` ones: those the store still had queued or running then (they outlived the last server).
    context_since: float | None = None
    carried: frozenset[str] = frozenset()
    # Only the jobs of these principals (None: every principal's; a job recorded without one is `local`'s).
    principals: frozenset[str] | None = None


def views_config(
    home: Path,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    default_dir: Path | None = None,
    context_since: float | None = None,
) -> ViewsConfig:
    """`[audit]` in relay's config.toml: `views_dir` (a path, "workspace" for relay's working directory,
    or "" for no views; default `default_dir`, else RELAY_HOME) and `iac_entries`. RELAY_AUDIT_VIEWS_DIR
    wins over the file, so a project's MCP config can ask for the views in its own root.

    The store (which has no Settings) opens the audit log, so this reads its two variables itself.
    """
    env = os.environ if environ is None else environ
    config = Path(env["RELAY_CONFIG"]) if env.get("RELAY_CONFIG") else home / "config.toml"
    table: dict[str, Any] = {}
    with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
        raw = tomllib.loads(config.read_text(encoding="utf-8")).get("audit")
        table = raw if isinstance(raw, dict) else {}  # pyright: ignore[reportUnknownVariableType]
    where = env.get("RELAY_AUDIT_VIEWS_DIR", table.get("views_dir", None))
    entries = table.get("iac_entries", DEFAULT_IAC_ENTRIES)
    entries = entries if isinstance(entries, int) and entries > 0 else DEFAULT_IAC_ENTRIES
    if where is None:
        return ViewsConfig(default_dir or home, entries, context_since)
    if where in ("", False):
        return ViewsConfig(None, entries, context_since)
    if where == "workspace":
        return ViewsConfig(cwd or Path.cwd(), entries, context_since)
    return ViewsConfig(Path(str(where)).expanduser(), entries, context_since)


@dataclass
class Entry:
    """One job as the views show it, folded from its audit entries."""

    job_id: str
    agent: str = "?"
    model: str | None = None
    prompt: str = ""
    prompt_chars: int = 0
    started: float | None = None
    running_at: float | None = None
    ended: float | None = None
    status: str = "queued"
    cost_usd: float | None = None
    error: str | None = None
    output: str = ""
    output_chars: int = 0
    tools: list[str] = field(default_factory=lambda: [])

    @property
    def final(self) -> bool:
        return self.status in FINAL_EVENTS

    def fold(self, event: str, ts: float, data: dict[str, Any]) -> None:
        if event == "queued":
            self.agent = str(data.get("agent") or self.agent)
            self.model = _opt_str(data.get("model")) or self.model
            self.prompt = str(data.get("prompt") or "")
            self.prompt_chars = int(data.get("prompt_chars") or len(self.prompt))
            self.started = ts
        elif event == "running":
            self.running_at = ts
            self.started = self.started or ts
            self.status = "running"
        elif event in FINAL_EVENTS:
            self.status = event
            self.ended = ts
            self.model = _opt_str(data.get("model")) or self.model
            cost = data.get("cost_usd")
            self.cost_usd = float(cost) if isinstance(cost, int | float) else None
            err: Any = data.get("error")
            message: Any = cast(dict[str, Any], err).get("message") if isinstance(err, dict) else None
            self.error = str(message) if message else None
            self.output = str(data.get("output") or "")
            self.output_chars = int(data.get("output_chars") or len(self.output))
            tools: Any = data.get("tools")
            self.tools = [str(t) for t in cast(list[Any], tools)] if isinstance(tools, list) else []


def _owner(data: Any) -> str:
    """The principal a job's `queued` entry records (one recorded before principals existed is `local`'s)."""
    owner: Any = cast(dict[str, Any], data).get("principal") if isinstance(data, dict) else None
    return str(owner) if owner else LOCAL_NAME


def _opt_str(value: Any) -> str | None:
    return str(value) if value else None


@dataclass
class ViewState:
    """The jobs the views show: every job still active plus the newest finished ones, oldest first."""

    keep: int = DEFAULT_IAC_ENTRIES
    principals: frozenset[str] | None = None
    entries: dict[str, Entry] = field(default_factory=lambda: {})
    offset: int = 0
    # Jobs of other principals still active (their later entries are skipped; forgotten at their end).
    hidden: set[str] = field(default_factory=lambda: set[str]())

    def fold_line(self, line: bytes) -> None:
        entry = parse_loose(line)
        if entry is None:
            return
        job_id, event, data = entry.get("job_id"), entry.get("event"), entry.get("data")
        if not isinstance(job_id, str) or not isinstance(event, str):
            return
        ts = entry.get("ts")
        if job_id in self.hidden:
            if event in FINAL_EVENTS:
                self.hidden.discard(job_id)
            return
        job = self.entries.get(job_id)
        if job is None:
            if event not in ("queued", "running", *FINAL_EVENTS):
                return
            if self.principals is not None and (event != "queued" or _owner(data) not in self.principals):
                if event not in FINAL_EVENTS:  # another's (or one whose owner is unknown): skip it to its end
                    self.hidden.add(job_id)
                return
            job = self.entries[job_id] = Entry(job_id)
        job.fold(event, float(ts) if isinstance(ts, int | float) else 0.0, data if isinstance(data, dict) else {})  # pyright: ignore[reportUnknownArgumentType]
        self._prune()

    def _prune(self) -> None:
        while len(self.entries) > self.keep:
            oldest_final = next((k for k, e in self.entries.items() if e.final), None)
            if oldest_final is None:
                return
            del self.entries[oldest_final]


class Views:
    """Renders IAC.md and CONTEXT.md from one RELAY_HOME's audit log into `config.out_dir`."""

    def __init__(self, home: Path, config: ViewsConfig) -> None:
        self.home = home
        self.config = config
        self.state = ViewState(config.iac_entries, config.principals)
        self._cv = threading.Condition()
        # One render at a time in this process (the worker's, or one asked for now): the state is folded by one.
        self._rendering = threading.Lock()
        self._dirty = False
        self._busy = False
        self._worker: threading.Thread | None = None

    def schedule(self) -> None:
        """Render soon, in a worker thread: one pass RENDER_DELAY_S after the first change, folding every change
        meanwhile. A job's three entries (queued, running, its end) cost one render, not three, and it comes after
        a short job's reply instead of competing with it; the worker lingers a while, so no thread is started
        per job."""
        if self.config.out_dir is None:
            return
        with self._cv:
            self._dirty = True
            self._cv.notify_all()
            if self._worker is not None:
                return
            self._worker = threading.Thread(target=self._work, name="relay-audit-views", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            with self._cv:
                if not self._dirty and not self._cv.wait_for(lambda: self._dirty, WORKER_LINGER_S):
                    self._worker = None
                    self._cv.notify_all()
                    return
                self._busy = True
            time.sleep(RENDER_DELAY_S)
            with self._cv:
                self._dirty = False
            try:
                self.render()
            except Exception as exc:  # a view that cannot be written must not stop the next one
                logger.warning("rendering IAC.md / CONTEXT.md failed: %s", exc)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait (bounded) until no render is pending; True when idle."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._dirty and not self._busy, timeout)

    def render(self, now: float | None = None) -> None:
        """Fold the log's new lines and write both views (under a lock shared with other relay processes)."""
        out = self.config.out_dir
        if out is None or not self.home.is_dir():  # a home removed with its log: nothing to render, nothing made
            return
        with self._rendering, (self.home / LOCK_FILE).open("a") as lock:
            lock_fd(lock.fileno())
            self._catch_up()
            stamp = now if now is not None else datetime.now(UTC).timestamp()
            entries = list(self.state.entries.values())
            out.mkdir(parents=True, exist_ok=True)
            _write_atomic(out / IAC_FILE, render_iac(entries, self.config.iac_entries))
            context = render_context(entries, stamp, self.config.context_since, self.config.carried)
            _write_atomic(out / CONTEXT_FILE, context)

    def _catch_up(self) -> None:
        path = self.home / LOG_FILE
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < self.state.offset:  # the log was replaced: start again
            self.state = ViewState(self.config.iac_entries, self.config.principals)
        if size == self.state.offset:
            return
        with path.open("rb") as fh:
            fh.seek(self.state.offset)
            for raw in fh:
                if not raw.endswith(b"\n"):  # a line still being written waits for the next pass
                    break
                self.state.fold_line(raw[:-1])
                self.state.offset += len(raw)


def _write_atomic(path: Path, text: str) -> None:
    """Write `text` to a new file created with VIEW_MODE (never readable by others, not even for a moment) and
    rename it over `path` (an old view of any mode is replaced whole)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # left by a render that died, with this pid and thread id
    try:
        fd = os.open(tmp, flags, VIEW_MODE)
        try:
            write_all(fd, text.encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


# rendering (pure) ---------------------------------------------------------------------------


def _clock(ts: float | None) -> str:
    return datetime.fromtimestamp(ts or 0, UTC).strftime("%H:%M:%S UTC")


def _summary(prompt: str) -> str:
    flat = " ".join(prompt.split())
    return flat[:SUMMARY_CHARS] + ("..." if len(flat) > SUMMARY_CHARS else "")


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in the text (4 when it holds ```, as the seed)."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _block(title: str, text: str) -> list[str]:
    fence = _fence(text)
    return ["<details>", f"<summary>{title}</summary>", "", fence, text, fence, "", "</details>"]


def short_id(job_id: str) -> str:
    """The 8-hex id the views show (a unique prefix of the job id; PowerSpawn's agent id)."""
    return job_id[:8]


def _who(entry: Entry) -> str:
    return f"{entry.agent} ({entry.model or 'default'})"


def status_line(entry: Entry) -> str:
    tail = f"| `#{short_id(entry.job_id)}` | {_who(entry)} | {_clock(entry.started)} | Tools: "
    tail += ", ".join(entry.tools) if entry.tools else "None"
    if not entry.final:
        label = "Running" if entry.status == "running" else "Queued"
        return f"- [ ] ⏳ **{label}** {tail}"
    since = entry.running_at or entry.started
    secs = max(0.0, (entry.ended or 0) - since) if since is not None else 0.0
    if entry.status == "completed":
        return f"- [x] ✅ **Done** ({secs:.1f}s, ${entry.cost_usd or 0:.4f}) {tail}"
    error = " ".join((entry.error or entry.status).split())
    return f"- [x] ❌ **Failed**: {error} ({secs:.1f}s) {tail}"


def render_iac(entries: list[Entry], limit: int = DEFAULT_IAC_ENTRIES) -> str:
    """The IAC.md text: newest `limit` jobs first, each as seed 004's entry."""
    lines = [
        "# Inter-Agent Communication Log",
        "",
        f"> Newest entries first. Limited to last {limit} entries. Rendered by relay from its audit log "
        "(`relay audit verify` checks it); edits here are overwritten.",
        "",
    ]
    for entry in list(reversed(entries))[:limit]:
        lines += [f"### 🤖 {_summary(entry.prompt)}", status_line(entry), ""]
        lines += _block(f"📥 Input ({entry.prompt_chars} chars)", entry.prompt)
        lines.append("")
        if entry.final:
            lines += _block(f"📤 Output ({entry.output_chars} chars)", entry.output)
        else:
            lines.append(f"<!-- RESULT_{short_id(entry.job_id)} -->")
        lines += ["", "---", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_context(
    entries: list[Entry], now: float, since: float | None = None, carried: frozenset[str] = frozenset()
) -> str:
    """The CONTEXT.md text: a table of the jobs still queued or running (queued since `since` or `carried`, if given)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    active = [e for e in entries if not e.final and (since is None or (e.started or 0) >= since or e.job_id in carried)]
    lines = [
        "# Agent Context",
        "",
        f"Last Updated: {stamp}",
        "",
        "## Active Agents",
        "",
        "| ID | Agent | Task | Started |",
        "|----|-------|------|---------|",
    ]
    if not active:
        lines.append("| - | - | No active agents | - |")
    for entry in active:
        lines.append(
            f"| `{short_id(entry.job_id)}` | {_cell(_who(entry))} | {_cell(_summary(entry.prompt))} "
            f"| {_clock(entry.started)} |"
        )
    lines += ["", "## Notes", "", "Queued and running jobs only; see IAC.md for history.", ""]
    return "\n".join(lines)
