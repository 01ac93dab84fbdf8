"""`relay install|uninstall CLIENT`: compute each config file's new text, show it as a diff, write it atomically.

Idempotent (a second install changes nothing), and an uninstall after an install gives the
files their original bytes back (a file install created and left empty is removed).
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.clients import jsonedit, tomledit
from relay.clients.specs import (
    ALIASES,
    CLIENTS,
    SCOPES,
    ClientSpec,
    Context,
    FilePlan,
    JsonItem,
    JsonSet,
    TomlTable,
)
from relay.errors import ErrorCode, RelayError

EMPTY = ("", "{}")  # a config file with nothing in it


@dataclass(frozen=True)
class Change:
    path: Path
    before: str | None  # None: the file does not exist
    after: str | None  # None: the file is to be removed

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        old = (self.before or "").splitlines(keepends=True)
        new = (self.after or "").splitlines(keepends=True)
        name = str(self.path)
        lines = difflib.unified_diff(
            old, new, "/dev/null" if self.before is None else name, "/dev/null" if self.after is None else name
        )
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def client_spec(name: str) -> ClientSpec:
    key = ALIASES.get(name, name)
    if key not in CLIENTS:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"relay does not know the client {name!r}",
            f"use one of: {', '.join(CLIENTS)}",
        )
    return CLIENTS[key]


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise RelayError(ErrorCode.INVALID_ARGUMENT, f"unknown scope {scope!r}", "use --scope user or --scope project")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"cannot read {path}: {exc.strerror}", "check its permissions"
        ) from None


def _apply(plan: FilePlan, text: str, remove: bool) -> str:
    where = str(plan.path)
    for edit in plan.edits:
        if isinstance(edit, JsonSet):
            text = (
                jsonedit.remove_value(text, edit.path, where)
                if remove
                else jsonedit.set_value(text, edit.path, edit.value, where)
            )
        elif isinstance(edit, JsonItem):
            text = (
                jsonedit.remove_item(text, edit.path, edit.item, where)
                if remove
                else jsonedit.add_item(text, edit.path, edit.item, where)
            )
        else:
            text = (
                tomledit.remove_table(text, edit.table, where)
                if remove
                else tomledit.set_table(text, edit.table, edit.body, where)
            )
    return text


def plan_changes(spec: ClientSpec, ctx: Context, scope: str, *, remove: bool = False) -> list[Change]:
    """The change to every file the client's entry lives in (unchanged files included, with changed=False)."""
    _check_scope(scope)
    changes: list[Change] = []
    for plan in spec.plan(ctx, scope):
        before = _read(plan.path)
        if before is None and remove:
            changes.append(Change(plan.path, None, None))
            continue
        after = _apply(plan, before or "", remove)
        # relay's entry was all the file held (install created it): remove the file.
        emptied = remove and before is not None and after.strip() in EMPTY and before.strip() not in EMPTY
        if emptied:
            changes.append(Change(plan.path, before, None))
            continue
        changes.append(Change(plan.path, before, after))
    return changes


def write_changes(changes: list[Change]) -> None:
    """Write every changed file atomically (same folder, same mode), or remove it."""
    for change in changes:
        if not change.changed:
            continue
        if change.after is None:
            change.path.unlink(missing_ok=True)
            continue
        change.path.parent.mkdir(parents=True, exist_ok=True)
        mode = change.path.stat().st_mode & 0o7777 if change.path.exists() else 0o600
        fd, tmp = tempfile.mkstemp(prefix=f".{change.path.name}.", dir=change.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                handle.write(change.after)
            os.chmod(tmp, mode)
            os.replace(tmp, change.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@dataclass(frozen=True)
class EntryReport:
    """doctor's view of one client's relay entry in one scope."""

    client: str
    scope: str
    path: str
    status: str  # ok, missing, problems
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what else the client needs here (not a fault of the entry: no exit 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "scope": self.scope,
            "path": self.path,
            "status": self.status,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


def _json_value(text: str, path: tuple[str, ...], where: str) -> Any:
    node: Any = jsonedit.load(text, where)
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]  # pyright: ignore[reportUnknownVariableType]
    return node  # pyright: ignore[reportUnknownVariableType]


def _command_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return "the relay entry is not an object"
    command = entry.get("command")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if not isinstance(command, str) or not command:
        return "the relay entry has no command"
    if shutil.which(command) is None:
        return f"its command {command!r} is not an executable (run `relay install` again)"
    args = entry.get("args") or []  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if "serve" not in args:
        return "its args do not run `relay serve`"
    return None


def _entry_problems(plan: FilePlan, text: str, found_entry: list[bool]) -> list[str]:
    where = str(plan.path)
    problems: list[str] = []
    for index, edit in enumerate(plan.edits):
        if isinstance(edit, JsonSet):
            value = _json_value(text, edit.path, where)
            if index == 0 and edit.path[-1] == "relay":
                if value is None:
                    continue
                found_entry.append(True)
                if (problem := _command_problem(value)) is not None:
                    problems.append(problem)
                wanted: dict[str, Any] = edit.value
                problems += [
                    f"{k} is {value.get(k)!r}, relay install writes {v!r}"  # pyright: ignore[reportUnknownMemberType]
                    for k, v in wanted.items()
                    if k not in ("command", "args", "env") and value.get(k) != v  # pyright: ignore[reportUnknownMemberType]
                ]
            elif value is None or (edit.sane(value) if edit.sane else value != edit.value):
                problems.append(edit.why)
        elif isinstance(edit, JsonItem):
            items = _json_value(text, edit.path, where)
            if not isinstance(items, list) or edit.item not in items:
                problems.append(edit.why)
        else:
            problems += _toml_problems(edit, text, where, found_entry)
    return problems


def _toml_problems(edit: TomlTable, text: str, where: str, found_entry: list[bool]) -> list[str]:
    node: Any = tomledit.load(text, where)
    for part in edit.table:
        node = node.get(part) if isinstance(node, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if not isinstance(node, dict):
        return []
    found_entry.append(True)
    problems: list[str] = []
    if (problem := _command_problem(node)) is not None:
        problems.append(problem)
    for key, wanted in edit.body.items():
        present = node.get(key)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        check = edit.sane.get(key)
        if (check(present) if check else present == wanted) is False:
            problems.append(f"{key} is {present!r}, relay install writes {wanted!r}")
    return problems


def check_client(spec: ClientSpec, ctx: Context, scope: str) -> EntryReport | None:
    """Is relay's entry present and sane in this scope? None when the client has no config file there at all."""
    plans = spec.plan(ctx, scope)
    texts = [(plan, _read(plan.path)) for plan in plans]
    if all(text is None for _, text in texts):
        return None
    found: list[bool] = []
    problems: list[str] = []
    for plan, text in texts:
        try:
            problems += _entry_problems(plan, text or "", found)
        except RelayError as err:
            problems.append(err.message)
    path = str(plans[0].path)
    if not found:
        return EntryReport(spec.name, scope, path, "missing", ("run `relay install " + spec.name + "`",))
    advice = spec.advice(ctx) if spec.advice is not None else None
    notes = (advice,) if advice else ()
    return EntryReport(spec.name, scope, path, "problems" if problems else "ok", tuple(problems), notes)


def check_all(ctx: Context) -> list[EntryReport]:
    """One report per client and scope where the client keeps a config file (user scope, and the project's)."""
    reports: list[EntryReport] = []
    for spec in CLIENTS.values():
        for scope in SCOPES:
            report = check_client(spec, ctx, scope)
            if report is not None:
                reports.append(report)
    return reports
