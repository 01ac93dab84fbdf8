"""A land whose conflict the job's own agent resolves: `job_land(on_conflict="agent")`, `relay land --resolve`.

The land is tried as always. When the job's branch conflicts with the target, the conflict is kept
in the job's worktree (relay.workspaces.conflict: the target merged into the branch, git's markers
left in the files), and a follow-up job starts there on the same agent and model, its prompt naming
the conflicting files and both sides. It goes through the one door (Engine.submit_confirmed ->
relay.jobs.door) as the caller (who can name the job only if it is theirs), at the permission the
original job ran with and never more: above the caller's grant the person is asked, as for any job.
Once it ends, its seal has committed the resolution; relay checks that no marker is left and lands
again through the same gate. A second conflict, a follow-up that did not complete or left a marker,
stops with the usual refusal (`resolved_by` names the follow-up); the branch is put back as it was
unless the agent's resolution was committed. Nothing loops. The conflict is recorded in the worktree's git
folder until it is settled: a land after relay went away in the middle keeps a completed resolution without
markers and takes anything else back first, so no marker lands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import anyio

from relay.errors import ErrorCode, RelayError, invalid
from relay.jobs.engine import Engine, JobRequest
from relay.workspaces import LandError, WorkspaceRecord, Workspaces
from relay.workspaces import conflict as conflicts

OnConflict = Literal["refuse", "agent"]
ON_CONFLICT: tuple[OnConflict, ...] = ("refuse", "agent")
# The permissions at which an agent can edit the conflicting files.
EDITS = ("edit", "full")
# Beyond the follow-up's own time limit (which ends it), how long the land waits for its end to be recorded.
FOLLOW_UP_GRACE_S = 60.0


@dataclass(frozen=True)
class Land:
    """What to land and how: the same for the first try and the one after the agent's resolution."""

    job_id: str
    into: str | None = None
    strategy: str = "rebase"
    test_command: str | None = None
    on_conflict: OnConflict = "refuse"


async def land(engine: Engine, req: Land) -> dict[str, Any]:
    """Land `req.job_id`; on a conflict with `on_conflict="agent"`, have its agent resolve it, then land again.
    The result is Engine.land's, with `resolved_by` (the follow-up's id, or None); a refusal is LandError."""
    if req.on_conflict not in ON_CONFLICT:
        raise invalid(f"on_conflict {req.on_conflict!r} is not one of refuse, agent", "use refuse (default) or agent")
    await _settle(engine, req.job_id)
    try:
        return await _land(engine, req) | {"resolved_by": None}
    except LandError as err:
        if req.on_conflict != "agent" or err.code is not ErrorCode.LAND_CONFLICT or not err.details.get("conflicts"):
            raise
        refused = err
    job = engine.get(req.job_id)
    permission = str(job.request.get("permission") or "read-only")
    if permission not in EDITS:
        raise _refusal(
            refused,
            f"; job {job.id} ran at permission {permission!r}, so its agent could not edit the files",
            "resolve it with a follow-up that may edit: delegate(workspace='job:"
            f"{job.id}', permission='edit', prompt='merge the target and resolve the conflicts'), then land again",
        )
    rec = _workspace(engine, job.id)
    kept = await anyio.to_thread.run_sync(conflicts.keep, rec, req.into)
    if kept is None:  # not the branch's conflict (the target moved, a dirty checkout): the refusal stands
        raise refused
    try:
        model = job.request.get("model")
        follow = await engine.submit_confirmed(
            JobRequest(
                agent=job.agent,
                prompt=kept.prompt(),
                workspace=f"job:{rec.job_id}",
                permission=permission,
                model=model if isinstance(model, str) else None,
            )
        )
    except BaseException:  # refused at the door (or the call went away): the branch as it was
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(conflicts.undo, rec, kept)
        raise
    await anyio.to_thread.run_sync(conflicts.note, rec, kept, follow)
    try:
        ended = await engine.wait_one(follow, engine.settings.job_timeout_s + FOLLOW_UP_GRACE_S)
    except BaseException:  # the call went away: the follow-up must not seal half a resolution onto the branch
        with anyio.CancelScope(shield=True):
            await engine.cancel(follow)
            await anyio.to_thread.run_sync(conflicts.undo, rec, kept)
        raise
    if not ended.is_final:
        ended = await engine.cancel(follow)
    left = await anyio.to_thread.run_sync(conflicts.conclude, rec, kept) if ended.status == "completed" else None
    if left is None or left:
        await anyio.to_thread.run_sync(conflicts.undo, rec, kept)
        said = f"ended {ended.status}" if left is None else f"left conflict markers in: {', '.join(left)}"
        raise _refusal(
            refused,
            f"; the follow-up job {follow} that was to resolve it {said}",
            f"nothing was changed and the branch is as it was; read job_result(job_id='{follow}'), then resolve it "
            f"with a follow-up of your own (workspace='job:{rec.job_id}') and land again",
            resolved_by=follow,
        )
    try:
        return await _land(engine, req) | {"resolved_by": follow}
    except LandError as again:  # a second conflict (or a failing gate) stops here, with today's refusal
        again.details["resolved_by"] = follow
        raise


async def _settle(engine: Engine, job_id: str) -> None:
    """A resolution that relay went away in the middle of (the conflict is still recorded in the worktree): kept
    if its follow-up completed and left no marker, else taken back, so no marker is ever landed. One whose
    follow-up still runs is left to it (the land is refused while a job runs in the worktree)."""
    try:
        rec = _workspace(engine, job_id)
    except RelayError:
        return  # not a worktree job, or not the caller's: the land says so
    found = await anyio.to_thread.run_sync(conflicts.pending, rec)
    if found is None:
        return
    kept, follow = found
    ended = None
    if follow is not None:
        try:
            ended = engine.get(follow)
        except RelayError:
            ended = None
        if ended is not None and not ended.is_final:
            return
    if ended is not None and ended.status == "completed":
        left = await anyio.to_thread.run_sync(conflicts.conclude, rec, kept)
        if not left:
            return
    await anyio.to_thread.run_sync(conflicts.undo, rec, kept)


async def _land(engine: Engine, req: Land) -> dict[str, Any]:
    return await engine.land(req.job_id, into=req.into, strategy=req.strategy, test_command=req.test_command)


def _workspace(engine: Engine, job_id: str) -> WorkspaceRecord:
    """The worktree a job ran in (a follow-up's is its owner's): found through the caller's own view of the job."""
    shown: dict[str, Any] = engine.envelope(job_id).get("workspace") or {}
    owner = shown.get("owner_job_id")
    spaces = Workspaces(engine.settings)
    try:
        rec = spaces.get(str(owner)) if owner else None
    finally:
        spaces.close()
    if rec is None:
        raise invalid(f"job {job_id} has no worktree here to resolve a conflict in", "land with on_conflict='refuse'")
    return rec


def _refusal(first: LandError, more: str, hint: str, **details: Any) -> LandError:
    return LandError(first.code, first.message + more, hint, **(first.details | details))
