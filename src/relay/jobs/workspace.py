"""The job engine's side of worktree workspaces: where a job runs, its branch sealed at its end, land, discard.

A request's `workspace` is None (the caller's folder as it is), "worktree" (a new git worktree on
branch relay/<job-id>) or "job:<id>" (the worktree of an earlier job: a follow-up adds commits to
its branch). The stored request says `workspace="job:<owner>"` and `worktree={path, branch, base}`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from relay.errors import ErrorCode, RelayError, invalid
from relay.jobs.gitprobe import in_work_tree
from relay.jobs.request import JobRequest, request_from
from relay.jobs.state import JobState
from relay.principal import visible_to
from relay.store import JobRecord
from relay.workspaces import WorkspaceRecord, check_remote, commit_message, procs, ready, shown_url
from relay.workspaces.land import gated_test

JOB_PREFIX = "job:"
# How often a job's fetch looks in the store whether another process ended the job (a cancel through a front).
ENDED_CHECK_S = 1.0


def owner_of(request: dict[str, Any]) -> str | None:
    """The job whose worktree a stored request runs in (None: not a worktree job)."""
    value = request.get("workspace")
    return value.removeprefix(JOB_PREFIX) if isinstance(value, str) and value.startswith(JOB_PREFIX) else None


class JobWorkspaces:
    """Places jobs in worktrees and seals, lands and discards them."""

    def __init__(self, state: JobState) -> None:
        self._state = state
        self.spaces = state.workspaces

    # where a job runs ---------------------------------------------------------------------

    def follow_up_target(self, workspace: str | None, session_id: str | None, agent: str) -> WorkspaceRecord | None:
        """The existing workspace a request continues: `job:<id>`, or the one its resumed session started in."""
        if workspace is not None and workspace.startswith(JOB_PREFIX):
            return self.record_for(workspace.removeprefix(JOB_PREFIX))
        if workspace is None and session_id:
            session = self._state.store.get_session(session_id, agent, principal=visible_to())
            if session is not None:
                return self.spaces.of_path(session.cwd)
        return None

    def reopen(self, rec: WorkspaceRecord) -> WorkspaceRecord:
        """The workspace, made again if it was removed; refused while another job runs in it."""
        busy = self.running_in().get(rec.job_id)
        if busy is not None:
            raise RelayError(
                ErrorCode.LIMIT_REACHED,
                f"job {busy} is still running in job {rec.job_id}'s worktree",
                f"job_wait(job_ids=['{busy}']) first, then follow up",
            )
        return self.spaces.reopen(rec)

    def worktree_by_default(self, permission: str, cwd: str) -> bool:
        """Whether `[workspaces] default = "worktree"` puts this job in a worktree: it may edit, in a repository."""
        return (
            self._state.settings.default_workspace == "worktree"
            and permission in ("edit", "full")
            and in_work_tree(cwd)
            and self.spaces.of_path(cwd) is None
        )

    @staticmethod
    def check(workspace: str | None, base: str | None, carry_changes: bool, subdir: str = "") -> None:
        if subdir:
            raise invalid("subdir applies only to a job by repository URL", "pass repo with it, or leave it out")
        if workspace not in (None, "cwd", "worktree") and not (workspace or "").startswith(JOB_PREFIX):
            raise invalid(
                f"workspace {workspace!r} is not one of cwd, worktree, job:<job-id>",
                "use workspace='worktree' for a new worktree, or 'job:<id>' to continue in an earlier job's",
            )
        if (base is not None or carry_changes) and workspace != "worktree":
            raise invalid(
                "base and carry_changes apply only to a new worktree",
                "pass workspace='worktree' with them, or leave them out",
            )

    def stored(self, rec: WorkspaceRecord) -> dict[str, Any]:
        """What the job's stored request records of its workspace."""
        return {
            "workspace": f"{JOB_PREFIX}{rec.job_id}",
            "worktree": {"path": rec.cwd, "branch": rec.branch, "base": rec.base_ref or rec.base_sha, "repo": rec.repo},
        }

    def agent_env(self, req: JobRequest, job_id: str) -> dict[str, str]:
        """The environment job `job_id`'s agent gets from its worktree (a new one, or `job:<id>`'s): the worktree's
        block of ports, reserved on first use (relay.workspaces.ready). Nothing for a job outside a worktree, or one
        not placed yet (a job by URL)."""
        where = req.workspace or ""
        owner = job_id if where == "worktree" else where.removeprefix(JOB_PREFIX)
        ws = self.spaces.get(owner) if where == "worktree" or where.startswith(JOB_PREFIX) else None
        if ws is None or ws.state in ready.RELEASED:
            return {}
        try:
            ports = ready.reserve_ports(self._state.settings, self.spaces.store, owner, set(self.running_in()))
        except RelayError:  # every block held by a running job: it runs without (its setup log says so)
            return {}
        return ready.port_env(ports)

    def make_ready(self, job_id: str, stop: Callable[[], bool]) -> None:
        """Before a job's agent starts in a worktree git has just made (a new one, or one made again for a follow-up):
        the checkout's included files copied in, the person's setup command run there (its output in the job's
        setup.log: job_result view='setup'). SETUP_FAILED, or CANCELLED once `stop()` says so."""
        rec = self._state.store.get_job(job_id)
        owner = owner_of(rec.request) if rec is not None else None
        ws = self.spaces.get(owner) if owner else None
        if ws is None or not Path(ws.path).is_dir():
            return
        log = self._state.files(job_id).dir / ready.SETUP_LOG
        env = {"RELAY_JOB_ID": job_id}
        ready.make_ready(self._state.settings, ws, log, url=self.spaces.url_of(ws), env=env, stop=stop)

    # a job by repository URL (`repo`): checked at submit, placed by the worker that claims it ---------

    @staticmethod
    def by_url(req: JobRequest, job_id: str) -> tuple[JobRequest, dict[str, Any]]:
        """A `repo` request checked without reaching the URL (the worker fetches it), and what to store of it:
        the caller's checkout (`caller_cwd`, where job_land lands the branch; it need not exist here)."""
        assert req.repo is not None
        if req.workspace not in (None, "worktree") or req.carry_changes or req.session_id or req.continue_latest:
            raise invalid(
                "a job by repository URL runs in a new worktree of it on the worker that claims it",
                "leave out workspace, carry_changes, session_id and continue_latest with repo",
            )
        subdir = check_remote(req.repo, req.base, req.subdir)
        caller = req.cwd or os.getcwd()
        if not os.path.isabs(caller):
            raise invalid(f"cwd must be an absolute path, got {caller!r}", "pass the absolute path of your checkout")
        req = replace(req, workspace=f"{JOB_PREFIX}{job_id}", subdir=subdir, cwd=caller)
        where = {"url": shown_url(req.repo or ""), "base": req.base, "subdir": subdir}
        return req, {"workspace": req.workspace, "caller_cwd": caller, "worktree": where}

    def place(self, rec: JobRecord, epoch: int | None, stop: Callable[[], bool] | None = None) -> JobRequest:
        """On the worker that claimed a `repo` job: its worktree fetched and added here, recorded on its row (under
        the claim's epoch); the request to prepare, in that worktree. A second run of the job (its earlier worker
        was lost, or never started it) replaces what an earlier run left here and pushed. `stop`: a cancel, which
        ends the fetch (CANCELLED)."""
        req = request_from(rec)
        again = (epoch if epoch is not None else rec.epoch) > 1
        stopped = self._stop_or_ended(rec.id, stop)
        ws = self.spaces.place(rec.id, req.repo or "", ref=req.base, subdir=req.subdir, again=again, stop=stopped)
        if stopped(now=True):  # cancelled as the fetch ended: it is not run
            self.spaces.discard(ws)
            raise RelayError(
                ErrorCode.CANCELLED,
                "the job was cancelled while its repository was fetched",
                "submit it again if needed",
            )
        stored = self.stored(ws)
        stored["worktree"] |= {"url": shown_url(req.repo or "")}
        self._state.store.place_job(rec.id, rec.request | stored | {"cwd": ws.cwd}, ws.cwd, epoch=epoch)
        return replace(req, cwd=ws.cwd)

    def _stop_or_ended(self, job_id: str, stop: Callable[[], bool] | None) -> Callable[..., bool]:
        """`stop()`, or the job ended meanwhile by another process (a front's cancel), as the store says: looked up
        at most every ENDED_CHECK_S (and at once with `now=True`)."""
        last = [time.monotonic()]

        def stopped(*, now: bool = False) -> bool:
            if stop is not None and stop():
                return True
            if not now and time.monotonic() - last[0] < ENDED_CHECK_S:
                return False
            last[0] = time.monotonic()
            try:
                rec = self._state.store.get_job(job_id)
            except RelayError:  # the store cannot answer now: asked again later
                return False
            return rec is None or rec.is_final

        return stopped

    # a job's end --------------------------------------------------------------------------

    def seal(self, rec: JobRecord, payload: dict[str, Any]) -> dict[str, Any]:
        """Commit what the job left on its branch; the payload gets `workspace` and the branch's files_changed."""
        owner = owner_of(rec.request)
        ws = self.spaces.get(owner) if owner else None
        if ws is None:
            return payload
        message = commit_message(str(rec.request.get("prompt", "")), rec.id, rec.agent)
        try:
            if self.spaces.url_of(ws) is not None:  # placed from a URL on this worker: pushed back there too
                found = self.spaces.seal_and_push(ws, message, again=rec.epoch > 1)
            else:
                found = self.spaces.seal(ws, message)
        except RelayError as err:
            found = {"path": ws.cwd, "branch": ws.branch, "base": ws.base_ref or ws.base_sha, "note": err.message}
            return payload | {"workspace": found}
        return payload | {"workspace": found, "files_changed": found["files_changed"]}

    def current(self, rec: JobRecord) -> dict[str, Any] | None:
        """The envelope's `workspace`: as sealed at the job's end, with what became of it since (landed, discarded)."""
        owner = owner_of(rec.request)
        if owner is None:
            return None
        base: dict[str, Any] = (rec.result or {}).get("workspace") or rec.request.get("worktree") or {}
        ws = self.spaces.get(owner)
        if ws is None:
            return dict(base)
        extra: dict[str, Any] = {"state": ws.state, "owner_job_id": ws.job_id}
        if ws.ports and ws.state not in ready.RELEASED:
            extra["ports"] = ws.ports
        if ws.landed_into:
            extra |= {"landed_into": ws.landed_into, "landed_sha": ws.landed_sha}
        return dict(base) | extra

    # after the job ------------------------------------------------------------------------

    def record_for(self, job_id: str, *, fetch: bool = False) -> WorkspaceRecord:
        """The workspace of a job (a follow-up's is its owner's); INVALID_ARGUMENT when it ran in a plain folder.

        A `repo` job's is where this home has it (the cache of a worker that shares the home, or the caller's
        checkout it was fetched into), else its pushed branch fetched into the caller's checkout; `fetch` (a land):
        fetched into the caller's checkout in any case, for what the last push holds.
        """
        job = self._state.get(job_id, visible_to())  # the caller's job, as every engine query
        owner = owner_of(job.request)
        ws = self.spaces.get(owner) if owner else None
        by_url = job.request.get("repo") and owner == job.id
        if by_url and (ws is None or (fetch and ws.state != "discarded")):
            return self._fetched(job)  # (a copy discarded here is not fetched again)
        if ws is None:
            raise invalid(
                f"job {job.id} did not run in a worktree",
                "only jobs delegated with workspace='worktree' have a branch to land, diff or discard",
            )
        return ws

    def _fetched(self, job: JobRecord) -> WorkspaceRecord:
        """A `repo` job's branch fetched from its URL into the checkout its caller submitted it from."""
        req = job.request
        sealed: dict[str, Any] = (job.result or {}).get("workspace") or {}
        pushed: dict[str, Any] = sealed.get("remote") or {}
        if not job.is_final:
            raise invalid(
                f"job {job.id} runs on a worker: its branch is there until the job ends and pushes it",
                f"job_wait(job_ids=['{job.id}']) first",
            )
        if not sealed.get("base_sha"):
            raise invalid(
                f"job {job.id} ended ({job.status}) before a worker placed its worktree: there is no branch",
                "job_status shows why; submit it again",
            )
        if not pushed.get("pushed"):
            error: dict[str, Any] = pushed.get("error") or {}
            said = str(error.get("message") or sealed.get("note") or "it was not pushed")
            raise invalid(
                f"job {job.id}'s branch is not at {shown_url(str(req['repo']))}: {said}",
                "its branch stays in the cache of the worker that ran it; allow pushes to relay/* there and run it again",
            )
        caller = str(req.get("caller_cwd") or "")
        if not Path(caller).is_dir():
            raise invalid(
                f"job {job.id} was submitted from {caller!r}, which is not a folder here",
                f"land it from a clone of {shown_url(str(req['repo']))} (git fetch it, then git merge relay/{job.id})",
            )
        base, base_sha = str(sealed.get("base") or ""), str(sealed["base_sha"])
        return self.spaces.fetch_result(
            job.id,
            url=str(req["repo"]),
            cwd=caller,
            base_sha=base_sha,
            base_ref=base if base and base != base_sha else None,
            subdir=str(req.get("subdir") or ""),
        )

    def running_in(self) -> dict[str, str]:
        """Workspace (its owner job) -> a queued or running job in it; these are never pruned, landed or discarded."""
        jobs = self._state.store.list_jobs(statuses=("queued", "running"), limit=10_000)
        return {owner: r.id for r in jobs if (owner := owner_of(r.request))}

    def check_idle(self, ws: WorkspaceRecord, what: str) -> None:
        busy = self.running_in().get(ws.job_id)
        if busy is not None:
            raise RelayError(
                ErrorCode.INVALID_ARGUMENT,
                f"a job is still running in job {ws.job_id}'s worktree: it cannot be {what} now",
                f"job_wait(job_ids=['{busy}']) until it ends (or job_cancel it), then try again",
            )

    def land(self, job_id: str, into: str | None, strategy: str, test_command: str | None) -> dict[str, Any]:
        ws = self.record_for(job_id, fetch=True)
        self.check_idle(ws, "landed")
        rec = self._state.get(job_id)
        owner = self._state.get(ws.job_id)
        log = self._state.files(rec.id).dir / "land-test.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        message = commit_message(str(owner.request.get("prompt", "")), ws.job_id, owner.agent)
        landed = self.spaces.land(
            ws, into=into, strategy=strategy, test_command=test_command, test_log=log, message=message
        )
        return {"job_id": rec.id, "branch": ws.branch} | landed

    def test(self, job_id: str, command: str) -> dict[str, Any]:
        """Run a test command in a job's worktree (its output kept for job_result view=test); what it wrote there is
        undone, so no seal or land takes it."""
        ws = self.spaces.reopen(self.record_for(job_id))
        log = self._state.files(job_id).dir / "land-test.log"
        settings = self._state.settings
        env = procs.command_env(settings.environ, settings.command_pass_env, settings.command_env)
        return gated_test(ws, command, log, settings.land_test_timeout_s, env)

    def discard(self, job_id: str) -> dict[str, Any]:
        ws = self.record_for(job_id)
        self.check_idle(ws, "discarded")
        self.spaces.discard(ws)
        return {"job_id": job_id, "branch": ws.branch, "discarded": True, "path": ws.path}

    def prune(self) -> list[str]:
        """Remove old unlanded worktrees (their files deleted in the background), never one a job runs in."""
        return self.spaces.prune(set(self.running_in()))

    def sweep(self) -> list[str]:
        """`prune`, after deleting what removed worktrees left in the trash (at start-up: nobody waits on it); then
        the caches of repositories no job used for a while."""
        self.spaces.empty_trash()
        pruned = self.prune()
        if self._state.settings.repos_dir.is_dir():
            self.spaces.prune_repos()
        return pruned

    def diff_file(self, job_id: str, fresh: bool) -> Path:
        """The job's diff against its base in a file of its folder, for paging (written again when `fresh`)."""
        ws = self.record_for(job_id)
        path = self._state.files(job_id).dir / "diff.patch"
        if fresh or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.spaces.diff(ws), encoding="utf-8")
        return path


def next_for(job_id: str, state: str | None) -> str | None:
    """What to call after a worktree job ended: land or discard its branch (the `workspaces` toolset)."""
    if state not in (None, "active", "pruned"):
        return None
    return (
        f"call_tool(server_name='workspaces', tool_name='job_land', arguments={{'job_id': '{job_id}'}}) to land "
        f"its branch (job_result view='diff' shows it), or tool_name='job_discard'"
    )
