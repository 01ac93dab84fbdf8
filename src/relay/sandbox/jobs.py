"""A sandboxed run as a relay job: listed by job_list, cancellable with job_cancel, bounded by its timeout.

The run's outcome is written next to the job's files (`sandbox/outcome.json`), so the tool that
submitted it, and anyone later, can read the whole result back.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult, Event
from relay.jobs.engine import Engine
from relay.sandbox.runner import Outcome, check_code, check_timeout, language_of, run_code

AGENT = "sandbox"
OUTCOME_FILE = "outcome.json"
# The engine's own deadline sits this far past the run's, so the run's timeout is what ends it.
ENGINE_MARGIN_S = 10.0
# How much of the code the job record keeps (the whole code is in the run's temp dir while it runs).
RECORDED_CODE_CHARS = 4000
# Runs of one engine at a time beyond which further runs wait for a slot (the engine's own job limit).
_slots: weakref.WeakKeyDictionary[Engine, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _limiter(engine: Engine) -> anyio.CapacityLimiter:
    if engine not in _slots:
        _slots[engine] = anyio.CapacityLimiter(max(1, engine.settings.max_concurrent))
    return _slots[engine]


def sandbox_dir(engine: Engine, job_id: str) -> Path:
    return engine.files(job_id).dir / "sandbox"


def read_outcome(engine: Engine, job_id: str) -> dict[str, Any] | None:
    """The outcome a finished run recorded (None when it never ran: cancelled while starting, bad input)."""
    try:
        data = json.loads((sandbox_dir(engine, job_id) / OUTCOME_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None  # pyright: ignore[reportUnknownVariableType]


def _failure(outcome: Outcome) -> RelayError:
    if outcome.timed_out:
        return RelayError(
            ErrorCode.TIMEOUT,
            f"the {outcome.language} code ran past its timeout and was killed",
            "raise timeout (at most 600 s) or make the code faster",
        )
    last = next((line for line in reversed(outcome.stderr.splitlines()) if line.strip()), "")
    return RelayError(
        ErrorCode.AGENT_FAILED,
        f"the {outcome.language} code exited with code {outcome.exit_code}" + (f": {last[:300]}" if last else ""),
        "read stderr in the result, fix the code and run it again",
    )


def submit_execute(
    engine: Engine,
    code: str,
    language: str = "python",
    *,
    timeout: float | None = None,
    context: str | None = None,
    tool: str = "execute_code",
    hidden: Sequence[Path] = (),
    inputs: Mapping[str, bytes] | None = None,
) -> str:
    """Validate, then submit the run as a job; returns the job id (the tool waits on it)."""
    lang = language_of(language)
    check_code(code)
    timeout_s = check_timeout(timeout)
    first_line = next((line.strip() for line in code.splitlines() if line.strip()), "")
    request: dict[str, Any] = {
        "tool": tool,
        "prompt": f"[{lang}] {first_line}",
        "language": lang,
        "code": code[:RECORDED_CODE_CHARS],
        "context": context,
        "timeout_s": timeout_s,
    }
    where: dict[str, Path] = {}

    async def task(emit: Callable[[Event], None]) -> AgentResult:
        out = where["dir"]
        async with _limiter(engine):
            emit(Event("sandbox.started", {"language": lang, "timeout_s": timeout_s}))
            outcome = await run_code(
                code, lang, timeout_s, out, environ=engine.settings.environ, hidden=hidden, inputs=inputs
            )
        path = out / OUTCOME_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(outcome.to_dict()), encoding="utf-8")
        os.replace(tmp, path)
        emit(
            Event(
                "sandbox.exited",
                {
                    "exit_code": outcome.exit_code,
                    "timed_out": outcome.timed_out,
                    "isolation": outcome.isolation,
                    "execution_time": outcome.execution_time,
                },
            )
        )
        return AgentResult(
            ok=outcome.success, text=outcome.result, error=None if outcome.success else _failure(outcome)
        )

    job_id = engine.submit_task(AGENT, request, task, timeout_s=timeout_s + ENGINE_MARGIN_S)
    # The task starts at the event loop's next turn, after this assignment.
    where["dir"] = sandbox_dir(engine, job_id)
    return job_id
