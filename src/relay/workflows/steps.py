"""The step machinery every workflow tool shares: validation, consolidated findings, state in threads.

A workflow's state (its steps so far) is stored in the metadata of the thread turns it adds, so
a workflow continues with its `continuation_id` after relay restarts, and any other tool or
model continuing the thread sees the steps as conversation history.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from relay.config import Settings
from relay.errors import invalid
from relay.osfiles import expand_home
from relay.threads import NewTurn, Thread, ThreadStore, new_thread_id, open_threads
from relay.workflows import messages as msg

STATE_KEY = "workflow"


@dataclass(frozen=True)
class Step:
    """One call of a workflow tool: the common WorkflowRequest fields."""

    step: str
    step_number: int
    total_steps: int
    next_step_required: bool
    findings: str = ""
    files_checked: tuple[str, ...] = ()
    relevant_files: tuple[str, ...] = ()
    relevant_context: tuple[str, ...] = ()
    issues_found: tuple[dict[str, Any], ...] = ()
    confidence: str | None = None
    hypothesis: str | None = None
    images: tuple[str, ...] = ()
    use_assistant_model: bool = True
    continuation_id: str | None = None
    model: str | None = None
    temperature: float | None = None
    thinking_mode: str | None = None
    extra: dict[str, Any] = field(default_factory=lambda: {})

    def record(self) -> dict[str, Any]:
        """What is kept of this step in the workflow's state."""
        data = asdict(self)
        for key in ("continuation_id", "model", "temperature", "thinking_mode", "use_assistant_model"):
            data.pop(key)
        return data


# The image formats relay's model APIs take, by the bytes they start with (WebP: RIFF....WEBP).
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


def image_data_url(spec: str) -> str | None:
    """An inline image as a data URL: a data URL as given, or raw base64 of a png/jpeg/gif/webp image."""
    text = spec.strip()
    if text.startswith("data:"):
        return text
    packed = "".join(text.split())
    if len(packed) % 4 or not _BASE64.match(packed):
        return None
    try:
        head = base64.b64decode(packed[:64], validate=True)
    except (binascii.Error, ValueError):
        return None
    media = next((m for magic, m in _IMAGE_MAGIC if head.startswith(magic)), None)
    if media is None and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        media = "image/webp"
    return f"data:{media};base64,{packed}" if media else None


def inline_images(images: Sequence[str]) -> tuple[str, ...]:
    """The images with raw base64 turned into data URLs (paths stay as given)."""
    return tuple(image_data_url(i) or i for i in images)


def check_absolute(paths: Sequence[str], images: bool = False) -> None:
    """Zen's rule: every path is a full absolute path ('~' expanded); images may also be inline data."""
    for raw in paths:
        if images and image_data_url(raw):
            continue
        if not expand_home(raw).is_absolute():
            raise msg.image_form_error(raw) if images else msg.absolute_paths_error(raw)


def validate(step: Step) -> Step:
    """Common checks; returns the step with total_steps raised to step_number when it was lower (as Zen does)."""
    if step.step_number < 1:
        raise msg.at_least_one("step_number")
    if step.total_steps < 1:
        raise msg.at_least_one("total_steps")
    if len(step.step) > msg.STEP_CHAR_LIMIT:
        raise msg.step_too_long()
    check_absolute(step.files_checked)
    check_absolute(step.relevant_files)
    check_absolute(step.images, images=True)
    if step.confidence is not None and step.confidence not in msg.CONFIDENCE_LEVELS:
        raise invalid(
            f"confidence {step.confidence!r} is not one of {', '.join(msg.CONFIDENCE_LEVELS)}",
            "use exploring, low, medium, high, very_high, almost_certain or certain",
        )
    if step.total_steps < step.step_number:
        return replace(step, total_steps=step.step_number)
    return step


@contextmanager
def thread_store(settings: Settings) -> Generator[ThreadStore]:
    threads = open_threads(settings)
    try:
        yield threads
    finally:
        threads.close()


def load_thread(threads: ThreadStore, continuation_id: str | None) -> Thread | None:
    """The live thread for a continuation id (an error naming what to do when it is gone)."""
    return threads.get(continuation_id) if continuation_id else None


def workflow_state(thread: Thread | None, tool: str) -> dict[str, Any] | None:
    """The newest state this tool stored in the thread, if any."""
    if thread is None:
        return None
    for turn in reversed(thread.turns):
        state = turn.metadata.get(STATE_KEY)
        if isinstance(state, dict) and state.get("tool") == tool:  # pyright: ignore[reportUnknownMemberType]
            return dict(state)  # pyright: ignore[reportUnknownArgumentType]
    return None


def record(
    threads: ThreadStore,
    thread_id: str,
    tool: str,
    user_text: str,
    reply_text: str,
    state: dict[str, Any],
    *,
    files: Sequence[str] = (),
    images: Sequence[str] = (),
    model: str | None = None,
    job_id: str | None = None,
) -> Thread:
    """Add one step to the thread: the caller's step and the tool's reply, with the state attached."""
    provider = model.partition(":")[0] if model and ":" in model else None
    turns = [
        NewTurn("user", user_text, files=tuple(files), images=tuple(images)),
        NewTurn("assistant", reply_text, provider=provider, model=model, job_id=job_id, metadata={STATE_KEY: state}),
    ]
    return threads.add_turns(thread_id, turns, tool=tool, title=user_text)


# An exchange (the caller's turn and the answer) adds two turns to a thread.
EXCHANGE_TURNS = 2


def offer(threads: ThreadStore, thread: Thread, note_kind: str = "conversation") -> dict[str, Any] | None:
    """Zen's `continuation_offer`, or None when the thread has no room for another exchange.

    It counts exchanges (a call and its answer: two turns), what the caller can still do, so it says
    "1 more" exactly when one more continuation fits and is gone when the next one would be refused.
    """
    remaining = thread.remaining_turns(threads.config.max_turns) // EXCHANGE_TURNS
    if remaining < 1:
        return None
    exchanges = f"{remaining} more exchange{'' if remaining == 1 else 's'}"
    note = (
        f"Consensus workflow can continue for {exchanges}."
        if note_kind == "consensus"
        else f"You can continue this conversation for {exchanges}."
    )
    return {"continuation_id": thread.id, "note": note, "remaining_turns": remaining}


def thread_id_for(thread: Thread | None) -> str:
    return thread.id if thread is not None else new_thread_id()


@dataclass(frozen=True)
class Consolidated:
    """Everything the steps so far found, merged (newest confidence wins)."""

    initial_request: str
    findings: tuple[str, ...]
    files_checked: tuple[str, ...]
    relevant_files: tuple[str, ...]
    relevant_context: tuple[str, ...]
    issues_found: tuple[dict[str, Any], ...]
    hypotheses: tuple[str, ...]
    images: tuple[str, ...]
    confidence: str


def _union(lists: Sequence[Sequence[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for items in lists for item in items))


def consolidate(history: Sequence[dict[str, Any]]) -> Consolidated:
    findings = tuple(f"Step {s['step_number']}: {s['findings']}" for s in history if s.get("findings"))
    issues: list[dict[str, Any]] = []
    for s in history:
        for issue in s.get("issues_found", ()):
            if issue not in issues:
                issues.append(issue)
    confidence = next((s["confidence"] for s in reversed(history) if s.get("confidence")), "low")
    return Consolidated(
        initial_request=history[0]["step"] if history else "",
        findings=findings,
        files_checked=_union([s.get("files_checked", ()) for s in history]),
        relevant_files=_union([s.get("relevant_files", ()) for s in history]),
        relevant_context=_union([s.get("relevant_context", ()) for s in history]),
        issues_found=tuple(issues),
        hypotheses=tuple(
            f"Step {s['step_number']} ({s.get('confidence') or 'low'}): {s['hypothesis']}"
            for s in history
            if s.get("hypothesis")
        ),
        images=_union([s.get("images", ()) for s in history]),
        confidence=confidence,
    )


def advance(state: dict[str, Any] | None, tool: str, step: Step) -> dict[str, Any]:
    """The state after this step: step 1 starts over, a repeated step number replaces the earlier one."""
    history: list[dict[str, Any]] = [] if state is None or step.step_number == 1 else list(state.get("steps", []))
    history = [s for s in history if s.get("step_number") != step.step_number]
    history.append(step.record())
    history.sort(key=lambda s: int(s["step_number"]))
    base = dict(state) if state is not None and step.step_number != 1 else {}
    return base | {"tool": tool, "steps": history}


def step_summary(tool: str, step: Step) -> str:
    """The caller's step as one thread turn (what another tool or model sees as history)."""
    lines = [f"[{tool} step {step.step_number}/{step.total_steps}] {step.step}"]
    if step.findings:
        lines.append(f"Findings: {step.findings}")
    if step.hypothesis:
        lines.append(f"Hypothesis: {step.hypothesis}")
    if step.relevant_files:
        lines.append(f"Relevant files: {', '.join(step.relevant_files)}")
    return "\n".join(lines)


def embeddable(paths: Sequence[str], settings: Settings) -> tuple[list[str], list[str]]:
    """The paths that exist inside the allowed roots (to embed), and the rest (reported, not fatal)."""
    ok: list[str] = []
    skipped: list[str] = []
    for raw in paths:
        path = expand_home(raw)
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            skipped.append(raw)
            continue
        roots = settings.allowed_roots
        if roots and not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            skipped.append(raw)
            continue
        ok.append(str(resolved))
    return ok, skipped


@dataclass(frozen=True)
class Reply:
    """What a workflow tool answers: the seed's JSON, and whether it reports a failure."""

    data: dict[str, Any]
    is_error: bool = False
