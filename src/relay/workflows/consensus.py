"""Zen's `consensus`, run in parallel: step 1 starts every listed model at once, each later step
returns the next finished answer.

Each model (a model API, or an agent CLI named `cli:NAME[/MODEL]`) sees only the proposal, the
relevant files and its stance: never the others' answers. Each runs as its own job, so the wall
time is about the slowest model's, and a model that fails is reported in its step while the
others go on. The job ids live in the thread, so the steps continue after a relay restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.ask import AskArgs
from relay.errors import RelayError
from relay.jobs.engine import Engine
from relay.workflows import messages as msg
from relay.workflows.models import answer, cli_target, resolve_model, start_cli_job, start_model_job
from relay.workflows.steps import (
    Reply,
    check_absolute,
    embeddable,
    load_thread,
    offer,
    record,
    thread_id_for,
    thread_store,
    workflow_state,
)

TOOL = "consensus"
MIN_MODELS = 2


@dataclass(frozen=True)
class ModelSpec:
    model: str
    stance: str = "neutral"
    stance_prompt: str | None = None


@dataclass(frozen=True)
class ConsensusStep:
    step: str
    step_number: int
    total_steps: int
    next_step_required: bool
    findings: str
    models: tuple[ModelSpec, ...] | None = None
    relevant_files: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    continuation_id: str | None = None
    use_assistant_model: bool = True
    current_model_index: int | None = None
    model_responses: tuple[dict[str, Any], ...] = ()


def _validate(req: ConsensusStep) -> None:
    if req.step_number < 1:
        raise msg.at_least_one("step_number")
    if req.total_steps < 1:
        raise msg.at_least_one("total_steps")
    if len(req.step) > msg.STEP_CHAR_LIMIT:
        raise msg.step_too_long()
    check_absolute(req.relevant_files)
    check_absolute(req.images, images=True)
    if req.step_number != 1:
        return
    if not req.models or len(req.models) < MIN_MODELS:
        raise msg.consensus_models_required()
    seen: set[tuple[str, str]] = set()
    for spec in req.models:
        if spec.stance not in msg.STANCES:
            raise msg.invalid(
                f"stance {spec.stance!r} is not one of for, against, neutral", "use for, against or neutral"
            )
        key = (spec.model, spec.stance)
        if key in seen:
            raise msg.consensus_duplicate(spec.model, spec.stance)
        seen.add(key)


def _system_prompt(spec: ModelSpec) -> str:
    stance = spec.stance_prompt or msg.CONSENSUS_STANCE_PROMPTS[spec.stance]
    return f"{stance}\n\n{msg.CONSENSUS_FORMAT}"


def _start(engine: Engine, spec: ModelSpec, proposal: str, files: list[str], images: tuple[str, ...]) -> str:
    """One model's job: an agent CLI (files listed by path) or a model API (files embedded)."""
    target = cli_target(spec.model)
    if target is not None:
        refs = "".join(f"\n- {path}" for path in files)
        prompt = proposal + (f"\n\n=== FILES TO CONSIDER ==={refs}" if refs else "")
        return start_cli_job(engine, target, prompt, _system_prompt(spec))
    model = resolve_model(engine.settings, spec.model, TOOL)
    args = AskArgs(
        prompt=proposal,
        model=model.id,
        system_prompt=_system_prompt(spec),
        files=tuple(files),
        images=images,
        thinking_mode="medium" if model.reasoning else None,
        tool=TOOL,
    )
    return start_model_job(engine, args, record=False)


def _start_all(engine: Engine, req: ConsensusStep) -> list[dict[str, Any]]:
    """Start every model at once; one that cannot start is recorded as failed, the others still run."""
    assert req.models is not None
    files, _ = embeddable(req.relevant_files, engine.settings)
    images = tuple(i for i in req.images if i.startswith("data:") or Path(i).is_absolute())
    started: list[dict[str, Any]] = []
    for spec in req.models:
        entry: dict[str, Any] = {"model": spec.model, "stance": spec.stance, "job_id": None, "error": None}
        try:
            entry["job_id"] = _start(engine, spec, req.step, files, images)
        except RelayError as err:
            entry["error"] = err.to_dict()
        started.append(entry)
    return started


async def _next_finished(engine: Engine, entries: list[dict[str, Any]], reported: list[int]) -> int:
    """The index of the next model to report: one that could not start, else the first job to finish."""
    pending = [i for i in range(len(entries)) if i not in reported]
    for i in pending:
        if entries[i]["job_id"] is None:
            return i
    while True:  # the engine bounds each wait; the job's own timeout bounds the whole
        records = await engine.wait([entries[i]["job_id"] for i in pending], "any", float("inf"))
        finished = [(r.finished_at or 0.0, i) for i, r in zip(pending, records, strict=True) if r.is_final]
        if finished:
            return min(finished)[1]


def _response(engine: Engine, entry: dict[str, Any]) -> dict[str, Any]:
    if entry["job_id"] is None:
        return {
            "model": entry["model"],
            "stance": entry["stance"],
            "status": "error",
            "error": entry["error"]["message"],
            "metadata": {"error": entry["error"], "job_id": None},
        }
    ans = answer(engine, entry["job_id"])
    meta = {"job_id": ans.job_id, "model_used": ans.model, "provider": ans.provider, "duration_s": ans.duration_s}
    if ans.ok:
        return {
            "model": entry["model"],
            "stance": entry["stance"],
            "status": "success",
            "verdict": ans.text,
            "metadata": meta,
        }
    error = ans.error or {}
    return {
        "model": entry["model"],
        "stance": entry["stance"],
        "status": "error",
        "error": str(error.get("message", "the model failed")),
        "metadata": meta | {"error": error},
    }


async def consensus_step(engine: Engine, req: ConsensusStep) -> Reply:
    """One step: step 1 starts all models and reports the first answer; each later step the next one."""
    _validate(req)
    with thread_store(engine.settings) as threads:
        thread = load_thread(threads, req.continuation_id)
        state: dict[str, Any] | None = workflow_state(thread, TOOL)
    if req.step_number == 1 or state is None:
        if req.models is None or len(req.models) < MIN_MODELS:
            raise msg.consensus_models_required()
        state = {
            "tool": TOOL,
            "proposal": req.step,
            "entries": _start_all(engine, req),
            "reported": [],
            "responses": [],
        }
    entries: list[dict[str, Any]] = state["entries"]
    reported: list[int] = [int(i) for i in state["reported"]]
    total = len(entries)
    data: dict[str, Any] = {"step_number": req.step_number, "total_steps": total}
    if len(reported) < total:
        index = await _next_finished(engine, entries, reported)
        reported.append(index)
        response = _response(engine, entries[index])
        state["reported"] = reported
        state["responses"] = [*state["responses"], response]
        data |= {
            "model_consulted": entries[index]["model"],
            "model_stance": entries[index]["stance"],
            "model_response": response,
        }
    complete = len(reported) >= total
    data["current_model_index"] = len(reported)
    data["next_step_required"] = not complete
    if req.step_number == 1:
        data["status"] = "analysis_and_first_model_consulted"
        data["agent_analysis"] = {"initial_analysis": req.findings}
    else:
        data["status"] = "model_consulted"
    data["models_running"] = [
        e["model"] for i, e in enumerate(entries) if i not in reported and e["job_id"] is not None
    ]
    with thread_store(engine.settings) as threads:
        thread_id = thread_id_for(thread)
        if complete:
            data["status"] = "consensus_workflow_complete"
            data["consensus_complete"] = True
            data["complete_consensus"] = {
                "initial_prompt": state["proposal"],
                "models_consulted": [f"{e['model']}:{e['stance']}" for e in entries],
                "total_responses": len(state["responses"]),
                "consensus_confidence": "high",
            }
            data["accumulated_responses"] = state["responses"]
            data["next_steps"] = (
                "All models have answered. Synthesize: where they agree, where they disagree and why, and your "
                "recommendation with its trade-offs. Present it to the user."
            )
        else:
            data["next_steps"] = (
                f"Note what this model said in findings, then call consensus with step_number={req.step_number + 1} "
                f"and continuation_id={thread_id!r} for the next answer (the other models are already running)."
            )
        last: dict[str, Any] = data.get("model_response") or {}
        reply = str(last.get("verdict") or last.get("error") or "")
        user = f"[consensus step {req.step_number}/{total}] {req.step}\nFindings: {req.findings}"
        saved = record(threads, thread_id, TOOL, user, reply or "[consensus] no answer", state)
        data["continuation_id"] = thread_id
        data["continuation_offer"] = offer(threads, saved, "consensus")
    return Reply(data)
