"""Profile `claude-code-mcp`: steipete/claude-code-mcp's one tool, `claude_code(prompt, workFolder)` (seed 000).

Claude runs with its permission prompts skipped, as the original does; the answer comes back as plain
text. A workFolder that does not exist falls back to the home directory, as in the original.
"""

from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import JobRequest
from relay.osfiles import expand_home, is_dir
from relay.server.results import error_result
from relay.server.toolsets import _compat as compat
from relay.server.toolsets._registry import RUNS_AGENT, Deps, ToolRegistry, Toolset, seed_errors

PROFILE = "claude-code-mcp"

# The original's texts, in one place.
TEXTS = {
    "description": (
        "Claude Code Agent: Your versatile multi-modal assistant for code, file, Git, and terminal operations "
        "via Claude CLI. Use `workFolder` for contextual execution."
    ),
    "prompt": "The detailed natural language prompt for Claude to execute.",
    "work_folder": (
        "Mandatory when using file operations or referencing any file. "
        "The working directory for the Claude CLI execution. Must be an absolute path."
    ),
    "bad_prompt": "Missing or invalid required parameter: prompt",
    "timeout": "Claude CLI command timed out after {seconds}s. Details: {details}",
    "failed": "Claude CLI execution failed: {details}",
}
# The original's execution timeout: 30 minutes.
TIMEOUT_MS = 1_800_000


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(description=TEXTS["description"], annotations=RUNS_AGENT)
    async def claude_code(
        ctx: Context[Any, Any],
        prompt: Annotated[Any, Field(description=TEXTS["prompt"])] = None,
        workFolder: Annotated[str | None, Field(description=TEXTS["work_folder"])] = None,
    ) -> CallToolResult:
        # An empty or blank prompt is refused here, before anything runs: it is not a failed execution.
        if not isinstance(prompt, str) or not prompt.strip():
            return _error(ErrorCode.INVALID_ARGUMENT, TEXTS["bad_prompt"], "pass the task as a non-empty string prompt")
        home = str(deps.settings.environ.get("HOME") or Path.home())
        cwd = _work_folder(workFolder, home)
        engine = deps.engine()
        req = JobRequest(
            agent="claude",
            prompt=prompt,
            cwd=cwd,
            permission="full",  # the original runs `claude --dangerously-skip-permissions`
            timeout_s=compat.ms_to_s(TIMEOUT_MS),
        )
        try:
            job_id = await compat.start(engine, req, profile=PROFILE, tool="claude_code")
        except RelayError as err:
            return _error(
                err.code, TEXTS["failed"].format(details=err.message), _start_hint(err, workFolder, cwd, home)
            )
        rec = await compat.wait_sync(engine, job_id, ctx)
        hint = f"job_result(job_id='{rec.id}') in relay's core tools shows the whole job"
        if compat.timed_out(rec):
            details = compat.error_message(rec)
            return _error(ErrorCode.TIMEOUT, TEXTS["timeout"].format(seconds=TIMEOUT_MS // 1000, details=details), hint)
        if rec.status != "completed":
            return _error(ErrorCode.AGENT_FAILED, TEXTS["failed"].format(details=compat.error_message(rec)), hint)
        return CallToolResult(content=[TextContent(type="text", text=compat.output_text(engine, job_id))])

    compat.seed_required(reg, "claude_code", "prompt")


def _work_folder(work_folder: str | None, home: str) -> str:
    """workFolder made absolute when it is a directory; otherwise home, as the original falls back."""
    if work_folder:
        folder = expand_home(work_folder).absolute()
        if is_dir(folder):
            return str(folder)
    return home


def _start_hint(err: RelayError, work_folder: str | None, cwd: str, home: str) -> str:
    """The hint of a job that could not start; says why Claude was to run in the home directory."""
    if err.code is not ErrorCode.CWD_NOT_ALLOWED or cwd != home or work_folder == home:
        return err.hint
    why = f"workFolder {work_folder!r} is not a directory" if work_folder else "no workFolder was given"
    return f"{why}, so Claude was to run in the home directory {home}: pass workFolder ({err.hint})"


def _error(code: ErrorCode, message: str, hint: str) -> CallToolResult:
    return error_result(RelayError(code, message, hint))


TOOLSET = Toolset(
    name=PROFILE,
    description="steipete/claude-code-mcp's claude_code tool (seed 000), as relay jobs",
    build=build,
    error_envelope=seed_errors(compat.words_error),
)
