"""Per-action approval: an ACP agent's permission request, answered by the job's policy or kept for the person.

The ACP driver reports each `session/request_permission` as a `permission_request` event (data: the request's
`id`, its `toolCall` with `kind`, `title`, `locations`, `rawInput`, and its `options`). What the action needs is
its kind's level: read/search/think/fetch are `read-only`, edit/delete/move are `edit`, execute and anything else
`full`; any of them on a file outside the job's folder needs `full`. Within the job's own permission and with the policy `grant` (`[security] approvals`, `[agents.NAME]
approvals`), relay allows it at once (publish.py hands it each `permission_request` event it stores); otherwise the request is kept in the job's folder (`approvals/ID.json`) for
the next call of the job's owner that waits on it to ask the person (relay.server.approvals). A request nobody
answers within `approval_wait_s` is denied (`cancelled`): never allowed by default.

A request is named by the driver run that asked and its id (`approvals/RUN.ID.json`): a retried or restarted run
in the same job folder numbers its requests from 1 again, and an earlier run's request or answer is never its own.
Whoever answers first (the grant, the person, the wait running out) creates `approvals/RUN.ID.answer.json` exclusively;
only that one posts the answer to the driver's inbox, so a request is answered once, across processes too. Every
request and every answer is on the audit record (`permission.requested`, `permission.answered`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast

import anyio

from relay.agents.acp.inbox import PERMISSION_ANSWER, post
from relay.config import PERMISSIONS, Settings
from relay.jobs.state import JobState
from relay.store import JobRecord

PERMISSION_REQUEST = "permission_request"
APPROVALS_DIR = "approvals"
ANSWER_SUFFIX = ".answer.json"
# What a request keeps of the agent's raw input (a command, a patch), for the form and the audit entry.
INPUT_CHARS = 4000
# The most files a request names in the form and the audit entry.
MAX_PATHS = 50

# The level each ACP tool kind needs; a kind not listed (`other`, a new one) needs `full`.
KIND_LEVELS = {
    "read": "read-only",
    "search": "read-only",
    "think": "read-only",
    "fetch": "read-only",
    "edit": "edit",
    "delete": "edit",
    "move": "edit",
    "execute": "full",
}

Action = Literal["accept", "decline", "cancel", "unavailable", "capped", "expired", "ended"]
"""How a request was answered: the person's accept/decline/cancel, or why nobody allowed it."""
By = Literal["grant", "person", "nobody"]


def level_of(kind: str) -> str:
    return KIND_LEVELS.get(kind, "full")


def _outside(paths: list[str], cwd: str) -> bool:
    """Whether a path (relative ones from `cwd`) leads out of `cwd`, symlinks followed: `edit` is within the folder."""
    top = os.path.realpath(cwd) if cwd else ""
    return not top or any(
        (found := os.path.realpath(os.path.join(top, path))) != top
        and not found.startswith(top.rstrip(os.sep) + os.sep)
        for path in paths
    )


def level_for(kind: str, paths: list[str], cwd: str) -> str:
    """What an action needs: its kind's level within the job's folder, and `full` for a file outside it (`edit`
    edits files in the folder only; a read out of it reaches relay's own files, another principal's prompts in
    relay.db, the person's keys: what no permission below `full` gives)."""
    return "full" if paths and _outside(paths, cwd) else level_of(kind)


def policy_of(settings: Settings, agent: str) -> str:
    return settings.agent(agent).approvals or settings.approvals


@dataclass(frozen=True)
class Request:
    """One permission request of a job's agent, as relay keeps it."""

    id: int
    title: str
    kind: str
    level: str  # what the action needs
    paths: tuple[str, ...]
    input: str  # the agent's raw input as JSON text, clipped
    allow: str | None  # the optionId that allows it once (None: the agent offered none)
    reject: str | None  # the optionId that refuses it once
    agent: str
    cwd: str
    permission: str  # the job's own permission
    principal: str  # the job's owner: the only one who may answer
    asked_at: float
    # The driver run that asked (relay.agents.acp.inbox): a retry in the same job folder numbers its requests from 1
    # again, so a request is its run and its id, and an earlier run's answer never answers it.
    run: str = ""

    @property
    def key(self) -> str:
        """The request's name in the job's folder (and in its form's key): its run and its id."""
        return f"{self.run}.{self.id}" if self.run else str(self.id)

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("allow", "reject")} | {"paths": list(self.paths)}

    def describe(self) -> str:
        """The action in one text: what the person is shown and what an answer is sealed to."""
        return json.dumps(
            {
                "id": self.id,
                "run": self.run,
                "title": self.title,
                "kind": self.kind,
                "paths": self.paths,
                "input": self.input,
            }
        )


def _option(options: list[Any], *kinds: str) -> str | None:
    for kind in kinds:
        for option in options:
            if isinstance(option, dict):
                entry = cast(dict[str, Any], option)
                if entry.get("kind") == kind and isinstance(entry.get("optionId"), str):
                    return str(entry["optionId"])
    return None


def request_from(rec: JobRecord, data: dict[str, Any]) -> Request | None:
    """A request from a `permission_request` event's data; None when it carries no usable id."""
    rid = data.get("id")
    if isinstance(rid, bool) or not isinstance(rid, int):
        return None
    given = data.get("toolCall", data.get("tool_call"))  # the driver's line, or relay's ACP parser's event
    call: dict[str, Any] = cast(dict[str, Any], given) if isinstance(given, dict) else {}
    options: list[Any] = cast(list[Any], data.get("options")) if isinstance(data.get("options"), list) else []
    raw_locations = call.get("locations")
    locations: list[Any] = cast(list[Any], raw_locations) if isinstance(raw_locations, list) else []
    paths = [str(cast(dict[str, Any], loc).get("path")) for loc in locations if isinstance(loc, dict)]
    raw = call.get("rawInput")
    text = raw if isinstance(raw, str) else json.dumps(raw, default=str) if raw is not None else ""
    kind = str(call.get("kind") or "other")
    run = data.get("run")
    permission = str(rec.request.get("permission") or "read-only")
    cwd = str(rec.request.get("cwd") or rec.cwd or "")
    return Request(
        id=rid,
        title=str(call.get("title") or kind)[:INPUT_CHARS],
        kind=kind,
        level=level_for(kind, paths, cwd),
        paths=tuple(paths[:MAX_PATHS]),
        input=text[:INPUT_CHARS],
        allow=_option(options, "allow_once"),  # "allow this once": never an allow_always
        reject=_option(options, "reject_once", "reject_always"),
        agent=rec.agent,
        cwd=cwd,
        permission=permission if permission in PERMISSIONS else "read-only",
        principal=rec.principal,
        asked_at=time.time(),
        run=run if isinstance(run, str) and run.isalnum() else "",
    )


def within_grant(request: Request) -> bool:
    return PERMISSIONS.index(request.level) <= PERMISSIONS.index(request.permission)


def _folder(job_dir: Path) -> Path:
    return job_dir / APPROVALS_DIR


def pending(job_dir: Path) -> list[Request]:
    """The requests of a job not answered yet, oldest first."""
    folder = _folder(job_dir)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found: list[Request] = []
    for name in names:
        if not name.endswith(".json") or name.endswith(ANSWER_SUFFIX):
            continue
        if (folder / (name.removesuffix(".json") + ANSWER_SUFFIX)).exists():
            continue
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
            found.append(Request(**(data | {"paths": tuple(data["paths"])})))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return sorted(found, key=lambda r: r.asked_at)


def _keep(job_dir: Path, request: Request) -> bool:
    """Write the request into the job's folder; False when it is there already (a replay after a restart)."""
    folder = _folder(job_dir)
    folder.mkdir(exist_ok=True)
    path = folder / f"{request.key}.json"
    if path.exists():
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(request)), encoding="utf-8")
    os.replace(tmp, path)
    return True


def answer(job_dir: Path, request: Request, action: Action, by: By, audit: Any, who: str | None = None) -> bool:
    """Answer a request once: allow it once on `accept`, refuse it once on `decline`, else `cancelled`.

    Returns False when it was answered already (by the grant, another call, or the wait running out)."""
    if action == "accept" and request.allow is not None:
        message: dict[str, Any] = {"outcome": "selected", "optionId": request.allow}
    elif action == "decline" and request.reject is not None:
        message = {"outcome": "selected", "optionId": request.reject}
    else:
        message = {"outcome": "cancelled"}
    path = _folder(job_dir) / f"{request.key}{ANSWER_SUFFIX}"
    entry = {
        "id": request.id,
        "run": request.run,
        "answer": action,
        "by": by,
        "who": who,
        "allowed": message.get("optionId") == request.allow and action == "accept",
    } | message
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, json.dumps(entry | {"at": time.time()}).encode("utf-8"))
    finally:
        os.close(fd)
    with contextlib.suppress(OSError, ValueError):  # a job that ended meanwhile has nobody reading its inbox
        run = {"run": request.run} if request.run else {}  # for the run that asked, never a later one
        post(job_dir, {"type": PERMISSION_ANSWER, "id": request.id, **run, **message})
    audit("permission.answered", job_dir.name, entry | {"title": request.title, "kind": request.kind})
    return True


def arrived(state: JobState, job_id: str, data: dict[str, Any]) -> None:
    """A job's agent asks permission (publish.py calls this for each `permission_request` event it stores):
    allowed at once within the job's permission under the policy `grant`, else kept for the person."""
    rec = state.store.get_job(job_id)
    request = request_from(rec, data) if rec is not None else None
    job_dir = state.files(job_id).dir
    if rec is None or request is None or not _keep(job_dir, request):
        return  # not a request relay can answer, or one it has seen already
    audit = state.store.audit.record
    policy = policy_of(state.settings, rec.agent)
    audit("permission.requested", rec.id, request.record() | {"policy": policy, "within_grant": within_grant(request)})
    if within_grant(request) and policy == "grant":
        answer(job_dir, request, "accept", "grant", audit)
        return
    state.notify()
    if state.tg is not None:
        state.tg.start_soon(_expire, state, job_dir, request)


async def _expire(state: JobState, job_dir: Path, request: Request) -> None:
    """Deny the request once nobody has answered it within `approval_wait_s`."""
    await anyio.sleep(state.settings.approval_wait_s)
    answer(job_dir, request, "expired", "nobody", state.store.audit.record)
