"""Toolset `workspaces`: land or discard the branch of a job that ran in its own git worktree; best of N agents."""

from typing import Annotated, Any, Literal

from mcp.types import CallToolResult
from pydantic import Field

from relay.errors import RelayError
from relay.server.models import DiscardResult, ErrorInfo, LandResult
from relay.server.results import error_result, model_result, run_guarded
from relay.server.toolsets._registry import DESTROYS_STATE, Deps, ToolRegistry, Toolset
from relay.workspaces import LandError


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        description=(
            "Land a worktree job's branch: rebase/merge/squash onto `into` (default: its base branch), run "
            "test_command there, then move the branch. On a conflict or a failing test nothing changes."
        ),
        annotations=DESTROYS_STATE,
    )
    async def job_land(
        job_id: str,
        into: Annotated[str | None, Field(description="target branch; default the job's base")] = None,
        strategy: Literal["rebase", "merge", "squash"] = "rebase",
        test_command: Annotated[str | None, Field(description="shell command that must pass first")] = None,
    ) -> Annotated[CallToolResult, LandResult]:
        async def go() -> CallToolResult:
            engine = deps.engine()
            try:
                landed = await engine.land(job_id, into=into, strategy=strategy, test_command=test_command)
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
                    error=ErrorInfo.model_validate(err.to_dict()),
                )
                return model_result(refused, is_error=True)
            return model_result(LandResult.model_validate(landed))

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
