"""Zen's simple tools: `chat` (one model, a thread, generated code to a file), `challenge`, `apilookup`.

challenge and apilookup call no model: they return instructions for the calling agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.ask import AskArgs
from relay.errors import ErrorCode, RelayError, invalid
from relay.jobs.engine import Engine
from relay.osfiles import expand_home, is_dir
from relay.workflows import messages as msg
from relay.workflows.models import Answer, resolve_model, start_model_job, wait_job
from relay.workflows.models import answer as job_answer
from relay.workflows.steps import Reply, check_absolute, load_thread, offer, thread_store

_GENERATED = re.compile(r"<GENERATED-CODE>(.*?)</GENERATED-CODE>", re.DOTALL)


@dataclass(frozen=True)
class ChatRequest:
    prompt: str
    working_directory_absolute_path: str
    model: str | None = None
    temperature: float | None = None
    thinking_mode: str | None = None
    continuation_id: str | None = None
    absolute_file_paths: tuple[str, ...] = ()
    images: tuple[str, ...] = ()


def check_working_directory(engine: Engine, raw: str) -> Path:
    """An absolute, existing directory inside the allowed roots (the seed's messages for the first two)."""
    path = expand_home(raw)
    if not path.is_absolute():
        raise msg.working_directory_not_absolute(raw)
    if not is_dir(path):
        raise msg.working_directory_missing(raw)
    resolved = path.resolve()
    roots = engine.settings.allowed_roots
    if roots and not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        raise RelayError(
            ErrorCode.CWD_NOT_ALLOWED,
            f"working directory {str(resolved)[:300]!r} is outside the allowed roots",
            "use a directory under the allowed roots, or add it to security.allowed_roots in config.toml",
        )
    return resolved


def model_metadata(tool: str, ans: Answer) -> dict[str, Any]:
    return {
        "tool_name": tool,
        "model_used": ans.model.partition(":")[2] or ans.model,
        "provider_used": ans.provider,
        "job_id": ans.job_id,
    }


def failure(tool: str, ans: Answer) -> Reply:
    """Zen's error ToolOutput for a model call that failed (relay's error object kept in metadata)."""
    detail = (ans.error or {}).get("message", "the model call failed")
    return Reply(
        {
            "status": "error",
            "content": f"Error in {tool}: {detail}",
            "content_type": "text",
            "metadata": model_metadata(tool, ans) | {"error": ans.error},
            "continuation_offer": None,
        },
        is_error=True,
    )


def _save_generated(text: str, workdir: Path) -> tuple[str, str | None]:
    """The reply with its last <GENERATED-CODE> block saved to the working directory and replaced by a note."""
    blocks = _GENERATED.findall(text)
    if not blocks:
        return text, None
    target = workdir / msg.GENERATED_CODE_FILE
    target.write_text(blocks[-1].strip("\n") + "\n", encoding="utf-8")
    note = msg.generated_code_note(str(target))
    return _GENERATED.sub(f"[code saved to {target}]", text).strip() + "\n\n" + note, str(target)


async def chat(engine: Engine, req: ChatRequest) -> Reply:
    """Ask one model (its thread's history included); returns Zen's ToolOutput with a continuation offer."""
    if not req.prompt.strip():
        raise invalid("prompt is empty", "pass your question or idea as prompt")
    workdir = check_working_directory(engine, req.working_directory_absolute_path)
    check_absolute(req.absolute_file_paths)
    check_absolute(req.images, images=True)
    with thread_store(engine.settings) as threads:
        thread = load_thread(threads, req.continuation_id)
    model = resolve_model(engine.settings, req.model, "chat", thread)
    args = AskArgs(
        prompt=req.prompt,
        model=model.id,
        system_prompt=msg.CHAT_SYSTEM_PROMPT,
        continuation_id=req.continuation_id,
        files=req.absolute_file_paths,
        images=req.images,
        temperature=req.temperature,
        thinking_mode=req.thinking_mode,
        tool="chat",
    )
    job_id = start_model_job(engine, args, record=True)
    await wait_job(engine, job_id)
    ans = job_answer(engine, job_id)
    if not ans.ok:
        return failure("chat", ans)
    content, saved = _save_generated(ans.text, workdir)
    thread_id = str(engine.get(job_id).request.get("continuation_id"))
    with thread_store(engine.settings) as threads:
        current = threads.find(thread_id)
        cont = offer(threads, current) if current is not None else None
    metadata = model_metadata("chat", ans) | {"conversation_ready": True}
    if saved:
        metadata["generated_code_file"] = saved
    return Reply(
        {
            "status": "continuation_available" if cont else "success",
            "content": content + msg.CHAT_TRAILER,
            "content_type": "markdown",
            "metadata": metadata,
            "continuation_offer": cont,
        }
    )


def challenge(prompt: str) -> Reply:
    """The statement wrapped in instructions to reassess it critically (no model call)."""
    if not prompt.strip():
        raise invalid("prompt is empty", "pass the statement to challenge as prompt")
    return Reply(
        {
            "status": "challenge_accepted",
            "original_statement": prompt,
            "challenge_prompt": msg.CHALLENGE_WRAPPER.format(statement=prompt),
            "instructions": msg.CHALLENGE_INSTRUCTIONS,
        }
    )


def apilookup(prompt: str) -> Reply:
    """Instructions for the calling agent to look the API up on the web itself (no model call)."""
    if not prompt.strip():
        raise invalid("prompt is empty", "name the API, SDK or library to look up as prompt")
    return Reply({"status": "web_lookup_needed", "instructions": msg.APILOOKUP_INSTRUCTIONS, "user_prompt": prompt})
