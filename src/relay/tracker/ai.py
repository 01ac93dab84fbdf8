"""Model-assisted task work: split a task into subtasks (`expand_task`), check a closed task (`validate_task`).

The model is reached through an `Asker` (prompt, system prompt -> answer text); `engine_asker`
makes one from relay's `ask` core, so every question is a durable job like any other ask.
The prompts ask for JSON; the parsers accept it bare or in a fenced block and refuse anything else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from relay.ask import AskArgs, submit_ask
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.tracker.model import DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY, Task, TaskChanges
from relay.tracker.project import Project
from relay.tracker.store import TaskStore

Asker = Callable[[str, str], Awaitable[str]]
# A model answer that takes longer than this is abandoned (the job is cancelled).
ASK_TIMEOUT_S = 300.0
MAX_SUBTASKS = 25

EXPAND_SYSTEM = (
    "You split a software task into concrete subtasks a developer can do one at a time. Answer with JSON only, "
    'no prose: {"subtasks": [{"title": str, "description": str, "priority": 1|2|3, "task_type": '
    '"task"|"bug"|"feature"|"chore", "depends_on": [indexes of earlier subtasks that must be done first]}]}. '
    f"At most {MAX_SUBTASKS} subtasks, in the order they should be done."
)
VALIDATE_SYSTEM = (
    "You check whether finished work meets a task's description. Answer with JSON only, no prose: "
    '{"valid": true|false, "feedback": "what is missing, or why it is done"}.'
)


@dataclass(frozen=True)
class SubtaskSpec:
    title: str
    description: str | None
    priority: int
    task_type: str
    depends_on: tuple[int, ...]


def _json_object(text: str, what: str) -> dict[str, Any]:
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.DOTALL)
    candidate = fenced.group(1) if fenced else text[text.find("{") : text.rfind("}") + 1]
    try:
        data = json.loads(candidate)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR,
            f"the model's {what} was not the JSON object asked for: {text[:200]!r}",
            "retry, or ask a stronger model (set RELAY_ASK_MODEL)",
        )
    return data  # pyright: ignore[reportUnknownVariableType]


def expansion_prompt(task: Task, context: str | None) -> str:
    parts = [f"Task {task.id}: {task.title}", f"Type: {task.task_type}, priority {task.priority}"]
    if task.description:
        parts.append(f"Description:\n{task.description}")
    if context:
        parts.append(f"Context from the caller:\n{context}")
    parts.append("Split this task into subtasks.")
    return "\n\n".join(parts)


def parse_expansion(text: str) -> list[SubtaskSpec]:
    """The subtasks in a model's answer; dependencies may point only at earlier subtasks."""
    data = _json_object(text, "expansion")
    raw = data.get("subtasks")
    if not isinstance(raw, list) or not raw:
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR, "the model proposed no subtasks", "add context, or split the task by hand"
        )
    out: list[SubtaskSpec] = []
    for index, item in enumerate(raw[:MAX_SUBTASKS]):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        if not isinstance(item, dict) or not isinstance(item.get("title"), str) or not item["title"].strip():  # pyright: ignore[reportUnknownMemberType]
            continue
        spec: dict[str, Any] = item  # pyright: ignore[reportUnknownVariableType]
        priority = spec.get("priority", DEFAULT_PRIORITY)
        if not isinstance(priority, int) or isinstance(priority, bool) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            priority = DEFAULT_PRIORITY
        deps_raw: list[Any] = spec["depends_on"] if isinstance(spec.get("depends_on"), list) else []
        deps = tuple(sorted({d for d in deps_raw if isinstance(d, int) and not isinstance(d, bool) and 0 <= d < index}))
        description = spec.get("description")
        task_type = spec.get("task_type")
        out.append(
            SubtaskSpec(
                title=spec["title"].strip()[:500],
                description=description if isinstance(description, str) else None,
                priority=priority,
                task_type=task_type.strip()[:50] if isinstance(task_type, str) and task_type.strip() else "task",
                depends_on=deps,
            )
        )
    if not out:
        raise RelayError(ErrorCode.UPSTREAM_ERROR, "the model's subtasks had no titles", "retry")
    return out


def validation_prompt(task: Task, changes_summary: str, context: str | None) -> str:
    parts = [f"Task {task.id}: {task.title}"]
    if task.description:
        parts.append(f"Description:\n{task.description}")
    if task.closed_reason:
        parts.append(f"Closing reason: {task.closed_reason}")
    parts.append(f"Summary of the changes made:\n{changes_summary}")
    if context:
        parts.append(f"Context from the caller:\n{context}")
    parts.append("Does the work meet the task's description?")
    return "\n\n".join(parts)


def parse_validation(text: str) -> tuple[bool, str]:
    data = _json_object(text, "verdict")
    valid = data.get("valid")
    if not isinstance(valid, bool):
        raise RelayError(ErrorCode.UPSTREAM_ERROR, "the model gave no true/false verdict", "retry")
    feedback = data.get("feedback")
    return valid, feedback if isinstance(feedback, str) else ""


async def expand_task(
    store: TaskStore, project: Project, task_id: str, ask: Asker, context: str | None = None
) -> dict[str, Any]:
    """Ask the model for subtasks, then create them under the task with their `blocks` dependencies."""
    task = store.get(project, task_id)
    specs = parse_expansion(await ask(expansion_prompt(task, context), EXPAND_SYSTEM))
    created: list[Task] = []
    for spec in specs:
        created.append(
            store.create(
                project,
                spec.title,
                description=spec.description,
                priority=spec.priority,
                task_type=spec.task_type,
                parent_task_id=task.id,
                original_instruction=context,
            )
        )
    dependencies: list[dict[str, Any]] = []
    for sub, spec in zip(created, specs, strict=True):
        for index in spec.depends_on:
            dep = store.add_dependency(project, sub.id, created[index].id)
            dependencies.append(dep.to_dict())
    return {
        "task_id": task.id,
        "subtasks": [store.get(project, t.id).brief() for t in created],
        "dependencies": dependencies,
    }


async def validate_task(
    store: TaskStore, project: Project, task_id: str, changes_summary: str, ask: Asker, context: str | None = None
) -> dict[str, Any]:
    """Ask the model whether the work meets the description; record `validation_status` and feedback."""
    if not changes_summary.strip():
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT, "changes_summary is empty", "say what was changed to finish the task"
        )
    task = store.get(project, task_id)
    valid, feedback = parse_validation(await ask(validation_prompt(task, changes_summary, context), VALIDATE_SYSTEM))
    status = "valid" if valid else "invalid"
    store.update(project, task.id, TaskChanges(validation_status=status, validation_feedback=feedback))
    return {"task_id": task.id, "is_valid": valid, "validation_status": status, "feedback": feedback}


def engine_asker(engine: Engine, tool: str, timeout_s: float = ASK_TIMEOUT_S) -> Asker:
    """An Asker that runs each question as an `ask` job on the engine with the default model."""

    async def ask(prompt: str, system: str) -> str:
        try:
            job_id = await submit_ask(engine, AskArgs(prompt=prompt, system_prompt=system, tool=tool))
        except RelayError as err:
            if err.code is ErrorCode.AUTH_MISSING:
                raise RelayError(err.code, f"{tool} needs a model: {err.message}", err.hint) from None
            raise
        try:
            rec = await engine.wait_one(job_id, timeout_s)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # the caller went away: do not leave the question running
                await engine.cancel(job_id)
            raise
        if not rec.is_final:
            await engine.cancel(job_id)
            raise RelayError(ErrorCode.TIMEOUT, f"the model did not answer within {timeout_s:.0f} s", "retry later")
        env = engine.envelope(job_id)
        if env["status"] != "completed":
            error: Any = env.get("error")
            if not isinstance(error, dict):
                error = {"code": "AGENT_FAILED", "message": f"the model job ended {env['status']}", "hint": "retry"}
            raise RelayError.from_dict(error)  # pyright: ignore[reportUnknownArgumentType]
        return str(env["output"])

    return ask
