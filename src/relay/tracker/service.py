"""One tracker per server: the store, its sync, the debounced auto-export, and project resolution.

The first time a git project is used, a `.gobby/tasks.jsonl` that changed since relay last
synced it (a fresh clone, a pull) is imported, so the store starts from what git brought.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.principal import LOCAL_NAME
from relay.tracker.jsonl import Shared
from relay.tracker.project import Project, resolve_project
from relay.tracker.store import TaskStore
from relay.tracker.sync import DEBOUNCE_S, AutoExporter, TaskSync, sync_paths

# RELAY_TASKS_AUTO_EXPORT=0 turns the debounced export off; RELAY_TASKS_EXPORT_DELAY_S sets its delay.
AUTO_EXPORT_ENV = "RELAY_TASKS_AUTO_EXPORT"
EXPORT_DELAY_ENV = "RELAY_TASKS_EXPORT_DELAY_S"


def export_delay(settings: Settings) -> float | None:
    """The auto-export delay in seconds, or None when auto-export is off."""
    if settings.environ.get(AUTO_EXPORT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    raw = settings.environ.get(EXPORT_DELAY_ENV, "").strip()
    if not raw:
        return DEBOUNCE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"{EXPORT_DELAY_ENV}={raw!r}", f"set {EXPORT_DELAY_ENV} to seconds (0..3600)"
        )
    return value


def shared_principals(settings: Settings) -> Shared:
    """Whose tasks go to the repository file: the local user's and admin tokens' (jsonl.py), not a user token's."""
    admins = {t.principal.name for t in settings.tokens if t.principal.is_admin}
    return lambda owner: owner == LOCAL_NAME or owner in admins


class Tracker:
    """The tracker a server (or the CLI) works with; close it to flush pending exports."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = TaskStore.open(settings)
        self.sync = TaskSync(self.store, shared=shared_principals(settings))
        delay = export_delay(settings)
        self.auto: AutoExporter | None = AutoExporter(self.sync, delay) if delay is not None else None
        if self.auto is not None:
            self.store.on_change = self.auto.schedule
        self._seen: set[str] = set()
        self.errors: dict[str, str] = {}
        self._lock = threading.Lock()

    def project(self, project: str | None = None, cwd: Path | None = None) -> Project:
        """The project of `project` (a path) or of `cwd` (default: relay's working directory)."""
        resolved = resolve_project(cwd or Path.cwd(), project, self.settings.allowed_roots)
        with self._lock:
            first = resolved.key not in self._seen
            self._seen.add(resolved.key)
        if first and resolved.is_git:
            self._import_if_changed(resolved)
        return resolved

    def _import_if_changed(self, project: Project) -> None:
        if not self.sync.file_changed(project):
            return
        try:
            self.sync.import_file(project)
        except RelayError as err:
            # A broken file must not lock the project's tasks away; get_sync_status reports it.
            self.errors[project.key] = f"import of {sync_paths(project)[0]} failed: {err.message}"

    def export_error(self, project: Project) -> str | None:
        """The last failed automatic import or export of the project, if any."""
        if project.key in self.errors:
            return self.errors[project.key]
        return self.auto.errors.get(project.key) if self.auto is not None else None

    def sync_project(self, project: Project, direction: str = "both") -> dict[str, Any]:
        """`sync_tasks`: import and/or export now; a success clears an earlier automatic failure."""
        result = self.sync.sync(project, direction)
        self.errors.pop(project.key, None)
        if self.auto is not None:
            self.auto.errors.pop(project.key, None)
        return result

    def close(self) -> None:
        if self.auto is not None:
            self.auto.close()
        self.store.close()
