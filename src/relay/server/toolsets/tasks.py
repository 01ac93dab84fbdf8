"""Toolset `tasks` (alias `gobby-tasks`): seed 003's task tracker tools over `relay.tracker`.

Names, parameters and return shapes are seed 003's (Gobby's gobby-tasks): list tools return the
8-field brief format, `get_task` the full record with its dependencies, `create_task` requires
`session_id`. Every tool takes an optional `project` (a repository path; default: the directory
relay runs in). Bad input comes back as an error result with a hint.

Tasks belong to the principal that created them (relay/tracker/principals.py): a `user` token sees,
changes, links and deletes only its own; another's id answers TASK_NOT_FOUND as an unknown one does.
An admin token and the local user (stdio) see all.
"""

import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.types import CallToolResult
from pydantic import Field

from relay.errors import ErrorCode, RelayError
from relay.principal import current
from relay.server.results import error_result, json_result
from relay.server.toolsets._registry import (
    DESTROYS_STATE,
    READ_ONLY,
    WRITES_FROM_OUTSIDE,
    WRITES_STATE,
    Deps,
    ToolRegistry,
    Toolset,
)
from relay.tracker import Project, Task, TaskChanges, ai
from relay.tracker.service import Tracker

Status = Literal["open", "in_progress", "closed"]
DepType = Literal["blocks", "related", "discovered-from"]
ProjectArg = Annotated[str | None, Field(description="repository path; default: the directory relay runs in")]
TaskId = Annotated[str, Field(description="task id, e.g. gt-abc123")]
Priority = Annotated[int, Field(ge=0, le=4, description="1 high, 2 medium, 3 low (0 critical, 4 backlog)")]
_VERBS = {"blocks": "blocked by", "related": "related to", "discovered-from": "discovered from"}


def _answer(fn: Callable[[], dict[str, Any]]) -> CallToolResult:
    try:
        return json_result(fn())
    except RelayError as err:
        return error_result(err)


async def _run(fn: Callable[[], dict[str, Any]]) -> CallToolResult:
    """Run a tool body in a worker thread: SQLite and file I/O never hold up the event loop."""
    return await anyio.to_thread.run_sync(_answer, fn)


def _listed(tasks: list[Task]) -> dict[str, Any]:
    return {"tasks": [t.brief() for t in tasks], "count": len(tasks)}


def build(reg: ToolRegistry, deps: Deps) -> None:
    creating = threading.Lock()  # tool bodies run in worker threads: one tracker per server

    def tracker() -> Tracker:
        def make() -> Tracker:
            made = Tracker(deps.settings)

            async def close() -> None:
                await anyio.to_thread.run_sync(made.close)

            deps.on_close(close)
            return made

        with creating:
            return deps.service("tracker", make)

    def scope(project: str | None) -> tuple[Tracker, Project]:
        t = tracker()
        return t, t.project(project)

    def full(t: Tracker, p: Project, task_id: str) -> dict[str, Any]:
        blocked_by, blocking = t.store.dependencies(p, task_id)
        return {
            **t.store.get(p, task_id).to_dict(),
            "dependencies": {
                "blocked_by": [d.to_dict() for d in blocked_by],
                "blocking": [d.to_dict() for d in blocking],
            },
        }

    @reg.tool(description="Create a new task in the current project. Returns the task.", annotations=WRITES_STATE)
    async def create_task(
        title: Annotated[str, Field(description="Task title")],
        session_id: Annotated[str, Field(description="your session id (required): the task is linked to it")],
        description: Annotated[str | None, Field(description="details, acceptance criteria")] = None,
        priority: Priority = 2,
        task_type: Annotated[str, Field(description="task, bug, feature, epic or chore")] = "task",
        parent_task_id: Annotated[str | None, Field(description="parent task (epic) id")] = None,
        blocks: Annotated[list[str] | None, Field(description="ids of tasks this new task blocks")] = None,
        labels: Annotated[list[str] | None, Field(description="labels to attach")] = None,
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            if not session_id.strip():
                raise RelayError(ErrorCode.INVALID_ARGUMENT, "session_id is required", "pass your session id")
            t, p = scope(project)
            task = t.store.create(
                p,
                title,
                description=description,
                priority=priority,
                task_type=task_type,
                parent_task_id=parent_task_id,
                blocks=blocks or [],
                labels=labels or [],
                session_id=session_id,
            )
            return task.to_dict()

        return await _run(go)

    @reg.tool(description="Get task details with dependencies (the full record).", annotations=READ_ONLY)
    async def get_task(task_id: TaskId, project: ProjectArg = None) -> CallToolResult:
        return await _run(lambda: full(*scope(project), task_id))

    @reg.tool(
        description="Update task fields; only the fields given change. Returns the task.", annotations=WRITES_STATE
    )
    async def update_task(
        task_id: TaskId,
        title: Annotated[str | None, Field(description="new title")] = None,
        description: Annotated[str | None, Field(description="new description")] = None,
        status: Annotated[Status | None, Field(description="open, in_progress or closed")] = None,
        priority: Annotated[int | None, Field(ge=0, le=4, description="1 high, 2 medium, 3 low")] = None,
        assignee: Annotated[str | None, Field(description="who works on it")] = None,
        labels: Annotated[list[str] | None, Field(description="replaces the labels")] = None,
        project: ProjectArg = None,
    ) -> CallToolResult:
        changes = TaskChanges(
            title=title,
            description=description,
            status=status,
            priority=priority,
            assignee=assignee,
            labels=tuple(labels) if labels is not None else None,
        )

        def go() -> dict[str, Any]:
            t, p = scope(project)
            return t.store.update(p, task_id, changes).to_dict()

        return await _run(go)

    @reg.tool(
        description="Close a task with a reason (completed, wont_fix, duplicate...). Returns the task.",
        annotations=WRITES_STATE,
    )
    async def close_task(
        task_id: TaskId,
        reason: Annotated[str, Field(description="why it is closed")] = "completed",
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            return t.store.close_task(p, task_id, reason).to_dict()

        return await _run(go)

    @reg.tool(description="Delete a task; cascade=true also deletes its subtasks.", annotations=DESTROYS_STATE)
    async def delete_task(
        task_id: TaskId,
        cascade: Annotated[bool, Field(description="also delete subtasks")] = False,
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            deleted = t.store.delete(p, task_id, cascade)
            return {"success": True, "message": f"Task {task_id} deleted", "deleted": deleted}

        return await _run(go)

    @reg.tool(description="List tasks with optional filters, newest first (brief format).", annotations=READ_ONLY)
    async def list_tasks(
        status: Annotated[Status | None, Field(description="only this status")] = None,
        priority: Annotated[int | None, Field(description="only this priority")] = None,
        task_type: Annotated[str | None, Field(description="only this type")] = None,
        assignee: Annotated[str | None, Field(description="only this assignee")] = None,
        label: Annotated[str | None, Field(description="only tasks with this label")] = None,
        parent_task_id: Annotated[str | None, Field(description="only subtasks of this task")] = None,
        title_like: Annotated[str | None, Field(description="title contains this (case-insensitive)")] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="at most this many")] = 50,
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            found = t.store.list(
                p,
                status=status,
                priority=priority,
                task_type=task_type,
                assignee=assignee,
                label=label,
                parent_task_id=parent_task_id,
                title_like=title_like,
                limit=limit,
            )
            return _listed(found)

        return await _run(go)

    @reg.tool(
        description="Add a dependency: task_id depends on depends_on (blocks refuses cycles, naming them).",
        annotations=WRITES_STATE,
    )
    async def add_dependency(
        task_id: Annotated[str, Field(description="the dependent task")],
        depends_on: Annotated[str, Field(description="the task it depends on (the blocker)")],
        dep_type: Annotated[DepType, Field(description="blocks, related or discovered-from")] = "blocks",
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            dep = t.store.add_dependency(p, task_id, depends_on, dep_type)
            message = f"Task {task_id} {_VERBS[dep_type]} {depends_on}"
            return {"success": True, "message": message, "dependency": dep.to_dict()}

        return await _run(go)

    @reg.tool(description="Remove a dependency of task_id on depends_on.", annotations=DESTROYS_STATE)
    async def remove_dependency(
        task_id: Annotated[str, Field(description="the dependent task")],
        depends_on: Annotated[str, Field(description="the task it depends on")],
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            removed = t.store.remove_dependency(p, task_id, depends_on)
            message = "Dependency removed" if removed else f"Task {task_id} did not depend on {depends_on}"
            return {"success": True, "message": message, "removed": removed}

        return await _run(go)

    @reg.tool(description="Get blockers/blocking tasks of a task as a tree.", annotations=READ_ONLY)
    async def get_dependency_tree(
        task_id: TaskId,
        direction: Annotated[
            Literal["blockers", "blocking", "both"], Field(description="blockers, blocking or both")
        ] = "both",
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            return t.store.dependency_tree(p, task_id, direction)

        return await _run(go)

    @reg.tool(
        description="Detect circular dependencies among the project's blocks dependencies.", annotations=READ_ONLY
    )
    async def check_dependency_cycles(project: ProjectArg = None) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            cycles = t.store.cycles(p)
            return {"has_cycles": True, "cycles": cycles} if cycles else {"has_cycles": False}

        return await _run(go)

    @reg.tool(
        description="List unblocked tasks: open, no open blocker; by priority then age (brief format).",
        annotations=READ_ONLY,
    )
    async def list_ready_tasks(
        priority: Annotated[int | None, Field(description="only this priority")] = None,
        task_type: Annotated[str | None, Field(description="only this type")] = None,
        assignee: Annotated[str | None, Field(description="only this assignee")] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="at most this many")] = 10,
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            return _listed(t.store.ready(p, priority=priority, task_type=task_type, assignee=assignee, limit=limit))

        return await _run(go)

    @reg.tool(description="List blocked tasks with their open blockers (brief format).", annotations=READ_ONLY)
    async def list_blocked_tasks(
        limit: Annotated[int, Field(ge=1, le=1000, description="at most this many")] = 20,
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            blocked = t.store.blocked(p, limit)
            items = [{**task.brief(), "blocked_by": [b.brief() for b in blockers]} for task, blockers in blocked]
            return {"blocked_tasks": items, "count": len(items)}

        return await _run(go)

    @reg.tool(
        description="Link a task to a session (worked_on, discovered, mentioned, closed).", annotations=WRITES_STATE
    )
    async def link_task_to_session(
        task_id: TaskId,
        session_id: Annotated[str | None, Field(description="the session id (required)")] = None,
        action: Annotated[
            Literal["worked_on", "discovered", "mentioned", "closed"], Field(description="what the session did")
        ] = "worked_on",
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            if not session_id:
                raise RelayError(ErrorCode.INVALID_ARGUMENT, "session_id is required", "pass your session id")
            t, p = scope(project)
            link = t.store.link_session(p, task_id, session_id, action)
            return {"success": True, "message": f"Task {task_id} linked to session {session_id} ({link.action})"}

        return await _run(go)

    @reg.tool(
        description="Get the tasks a session touched (brief format plus the link's action).", annotations=READ_ONLY
    )
    async def get_session_tasks(
        session_id: Annotated[str, Field(description="the session id")], project: ProjectArg = None
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            # A user sees the links it made; an admin (and the local user) the links anyone made to the session.
            linked = t.store.session_tasks(p, session_id, everyone=current().is_admin)
            tasks = [{**task.brief(), "action": action} for task, action in linked]
            return {"session_id": session_id, "tasks": tasks}

        return await _run(go)

    @reg.tool(description="Get the sessions that touched a task.", annotations=READ_ONLY)
    async def get_task_sessions(task_id: TaskId, project: ProjectArg = None) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            links = t.store.task_sessions(p, task_id)
            return {"task_id": task_id, "sessions": [link.to_dict() for link in links]}

        return await _run(go)

    @reg.tool(
        description="Import/export tasks to .gobby/tasks.jsonl in the repository (git sync).", annotations=WRITES_STATE
    )
    async def sync_tasks(
        direction: Annotated[Literal["import", "export", "both"], Field(description="import, export or both")] = "both",
        project: ProjectArg = None,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            return t.sync_project(p, direction)

        return await _run(go)

    @reg.tool(
        description="Get sync status of .gobby/tasks.jsonl: no_file, no_meta, available or error.",
        annotations=READ_ONLY,
    )
    async def get_sync_status(project: ProjectArg = None) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            status = t.sync.status(p)
            problem = t.export_error(p)
            return {**status, "status": "error", "error": problem} if problem else status

        return await _run(go)

    @reg.tool(
        description="Split a task into subtasks with dependencies, written by a configured model.",
        annotations=WRITES_FROM_OUTSIDE,
    )
    async def expand_task(
        task_id: TaskId,
        context: Annotated[str | None, Field(description="extra guidance for the split")] = None,
        project: ProjectArg = None,
    ) -> CallToolResult:
        try:
            t, p = await anyio.to_thread.run_sync(scope, project)
            asker = ai.engine_asker(deps.engine(), "expand_task")
            return json_result(await ai.expand_task(t.store, p, task_id, asker, context))
        except RelayError as err:
            return error_result(err)

    @reg.tool(
        description="Ask a configured model whether finished work meets the task's description.",
        annotations=WRITES_FROM_OUTSIDE,
    )
    async def validate_task(
        task_id: TaskId,
        changes_summary: Annotated[str, Field(description="what was changed to finish the task")],
        context: Annotated[str | None, Field(description="extra context for the check")] = None,
        project: ProjectArg = None,
    ) -> CallToolResult:
        try:
            t, p = await anyio.to_thread.run_sync(scope, project)
            asker = ai.engine_asker(deps.engine(), "validate_task")
            return json_result(await ai.validate_task(t.store, p, task_id, changes_summary, asker, context))
        except RelayError as err:
            return error_result(err)

    @reg.tool(description="Add a label to a task. Returns the task.", annotations=WRITES_STATE)
    async def add_label(
        task_id: TaskId, label: Annotated[str, Field(description="the label")], project: ProjectArg = None
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            return t.store.set_labels(p, task_id, add=label).to_dict()

        return await _run(go)

    @reg.tool(description="Remove a label from a task. Returns the task.", annotations=DESTROYS_STATE)
    async def remove_label(
        task_id: TaskId, label: Annotated[str, Field(description="the label")], project: ProjectArg = None
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            t, p = scope(project)
            return t.store.set_labels(p, task_id, remove=label).to_dict()

        return await _run(go)


TOOLSET = Toolset(
    name="tasks",
    description="a task tracker with dependencies, scoped by project and synced to .gobby/tasks.jsonl with git",
    build=build,
    aliases=("gobby-tasks",),
)
