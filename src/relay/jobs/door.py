"""One door in: every job request is admitted here, and a reader follows it top to bottom.

    1. values    every value the caller sent, by its typed rule (request.check, relay.agents.values)
    2. resolve   the workspace it continues, the session it resumes (the principal's own), its model,
                 permission and folder (request.resolve, relay.jobs.sessions)
    3. permit    may it run at that permission (grants.permit): within the grant, or the person's yes,
                 never past the principal's cap; `admit_confirmed` asks the person and admits again
    4. place     only now anything is made: the worktree it runs in, and its invocation (request.build)

Every surface submits through it: the MCP tools and compat profiles, MCP Tasks, HTTP and the CLI (by
`Engine.submit` and `submit_confirmed`), a task's later jobs (`judge` asks for them first: best_of), and a
job admitted again where it runs (`readmit`: a worker's claim, a restart), within what allowed it at its
submit. Nothing before step 4 makes anything (but an earlier job's worktree that was removed, made again from
its branch where a follow-up asks for it), so a refusal leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio

from relay.jobs import grants
from relay.jobs.request import SUBMITTED_VIA, JobRequest, Prepared, Resolved, build, check, request_from, resolve
from relay.jobs.state import JobState
from relay.jobs.workspace import JOB_PREFIX, JobWorkspaces
from relay.store import JobRecord
from relay.workspaces import WorkspaceRecord


@dataclass(frozen=True)
class Admitted:
    """A request through the door: its job's id, the request as it is stored, its invocation, and what its row
    records of its workspace."""

    job_id: str
    request: JobRequest
    prepared: Prepared
    placed: dict[str, Any]


class Door:
    """The one admission path of jobs (see the module's docstring for its four steps)."""

    def __init__(self, state: JobState, spaces: JobWorkspaces, which: Callable[[str], str | None]) -> None:
        self._state = state
        self._spaces = spaces
        self._which = which

    def admit(self, req: JobRequest, job_id: str) -> Admitted:
        """Steps 1 to 4 for a new job; raises RelayError (GrantExceeded at step 3) before anything is made."""
        settings = self._state.settings
        if req.via is None:
            req = replace(req, via=SUBMITTED_VIA.get())
        # 1. values
        checked = check(settings, req)
        # 2. resolve: the workspace first (a follow-up runs in its earlier job's folder), then the rest
        if req.repo is not None:  # checked here; fetched, placed and admitted again by the worker that claims it
            req, placed = self._spaces.by_url(req, job_id)
            resolved = resolve(settings, self._state.store, self._which, req, checked, place_later=True)
            return Admitted(job_id, req, build(settings, req, resolved, self._permit(req, resolved), job_id), placed)
        self._spaces.check(req.workspace, req.base, req.carry_changes, req.subdir)
        follow = self._spaces.follow_up_target(req.workspace, req.session_id, req.agent)
        if follow is not None:  # an earlier job's worktree: made again if it was removed, never shared at once
            follow = self._spaces.reopen(follow)  # (a resumed session that started elsewhere: refused by resolve)
            req = replace(req, cwd=follow.cwd, workspace=f"{JOB_PREFIX}{follow.job_id}")
        resolved = resolve(settings, self._state.store, self._which, req, checked)
        if req.workspace is None and self._spaces.worktree_by_default(resolved.permission, resolved.cwd):
            req = replace(req, workspace="worktree")  # [workspaces] default: a job that may edit gets its own
        # 3. permit
        allowed = self._permit(req, resolved)
        # 4. place
        req, resolved, placed = self._place(req, resolved, job_id, follow)
        env = self._spaces.agent_env(req, job_id)  # a worktree's block of ports (relay.workspaces.ready)
        return Admitted(job_id, req, build(settings, req, resolved, allowed, job_id, env), placed)

    async def admit_confirmed(self, req: JobRequest, job_id: str) -> Admitted:
        """`admit`; above the grant, the person is asked (within the principal's cap) and the request admitted
        again within their yes. Without one, the refusal, on the audit record: nothing was made."""
        try:
            return await self.admit_off_loop(req, job_id)
        except grants.GrantExceeded as exceeded:
            consent = await grants.confirm(self._state.settings, exceeded, self._state.store.audit.record)
        with grants.consented(consent):
            return await self.admit_off_loop(req, job_id)

    async def admit_off_loop(self, req: JobRequest, job_id: str) -> Admitted:
        """`admit` in a worker thread when it may make a worktree (git's checkout, submodules, carried changes: it may
        take seconds, and the event loop answers other calls meanwhile). A caller gone meanwhile still gets its job
        queued (the thread's answer comes back, the cancel is seen after): never a worktree without its job. Any other
        request is admitted right here: a fraction of a millisecond, where a hop to a thread and back costs more."""
        if not self.may_place(req):
            return self.admit(req, job_id)
        return await anyio.to_thread.run_sync(self.admit, req, job_id)  # not abandoned: a cancel waits for it

    def may_place(self, req: JobRequest) -> bool:
        """Whether admitting `req` may run git: a new worktree (asked for, or `[workspaces] default`), an earlier
        job's (`job:<id>`, or the one a resumed session started in: made again when it was removed), a repository URL."""
        return (
            req.workspace not in (None, "cwd")
            or req.repo is not None
            or req.session_id is not None
            or self._state.settings.default_workspace == "worktree"
        )

    async def judge(self, req: JobRequest, agents: str | None = None) -> grants.Consent | None:
        """Steps 1 to 3 for jobs like `req` that a task submits later (best_of's candidates), while the call that
        starts the task can still ask the person: None within the grant, their yes, or the refusal."""
        settings = self._state.settings
        req = replace(req, via=req.via or SUBMITTED_VIA.get())

        def permitted() -> None:
            self._permit(req, resolve(settings, self._state.store, self._which, req, check(settings, req)))

        return await grants.consent_for(settings, permitted, agents, self._state.store.audit.record)

    def readmit(self, rec: JobRecord, req: JobRequest | None = None) -> Prepared:
        """A stored job admitted again where it runs (after a restart, or by the worker that claimed it, in the
        folder it placed `req` in): every step again, within what allowed its permission at its submit."""
        settings, req = self._state.settings, req or request_from(rec)
        with grants.as_allowed(rec.request):
            resolved = resolve(settings, self._state.store, self._which, req, check(settings, req))
            env = self._spaces.agent_env(req, rec.id)  # its worktree's block of ports (relay.workspaces.ready)
            return build(settings, req, resolved, self._permit(req, resolved), rec.id, env)

    def _permit(self, req: JobRequest, resolved: Resolved) -> grants.Permit:
        return grants.permit(
            self._state.settings, resolved.permission, agent=req.agent, cwd=resolved.cwd, prompt=req.prompt, via=req.via
        )

    def _place(
        self, req: JobRequest, resolved: Resolved, job_id: str, follow: WorkspaceRecord | None
    ) -> tuple[JobRequest, Resolved, dict[str, Any]]:
        """The folder the job runs in: an earlier job's worktree, a new worktree (made now), or the folder as it is."""
        if follow is not None:
            ws = follow
        elif req.workspace == "worktree":
            ws = self._state.workspaces.create(job_id, resolved.cwd, base=req.base, carry_changes=req.carry_changes)
        else:
            return req, resolved, {}
        return replace(req, cwd=ws.cwd), replace(resolved, cwd=ws.cwd), self._spaces.stored(ws)
