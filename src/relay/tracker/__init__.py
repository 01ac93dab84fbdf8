"""The task tracker: tasks with dependencies, scoped by project, synced to `.gobby/tasks.jsonl` with git.

Core only: it knows nothing of MCP; the `tasks` toolset and any CLI call these functions.
"""

from relay.tracker.model import Dependency, SessionLink, Task, TaskChanges
from relay.tracker.project import Project, resolve_project
from relay.tracker.store import TaskStore
from relay.tracker.sync import AutoExporter, TaskSync

__all__ = [
    "AutoExporter",
    "Dependency",
    "Project",
    "SessionLink",
    "Task",
    "TaskChanges",
    "TaskStore",
    "TaskSync",
    "resolve_project",
]
