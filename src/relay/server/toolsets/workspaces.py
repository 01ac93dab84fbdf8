"""Toolset `workspaces`: land or discard the branch of a job that ran in its own git worktree; best of N agents."""

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from relay.errors import RelayError
from relay.server.models import DiscardResult, Envelope, ErrorInfo, LandResult
from relay.server.results import error_result, model_result, run_guarded, run_job
from relay.server.toolsets._registry import DESTROYS_STATE, RUNS_AGENT, Deps, ToolRegistry, Toolset
from relay.workflows.best_of import BestOf, candidates_of, submit_best_of
from relay.workflows.resolve import Land
from relay.workflows.resolve import land as land_resolving
from relay.workspaces import LandError


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        description=(
            "Land a worktree job's branch: rebase/merge/squash onto `into` (default: its base branch), run "
            "test_command there, then move the branch. On a conflict or a failing test nothing changes, unless "
            "on_conflict='agent'."
        ),
        annotations=DESTROYS_STATE,
    )
    async def job_land(
        job_id: str,
        into: Annotated[str | None, Field(description="target branch; default the job's base")] = None,
        strategy: Literal["rebase", "merge", "squash"] = "rebase",
        test_command: Annotated[str | None, Field(description="shell command that must pass first")] = None,
        on_conflict: Annotated[
            Literal["refuse", "agent"],
            Field(
                description="on a conflict: refuse (default; nothing changes) or agent (the job's agent resolves it in "
                "its worktree as a follow-up job, then the land is tried again through the test)"
            ),
        ] = "refuse",
    ) -> Annotated[CallToolResult, LandResult]:
        async def go() -> CallToolResult:
            engine = deps.engine()
            asked = Land(job_id, into=into, strategy=strategy, test_command=test_command, on_conflict=on_conflict)
            try:
                landed = await land_resolving(engine, asked)
            except LandError as err:
                ws: dict[str, Any] = engine.envelope(job_id).get("workspace") or {}
                refused = LandResult(
                    job_id=job_id,
                    branch=str(ws.get("branch", "")),
                    landed=False,
                    into=into,
                    strategy=strategy,
                    conflicts=list(err.details.get("conflicts") or []),
                    test=err.details.get("test"),
                    resolved_by=err.details.get("resolved_by"),
                    error=ErrorInfo.model_validate(err.to_dict()),
                )
                return model_result(refused, is_error=True)
            return model_result(LandResult.model_validate(landed))

        return await run_guarded(go)

    @reg.tool(
        description=(
            "Run one task on several agents at once, each in its own git worktree; test each; a review_model compares "
            "the diffs. Answer: candidates ranked (JSON). Land the one you want with job_land."
        ),
        annotations=RUNS_AGENT,
    )
    async def best_of(
        ctx: Context[Any, Any],
        prompt: Annotated[str, Field(description="the task, self-contained")],
        agents: Annotated[list[str] | None, Field(description="e.g. [codex, claude, gemini]")] = None,
        n: Annotated[int | None, Field(ge=2, le=8, description="runs of one agent (agents=[x] or claude)")] = None,
        cwd: Annotated[str | None, Field(description="absolute folder in the repository")] = None,
        base: Annotated[str | None, Field(description="ref to start from; default HEAD")] = None,
        test_command: Annotated[str | None, Field(description="shell command run in each worktree")] = None,
        review_model: Annotated[str | None, Field(description="model that compares the diffs")] = None,
        permission: Literal["edit", "full"] = "edit",
        mode: Literal["auto", "sync", "async"] = "auto",
        timeout_s: Annotated[float | None, Field(gt=0, description="limit per candidate")] = None,
    ) -> Annotated[CallToolResult, Envelope]:
        async def go() -> CallToolResult:
            engine = deps.engine()
            req = BestOf(
                prompt=prompt,
                agents=candidates_of(agents, n),
                cwd=cwd,
                base=base,
                test_command=test_command,
                review_model=review_model,
                permission=permission,
                timeout_s=timeout_s,
            )
            return await run_job(engine, lambda: submit_best_of(engine, req), mode, ctx)

        return await run_guarded(go)

    @reg.tool(description="Remove a worktree job's worktree and its branch.", annotations=DESTROYS_STATE)
    async def job_discard(job_id: str) -> Annotated[CallToolResult, DiscardResult]:
        async def go() -> CallToolResult:
            try:
                return model_result(DiscardResult.model_validate(await deps.engine().discard(job_id)))
            except RelayError as err:
                return error_result(err)

        return await run_guarded(go)


TOOLSET = Toolset(
    name="workspaces",
    description="land or discard the git branch a worktree job left (delegate workspace='worktree'); best of N",
    build=build,
)
