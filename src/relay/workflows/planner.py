"""Zen's `planner`: a plan built step by step by the calling agent, with revisions and branches.

No model is called. The seed's rules are enforced: a revision names the step it revises, a
branch names the step it branches from and its id.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from relay.jobs.engine import Engine
from relay.workflows import messages as msg
from relay.workflows.steps import Reply, load_thread, record, thread_id_for, thread_store, workflow_state

TOOL = "planner"
# Zen pauses for deliberate thinking in the first steps of a plan this long or longer.
DEEP_THINKING_MIN_STEPS = 5
DEEP_THINKING_UNTIL_STEP = 3


@dataclass(frozen=True)
class PlanStep:
    step: str
    step_number: int
    total_steps: int
    next_step_required: bool
    is_step_revision: bool = False
    revises_step_number: int | None = None
    is_branch_point: bool = False
    branch_from_step: int | None = None
    branch_id: str | None = None
    more_steps_needed: bool = False
    continuation_id: str | None = None
    model: str | None = None
    use_assistant_model: bool = False


def _validate(req: PlanStep) -> PlanStep:
    if req.step_number < 1:
        raise msg.at_least_one("step_number")
    if req.total_steps < 1:
        raise msg.at_least_one("total_steps")
    if len(req.step) > msg.STEP_CHAR_LIMIT:
        raise msg.step_too_long()
    if req.is_step_revision and req.revises_step_number is None:
        raise msg.planner_missing("revises_step_number", "is_step_revision=true")
    if req.is_branch_point and req.branch_from_step is None:
        raise msg.planner_missing("branch_from_step", "is_branch_point=true")
    if req.is_branch_point and not req.branch_id:
        raise msg.planner_missing("branch_id", "is_branch_point=true")
    for name in ("revises_step_number", "branch_from_step"):
        value = getattr(req, name)
        if value is not None and value < 1:
            raise msg.at_least_one(name)
    if req.total_steps < req.step_number:
        return replace(req, total_steps=req.step_number)
    return req


def plan_step(engine: Engine, req: PlanStep) -> Reply:
    """Record one planning step and say what to do next."""
    req = _validate(req)
    with thread_store(engine.settings) as threads:
        thread = load_thread(threads, req.continuation_id)
        state = workflow_state(thread, TOOL)
        steps: list[dict[str, Any]] = [] if state is None or req.step_number == 1 else list(state.get("steps", []))
        branches: dict[str, list[int]] = (
            {} if state is None or req.step_number == 1 else dict(state.get("branches", {}))
        )
        entry = {
            "step_number": req.step_number,
            "step": req.step,
            "is_step_revision": req.is_step_revision,
            "revises_step_number": req.revises_step_number,
            "is_branch_point": req.is_branch_point,
            "branch_from_step": req.branch_from_step,
            "branch_id": req.branch_id,
        }
        steps.append(entry)
        if req.is_branch_point and req.branch_id:
            branches.setdefault(req.branch_id, []).append(req.step_number)
        thread_id = thread_id_for(thread)
        data: dict[str, Any] = {
            "status": "planning_in_progress",
            "step_number": req.step_number,
            "total_steps": req.total_steps,
            "next_step_required": req.next_step_required,
            "continuation_id": thread_id,
            "step_content": req.step,
            "metadata": {
                "tool_name": TOOL,
                "branches": sorted(branches),
                "step_history_length": len(steps),
                "is_step_revision": req.is_step_revision,
                "revises_step_number": req.revises_step_number,
                "is_branch_point": req.is_branch_point,
                "branch_from_step": req.branch_from_step,
                "branch_id": req.branch_id,
                "more_steps_needed": req.more_steps_needed,
            },
        }
        deep = (
            req.next_step_required
            and req.total_steps >= DEEP_THINKING_MIN_STEPS
            and req.step_number <= DEEP_THINKING_UNTIL_STEP
        )
        if deep:
            data["status"] = "pause_for_deep_thinking"
            data["thinking_required"] = True
            data["required_thinking"] = [
                "Consider what could go wrong with the plan so far",
                "Question the order of the steps and their dependencies",
                "Look for a simpler approach before adding detail",
            ]
            data["next_steps"] = (
                f"MANDATORY: DO NOT call the planner tool again immediately. This is a complex plan "
                f"({req.total_steps} steps): first think deeply about step {req.step_number} and what it implies, "
                f"then call planner with step_number={req.step_number + 1} and continuation_id={thread_id!r}."
            )
        elif req.next_step_required:
            data["status"] = "pause_for_planning"
            data["planner_required"] = True
            data["next_steps"] = (
                f"Continue with step {req.step_number + 1} of {req.total_steps}: call planner with "
                f"step_number={req.step_number + 1} and continuation_id={thread_id!r}. Revise or branch as needed."
            )
        else:
            data["status"] = "planning_complete"
            data["planning_complete"] = True
            data["plan_summary"] = f"COMPLETE PLAN: {req.step} (Total {req.total_steps} steps completed)"
            data["output"] = {
                "instructions": "Present the complete plan to the user as numbered steps, with branches and "
                "revisions marked, and any open questions at the end.",
                "format": "step_by_step_planning",
                "presentation_guidelines": "Use headings per phase, one line per step, no code unless asked.",
            }
            data["next_steps"] = "Planning is complete. Present the plan to the user, then start on step 1."
        new_state = {"tool": TOOL, "steps": steps, "branches": branches}
        reply = f"[planner] {data['status']} at step {req.step_number}/{req.total_steps}"
        record(
            threads, thread_id, TOOL, f"[planner step {req.step_number}/{req.total_steps}] {req.step}", reply, new_state
        )
    return Reply(data)
