"""Toolset and profile `zen`: Zen/PAL MCP's nine tools with seed 002's names, parameters and messages.

Each tool validates its arguments and calls one function of `relay.workflows`; the seed's texts
live in `relay.workflows.messages`. Where seed 002 and Zen's source differ relay follows the
seed (docs/zen.md lists the points).
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.types import CallToolResult
from pydantic import BaseModel, Field, JsonValue
from pydantic.config import JsonDict

from relay.errors import RelayError
from relay.server.results import clip, json_result, run_guarded
from relay.server.toolsets._registry import (
    READ_ONLY,
    READS_OUTSIDE,
    WRITES_FROM_OUTSIDE,
    Deps,
    ToolRegistry,
    Toolset,
    did_you_mean_first,
    seed_errors,
)
from relay.workflows import clink as clink_core
from relay.workflows import info
from relay.workflows import messages as msg
from relay.workflows.consensus import ConsensusStep, ModelSpec, consensus_step
from relay.workflows.investigate import run_step
from relay.workflows.planner import PlanStep, plan_step
from relay.workflows.simple import ChatRequest, apilookup, challenge, chat
from relay.workflows.steps import Reply, Step, inline_images


def _optional(schema: JsonDict) -> None:
    """A `null` default tells the calling model nothing; dropping it keeps tools/list small, and so does
    writing `anyOf: [{type: T, minimum...}, {type: null}]` as `type: [T, null], minimum...` (same meaning)."""
    if "default" in schema and schema["default"] is None:
        del schema["default"]
    variants = schema.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        other = next(v for v in variants if v != {"type": "null"})
        if isinstance(other, dict) and isinstance(other.get("type"), str):
            del schema["anyOf"]
            schema.update(other)
            schema["type"] = [other["type"], "null"]
            enum = schema.get("enum")
            if isinstance(enum, list) and None not in enum:
                schema["enum"] = [*enum, None]


def _opt(description: str, **extra: JsonValue) -> Any:
    def shape(schema: JsonDict) -> None:
        _optional(schema)
        schema.update(extra)

    return Field(description=description, json_schema_extra=shape)


Model = Annotated[str | None, _opt("id/alias (list_models) or auto")]
Temperature = Annotated[float | None, Field(ge=0, le=1, description="0..1", json_schema_extra=_optional)]
ThinkingMode = Annotated[Literal["minimal", "low", "medium", "high", "max"] | None, _opt("reasoning depth")]
ContinuationId = Annotated[str | None, _opt("thread id from any tool")]
Images = Annotated[list[str] | None, _opt("image paths, data URLs or base64")]
FilePaths = Annotated[list[str] | None, _opt("absolute file paths")]
StepText = Annotated[str, Field(description="this step's work")]
# Published with minimum 1; a lower value reaches the workflow, which answers in Zen's words
# ("step_number must be at least 1").
StepNumber = Annotated[int, Field(json_schema_extra={"minimum": 1})]
TotalSteps = Annotated[int, Field(description="estimate", json_schema_extra={"minimum": 1})]
NextStep = Annotated[bool, Field(description="more steps follow")]
Findings = Annotated[str, Field(description="what this step found")]
Paths = Annotated[list[str] | None, _opt("absolute paths")]
RelevantContext = Annotated[list[str] | None, _opt("functions/methods involved")]
Issues = Annotated[list[dict[str, Any]] | None, _opt("{severity, description}")]
Confidence = Annotated[
    Literal["exploring", "low", "medium", "high", "very_high", "almost_certain", "certain"] | None,
    _opt("default low"),
]
Hypothesis = Annotated[str | None, _opt("current theory")]
UseAssistant = Annotated[bool, Field(description="expert model at the end")]

WORKFLOW_RULES = (
    " Steps: while next_step_required, do the returned required_actions, then call again with step_number+1 and "
    "continuation_id. The last step sends all findings and relevant_files to the expert model unless skipped."
)


class ConsensusModel(BaseModel):
    model: str = Field(description="model id/alias, or cli:NAME[/MODEL] for an agent CLI")
    stance: Literal["for", "against", "neutral"] = "neutral"
    stance_prompt: str | None = Field(None, description="custom stance instructions", json_schema_extra=_optional)


def _paths(value: list[str] | None) -> tuple[str, ...]:
    return tuple(value or ())


def _result(reply: Reply) -> CallToolResult:
    return json_result(reply.data, is_error=reply.is_error)


async def _guard(fn: Callable[[], Awaitable[Reply]]) -> CallToolResult:
    async def go() -> CallToolResult:
        return _result(await fn())

    return await run_guarded(go)


async def _ready(reply: Reply) -> Reply:
    return reply


def _tool_output_error(err: RelayError) -> CallToolResult:
    """Zen's ToolOutput with status "error", its shape for every failure: the message as `content`, relay's
    error (code, message, hint) in `metadata`, as a failed model call has it."""
    error = {"code": err.code.value, "message": clip(err.message), "hint": clip(err.hint)}
    data = {
        "status": "error",
        "content": error["message"],
        "content_type": "text",
        "metadata": {"error": error},
        "continuation_offer": None,
    }
    return json_result(data, is_error=True)


def _clink_unknown(tool: str, unknown: list[str], valid: list[str]) -> RelayError:
    return msg.clink_unknown_arguments(unknown, valid)


def _clink_nearest(err: RelayError, cli_name: str, available: list[str]) -> RelayError:
    """clink's refusal of a CLI it does not know, with the nearest configured CLI in the hint."""
    if not err.message.startswith(f"CLI '{cli_name}' is not configured"):
        return err
    return RelayError(
        err.code, err.message, did_you_mean_first(cli_name, available) + f"cli_name is one of: {', '.join(available)}"
    )


def build(reg: ToolRegistry, deps: Deps) -> None:
    settings = deps.settings
    cli_enum = clink_core.cli_names(settings)
    role_enum = list(clink_core.roles(settings))

    @reg.tool(
        "chat",
        description="Think with another model: a second opinion, brainstorming, validation. Files are embedded; "
        "a <GENERATED-CODE> block in the reply is saved to working_directory_absolute_path/zen_generated.code. "
        "Returns continuation_offer.continuation_id to continue with any tool or model.",
        annotations=WRITES_FROM_OUTSIDE,  # it may save generated code beside the caller's files
    )
    async def chat_tool(
        prompt: Annotated[str, Field(description="your question or idea, with context; large code goes in files")],
        working_directory_absolute_path: Annotated[str, Field(description="existing absolute project directory")],
        model: Model = None,
        temperature: Temperature = None,
        thinking_mode: ThinkingMode = None,
        continuation_id: ContinuationId = None,
        absolute_file_paths: FilePaths = None,
        images: Images = None,
    ) -> CallToolResult:
        req = ChatRequest(
            prompt,
            working_directory_absolute_path,
            model,
            temperature,
            thinking_mode,
            continuation_id,
            _paths(absolute_file_paths),
            inline_images(images or ()),
        )
        return await _guard(lambda: chat(deps.engine(), req))

    @reg.tool(
        "challenge",
        description="Make yourself reassess a statement critically instead of agreeing by reflex. No model is "
        "called: returns challenge_prompt for you to answer.",
        annotations=READ_ONLY,
    )
    async def challenge_tool(
        prompt: Annotated[str, Field(description="the statement to scrutinize")],
        model: Model = None,
        temperature: Temperature = None,
        thinking_mode: ThinkingMode = None,
        continuation_id: ContinuationId = None,
        images: Images = None,
    ) -> CallToolResult:
        return await _guard(lambda: _ready(challenge(prompt)))

    @reg.tool(
        "apilookup",
        description="Current API/SDK/library documentation: returns web-search instructions for you to run "
        "(no model is called). Use when versions or signatures may have changed.",
        annotations=READ_ONLY,
    )
    async def apilookup_tool(
        prompt: Annotated[str, Field(description="the API, SDK, library or version to look up")],
        model: Model = None,
        temperature: Temperature = None,
        thinking_mode: ThinkingMode = None,
        continuation_id: ContinuationId = None,
        images: Images = None,
    ) -> CallToolResult:
        return await _guard(lambda: _ready(apilookup(prompt)))

    @reg.tool(
        description="Hand a prompt to an agent CLI (codex, gemini, claude ...) in a role, as a relay job "
        "(job_result pages long output). No working directory, model, temperature or args parameters.",
        annotations=READ_ONLY,
        unknown_argument=_clink_unknown,
    )
    async def clink(
        prompt: Annotated[str, Field(description="non-empty request for the CLI")],
        cli_name: Annotated[str, Field(description="agent CLI", json_schema_extra={"enum": list(cli_enum)})],
        role: Annotated[str, Field(description="role prompt", json_schema_extra={"enum": list(role_enum)})] = (
            "default"
        ),
        absolute_file_paths: FilePaths = None,
        images: Images = None,
        continuation_id: ContinuationId = None,
    ) -> CallToolResult:
        req = clink_core.ClinkRequest(
            prompt, cli_name, role, _paths(absolute_file_paths), inline_images(images or ()), continuation_id
        )

        async def run() -> Reply:
            try:
                return await clink_core.clink(deps.engine(), req)
            except RelayError as err:
                raise _clink_nearest(err, cli_name, clink_core.cli_names(settings)) from None

        return await _guard(run)

    @reg.tool(
        description="Ask several models at once, each with a stance (for/against/neutral), blinded to the others. "
        "Step 1: step = the exact proposal, findings = your own analysis, models (>= 2, unique model+stance); all "
        "start in parallel and each step returns the next finished answer (total_steps = number of models). "
        "Later steps: findings = summary of the last answer. Models: API ids/aliases or cli:codex, cli:claude/o.",
        annotations=READS_OUTSIDE,
    )
    async def consensus(
        step: Annotated[str, Field(description="step 1: the proposal every model sees; later: your notes")],
        step_number: StepNumber,
        total_steps: TotalSteps,
        next_step_required: NextStep,
        findings: Annotated[str, Field(description="step 1: your analysis; later: the last answer's summary")],
        models: Annotated[list[ConsensusModel] | None, _opt("step 1 only", minItems=2)] = None,
        relevant_files: Paths = None,
        images: Images = None,
        continuation_id: ContinuationId = None,
        use_assistant_model: UseAssistant = True,
        current_model_index: Annotated[
            int | None, Field(ge=0, description="internal", json_schema_extra=_optional)
        ] = None,
        model_responses: Annotated[list[dict[str, Any]] | None, _opt("internal")] = None,
    ) -> CallToolResult:
        specs = tuple(ModelSpec(m.model, m.stance, m.stance_prompt) for m in models) if models is not None else None
        req = ConsensusStep(
            step,
            step_number,
            total_steps,
            next_step_required,
            findings,
            specs,
            _paths(relevant_files),
            inline_images(images or ()),
            continuation_id,
            use_assistant_model,
            current_model_index,
            tuple(model_responses or ()),
        )
        return await _guard(lambda: consensus_step(deps.engine(), req))

    @reg.tool(
        description="Build a plan step by step, with revisions (is_step_revision + revises_step_number) and "
        "branches (is_branch_point + branch_from_step + branch_id). No model is called.",
        annotations=READS_OUTSIDE,
    )
    async def planner(
        step: Annotated[str, Field(description="step 1: the task and scope; later: the next planning step")],
        step_number: StepNumber,
        total_steps: TotalSteps,
        next_step_required: NextStep,
        is_step_revision: Annotated[bool, Field(description="this step revises an earlier one")] = False,
        revises_step_number: Annotated[int | None, _opt("required with is_step_revision", minimum=1)] = None,
        is_branch_point: Annotated[bool, Field(description="this step starts a branch")] = False,
        branch_from_step: Annotated[int | None, _opt("required with is_branch_point", minimum=1)] = None,
        branch_id: Annotated[str | None, _opt("required with is_branch_point")] = None,
        more_steps_needed: Annotated[bool, Field(description="more steps than total_steps")] = False,
        continuation_id: ContinuationId = None,
        model: Model = None,
        use_assistant_model: Annotated[bool, Field(description="unused: the planner calls no model")] = False,
    ) -> CallToolResult:
        req = PlanStep(
            step,
            step_number,
            total_steps,
            next_step_required,
            is_step_revision,
            revises_step_number,
            is_branch_point,
            branch_from_step,
            branch_id,
            more_steps_needed,
            continuation_id,
            model,
            use_assistant_model,
        )
        return await _guard(lambda: _ready(plan_step(deps.engine(), req)))

    @reg.tool(
        description="Systematic code review (quality, security, performance, architecture). Step 1 needs "
        "relevant_files. total_steps: 2 with external validation, 1 with internal (no expert call)." + WORKFLOW_RULES,
        annotations=READS_OUTSIDE,
    )
    async def codereview(
        step: StepText,
        step_number: StepNumber,
        total_steps: TotalSteps,
        next_step_required: NextStep,
        findings: Findings,
        relevant_files: Annotated[list[str] | None, _opt("step 1: absolute files/dirs to review")] = None,
        files_checked: Paths = None,
        relevant_context: RelevantContext = None,
        issues_found: Issues = None,
        hypothesis: Hypothesis = None,
        images: Images = None,
        review_type: Literal["full", "security", "performance", "quick"] = "full",
        focus_on: Annotated[str | None, _opt("areas to emphasize")] = None,
        standards: Annotated[str | None, _opt("coding standards to enforce")] = None,
        severity_filter: Literal["critical", "high", "medium", "low", "all"] = "all",
        review_validation_type: Literal["external", "internal"] = "external",
        continuation_id: ContinuationId = None,
        model: Model = None,
        use_assistant_model: UseAssistant = True,
    ) -> CallToolResult:
        extra: dict[str, Any] = {
            "review_type": review_type,
            "focus_on": focus_on,
            "standards": standards,
            "severity_filter": severity_filter,
            "review_validation_type": review_validation_type,
        }
        req = Step(
            step,
            step_number,
            total_steps,
            next_step_required,
            findings,
            _paths(files_checked),
            _paths(relevant_files),
            _paths(relevant_context),
            tuple(issues_found or ()),
            None,
            hypothesis,
            inline_images(images or ()),
            use_assistant_model,
            continuation_id,
            model,
            extra=extra,
        )
        return await _guard(lambda: run_step(deps.engine(), "codereview", req))

    @reg.tool(
        description="Root-cause investigation of a bug. Record hypothesis and confidence each step; "
        "confidence 'certain' skips the expert (fix directly)." + WORKFLOW_RULES,
        annotations=READS_OUTSIDE,
    )
    async def debug(
        step: StepText,
        step_number: StepNumber,
        total_steps: TotalSteps,
        next_step_required: NextStep,
        findings: Findings,
        files_checked: Paths = None,
        relevant_files: Paths = None,
        relevant_context: RelevantContext = None,
        hypothesis: Hypothesis = None,
        confidence: Confidence = None,
        images: Images = None,
        continuation_id: ContinuationId = None,
        model: Model = None,
        use_assistant_model: UseAssistant = True,
    ) -> CallToolResult:
        req = Step(
            step,
            step_number,
            total_steps,
            next_step_required,
            findings,
            _paths(files_checked),
            _paths(relevant_files),
            _paths(relevant_context),
            (),
            confidence,
            hypothesis,
            inline_images(images or ()),
            use_assistant_model,
            continuation_id,
            model,
        )
        return await _guard(lambda: run_step(deps.engine(), "debug", req))

    @reg.tool(
        description="Deep analysis of a hard problem (architecture, trade-offs, risks); confidence 'certain' "
        "skips the expert." + WORKFLOW_RULES,
        annotations=READS_OUTSIDE,
    )
    async def thinkdeep(
        step: StepText,
        step_number: StepNumber,
        total_steps: TotalSteps,
        next_step_required: NextStep,
        findings: Findings,
        files_checked: Paths = None,
        relevant_files: Paths = None,
        relevant_context: RelevantContext = None,
        hypothesis: Hypothesis = None,
        confidence: Confidence = None,
        issues_found: Issues = None,
        problem_context: Annotated[str | None, _opt("background and constraints")] = None,
        focus_areas: Annotated[list[str] | None, _opt("e.g. architecture, performance")] = None,
        images: Images = None,
        continuation_id: ContinuationId = None,
        model: Model = None,
        temperature: Temperature = None,
        thinking_mode: ThinkingMode = None,
        use_assistant_model: UseAssistant = True,
    ) -> CallToolResult:
        req = Step(
            step,
            step_number,
            total_steps,
            next_step_required,
            findings,
            _paths(files_checked),
            _paths(relevant_files),
            _paths(relevant_context),
            tuple(issues_found or ()),
            confidence,
            hypothesis,
            inline_images(images or ()),
            use_assistant_model,
            continuation_id,
            model,
            temperature,
            thinking_mode,
            extra={"problem_context": problem_context, "focus_areas": focus_areas},
        )
        return await _guard(lambda: run_step(deps.engine(), "thinkdeep", req))

    @reg.tool(description="Models and aliases per provider.", annotations=READ_ONLY)
    async def listmodels() -> CallToolResult:
        return await _guard(lambda: _ready(info.listmodels(deps.settings)))

    @reg.tool(description="Server version and configuration.", annotations=READ_ONLY)
    async def version() -> CallToolResult:
        return await _guard(lambda: _ready(info.version(deps.settings, list(reg.tools))))


TOOLSET = Toolset(
    name="zen",
    description="Zen/PAL MCP's nine tools (seed 002): chat, challenge, apilookup, clink, consensus, planner, "
    "codereview, debug, thinkdeep; plus PAL's listmodels and version; models through relay's APIs, CLIs as "
    "jobs, threads shared and persistent",
    build=build,
    aliases=("pal",),
    error_envelope=seed_errors(_tool_output_error),
)
