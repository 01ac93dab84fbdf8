"""Git sync: the JSONL export and its meta file, last-write-wins import, debounced export, two real clones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.errors import ErrorCode, RelayError
from relay.tracker import Project, TaskChanges, TaskStore, TaskSync, resolve_project
from relay.tracker.sync import AutoExporter, render, sync_paths

from .conftest import Machine, lines

GOBBY_KEYS = {"id", "title", "description", "status", "created_at", "updated_at", "project_id", "parent_id", "deps_on"}


def test_export_writes_one_sorted_line_per_task_and_a_meta_file_with_its_hash(
    store: TaskStore, project: Project
) -> None:
    sync = TaskSync(store)
    a, b = store.create(project, "a", priority=1, labels=["x"]), store.create(project, "b")
    store.add_dependency(project, b.id, a.id)
    assert sync.status(project)["status"] == "no_file"
    sync.export_file(project)
    path, meta_path = sync_paths(project)
    records = lines(path)
    assert [r["id"] for r in records] == sorted([a.id, b.id])
    assert all(set(r) >= GOBBY_KEYS for r in records)
    by_id = {r["id"]: r for r in records}
    assert (by_id[b.id]["deps_on"], by_id[a.id]["priority"], by_id[a.id]["labels"]) == ([a.id], 1, ["x"])
    meta = json.loads(meta_path.read_text())
    assert set(meta) >= {"content_hash", "last_exported"}
    assert sorted(p.name for p in path.parent.iterdir()) == [
        ".gitattributes",
        ".gitignore",
        "tasks.jsonl",
        "tasks_meta.json",
    ]
    status = sync.status(project)
    assert (status["status"], status["synced"], status["hash"]) == ("available", True, meta["content_hash"])
    store.update(project, a.id, TaskChanges(title="a2"))
    assert sync.status(project)["synced"] is False


def test_import_keeps_the_newest_version_of_each_task(store: TaskStore, project: Project) -> None:
    sync = TaskSync(store)
    task = store.create(project, "original")
    sync.export_file(project)
    path, _ = sync_paths(project)
    record = lines(path)[0]
    newer = {**record, "title": "edited elsewhere", "updated_at": "2999-01-01T00:00:00+00:00"}
    older = {**record, "title": "stale edit", "updated_at": "2000-01-01T00:00:00Z"}
    other = {"id": "gt-abcdef", "title": "from a Gobby file", "status": "open", "created_at": "2026-01-01T00:00:00Z",
             "updated_at": "2026-01-01T00:00:00Z", "project_id": "p", "parent_id": None, "deps_on": [task.id]}  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in (older, newer, other)) + "\n")
    stats = sync.import_file(project)
    assert stats is not None and (stats.created, stats.updated) == (1, 1)
    assert store.get(project, task.id).title == "edited elsewhere"
    imported = store.get(project, "gt-abcdef")
    assert (imported.priority, imported.task_type) == (2, "task")  # Gobby's defaults for keys it does not write
    assert [t.id for t in store.ready(project)] == [task.id]
    path.write_text(json.dumps(older) + "\n")
    again = sync.import_file(project)
    assert again is not None and again.unchanged == 1
    assert store.get(project, task.id).title == "edited elsewhere"


def test_an_unknown_sync_direction_is_refused(store: TaskStore, project: Project) -> None:
    with pytest.raises(RelayError) as err:
        TaskSync(store).sync(project, "sideways")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert not sync_paths(project)[0].parent.exists()


def test_a_malformed_line_refuses_the_import_naming_the_line(store: TaskStore, project: Project) -> None:
    path, _ = sync_paths(project)
    path.parent.mkdir()
    good = '{"id": "gt-000001", "title": "ok", "updated_at": "2026-01-01T00:00:00Z"}\n'
    for bad in ("not json", '{"id": "gt-000002", "title": "x", "updated_at": "yesterday"}', '{"title": "no id"}'):
        path.write_text(good + bad + "\n")
        with pytest.raises(RelayError) as err:
            TaskSync(store).import_file(project)
        assert err.value.code is ErrorCode.INVALID_ARGUMENT
        assert "tasks.jsonl line 2" in err.value.message
        assert store.list(project) == []


def test_an_export_first_imports_a_file_changed_since_the_last_sync(store: TaskStore, project: Project) -> None:
    sync = TaskSync(store)
    mine = store.create(project, "mine")
    sync.export_file(project)
    path, _ = sync_paths(project)
    pulled = {"id": "gt-feed00", "title": "pulled", "status": "open", "created_at": "2026-01-01T00:00:00Z",
              "updated_at": "2026-01-01T00:00:00Z", "project_id": "repo", "parent_id": None, "deps_on": []}  # fmt: skip
    with path.open("a") as fh:
        fh.write(json.dumps(pulled) + "\n")
    result = sync.export_file(project)
    assert result["imported_first"]["created"] == 1
    assert [r["id"] for r in lines(path)] == sorted([mine.id, "gt-feed00"])


def test_changes_are_exported_once_after_the_debounce_delay(store: TaskStore, project: Project) -> None:
    auto = AutoExporter(TaskSync(store), delay_s=0.3)
    store.on_change = auto.schedule
    path, _ = sync_paths(project)
    try:
        for i in range(5):
            store.create(project, f"burst {i}")
        assert auto.pending(project)
        assert not path.exists()
        with auto.exported:
            assert auto.exported.wait_for(lambda: auto.exports >= 1, timeout=30)
        assert auto.exports == 1
        assert len(lines(path)) == 5
        assert path.read_text() == render(store, project)
        assert not list(path.parent.glob("*.tmp"))
    finally:
        auto.close()


def test_a_project_outside_git_is_not_auto_exported(store: TaskStore, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    project = resolve_project(plain)
    auto = AutoExporter(TaskSync(store), delay_s=0.01)
    store.on_change = auto.schedule
    store.create(project, "t")
    auto.close()
    assert not project.is_git
    assert not (plain / ".gobby").exists()


def test_two_clones_that_each_create_and_edit_tasks_end_with_the_union_and_no_lost_update(
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    shared = a.store.create(a.project, "shared task")
    a.publish("tasks from a")
    b.pull()
    assert set(b.state()) == {shared.id}

    # Both clones work at once: new tasks on each side, edits to different tasks, one task edited on both.
    a_new = [a.store.create(a.project, f"a task {i}", priority=1) for i in range(3)]
    b_new = [b.store.create(b.project, f"b task {i}", labels=["b"]) for i in range(4)]
    a.store.add_dependency(a.project, a_new[1].id, a_new[0].id)
    b.store.add_dependency(b.project, b_new[0].id, shared.id)
    a.store.update(a.project, shared.id, TaskChanges(description="edited on a first"))
    b.store.close_task(b.project, shared.id, "done on b later")  # the later edit of the shared task wins
    b.store.update(b.project, b_new[3].id, TaskChanges(priority=0))

    a.publish("a's work")
    b.publish("b's work")
    a.pull()

    assert a.state() == b.state()
    state = a.state()
    assert set(state) == {shared.id, *(t.id for t in a_new), *(t.id for t in b_new)}
    assert state[shared.id][:2] == ("shared task", "closed")
    assert state[b_new[3].id][2] == 0
    assert state[a_new[1].id][5] == [(a_new[1].id, a_new[0].id, "blocks")]
    assert state[b_new[0].id][5] == [(b_new[0].id, shared.id, "blocks")]
    for machine in (a, b):
        path, _ = sync_paths(machine.project)
        ids = [r["id"] for r in lines(path)]
        assert ids == sorted(set(ids))  # one line per task, sorted, no duplicates
        assert len(ids) == 8
        assert "<<<<<<<" not in path.read_text()
        assert machine.sync.status(machine.project)["synced"] is True
    assert sync_paths(a.project)[0].read_text() == sync_paths(b.project)[0].read_text()


def test_concurrent_edits_of_one_task_converge_to_the_later_one_on_both_clones(
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    task = a.store.create(a.project, "contested")
    a.publish("add")
    b.pull()
    a.store.update(a.project, task.id, TaskChanges(title="a's title"))
    b.store.update(b.project, task.id, TaskChanges(title="b's title, written later"))
    b.publish("b edits")
    a.publish("a edits")
    b.pull()
    assert a.state()[task.id][0] == b.state()[task.id][0] == "b's title, written later"


def test_a_dependency_cycle_made_by_merging_two_clones_is_broken_and_reported(
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    x, y = a.store.create(a.project, "x"), a.store.create(a.project, "y")
    a.publish("x and y")
    b.pull()
    a.store.add_dependency(a.project, x.id, y.id)
    b.store.add_dependency(b.project, y.id, x.id)
    a.publish("x waits for y")
    b.publish("y waits for x")
    assert b.store.cycles(b.project) == []
    a.pull()
    assert a.state() == b.state()
    assert a.store.cycles(a.project) == []
    edges = {(d.task_id, d.depends_on) for d in a.store.all_dependencies(a.project)}
    assert edges in ({(x.id, y.id)}, {(y.id, x.id)})  # one of the two survives, the same on both clones


def test_the_import_refuses_what_create_task_refuses_naming_file_and_line_and_keeps_the_rest(
    store: TaskStore, project: Project
) -> None:
    path, _ = sync_paths(project)
    path.parent.mkdir()
    held = store.create(project, "held here")

    def line(task_id: str, **fields: object) -> str:
        record = {"id": task_id, "title": "ok", "updated_at": "2099-01-01T00:00:00Z", **fields}
        return json.dumps(record) + "\n"

    path.write_text(
        line("gt-000001", title="fine")
        + line("gt-000002", title="x" * 10_000_000)  # create_task refuses more than 500 characters
        + line(held.id, title="nul \x00 in the title")  # would overwrite a task the store holds
        + line("gt-000004", labels=["a" * 101])
        + line("gt-000005", description="d" * 100_001)
        + line("gt-000006", title="also fine", deps_on=["gt-000002"])
    )
    stats = TaskSync(store).import_file(project)
    assert stats is not None
    assert [(r["file"], r["line"], r["id"]) for r in stats.refused] == [
        (str(path), 2, "gt-000002"),
        (str(path), 3, held.id),
        (str(path), 4, "gt-000004"),
        (str(path), 5, "gt-000005"),
    ]
    assert "title is 10000000 characters; the limit is 500" in stats.refused[0]["error"]
    assert f"{path} line 2" in stats.refused[0]["error"] and len(stats.refused[0]["error"]) < 300
    assert {t.id: t.title for t in store.list(project)} == {
        "gt-000001": "fine",
        held.id: "held here",
        "gt-000006": "also fine",
    }
    assert stats.skipped_dependencies != []  # the edge to the refused task is not made
