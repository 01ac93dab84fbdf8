"""Which project a task call is about: the git repository around a directory (or the directory itself)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from relay.errors import ErrorCode, RelayError, invalid
from relay.osfiles import expand_home


@dataclass(frozen=True)
class Project:
    """A task scope. `key` scopes rows in the store; `project_id` is written into new tasks."""

    root: Path
    is_git: bool

    @property
    def key(self) -> str:
        return str(self.root)

    @property
    def project_id(self) -> str:
        # The folder name, so clones of one repository write the same value into the JSONL.
        return self.root.name or "root"


def find_repo_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` holding `.git` (a directory, or a file in worktrees)."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def resolve_project(cwd: Path, project: str | None = None, allowed_roots: Sequence[Path] = ()) -> Project:
    """The project for `project` (a directory, absolute or relative to `cwd`) or, without it, for `cwd`."""
    raw = cwd if project is None else expand_home(project)
    if project is not None and ("\x00" in project or not project.strip()):
        raise invalid("project is empty or contains NUL bytes", "pass the repository's path, or omit project")
    path = raw if raw.is_absolute() else cwd / raw
    try:
        folder = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise invalid(
            f"project {str(project if project is not None else cwd)[:200]!r} is not an existing directory",
            "pass the repository's path, or omit project to use the directory relay runs in",
        ) from None
    if not folder.is_dir():
        raise invalid(f"project {str(folder)[:200]!r} is not a directory", "pass the repository's folder")
    # The folder named must be allowed; the repository around it is then the project, even when
    # relay was started in a subdirectory of it.
    if allowed_roots and not any(folder == r or folder.is_relative_to(r) for r in allowed_roots):
        raise RelayError(
            ErrorCode.CWD_NOT_ALLOWED,
            f"project {str(folder)[:200]!r} is outside the allowed roots",
            "use a repository under the allowed roots, or add it to security.allowed_roots in config.toml",
        )
    repo = find_repo_root(folder)
    return Project(root=repo or folder, is_git=repo is not None)
