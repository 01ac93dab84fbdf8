"""Git sync: a project's tasks as `.gobby/tasks.jsonl` (one line per task or deleted task, sorted by id).

Export writes the file atomically (temporary file + rename) with `tasks_meta.json` beside it
(content hash, last export). Import merges the file into the store, last write wins on
`updated_at` (merge.py). An export first imports a file that changed since relay last wrote or
read it (a `git pull`), so pulled tasks are never overwritten. `.gobby/.gitattributes` asks git
for its built-in `union` merge of the JSONL, so two clones' concurrent additions merge without
conflict markers; the next import keeps the newest line per id and the next export rewrites the
file sorted, one line per id. `tasks_meta.json` is local state and is git-ignored.

Deletions travel as tombstones (tombstones.py): a deleted task is written as
`{"cascade": false, "deleted": true, "id": ..., "project_id": ..., "updated_at": <deleted_at>}`
(jsonl.py), sorted with the task lines by id. On import a tombstone newer than the task deletes
it; a task line newer than the tombstone brings the task back; with both lines for one id (a
union merge) the newer counts. A file without tombstones imports as before. An export prunes
tombstones older than TOMBSTONE_TTL (90 days): a clone that stays away longer can bring such a
task back.

Principals (jsonl.py, merge.py): the file holds the tasks of the local user and of admin tokens
(`shared`), each line naming its principal when it is not the local user; a `user` token's tasks,
their tombstones and dependencies on them stay in relay's store, whoever runs the export. An import
makes each line its own principal's, never the caller's, and refuses lines of a `user` principal.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Generator
from datetime import timedelta
from pathlib import Path
from typing import Any

from relay.errors import RelayError, invalid
from relay.tracker.jsonl import TASKS_FILE, Shared, local_only, records, render, to_text
from relay.tracker.merge import ImportStats, merge_records
from relay.tracker.model import SYNC_DIRECTIONS, check_one_of, now_iso, parse_ts
from relay.tracker.project import Project
from relay.tracker.store import TaskStore
from relay.tracker.tombstones import TOMBSTONE_TTL, prune_tombstones

__all__ = ["AutoExporter", "ImportStats", "TaskSync", "exporting", "merge_records", "render", "sync_paths"]

SYNC_DIR = ".gobby"
META_FILE = "tasks_meta.json"
GITATTRIBUTES = "tasks.jsonl merge=union\n"
GITIGNORE = "tasks_meta.json\n*.tmp\n"
# Auto-export waits this long after the last change, so a burst of edits costs one write (Gobby: 5 s).
DEBOUNCE_S = 5.0


def sync_paths(project: Project) -> tuple[Path, Path]:
    folder = project.root / SYNC_DIR
    return folder / TASKS_FILE, folder / META_FILE


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class TaskSync:
    """Import, export and status of a project's JSONL; one lock so a debounced export never races a sync."""

    def __init__(
        self,
        store: TaskStore,
        clock: Callable[[], str] = now_iso,
        tombstone_ttl: timedelta = TOMBSTONE_TTL,
        shared: Shared = local_only,
    ) -> None:
        self.store = store
        self.shared = shared
        self._clock = clock
        self.tombstone_ttl = tombstone_ttl
        self._lock = threading.RLock()

    def _read_meta(self, meta_path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None  # pyright: ignore[reportUnknownVariableType]

    def _write_meta(self, meta_path: Path, **changes: Any) -> None:
        meta = self._read_meta(meta_path) or {}
        meta.update(changes)
        _write_atomic(meta_path, json.dumps(meta, indent=2, sort_keys=True) + "\n")

    def file_changed(self, project: Project) -> bool:
        """Whether the JSONL exists and differs from what relay last wrote or read (a clone, a pull)."""
        path, meta_path = sync_paths(project)
        try:
            current = _hash(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return False
        meta = self._read_meta(meta_path)
        return meta is None or meta.get("content_hash") != current

    def import_file(self, project: Project) -> ImportStats | None:
        """Merge the project's JSONL into the store; None when there is no file."""
        path, meta_path = sync_paths(project)
        with self._lock:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            except (OSError, UnicodeDecodeError) as err:
                raise invalid(f"cannot read {path}: {err}", "check the file's permissions and encoding") from None
            stats = merge_records(self.store, project, text, str(path), self.shared)
            self._write_meta(meta_path, content_hash=_hash(text), last_imported=self._clock())
            return stats

    def export_file(self, project: Project) -> dict[str, Any]:
        """Write the JSONL (after importing it first if it changed since relay last wrote or read it)."""
        path, meta_path = sync_paths(project)
        with self._lock:
            pulled: ImportStats | None = None
            if self.file_changed(project):
                pulled = self.import_file(project)
            path.parent.mkdir(parents=True, exist_ok=True)
            for name, content in ((".gitattributes", GITATTRIBUTES), (".gitignore", GITIGNORE)):
                extra = path.parent / name
                if not extra.exists():
                    _write_atomic(extra, content)
            with self.store.transaction() as db:
                pruned = prune_tombstones(db, project, parse_ts(self._clock()) - self.tombstone_ttl)
            lines = records(self.store, project, self.shared)
            text = to_text(lines)
            old = path.read_text(encoding="utf-8") if path.exists() else None
            if old != text:
                _write_atomic(path, text)
            self._write_meta(meta_path, content_hash=_hash(text), last_exported=self._clock())
            deleted = sum(1 for r in lines if r.get("deleted"))
            return {
                "path": str(path),
                "tasks": len(lines) - deleted,
                "tombstones": deleted,
                "pruned_tombstones": len(pruned),
                "written": old != text,
                "imported_first": pulled.to_dict() if pulled else None,
            }

    def sync(self, project: Project, direction: str = "both") -> dict[str, Any]:
        """Gobby's `sync_tasks`: import then export (or one of them); says what each step did."""
        check_one_of(direction, SYNC_DIRECTIONS, "direction")
        result: dict[str, Any] = {}
        with self._lock:
            if direction in ("import", "both"):
                stats = self.import_file(project)
                result["import"] = "completed" if stats is not None else "no_file"
                result["import_stats"] = stats.to_dict() if stats else None
            if direction in ("export", "both"):
                result["export_details"] = self.export_file(project)
                result["export"] = "completed"
        return result

    def status(self, project: Project) -> dict[str, Any]:
        """Gobby's `get_sync_status`: no_file / no_meta / available / error, and whether file and store agree."""
        path, meta_path = sync_paths(project)
        base: dict[str, Any] = {"path": str(path)}
        try:
            if not path.exists():
                return {"status": "no_file", "synced": False, **base}
            meta = self._read_meta(meta_path)
            if meta is None:
                return {"status": "no_meta", "synced": False, **base}
            current = _hash(path.read_text(encoding="utf-8"))
            in_store = _hash(render(self.store, project, self.shared))
        except (OSError, UnicodeDecodeError, RelayError) as err:
            return {"status": "error", "synced": False, "error": str(err), **base}
        return {
            "status": "available",
            "synced": current == meta.get("content_hash") and current == in_store,
            "last_exported": meta.get("last_exported"),
            "last_imported": meta.get("last_imported"),
            "hash": current,
            "file_changed_since_sync": current != meta.get("content_hash"),
            "store_changed_since_sync": in_store != meta.get("content_hash"),
            **base,
        }


class AutoExporter:
    """Exports a git project's JSONL `delay_s` after its last change (debounced), from a timer thread."""

    def __init__(self, sync: TaskSync, delay_s: float = DEBOUNCE_S) -> None:
        self.sync = sync
        self.delay_s = delay_s
        self.errors: dict[str, str] = {}
        self.exports = 0
        self.exported = threading.Condition()
        self._timers: dict[str, tuple[threading.Timer, Project]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def schedule(self, project: Project) -> None:
        if not project.is_git:
            return
        with self._lock:
            if self._closed:
                return
            held = self._timers.pop(project.key, None)
            if held is not None:
                held[0].cancel()
            timer = threading.Timer(self.delay_s, self._run, (project,))
            timer.daemon = True
            self._timers[project.key] = (timer, project)
            timer.start()

    def _run(self, project: Project) -> None:
        with self._lock:
            held = self._timers.get(project.key)
            if held is not None and held[0] is threading.current_thread():
                del self._timers[project.key]
        try:
            self.sync.export_file(project)
            self.errors.pop(project.key, None)
        except (RelayError, OSError, sqlite3.Error, ValueError) as err:
            # A failed background export must not kill the timer thread silently: keep it for status.
            self.errors[project.key] = str(err)
        with self.exported:
            self.exports += 1
            self.exported.notify_all()

    def flush(self) -> None:
        """Run every pending export now (at shutdown, or before an explicit sync)."""
        with self._lock:
            pending = list(self._timers.values())
            self._timers.clear()
        for timer, project in pending:
            timer.cancel()
            self._run(project)

    def pending(self, project: Project) -> bool:
        with self._lock:
            return project.key in self._timers

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._closed = True


@contextlib.contextmanager
def exporting(store: TaskStore, delay_s: float = DEBOUNCE_S) -> Generator[tuple[TaskSync, AutoExporter]]:
    """A TaskSync with auto-export wired to the store's changes; flushed on exit."""
    sync = TaskSync(store)
    auto = AutoExporter(sync, delay_s)
    store.on_change = auto.schedule
    try:
        yield sync, auto
    finally:
        store.on_change = None
        auto.close()
