"""Deletions travel through `.gobby/tasks.jsonl` as tombstones: two real git clones, each with its own SQLite store."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from relay.errors import ErrorCode, RelayError
from relay.tracker import Project, TaskChanges, TaskStore, TaskSync
from relay.tracker.model import format_ts, parse_ts
from relay.tracker.sync import sync_paths
from relay.tracker.tombstones import TOMBSTONE_TTL

from .conftest import Machine, git, lines

TOMBSTONE_KEYS = {"id", "deleted", "updated_at", "project_id", "cascade"}


def by_id(path: Path) -> dict[str, list[dict[str, object]]]:
    """The file's lines grouped by id (a union-merged file can hold several for one id)."""
    out: dict[str, list[dict[str, object]]] = {}
    for record in lines(path):
        out.setdefault(str(record["id"]), []).append(record)
    return out


def assert_converged(a: Machine, b: Machine) -> None:
    assert a.state() == b.state()
    assert a.store.tombstones(a.project) == b.store.tombstones(b.project)
    assert a.file().read_text() == b.file().read_text()
    for machine in (a, b):
        ids = [r["id"] for r in lines(machine.file())]
        assert ids == sorted(set(ids))  # one line per id, tasks and tombstones sorted together
        assert machine.sync.status(machine.project)["synced"] is True


def test_a_deletion_reaches_the_other_clone_and_its_export_does_not_bring_the_task_back(
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    doomed, waiting, kept = (a.store.create(a.project, t) for t in ("doomed", "waits for doomed", "kept"))
    a.store.add_dependency(a.project, waiting.id, doomed.id)
    a.publish("three tasks")
    b.pull()
    assert set(b.state()) == {doomed.id, waiting.id, kept.id}

    assert a.store.delete(a.project, doomed.id) == [doomed.id]
    assert a.sync.status(a.project)["synced"] is False  # the store has a tombstone the file lacks
    a.publish("delete doomed")
    line = by_id(a.file())[doomed.id]
    assert len(line) == 1 and set(line[0]) == TOMBSTONE_KEYS
    assert (line[0]["deleted"], line[0]["cascade"], line[0]["project_id"]) == (True, False, a.project.project_id)
    assert parse_ts(str(line[0]["updated_at"])) > parse_ts(doomed.updated_at)

    b.pull()
    assert set(b.state()) == {waiting.id, kept.id}
    assert b.store.all_dependencies(b.project) == []  # the edge went with the task, as in delete_task
    assert [s.id for s in b.store.tombstones(b.project)] == [doomed.id]
    assert b.sync.status(b.project)["synced"] is True

    b.store.update(b.project, kept.id, TaskChanges(title="kept, edited on b"))
    b.publish("b's export after the deletion")
    a.pull()
    assert doomed.id not in a.state()
    assert [r.get("deleted") for r in by_id(a.file())[doomed.id]] == [True]
    assert a.state()[kept.id][0] == "kept, edited on b"
    assert_converged(a, b)


def test_a_task_line_newer_than_the_deletion_brings_the_task_back_after_a_union_merge(
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    task = a.store.create(a.project, "contested")
    a.publish("add")
    b.pull()
    a.store.delete(a.project, task.id)
    a.publish("a deletes")
    b.store.update(b.project, task.id, TaskChanges(title="b edits it after a deleted it"))
    b.commit_and_merge("b edits")
    merged = by_id(b.file())[task.id]
    assert sorted(bool(r.get("deleted")) for r in merged) == [False, True]  # git's union kept both lines
    b.sync_and_push("b edits")
    assert [r.get("deleted") for r in by_id(b.file())[task.id]] == [None]
    a.pull()
    assert a.state()[task.id][0] == "b edits it after a deleted it"
    assert a.store.tombstones(a.project) == []  # the newer task line cleared it
    assert_converged(a, b)


def test_a_deletion_newer_than_an_edit_wins_after_a_union_merge(machines: tuple[Machine, Machine]) -> None:
    a, b = machines
    task = a.store.create(a.project, "contested")
    a.publish("add")
    b.pull()
    b.store.update(b.project, task.id, TaskChanges(title="b edits it first"))
    b.publish("b edits")
    a.store.delete(a.project, task.id)
    a.commit_and_merge("a deletes later")
    assert sorted(bool(r.get("deleted")) for r in by_id(a.file())[task.id]) == [False, True]
    a.sync_and_push("a deletes later")
    assert task.id not in a.state()
    b.pull()
    assert task.id not in b.state()
    assert_converged(a, b)


def test_a_cascade_deletion_takes_the_whole_subtree_on_the_other_clone(machines: tuple[Machine, Machine]) -> None:
    a, b = machines
    parent = a.store.create(a.project, "epic")
    child1 = a.store.create(a.project, "child 1", parent_task_id=parent.id)
    child2 = a.store.create(a.project, "child 2", parent_task_id=parent.id)
    grandchild = a.store.create(a.project, "grandchild", parent_task_id=child1.id)
    outside = a.store.create(a.project, "outside, waits for child 2")
    a.store.add_dependency(a.project, outside.id, child2.id)
    a.publish("a tree")
    b.pull()
    assert len(b.state()) == 5

    deleted = a.store.delete(a.project, parent.id, cascade=True)
    assert set(deleted) == {parent.id, child1.id, child2.id, grandchild.id}
    a.publish("delete the tree")
    b.pull()
    assert set(b.state()) == {outside.id}
    assert b.state()[outside.id][5] == []
    stones = b.store.tombstones(b.project)
    assert {s.id for s in stones} == set(deleted)
    assert all(s.cascaded for s in stones) and len({s.deleted_at for s in stones}) == 1
    b.publish("b after the deletion")
    a.pull()
    assert_converged(a, b)


@pytest.mark.parametrize("cascade", [True, False])
def test_subtasks_another_clone_added_meanwhile_are_deleted_by_a_cascade_only_if_written_before_it(
    machines: tuple[Machine, Machine], cascade: bool
) -> None:
    a, b = machines
    parent = a.store.create(a.project, "parent")
    a.publish("parent")
    b.pull()
    before = b.store.create(b.project, "subtask written before the deletion", parent_task_id=parent.id)
    a.store.delete(a.project, parent.id, cascade=cascade)
    a.publish("a deletes the parent")
    after = b.store.create(b.project, "subtask written after the deletion", parent_task_id=parent.id)
    b.publish("b's subtasks")
    state = b.state()
    assert parent.id not in state
    assert state[after.id][6] is None  # kept, detached from the deleted parent
    if cascade:
        assert before.id not in state
        assert {s.id for s in b.store.tombstones(b.project)} == {parent.id, before.id}
    else:
        assert state[before.id][6] is None
    a.pull()
    assert_converged(a, b)


def test_an_old_file_without_tombstones_imports_as_before_and_does_not_revive_a_deleted_task(
    store: TaskStore, project: Project
) -> None:
    path, _ = sync_paths(project)
    path.parent.mkdir()
    old = [
        {"id": f"gt-00000{i}", "title": f"old {i}", "status": "open", "created_at": "2026-01-01T00:00:00Z",
         "updated_at": "2026-01-01T00:00:00Z", "project_id": "repo", "parent_id": None, "deps_on": []}
        for i in (1, 2)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    sync = TaskSync(store)
    stats = sync.import_file(project)
    assert stats is not None and stats.to_dict() == {
        "created": 2,
        "updated": 0,
        "unchanged": 0,
        "deleted": 0,
        "detached": 0,
        "skipped_dependencies": [],
        "refused": [],
    }
    sync.export_file(project)
    assert all("deleted" not in r for r in lines(path))

    store.delete(project, "gt-000001")
    path.write_text("".join(json.dumps(r) + "\n" for r in old))  # a stale copy, written before the deletion
    again = sync.import_file(project)
    assert again is not None and (again.created, again.unchanged) == (0, 2)
    assert [t.id for t in store.all_tasks(project)] == ["gt-000002"]
    sync.export_file(project)
    assert [(r["id"], r.get("deleted")) for r in lines(path)] == [("gt-000001", True), ("gt-000002", None)]


class Clock:
    def __init__(self, start: str) -> None:
        self.now = parse_ts(start)

    def __call__(self) -> str:
        return format_ts(self.now)


def test_an_export_prunes_tombstones_older_than_the_ttl(project: Project, relay_home: Path) -> None:
    clock = Clock("2026-01-01T00:00:00Z")
    dated = TaskStore(relay_home / "dated.db", clock=clock)
    try:
        old, recent, alive = (dated.create(project, t) for t in ("old", "recent", "alive"))
        dated.delete(project, old.id)
        clock.now += TOMBSTONE_TTL - timedelta(days=10)
        dated.delete(project, recent.id)
        clock.now += timedelta(days=11)  # old's tombstone is now TTL + 1 day old, recent's 11 days
        result = TaskSync(dated, clock=clock).export_file(project)
        assert (result["tasks"], result["tombstones"], result["pruned_tombstones"]) == (1, 1, 1)
        assert [s.id for s in dated.tombstones(project)] == [recent.id]
        path, _ = sync_paths(project)
        assert {r["id"]: r.get("deleted") for r in lines(path)} == {recent.id: True, alive.id: None}
        assert TaskSync(dated, clock=clock).status(project)["synced"] is True
    finally:
        dated.close()


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"id": "gt-00000b", "deleted": true}', "line 2 (gt-00000b) is a tombstone without updated_at"),
        ('{"id": "gt-00000b", "deleted": true, "updated_at": "yesterday"}', "line 2 (gt-00000b) tombstone:"),
        (
            '{"id": "gt-00000b", "deleted": "yes", "updated_at": "2026-01-01T00:00:00Z"}',
            "line 2 (gt-00000b) has deleted",
        ),
        ('{"id": "gt-00000b", "deleted": true, "updated_at": "2026-01-01T00:00:00Z", "cascade": 1}', "cascade"),
        ('{"deleted": true, "updated_at": "2026-01-01T00:00:00Z"}', "line 2 has no usable id"),
    ],
)
def test_a_malformed_tombstone_refuses_the_import_naming_the_line(
    store: TaskStore, project: Project, line: str, problem: str
) -> None:
    path, _ = sync_paths(project)
    path.parent.mkdir()
    path.write_text('{"id": "gt-00000a", "title": "ok", "updated_at": "2026-01-01T00:00:00Z"}\n' + line + "\n")
    with pytest.raises(RelayError) as err:
        TaskSync(store).import_file(project)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert problem in err.value.message and "tasks.jsonl line 2" in err.value.message
    assert store.list(project) == [] and store.tombstones(project) == []


def test_a_new_task_never_takes_a_deleted_tasks_id(relay_home: Path, project: Project) -> None:
    draws = iter([b"a" * 16, b"a" * 16, b"b" * 16])
    tasks = TaskStore(relay_home / "ids.db", entropy=lambda n: next(draws))
    try:
        first = tasks.create(project, "first")
        tasks.delete(project, first.id)
        second = tasks.create(project, "second")  # the first draw repeats the deleted id
        assert second.id != first.id
    finally:
        tasks.close()


def test_a_database_from_before_tombstones_is_upgraded_in_place(relay_home: Path, project: Project) -> None:
    path = relay_home / "old.db"
    TaskStore(path).close()
    with sqlite3.connect(path) as db:  # as relay.db was before migration m010_task_tombstones (and the later m019)
        db.execute("DROP TABLE task_tombstones")
        db.execute("DELETE FROM migrations WHERE name='m010_task_tombstones'")
        db.execute("ALTER TABLE task_sessions DROP COLUMN principal")
        db.execute("DELETE FROM migrations WHERE name='m019_task_principals'")
        db.execute(
            "INSERT INTO tasks (project, id, project_id, title, created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (
                project.key,
                "gt-01d000",
                project.project_id,
                "from before",
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:00Z",
            ),
        )
    db.close()
    upgraded = TaskStore(path)
    try:
        assert [t.title for t in upgraded.all_tasks(project)] == ["from before"]
        assert upgraded.delete(project, "gt-01d000") == ["gt-01d000"]
        assert [s.id for s in upgraded.tombstones(project)] == ["gt-01d000"]
    finally:
        upgraded.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT 1 FROM migrations WHERE name='m010_task_tombstones'").fetchone() == (1,)
    db.close()


def test_git_keeps_the_tombstones_across_a_fresh_clone(machines: tuple[Machine, Machine], tmp_path: Path) -> None:
    a, _ = machines
    task = a.store.create(a.project, "gone before the clone")
    a.store.delete(a.project, task.id)
    a.publish("a tombstone only")
    third = Machine(tmp_path / "machine-c", tmp_path / "origin.git")
    try:
        assert git(third.repo, "ls-files", ".gobby/tasks.jsonl").strip() == ".gobby/tasks.jsonl"
        third.pull()
        assert [s.id for s in third.store.tombstones(third.project)] == [task.id]
        assert third.state() == {}
    finally:
        third.store.close()
