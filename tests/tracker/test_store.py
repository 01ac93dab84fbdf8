"""The task store: CRUD, ids, dependencies and cycles, ready and blocked work, labels, session links."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from relay.errors import ErrorCode, RelayError
from relay.tracker import Project, TaskChanges, TaskStore, resolve_project
from relay.tracker.model import BRIEF_FIELDS

from .conftest import init_repo


def test_a_new_task_is_open_with_a_gt_id_and_gobbys_full_fields(store: TaskStore, project: Project) -> None:
    task = store.create(project, "Implement authentication", priority=1, task_type="feature", session_id="s-1")
    data = task.to_dict()
    assert re.fullmatch(r"gt-[0-9a-f]{6}", task.id)
    assert data == {
        "id": task.id,
        "project_id": "repo",
        "title": "Implement authentication",
        "status": "open",
        "priority": 1,
        "type": "feature",
        "created_at": task.created_at,
        "updated_at": task.created_at,
        "description": None,
        "parent_task_id": None,
        "discovered_in_session_id": "s-1",
        "assignee": None,
        "labels": [],
        "closed_reason": None,
        "closed_at": None,
        "platform_id": None,
        "validation_status": None,
        "validation_feedback": None,
        "original_instruction": None,
    }
    assert list(task.brief()) == list(BRIEF_FIELDS)
    assert [link.to_dict()["action"] for link in store.task_sessions(project, task.id)] == ["discovered"]


def test_an_id_that_collides_is_drawn_again_and_after_three_retries_it_is_an_error(
    relay_home: Path, project: Project
) -> None:
    draws = iter([b"a" * 16, b"a" * 16, b"b" * 16] + [b"c" * 16] * 8)
    store = TaskStore(relay_home / "relay.db", entropy=lambda n: next(draws))
    try:
        first = store.create(project, "takes the id of a")
        second = store.create(project, "collides with a once, then gets b")
        third = store.create(project, "gets c")
        with pytest.raises(RelayError) as err:
            store.create(project, "c is taken and every retry draws c again")
    finally:
        store.close()
    assert len({first.id, second.id, third.id}) == 3
    assert err.value.code is ErrorCode.INTERNAL
    assert err.value.message == "Failed to generate unique task ID after 3 retries"


def test_tasks_are_scoped_by_project(store: TaskStore, tmp_path: Path) -> None:
    a = resolve_project(init_repo(tmp_path / "a"))
    b = resolve_project(init_repo(tmp_path / "b"))
    task = store.create(a, "only in a")
    assert store.find(b, task.id) is None
    with pytest.raises(RelayError) as err:
        store.get(b, task.id)
    assert err.value.code is ErrorCode.TASK_NOT_FOUND
    assert [t.id for t in store.list(a)] == [task.id]
    assert store.list(b) == []


def test_a_subdirectory_of_a_repository_is_the_same_project(tmp_path: Path) -> None:
    root = init_repo(tmp_path / "proj")
    (root / "src" / "deep").mkdir(parents=True)
    assert resolve_project(root / "src" / "deep") == resolve_project(root)
    assert resolve_project(tmp_path, project="proj/src") == resolve_project(root)
    assert resolve_project(root).is_git
    # relay started in a subdirectory (its allowed root) still works on the whole repository
    assert resolve_project(root / "src", allowed_roots=[root / "src"]) == resolve_project(root)


def test_a_project_outside_the_allowed_roots_or_missing_is_refused(tmp_path: Path) -> None:
    root = init_repo(tmp_path / "proj")
    with pytest.raises(RelayError) as outside:
        resolve_project(root, allowed_roots=[tmp_path / "elsewhere"])
    with pytest.raises(RelayError) as missing:
        resolve_project(root, project="no/such/dir")
    assert (outside.value.code, missing.value.code) == (ErrorCode.CWD_NOT_ALLOWED, ErrorCode.INVALID_ARGUMENT)


def test_update_changes_only_the_given_fields_and_bumps_updated_at(store: TaskStore, project: Project) -> None:
    task = store.create(project, "t", description="d", labels=["a"])
    updated = store.update(project, task.id, TaskChanges(status="in_progress", assignee="me"))
    assert (updated.status, updated.assignee, updated.description, updated.labels) == ("in_progress", "me", "d", ("a",))
    assert updated.updated_at > task.updated_at
    with pytest.raises(RelayError) as bad:
        store.update(project, task.id, TaskChanges(status="done"))
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT


def test_closing_records_the_reason_and_reopening_clears_it(store: TaskStore, project: Project) -> None:
    task = store.create(project, "t")
    closed = store.close_task(project, task.id, "wont_fix")
    assert (closed.status, closed.closed_reason) == ("closed", "wont_fix")
    assert closed.closed_at is not None
    reopened = store.update(project, task.id, TaskChanges(status="open"))
    assert (reopened.status, reopened.closed_reason, reopened.closed_at) == ("open", None, None)


def test_a_task_with_children_is_deleted_only_with_cascade(store: TaskStore, project: Project) -> None:
    parent = store.create(project, "epic", task_type="epic")
    child = store.create(project, "child", parent_task_id=parent.id)
    grandchild = store.create(project, "grandchild", parent_task_id=child.id)
    with pytest.raises(RelayError) as err:
        store.delete(project, parent.id)
    assert err.value.message == f"Task {parent.id} has children. Use cascade=True to delete."
    assert store.delete(project, parent.id, cascade=True) == [parent.id, child.id, grandchild.id]
    assert store.list(project) == []


def test_list_filters_combine_and_return_newest_first(store: TaskStore, project: Project) -> None:
    a = store.create(project, "Fix login bug", task_type="bug", labels=["auth"])
    b = store.create(project, "Add login page", priority=1, labels=["auth", "ui"])
    c = store.create(project, "Write docs", priority=3)
    assert [t.id for t in store.list(project)] == [c.id, b.id, a.id]
    assert [t.id for t in store.list(project, label="auth")] == [b.id, a.id]
    assert [t.id for t in store.list(project, title_like="LOGIN", task_type="bug")] == [a.id]
    assert [t.id for t in store.list(project, priority=3)] == [c.id]
    assert [t.id for t in store.list(project, title_like="%")] == []
    assert [t.id for t in store.list(project, limit=1)] == [c.id]


def test_labels_are_added_once_and_removed(store: TaskStore, project: Project) -> None:
    task = store.create(project, "t")
    store.set_labels(project, task.id, add="backend")
    again = store.set_labels(project, task.id, add="backend")
    assert again.labels == ("backend",)
    assert store.set_labels(project, task.id, remove="backend").labels == ()


def test_a_dependency_that_closes_a_cycle_is_refused_naming_the_cycle(store: TaskStore, project: Project) -> None:
    a, b, c = (store.create(project, name) for name in "abc")
    store.add_dependency(project, a.id, b.id)  # a waits for b
    store.add_dependency(project, b.id, c.id)  # b waits for c
    with pytest.raises(RelayError) as err:
        store.add_dependency(project, c.id, a.id)  # c would wait for a
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert f"Adding dependency {a.id} blocks {c.id} would create a cycle: {c.id} → {a.id} → {b.id} → {c.id}" in (
        err.value.message
    )
    assert store.cycles(project) == []
    related = store.add_dependency(project, c.id, a.id, "related")  # only `blocks` edges can deadlock
    assert related.dep_type == "related"
    with pytest.raises(RelayError):
        store.add_dependency(project, a.id, a.id)


def test_removing_a_dependency_unblocks_the_task(store: TaskStore, project: Project) -> None:
    a, b = store.create(project, "a"), store.create(project, "b")
    store.add_dependency(project, a.id, b.id)
    assert [t.id for t in store.ready(project)] == [b.id]
    assert store.remove_dependency(project, a.id, b.id) == 1
    assert {t.id for t in store.ready(project)} == {a.id, b.id}
    assert store.remove_dependency(project, a.id, b.id) == 0


def test_create_with_blocks_makes_the_new_task_a_blocker(store: TaskStore, project: Project) -> None:
    later = store.create(project, "deploy")
    first = store.create(project, "build", blocks=[later.id])
    blocked_by, blocking = store.dependencies(project, later.id)
    assert [(d.task_id, d.depends_on, d.dep_type) for d in blocked_by] == [(later.id, first.id, "blocks")]
    assert blocking == []
    assert [t.id for t in store.ready(project)] == [first.id]


def test_ready_work_is_ordered_by_priority_then_age_and_in_progress_blockers_still_block(
    store: TaskStore, project: Project
) -> None:
    low = store.create(project, "low", priority=3)
    high_old = store.create(project, "high old", priority=1)
    high_new = store.create(project, "high new", priority=1)
    waiting = store.create(project, "waiting", priority=0)
    store.add_dependency(project, waiting.id, low.id)
    store.update(project, low.id, TaskChanges(status="in_progress"))
    assert [t.id for t in store.ready(project)] == [high_old.id, high_new.id]
    assert [(t.id, [b.id for b in bs]) for t, bs in store.blocked(project)] == [(waiting.id, [low.id])]
    store.close_task(project, low.id)
    assert [t.id for t in store.ready(project)] == [waiting.id, high_old.id, high_new.id]
    assert store.blocked(project) == []


def test_the_dependency_tree_shows_blockers_and_blocking_and_marks_cycles_of_related_links(
    store: TaskStore, project: Project
) -> None:
    a, b, c = (store.create(project, name) for name in "abc")
    store.add_dependency(project, a.id, b.id)
    store.add_dependency(project, b.id, c.id)
    tree = store.dependency_tree(project, b.id)
    assert tree == {
        "id": b.id,
        "title": "b",
        "status": "open",
        "blockers": [{"id": c.id, "title": "c", "status": "open", "dep_type": "blocks", "blockers": []}],
        "blocking": [{"id": a.id, "title": "a", "status": "open", "dep_type": "blocks", "blocking": []}],
    }
    store.add_dependency(project, c.id, a.id, "related")
    loop = store.dependency_tree(project, a.id, "blockers")
    assert loop["blockers"][0]["blockers"][0]["blockers"][0] == {
        "id": a.id,
        "title": "a",
        "status": "open",
        "dep_type": "related",
        "cycle": True,
    }
    assert "blocking" not in loop


def test_session_links_are_listed_both_ways(store: TaskStore, project: Project) -> None:
    a, b = store.create(project, "a"), store.create(project, "b")
    store.link_session(project, a.id, "sess-1")
    store.link_session(project, b.id, "sess-1", "closed")
    store.link_session(project, a.id, "sess-2", "mentioned")
    assert [(t.id, action) for t, action in store.session_tasks(project, "sess-1")] == [
        (a.id, "worked_on"),
        (b.id, "closed"),
    ]
    assert [(s.session_id, s.action) for s in store.task_sessions(project, a.id)] == [
        ("sess-1", "worked_on"),
        ("sess-2", "mentioned"),
    ]
    with pytest.raises(RelayError):
        store.link_session(project, a.id, "sess-1", "stared_at")


def test_bad_input_is_an_invalid_argument_with_a_hint(store: TaskStore, project: Project) -> None:
    for call in (
        lambda: store.create(project, "   "),
        lambda: store.create(project, "t", priority=9),
        lambda: store.create(project, "t", labels=[""]),
        lambda: store.list(project, limit=0),
        lambda: store.ready(project, limit=100_000),
        lambda: store.dependency_tree(project, store.create(project, "x").id, "sideways"),
    ):
        with pytest.raises(RelayError) as err:
            call()
        assert err.value.code is ErrorCode.INVALID_ARGUMENT
        assert err.value.hint


def test_a_database_locked_by_another_writer_is_a_relay_error_not_a_crash(relay_home: Path, project: Project) -> None:
    store = TaskStore(relay_home / "relay.db", busy_timeout_s=0.2)
    other = sqlite3.connect(relay_home / "relay.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(RelayError) as err:
            store.create(project, "cannot be written now")
        other.execute("ROLLBACK")
        assert store.create(project, "written once the lock is gone").title == "written once the lock is gone"
    finally:
        other.close()
        store.close()
    assert err.value.code is ErrorCode.INTERNAL
    assert "locked" in err.value.message and err.value.hint
