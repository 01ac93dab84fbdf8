"""The per-server Tracker: a clone's JSONL is imported on first use; auto-export settings; failures reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.tracker import resolve_project
from relay.tracker.service import Tracker, export_delay
from relay.tracker.sync import sync_paths

from .conftest import init_repo

LINE = {"id": "gt-c10e00", "title": "came with the clone", "status": "open", "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z", "project_id": "proj", "parent_id": None, "deps_on": []}  # fmt: skip


def tracker_for(relay_home: Path, cwd: Path, **env: str) -> Tracker:
    return Tracker(load_settings({"RELAY_HOME": str(relay_home), **env}, cwd=cwd))


def test_a_fresh_clones_tasks_file_is_imported_the_first_time_the_project_is_used(
    relay_home: Path, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "proj")
    path, _ = sync_paths(resolve_project(repo))
    path.parent.mkdir()
    path.write_text(json.dumps(LINE) + "\n")
    tracker = tracker_for(relay_home, tmp_path)
    try:
        project = tracker.project(str(repo))
        assert [t.id for t in tracker.store.list(project)] == ["gt-c10e00"]
        status = tracker.sync.status(project)
        assert (status["status"], status["file_changed_since_sync"]) == ("available", False)
    finally:
        tracker.close()


def test_a_broken_tasks_file_does_not_lock_the_project_and_is_reported_until_a_sync_succeeds(
    relay_home: Path, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "proj")
    path = repo / ".gobby" / "tasks.jsonl"
    path.parent.mkdir()
    path.write_text("{broken\n")
    tracker = tracker_for(relay_home, tmp_path, RELAY_TASKS_AUTO_EXPORT="0")
    try:
        project = tracker.project(str(repo))
        assert tracker.store.list(project) == []
        problem = tracker.export_error(project)
        assert problem is not None and "line 1 is not JSON" in problem
        path.write_text(json.dumps(LINE) + "\n")
        assert tracker.sync_project(project)["import"] == "completed"
        assert tracker.export_error(project) is None
    finally:
        tracker.close()


def test_auto_export_delay_comes_from_the_environment(tmp_path: Path) -> None:
    def delay(**env: str) -> float | None:
        return export_delay(load_settings({"RELAY_HOME": str(tmp_path), **env}, cwd=tmp_path))

    assert delay() == 5.0
    assert delay(RELAY_TASKS_AUTO_EXPORT="0") is None
    assert delay(RELAY_TASKS_EXPORT_DELAY_S="0.5") == 0.5
    with pytest.raises(RelayError) as err:
        delay(RELAY_TASKS_EXPORT_DELAY_S="soon")
    assert err.value.code is ErrorCode.CONFIG_INVALID
