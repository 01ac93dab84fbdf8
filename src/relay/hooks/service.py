"""Session hooks for CLIs without relay-native session tracking (seed 003's `call_hook`).

SessionStart registers a session (id, source CLI, cwd, project, parent) and hands back the summary
of the project's last session; PromptSubmit records the prompt and gives the session its title;
Stop pauses it; SessionEnd writes its summary (by a model when one is configured, else from its
last prompts and the tasks it touched). The other hook types are recorded as events.

Every session belongs to the principal that reported it (relay/principal.py's `current()`): a hook
reaches only the caller's own sessions (another's id names a new session of the caller's), and the
summary SessionStart restores is the caller's own last one in the project, never another principal's.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.hooks.store import HookSession, HookStore
from relay.principal import current
from relay.tracker import Project, TaskStore, resolve_project

Asker = Callable[[str, str], Awaitable[str]]

# Seed 003's hook types and their kebab-case forms.
HOOK_TYPES: dict[str, str] = {
    "SessionStart": "session-start",
    "SessionEnd": "session-end",
    "PromptSubmit": "prompt-submit",
    "UserPromptSubmit": "user-prompt-submit",
    "Stop": "stop",
    "PreToolUse": "pre-tool-use",
    "PostToolUse": "post-tool-use",
    "PreCompact": "pre-compact",
    "SubagentStart": "subagent-start",
    "SubagentStop": "subagent-stop",
    "Notification": "notification",
}
START_SOURCES = ("startup", "clear", "resume", "compact")
# A start after /clear or a compaction continues the project's previous session: it becomes the parent.
HANDOFF_SOURCES = ("clear", "compact")
DEFAULT_SOURCE = "Unknown"
TITLE_CHARS = 80
SESSION_ID_CHARS = 200
# How much of a transcript's end a model summary reads.
TRANSCRIPT_TAIL_CHARS = 20_000
SUMMARY_PROMPTS = 5
MACHINE_ID_FILE = "machine_id"
# Transcripts relay reads for a summary live under the allowed roots or in these CLI folders of the home.
TRANSCRIPT_HOMES = (".codex", ".gemini", ".claude", ".cursor", ".copilot")

SUMMARY_SYSTEM = (
    "You summarize a coding-agent session for whoever continues the work: what was asked, what was done, "
    "which tasks moved, and what is left. Plain text, at most 200 words, no preamble."
)


def normalize(hook_type: str) -> str | None:
    """The canonical (CamelCase) hook type for any accepted spelling, or None."""
    key = re.sub(r"[-_\s]", "", hook_type).lower()
    for name in HOOK_TYPES:
        if name.lower() == key:
            return name
    return None


def title_from(prompt: str) -> str:
    """A session title from a prompt: its first line, whitespace collapsed, cut at a word near 80 characters."""
    first = next((line for line in prompt.splitlines() if line.strip()), "")
    text = " ".join(first.split())
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[:TITLE_CHARS].rsplit(" ", 1)[0] or text[:TITLE_CHARS]
    return cut + "…"


def machine_id(settings: Settings) -> str:
    """This machine's id: /etc/machine-id, else one relay made once and keeps in its home."""
    for path in (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id")):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text:
            return text
    own = settings.home / MACHINE_ID_FILE
    try:
        return own.read_text(encoding="utf-8").strip()
    except OSError:
        made = uuid.uuid4().hex
        own.parent.mkdir(parents=True, exist_ok=True)
        own.write_text(made, encoding="utf-8")
        return made


def _text(params: Mapping[str, Any], key: str, required: bool = False) -> str | None:
    value = params.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise invalid(f"{key} is required", f"pass params.{key}")
        return None
    if not isinstance(value, str):
        raise invalid(f"params.{key} must be a string", f"pass params.{key} as a string")
    return value


def _owner() -> str:
    """Whose session a hook reaches: the calling principal's."""
    return current().name


def _session_id(params: Mapping[str, Any]) -> str:
    sid = _text(params, "session_id", required=True)
    assert sid is not None
    if len(sid) > SESSION_ID_CHARS or "\x00" in sid:
        raise invalid("session_id is too long or holds NUL bytes", "pass the session id your CLI reported")
    return sid


class Hooks:
    """The hook handlers over a HookStore; `asker` (None: no model) writes session summaries."""

    def __init__(
        self, settings: Settings, store: HookStore, tasks: TaskStore, asker: Callable[[], Asker | None]
    ) -> None:
        self.settings = settings
        self.store = store
        self.tasks = tasks
        self.asker = asker
        self._machine: str | None = None

    @property
    def machine_id(self) -> str:
        if self._machine is None:
            self._machine = machine_id(self.settings)
        return self._machine

    async def call(self, hook_type: str, params: Mapping[str, Any] | None, source: str | None) -> dict[str, Any]:
        """Seed 003's call_hook: `{success, hook_type, normalized_type, result}` or `{success: false, ...}`."""
        name = normalize(hook_type)
        if name is None:
            return {
                "success": False,
                "error": f"Unknown hook type: {hook_type}",
                "error_type": "ValueError",
                "available_types": [*HOOK_TYPES, *HOOK_TYPES.values()],
            }
        try:
            result = await self._dispatch(name, dict(params or {}), source)
        except RelayError as err:
            return {
                "success": False,
                "hook_type": hook_type,
                "error": err.message,
                "error_type": "ValueError" if err.code is ErrorCode.INVALID_ARGUMENT else err.code.value,
                "hint": err.hint,
            }
        return {"success": True, "hook_type": name, "normalized_type": HOOK_TYPES[name], "result": result}

    async def _dispatch(self, name: str, params: dict[str, Any], source: str | None) -> dict[str, Any]:
        if name == "SessionStart":
            return self.session_start(params, source)
        if name in ("PromptSubmit", "UserPromptSubmit"):
            return self.prompt_submit(params, source)
        if name == "Stop":
            return self.stop(params, source)
        if name == "SessionEnd":
            return await self.session_end(params, source)
        return self.other(name, params, source)

    # the handlers -------------------------------------------------------------------------

    def _project(self, cwd: str, project: str | None) -> Project:
        try:
            return resolve_project(Path(cwd), project)
        except RelayError:
            return Project(root=Path(os.path.normpath(cwd)), is_git=False)

    def session_start(self, params: dict[str, Any], source: str | None) -> dict[str, Any]:
        sid = _session_id(params)
        start_source = _text(params, "source")
        cwd = os.path.abspath(_text(params, "cwd") or os.getcwd())
        project = self._project(cwd, _text(params, "project"))
        owner = _owner()
        previous = self.store.last_in_project(project.key, exclude=sid, principal=owner)
        parent = _text(params, "parent_session_id")
        if parent is None and start_source in HANDOFF_SOURCES and previous is not None:
            parent = previous.id
        known = self.store.get(sid, owner)
        session, is_new = self.store.start(
            sid,
            principal=owner,
            source=source or (known.source if known else DEFAULT_SOURCE),
            start_source=start_source,
            machine_id=self.machine_id,
            cwd=cwd,
            project=project.key,
            project_id=_text(params, "project_id") or project.project_id,
            parent_session_id=parent,
            transcript_path=_text(params, "transcript_path"),
        )
        restored = (previous.summary or self.fallback_summary(previous)) if previous is not None else None
        return {
            "session_id": session.id,
            "machine_id": session.machine_id,
            "parent_session_id": session.parent_session_id,
            "restored_summary": restored,
            "restored_from": previous.id if previous is not None else None,
            "source": session.source,
            "cwd": session.cwd,
            "project": session.project,
            "project_id": session.project_id,
            "status": session.status,
            "is_new": is_new,
        }

    def _known(self, sid: str, params: dict[str, Any], source: str | None) -> HookSession:
        """The caller's session, registered on the spot when its CLI skipped SessionStart."""
        found = self.store.get(sid, _owner())
        if found is not None:
            return found
        self.session_start({**params, "session_id": sid}, source)
        made = self.store.get(sid, _owner())
        assert made is not None
        return made

    def prompt_submit(self, params: dict[str, Any], source: str | None) -> dict[str, Any]:
        sid = _session_id(params)
        prompt = _text(params, "prompt", required=True)
        assert prompt is not None
        session = self._known(sid, params, source)
        title = _text(params, "title")
        if title is None and not session.title:
            title = title_from(prompt)
        if transcript := _text(params, "transcript_path"):
            self.store.set_transcript(sid, transcript, _owner())
        updated = self.store.add_prompt(sid, prompt, title[: TITLE_CHARS * 2] if title else None, _owner())
        return {
            "session_id": sid,
            "title": updated.title,
            "prompt_count": updated.prompt_count,
            "status": updated.status,
        }

    def stop(self, params: dict[str, Any], source: str | None) -> dict[str, Any]:
        sid = _session_id(params)
        self._known(sid, params, source)
        paused = self.store.set_status(sid, "paused", _owner())
        assert paused is not None
        return {"session_id": sid, "status": paused.status, "title": paused.title}

    async def session_end(self, params: dict[str, Any], source: str | None) -> dict[str, Any]:
        sid = _session_id(params)
        session = self._known(sid, params, source)
        if transcript := _text(params, "transcript_path"):
            self.store.set_transcript(sid, transcript, session.principal)
            session = self.store.get(sid, session.principal) or session
        tasks = self.touched_tasks(session)
        summary, summary_source, problem = await self.write_summary(session, tasks)
        ended = self.store.set_summary(sid, summary, summary_source, session.principal)
        assert ended is not None
        out: dict[str, Any] = {
            "session_id": sid,
            "status": ended.status,
            "title": ended.title,
            "summary": summary,
            "summary_source": summary_source,
            "tasks": tasks,
        }
        if problem:
            out["summary_error"] = problem
        return out

    def other(self, name: str, params: dict[str, Any], source: str | None) -> dict[str, Any]:
        sid = _session_id(params)
        self._known(sid, params, source)
        self.store.record_event(sid, name, params, _owner())
        out: dict[str, Any] = {"session_id": sid, "recorded": True, "events": self.store.event_counts(sid, _owner())}
        if name == "PreToolUse":
            out["decision"] = "allow"
        return out

    # summaries --------------------------------------------------------------------------------

    def touched_tasks(self, session: HookSession) -> list[dict[str, Any]]:
        """The tasks linked to the session (link_task_to_session, create_task's session_id)."""
        project = Project(root=Path(session.project), is_git=False)
        return [{**task.brief(), "action": action} for task, action in self.tasks.session_tasks(project, session.id)]

    def fallback_summary(self, session: HookSession, tasks: list[dict[str, Any]] | None = None) -> str:
        """A summary without a model: the session's last prompts and the tasks it touched."""
        tasks = self.touched_tasks(session) if tasks is None else tasks
        lines = [
            f"Session {session.id} ({session.source}, project {session.project_id})"
            + (f": {session.title}" if session.title else "")
        ]
        if session.prompts:
            lines.append(f"Last prompts ({min(len(session.prompts), SUMMARY_PROMPTS)} of {session.prompt_count}):")
            lines += [f"- {' '.join(p.split())[:300]}" for p in session.prompts[-SUMMARY_PROMPTS:]]
        else:
            lines.append("No prompts were recorded.")
        if tasks:
            lines.append("Tasks touched:")
            lines += [f"- {t['id']} {t['title']} [{t['status']}] ({t['action']})" for t in tasks]
        return "\n".join(lines)

    def _transcript_tail(self, session: HookSession) -> str:
        if not session.transcript_path:
            return ""
        path = Path(session.transcript_path).expanduser()
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError):
            return ""
        homes = [Path.home() / name for name in TRANSCRIPT_HOMES]
        roots = [*self.settings.allowed_roots, *homes]
        if not resolved.is_file() or not any(resolved.is_relative_to(r) for r in roots):
            return ""
        try:
            with resolved.open("rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - TRANSCRIPT_TAIL_CHARS))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    async def write_summary(self, session: HookSession, tasks: list[dict[str, Any]]) -> tuple[str, str, str | None]:
        """(summary, "model" or "prompts", why the model could not write it)."""
        fallback = self.fallback_summary(session, tasks)
        ask = self.asker()
        if ask is None:
            return fallback, "prompts", None
        parts = [fallback]
        if tail := self._transcript_tail(session):
            parts.append(f"End of the session's transcript:\n{tail}")
        parts.append("Summarize this session.")
        try:
            text = (await ask("\n\n".join(parts), SUMMARY_SYSTEM)).strip()
        except RelayError as err:
            if err.code is ErrorCode.AUTH_MISSING:
                return fallback, "prompts", None
            return fallback, "prompts", f"{err.code.value}: {err.message}"
        return (text, "model", None) if text else (fallback, "prompts", "the model returned an empty summary")

    # sessions relay's codex tool runs ------------------------------------------------------------

    def archive(self, session_id: str, *, principal: str, source: str, cwd: str) -> HookSession:
        """Archive `principal`'s session (registered first when only relay's jobs knew it): lists leave it out.

        The owner is named, not the caller: an admin archives the thread of whoever it belongs to.
        """
        if self.store.get(session_id, principal) is None:
            cwd = os.path.abspath(cwd or os.getcwd())
            project = self._project(cwd, None)
            self.store.start(
                session_id,
                principal=principal,
                source=source,
                start_source=None,
                machine_id=self.machine_id,
                cwd=cwd,
                project=project.key,
                project_id=project.project_id,
                parent_session_id=None,
                transcript_path=None,
            )
        archived = self.store.set_status(session_id, "archived", principal)
        assert archived is not None
        return archived

    def track(self, session_id: str, *, source: str, cwd: str, prompt: str) -> HookSession:
        """Record a turn of the caller's session relay itself ran (the codex tool): registered on first use,
        prompt added."""
        session = self._known(session_id, {"cwd": cwd, "source": "relay"}, source)
        return self.store.add_prompt(session_id, prompt, None if session.title else title_from(prompt), _owner())
