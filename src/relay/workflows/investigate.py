"""Zen's investigation workflows: `codereview`, `debug`, `thinkdeep`.

The calling agent does the work in steps; while `next_step_required` each step is recorded and
answered with `pause_for_<tool>` and the actions to take next (no model is called). The last
step either skips the expert (the seed's skip rules) or sends the consolidated findings, with the
relevant files embedded to fit the model's context window, to the chosen model as a job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relay.ask import AskArgs
from relay.config import Settings
from relay.jobs.engine import Engine
from relay.threads import Thread, ThreadStore
from relay.workflows import messages as msg
from relay.workflows.models import ModelInfo, resolve_model, run_model
from relay.workflows.steps import (
    Consolidated,
    Reply,
    Step,
    advance,
    consolidate,
    embeddable,
    load_thread,
    record,
    step_summary,
    thread_id_for,
    thread_store,
    validate,
    workflow_state,
)

EXPERT_THINKING_MODE = "high"
_FENCED = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.DOTALL)


@dataclass(frozen=True)
class Skip:
    status: str
    expert_status: str
    reason: str


# What the last step does: skip the expert, call it, or finish locally.
Decision = Skip | bool


@dataclass(frozen=True)
class Spec:
    """How one investigation tool names its statuses and keys, and decides on the expert."""

    name: str
    label: str  # status stem: code_review, investigation, thinkdeep
    counters_key: str
    summary_key: str
    decide: Callable[[Step, dict[str, Any], Consolidated, bool], Decision]
    actions: Callable[[Step], list[str]]

    @property
    def pause_status(self) -> str:
        return f"pause_for_{self.label}"

    @property
    def required_key(self) -> str:
        return f"{self.label}_required"


def default_trigger(step: Step, done: Consolidated) -> bool:
    """Zen's default: the assistant model is wanted and there is something to check."""
    return step.use_assistant_model and (
        bool(done.relevant_files) or len(done.findings) >= 2 or bool(done.issues_found)
    )


def _codereview_decide(step: Step, extra: dict[str, Any], done: Consolidated, continued: bool) -> Decision:
    if extra.get("review_validation_type", "external") == "internal":
        return Skip(
            "code_review_complete_ready_for_implementation",
            "skipped_due_to_internal_analysis_type",
            "review_validation_type is internal: the review was completed without an external model",
        )
    if not step.use_assistant_model:
        return False
    return continued or default_trigger(step, done)


def _debug_decide(step: Step, extra: dict[str, Any], done: Consolidated, continued: bool) -> Decision:
    if step.confidence == "certain":
        return Skip(
            "certain_confidence_proceed_with_fix",
            "skipped_due_to_certain_confidence",
            "confidence is certain: the root cause is confirmed, proceed with the fix",
        )
    return default_trigger(step, done)


def _thinkdeep_decide(step: Step, extra: dict[str, Any], done: Consolidated, continued: bool) -> Decision:
    if step.confidence == "certain":
        return Skip(
            "deep_thinking_complete_ready_for_implementation",
            "skipped_due_to_certain_thinking_confidence",
            "confidence is certain: the analysis is complete, proceed with implementation",
        )
    return step.use_assistant_model


def _codereview_actions(step: Step) -> list[str]:
    if step.step_number == 1:
        return [
            "Read every file in relevant_files and map the code's structure and purpose",
            "Note the review focus: correctness, security, performance, maintainability",
            "List each issue with its severity and location in issues_found",
        ]
    return [
        "Check the remaining files and the code paths the issues touch",
        "Confirm or drop each issue found so far; add new ones with severity",
        "Record what you checked in files_checked and summarize in findings",
    ]


def _debug_actions(step: Step) -> list[str]:
    if step.step_number == 1:
        return [
            "Reproduce the problem or gather its exact error output",
            "Read the code where the failure appears and trace its inputs",
            "Form a first hypothesis and record the evidence for it",
        ]
    return [
        "Test the current hypothesis against the code and logs",
        "Look for other explanations that fit the same evidence",
        "Raise confidence only with concrete evidence; certain only when confirmed",
    ]


def _thinkdeep_actions(step: Step) -> list[str]:
    return [
        "Examine the problem from the angles in focus_areas (or architecture, risks, alternatives)",
        "Question the assumptions behind your current conclusion",
        "Record evidence in findings and the files it came from in relevant_files",
    ]


SPECS: dict[str, Spec] = {
    "codereview": Spec(
        "codereview",
        "code_review",
        "code_review_status",
        "complete_code_review",
        _codereview_decide,
        _codereview_actions,
    ),
    "debug": Spec(
        "debug",
        "investigation",
        "investigation_status",
        "complete_investigation",
        _debug_decide,
        _debug_actions,
    ),
    "thinkdeep": Spec(
        "thinkdeep",
        "thinkdeep",
        "thinkdeep_status",
        "complete_thinking",
        _thinkdeep_decide,
        _thinkdeep_actions,
    ),
}


def _counters(spec: Spec, done: Consolidated, extra: dict[str, Any], step: Step) -> dict[str, Any]:
    counters: dict[str, Any] = {
        "files_checked": len(done.files_checked),
        "relevant_files": len(done.relevant_files),
        "relevant_context": len(done.relevant_context),
        "issues_found": len(done.issues_found),
        "images_collected": len(done.images),
        "current_confidence": done.confidence,
    }
    if spec.name == "codereview":
        by_severity: dict[str, int] = {}
        for issue in done.issues_found:
            severity = str(issue.get("severity", "unknown"))
            by_severity[severity] = by_severity.get(severity, 0) + 1
        counters["issues_by_severity"] = by_severity
        counters["review_validation_type"] = extra.get("review_validation_type", "external")
    if spec.name == "debug":
        counters["hypotheses_formed"] = len(done.hypotheses)
    return counters


def _expert_prompt(spec: Spec, done: Consolidated, extra: dict[str, Any]) -> str:
    parts = [f"=== {spec.name.upper()} REQUEST ===\n{done.initial_request}"]
    settings = {k: v for k, v in extra.items() if v not in (None, "", [])}
    if settings:
        parts.append("=== SETTINGS ===\n" + "\n".join(f"{k}: {v}" for k, v in settings.items()))
    if done.findings:
        parts.append("=== FINDINGS SO FAR ===\n" + "\n".join(done.findings))
    if done.hypotheses:
        parts.append("=== HYPOTHESES ===\n" + "\n".join(done.hypotheses))
    if done.issues_found:
        parts.append("=== ISSUES FOUND ===\n" + json.dumps(list(done.issues_found), indent=1))
    if done.relevant_context:
        parts.append("=== RELEVANT CONTEXT ===\n" + "\n".join(done.relevant_context))
    if done.confidence == "almost_certain":
        parts.append("The agent is almost certain of its conclusion: confirm or refute it specifically.")
    parts.append(f"Final confidence of the agent: {done.confidence}")
    return "\n\n".join(parts)


def parse_expert(text: str) -> dict[str, Any]:
    """The expert's JSON answer when it gave one, else Zen's text wrapper."""
    candidate = text.strip()
    fenced = _FENCED.search(candidate)
    if fenced:
        candidate = fenced.group(1)
    try:
        data = json.loads(candidate)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return dict(data)  # pyright: ignore[reportUnknownArgumentType]
    return {"status": "analysis_complete", "raw_analysis": text, "format": "text"}


def _summary(spec: Spec, done: Consolidated, step: Step) -> dict[str, Any]:
    if spec.name == "thinkdeep":
        return {
            "steps_completed": step.step_number,
            "final_confidence": done.confidence,
            "relevant_context": list(done.relevant_context),
            "key_findings": list(done.findings),
            "issues_identified": list(done.issues_found),
            "files_analyzed": list(done.relevant_files),
        }
    return {
        "initial_request": done.initial_request,
        "steps_taken": step.step_number,
        "files_examined": list(done.files_checked),
        "relevant_files": list(done.relevant_files),
        "relevant_context": list(done.relevant_context),
        "issues_found": list(done.issues_found),
        "hypotheses": list(done.hypotheses),
        "work_summary": "\n".join(done.findings),
        "final_confidence": done.confidence,
    }


def _base(spec: Spec, step: Step, thread_id: str, done: Consolidated, extra: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "status": f"{spec.label}_in_progress",
        "step_number": step.step_number,
        "total_steps": step.total_steps,
        "next_step_required": step.next_step_required,
        "continuation_id": thread_id,
        spec.counters_key: _counters(spec, done, extra, step),
        "metadata": {"tool_name": spec.name, "model_used": None, "provider_used": None},
    }
    if spec.name == "thinkdeep":
        data["thinking_status"] = {
            "current_step": step.step_number,
            "total_steps": step.total_steps,
            "files_checked": len(done.files_checked),
            "relevant_files": len(done.relevant_files),
            "thinking_confidence": done.confidence,
            "analysis_focus": extra.get("focus_areas") or ["general"],
        }
    return data


async def run_step(engine: Engine, tool: str, step: Step) -> Reply:
    """One step of codereview, debug or thinkdeep."""
    spec = SPECS[tool]
    step = validate(step)
    if tool == "codereview" and step.step_number == 1 and not step.relevant_files:
        raise msg.codereview_files_required()
    with thread_store(engine.settings) as threads:
        thread = load_thread(threads, step.continuation_id)
        state = advance(workflow_state(thread, tool), tool, step)
        state["extra"] = dict(state.get("extra", {})) | {k: v for k, v in step.extra.items() if v is not None}
        extra: dict[str, Any] = state["extra"]
        done = consolidate(state["steps"])
        thread_id = thread_id_for(thread)
        data = _base(spec, step, thread_id, done, extra)
        if step.next_step_required:
            data["status"] = spec.pause_status
            data[spec.required_key] = True
            data["required_actions"] = spec.actions(step)
            data["next_steps"] = (
                f"Do the required actions yourself before calling {tool} again. Then call {tool} with "
                f"step_number={step.step_number + 1}, your new findings, and continuation_id={thread_id!r}."
            )
            data["file_context"] = {
                "type": "reference_only",
                "note": "files are referenced by path while the workflow runs; they are embedded for the expert",
            }
            reply = f"[{tool}] paused for step {step.step_number + 1}: " + "; ".join(data["required_actions"])
            _save(threads, engine.settings, thread_id, tool, step, reply, state, None, None)
            return Reply(data)
        decision = spec.decide(step, extra, done, thread is not None)
        if isinstance(decision, Skip):
            data["status"] = decision.status
            data["skip_expert_analysis"] = True
            data["expert_analysis"] = {"status": decision.expert_status, "reason": decision.reason}
            data[spec.summary_key] = _summary(spec, done, step)
            data["next_steps"] = "Present the findings to the user and proceed with the work."
            _finish_extras(spec, data, done, step)
            _save(
                threads,
                engine.settings,
                thread_id,
                tool,
                step,
                f"[{tool}] complete: {decision.reason}",
                state,
                None,
                None,
            )
            return Reply(data)
        if not decision:
            data["status"] = "local_work_complete"
            data[spec.summary_key] = _summary(spec, done, step)
            data["next_steps"] = "The work is complete without an expert model; present the findings to the user."
            _finish_extras(spec, data, done, step)
            _save(
                threads,
                engine.settings,
                thread_id,
                tool,
                step,
                f"[{tool}] complete without expert analysis",
                state,
                None,
                None,
            )
            return Reply(data)
        model = resolve_model(engine.settings, step.model, tool, thread)
    return await _expert(engine, spec, step, state, done, extra, data, model, thread)


async def _expert(
    engine: Engine,
    spec: Spec,
    step: Step,
    state: dict[str, Any],
    done: Consolidated,
    extra: dict[str, Any],
    data: dict[str, Any],
    model: ModelInfo,
    thread: Thread | None,
) -> Reply:
    files, skipped = embeddable(done.relevant_files, engine.settings)
    args = AskArgs(
        prompt=_expert_prompt(spec, done, extra),
        model=model.id,
        system_prompt=msg.EXPERT_PROMPTS[spec.name],
        continuation_id=thread.id if thread is not None else None,
        files=tuple(files),
        images=tuple(i for i in done.images if i.startswith("data:") or i.startswith("/")),
        temperature=step.temperature,
        thinking_mode=step.thinking_mode or (EXPERT_THINKING_MODE if model.reasoning else None),
        tool=spec.name,
    )
    ans = await run_model(engine, args)
    thread_id = data["continuation_id"]
    data["metadata"] = {
        "tool_name": spec.name,
        "model_used": ans.model.partition(":")[2] or ans.model,
        "provider_used": ans.provider,
        "job_id": ans.job_id,
    }
    data["file_context"] = {"type": "fully_embedded", "files_embedded": len(files), "files_skipped": skipped}
    with thread_store(engine.settings) as threads:
        if not ans.ok:
            data["status"] = "error"
            data["error"] = (ans.error or {}).get("message", "the expert model failed")
            data["expert_analysis"] = {"status": "error", "error": ans.error}
            _save(
                threads,
                engine.settings,
                thread_id,
                spec.name,
                step,
                f"[{spec.name}] expert analysis failed",
                state,
                None,
                ans.job_id,
            )
            return Reply(data, is_error=True)
        expert = parse_expert(ans.text)
        data["expert_analysis"] = expert
        data["status"] = (
            "files_required_to_continue"
            if expert.get("status") == "files_required_to_continue"
            else "calling_expert_analysis"
        )
        data[spec.summary_key] = _summary(spec, done, step)
        data["next_steps"] = (
            "Weigh the expert analysis against your own findings: adopt what the code confirms, reject what it "
            "does not, then present the combined result to the user."
        )
        _finish_extras(spec, data, done, step)
        _save(threads, engine.settings, thread_id, spec.name, step, ans.text, state, ans.model, ans.job_id)
    return Reply(data)


def _finish_extras(spec: Spec, data: dict[str, Any], done: Consolidated, step: Step) -> None:
    if spec.name == "thinkdeep":
        data["thinking_complete"] = True
        data["completion_message"] = (
            f"Deep thinking complete after {step.step_number} steps with {done.confidence} confidence."
        )
    else:
        data[f"{spec.label}_complete"] = True


def _save(
    threads: ThreadStore,
    settings: Settings,
    thread_id: str,
    tool: str,
    step: Step,
    reply: str,
    state: dict[str, Any],
    model: str | None,
    job_id: str | None,
) -> None:
    # Only files inside the allowed roots: a later `ask` on this thread inlines the files of its history.
    files, _ = embeddable(step.relevant_files, settings)
    record(
        threads,
        thread_id,
        tool,
        step_summary(tool, step),
        reply,
        state,
        files=files,
        images=[i for i in step.images if not i.startswith("data:")],
        model=model,
        job_id=job_id,
    )
