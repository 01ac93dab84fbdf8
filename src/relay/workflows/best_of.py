"""best_of: the same task in parallel worktrees on several agents, each tested, compared by a reviewer model.

The run is an in-process job whose answer is the ranked candidates (JSON); each candidate is a
worktree job of its own, so its branch can be inspected, followed up and landed with job_land.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

import anyio

from relay.ask import AskArgs
from relay.errors import RelayError, invalid
from relay.events import AgentResult, Event
from relay.jobs.engine import Engine, JobRequest
from relay.jobs.grants import Permit, consented
from relay.workflows.models import run_model

# At most this many candidates in one run (each is an agent CLI in its own worktree).
MAX_CANDIDATES = 8
# Each candidate's diff is shown to the reviewer up to this many characters.
REVIEW_DIFF_CHARS = 30_000
# How long best_of waits for its candidates (each also has its own job timeout).
WAIT_S = 24 * 3600.0

REVIEW_SYSTEM_PROMPT = (
    "You are a senior code reviewer comparing several candidate changes made by different AI agents for the same "
    "task, side by side. Judge correctness, completeness, risk and code quality; the test results are facts. Be "
    "brief per candidate. End with exactly one line of JSON: "
    '{"ranking": ["<job id, best first>", ...], "reasons": {"<job id>": "<one sentence>"}}'
)


@dataclass(frozen=True)
class BestOf:
    prompt: str
    agents: tuple[str, ...]
    cwd: str | None = None
    base: str | None = None
    test_command: str | None = None
    review_model: str | None = None
    permission: str = "edit"
    timeout_s: float | None = None


def candidates_of(agents: list[str] | None, n: int | None, default_agent: str = "claude") -> tuple[str, ...]:
    """`agents` as given, or `n` runs of one agent (agents=[x], n=3 runs x three times)."""
    if agents and n is not None and len(agents) not in (1, n):
        raise invalid(f"agents has {len(agents)} entries but n={n}", "pass agents alone, or one agent with n")
    pool = tuple(agents or (default_agent,))
    found = pool * n if n and len(pool) == 1 else pool
    if len(found) < 2 or len(found) > MAX_CANDIDATES:
        raise invalid(
            f"best_of needs 2 to {MAX_CANDIDATES} candidates, got {len(found)}",
            "pass agents=['codex', 'claude', 'gemini'] or n=3",
        )
    return found


def parse_ranking(text: str) -> dict[str, Any]:
    """The reviewer's closing JSON line ({ranking, reasons}), or {} when it wrote none."""
    for match in reversed(list(re.finditer(r"\{.*\}", text))):
        try:
            found: Any = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict) and isinstance(found.get("ranking"), list):  # pyright: ignore[reportUnknownMemberType]
            return dict(found)  # pyright: ignore[reportUnknownArgumentType]
    return {}


def _review_prompt(req: BestOf, candidates: list[dict[str, Any]], diffs: dict[str, str]) -> str:
    parts = [f"The task every candidate was given:\n{req.prompt}\n"]
    for i, c in enumerate(candidates, 1):
        test = c["test"]
        tested = "not run" if test is None else ("passed" if test["passed"] else f"FAILED (exit {test['exit_code']})")
        diff = diffs.get(c["job_id"], "")
        clipped = diff[:REVIEW_DIFF_CHARS] + ("\n… (diff clipped)" if len(diff) > REVIEW_DIFF_CHARS else "")
        parts.append(
            f"## Candidate {i}: job {c['job_id']} ({c['agent']}), status {c['status']}, tests {tested}, "
            f"{len(c['files_changed'])} files +{c['insertions']} -{c['deletions']}\n```diff\n{clipped}\n```\n"
        )
    return "\n".join(parts)


def _job_ids(ranking: list[Any], jobs: list[str]) -> list[str]:
    """The reviewer's ranking as job ids: it may name a candidate by its job id or its number (1, "Candidate 2")."""
    found: list[str] = []
    for entry in ranking:
        text = str(entry).strip()
        number = re.fullmatch(r"(?:candidate\s*)?#?(\d+)", text, re.IGNORECASE)
        job = jobs[int(number.group(1)) - 1] if number and 0 < int(number.group(1)) <= len(jobs) else text
        if job in jobs and job not in found:
            found.append(job)
    return found


def _rank(candidates: list[dict[str, Any]], ranking: list[str]) -> list[dict[str, Any]]:
    """Passing tests first, then the reviewer's order, then the smaller change."""
    order = {job: i for i, job in enumerate(ranking)}

    def key(c: dict[str, Any]) -> tuple[int, int, int, int]:
        test = c["test"]
        failed = c["status"] != "completed" or (test is not None and not test["passed"])
        return (int(failed), order.get(c["job_id"], len(order)), c["insertions"] + c["deletions"], c["index"])

    ranked = sorted(candidates, key=key)
    for rank, c in enumerate(ranked, 1):
        c["rank"] = rank
        del c["index"]
    return ranked


async def run_best_of(
    engine: Engine, req: BestOf, emit: Any = None, test_permitted: Permit | None = None
) -> dict[str, Any]:
    """Run every candidate, test each (`test_permitted`: what allowed req.test_command, asked when best_of
    started), ask the reviewer; the ranked candidates and the review."""
    jobs: list[str] = []
    try:
        for agent in req.agents:
            jobs.append(await engine.submit_off_loop(_candidate(req, agent)))  # its worktree made off the loop
    except RelayError:
        for job_id in jobs:  # one candidate could not start (an agent not installed): none runs
            await engine.cancel(job_id)
            await engine.discard(job_id)
        raise
    if emit is not None:
        emit(Event("log", {"text": f"best_of: candidates {', '.join(jobs)}"}))
    try:
        await engine.wait(jobs, "all", WAIT_S)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):  # best_of cancelled: so are its candidates
            for job_id in jobs:
                await engine.cancel(job_id)
        raise
    envelopes = {job_id: engine.envelope(job_id) for job_id in jobs}
    tested = [job_id for job_id in jobs if envelopes[job_id]["status"] == "completed"]
    tests = await _test_all(engine, req, tested, test_permitted) if req.test_command else {}
    candidates: list[dict[str, Any]] = []
    diffs: dict[str, str] = {}
    for index, job_id in enumerate(jobs):
        env = envelopes[job_id]
        ws: dict[str, Any] = env.get("workspace") or {}
        test = tests.get(job_id)
        if ws.get("head"):
            page = engine.read_output(job_id, "diff", 0, REVIEW_DIFF_CHARS + 1)
            diffs[job_id] = page["text"]
        candidates.append(
            {
                "index": index,
                "job_id": job_id,
                "agent": env["agent"],
                "status": env["status"],
                "branch": ws.get("branch"),
                "path": ws.get("path"),
                "commits": ws.get("commits", 0),
                "files_changed": ws.get("files_changed", []),
                "insertions": ws.get("insertions", 0),
                "deletions": ws.get("deletions", 0),
                "test": test,
                "error": env["error"],
            }
        )
    review: dict[str, Any] | None = None
    ranking: list[str] = []
    if req.review_model:
        ans = await run_model(
            engine,
            AskArgs(
                prompt=_review_prompt(req, candidates, diffs),
                model=req.review_model,
                system_prompt=REVIEW_SYSTEM_PROMPT,
                tool="best_of",
            ),
        )
        parsed = parse_ranking(ans.text) if ans.ok else {}
        ranking = _job_ids(parsed.get("ranking", []), jobs)
        review = {"model": ans.model, "job_id": ans.job_id, "ok": ans.ok, "text": ans.text, "ranking": ranking}
        if not ans.ok:
            review["error"] = ans.error
        for c in candidates:
            c["review_note"] = str(parsed.get("reasons", {}).get(c["job_id"], "")) if parsed else ""
    ranked = _rank(candidates, ranking)
    best = next((c for c in ranked if c["status"] == "completed"), None)
    return {
        "candidates": ranked,
        "review": review,
        "best": best["job_id"] if best else None,
        "next": (
            f"call_tool(server_name='workspaces', tool_name='job_land', arguments={{'job_id': '{best['job_id']}'}}); "
            "job_discard the others"
            if best
            else "no candidate completed: read each job's error"
        ),
    }


async def _test_all(
    engine: Engine, req: BestOf, jobs: list[str], permitted: Permit | None
) -> dict[str, dict[str, Any]]:
    """req.test_command run in each job's worktree, side by side: at most as many at once as the engine runs jobs
    (jobs.max_concurrent). Each job's result by its id."""
    if req.test_command is None or permitted is None:
        return {}
    command = req.test_command
    found: dict[str, dict[str, Any]] = {}
    slots = anyio.CapacityLimiter(max(1, engine.settings.max_concurrent))

    failed: list[RelayError] = []

    async def one(job_id: str) -> None:
        async with slots:
            try:
                found[job_id] = await engine.test_worktree(job_id, command, permitted)
            except RelayError as err:  # raised as itself once the others ended, as a test run one by one did
                failed.append(err)

    async with anyio.create_task_group() as tg:
        for job_id in jobs:
            tg.start_soon(one, job_id)
    if failed:
        raise failed[0]
    return found


def _candidate(req: BestOf, agent: str) -> JobRequest:
    return JobRequest(
        agent=agent,
        prompt=req.prompt,
        cwd=req.cwd,
        permission=req.permission,
        workspace="worktree",
        base=req.base,
        timeout_s=req.timeout_s,
    )


async def submit_best_of(engine: Engine, req: BestOf) -> str:
    """best_of as a job of its own (waitable, cancellable); its answer is run_best_of's JSON.

    Its candidates start in that job, after the call returned: a permission above the grant is put
    to the person now, once for every agent, and the candidates run within that answer. So is the test
    command, a `full` action (relay.jobs.grants.permit_command): one form names the agents and the command
    when both need the person's yes.
    """
    agents = ", ".join(dict.fromkeys(req.agents))
    named = f"{agents}, then the test command {req.test_command!r} in each worktree" if req.test_command else agents
    consent = await engine.consent_for(_candidate(req, req.agents[0]), named)
    permitted = None
    if req.test_command:
        permitted = await engine.permit_command(
            req.test_command,
            what="best_of's test command",
            cwd=f"each candidate's worktree of {req.cwd}" if req.cwd else "each candidate's worktree",
            instead="run best_of without test_command and test the candidates yourself",
        )

    async def task(emit: Any) -> AgentResult:
        with consented(consent) if consent is not None else contextlib.nullcontext():
            found = await run_best_of(engine, req, emit, permitted)
        ok = found["best"] is not None
        return AgentResult(ok=ok, text=json.dumps(found, indent=1))

    return engine.submit_task("best_of", {"prompt": req.prompt, "agents": list(req.agents), "cwd": req.cwd}, task)
