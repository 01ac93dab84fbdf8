"""Zen's `clink`: hand a prompt to an agent CLI (claude, codex, gemini, copilot, config ones) in a role.

The CLI runs as a job of relay's engine (listed, cancellable, its full output paged with
job_result), read-only unless config says otherwise. Role prompts are relay's own, and
`[zen.roles]` in config.toml overrides them or adds roles; `[zen.clink.NAME]` sets a CLI's
`model` (claude's h/s/o work) and `permission`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from relay.agents import known_agents
from relay.agents.api._content import estimate_tokens
from relay.agents.api.registry import read_config_table
from relay.config import Settings
from relay.errors import invalid
from relay.jobs.engine import Engine
from relay.osfiles import expand_home
from relay.threads import NewTurn, select_history
from relay.workflows import messages as msg
from relay.workflows.models import Answer, CliTarget, answer, cli_job_request, cli_model, wait_job
from relay.workflows.steps import Reply, check_absolute, embeddable, load_thread, offer, thread_id_for, thread_store

TOOL = "clink"
# Zen returns at most this much of a CLI's answer inline (the rest: a <SUMMARY> or an excerpt).
MAX_INLINE_CHARS = 20_000
EXCERPT_CHARS = 4_000
# History from the thread prepended to the prompt, in tokens.
HISTORY_BUDGET_TOKENS = 24_000
_SUMMARY = re.compile(r"<SUMMARY>(.*?)</SUMMARY>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ClinkRequest:
    prompt: str
    cli_name: str | None = None
    role: str = "default"
    absolute_file_paths: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    continuation_id: str | None = None


def _config(settings: Settings) -> dict[str, Any]:
    return read_config_table(settings, "zen")


def roles(settings: Settings) -> dict[str, str]:
    """Role name → prompt: relay's three, overridden or extended by `[zen.roles]`."""
    table = _config(settings).get("roles", {})
    extra = {str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else {}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return msg.ROLE_PROMPTS | extra


def cli_names(settings: Settings) -> list[str]:
    return known_agents(settings)


def _cli_settings(settings: Settings, cli: str) -> dict[str, Any]:
    clink = _config(settings).get("clink", {})
    table = clink.get(cli, {}) if isinstance(clink, dict) else {}  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return dict(table) if isinstance(table, dict) else {}  # pyright: ignore[reportUnknownArgumentType]


def _file_refs(paths: tuple[str, ...]) -> str:
    lines: list[str] = []
    for raw in paths:
        path = expand_home(raw)
        try:
            st = path.stat()
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.st_mtime))
            lines.append(f"- {path} (modified {when}, {st.st_size} bytes)")
        except OSError:
            lines.append(f"- {path} (not found)")
    return "\n".join(lines)


def _prompt(req: ClinkRequest, history: str) -> str:
    parts: list[str] = []
    if history:
        parts.append("=== CONVERSATION HISTORY ===\n" + history)
    parts.append("=== USER REQUEST ===\n" + req.prompt)
    refs = _file_refs(req.absolute_file_paths + tuple(i for i in req.images if not i.startswith("data:")))
    if refs:
        parts.append("=== FILE REFERENCES ===\n" + refs)
    return "\n\n".join(parts)


def _bounded(text: str) -> tuple[str, dict[str, Any]]:
    """Zen's rule for long answers: a <SUMMARY> block if the CLI wrote one, else an excerpt."""
    if len(text) <= MAX_INLINE_CHARS:
        return text, {}
    summary = _SUMMARY.search(text)
    if summary:
        return summary.group(1).strip(), {"output_summarized": True, "output_total_chars": len(text)}
    excerpt = text[:EXCERPT_CHARS]
    note = (
        f"\n\n[The CLI's answer is {len(text)} characters; this is its first {EXCERPT_CHARS}. "
        "Read the rest with job_result(job_id=..., offset=...).]"
    )
    return excerpt + note, {"output_truncated": True, "output_total_chars": len(text)}


def _metadata(req: ClinkRequest, cli: str, ans: Answer, permission: str | None) -> dict[str, Any]:
    return {
        "tool_name": TOOL,
        "cli_name": cli,
        "role": req.role,
        "job_id": ans.job_id,
        "model_used": ans.model,
        "duration_seconds": ans.duration_s,
        "return_code": ans.exit_code,
        "permission": permission,
    }


async def clink(engine: Engine, req: ClinkRequest) -> Reply:
    """Run the CLI in its role as a job, wait for it, and answer with Zen's ToolOutput."""
    settings = engine.settings
    if not req.prompt.strip():
        raise msg.clink_empty_prompt()
    available = cli_names(settings)
    cli = req.cli_name or ("gemini" if "gemini" in available else available[0])
    if cli not in available:
        raise invalid(f"CLI '{cli}' is not configured. Available clients: {', '.join(available)}", "pick one of them")
    role_prompts = roles(settings)
    if req.role not in role_prompts:
        raise invalid(
            f"Role '{req.role}' not configured for CLI '{cli}'. Available roles: {', '.join(role_prompts)}",
            "use default, planner or codereviewer, or add the role under [zen.roles] in config.toml",
        )
    check_absolute(req.absolute_file_paths)
    check_absolute(req.images, images=True)
    cfg = _cli_settings(settings, cli)
    model = cli_model(cli, str(cfg["model"])) if cfg.get("model") else None
    permission = str(cfg["permission"]) if cfg.get("permission") else None
    with thread_store(settings) as threads:
        thread = load_thread(threads, req.continuation_id)
        threads.check_room(thread, 2)
    history = ""
    if thread is not None:
        chosen = select_history(thread.turns, HISTORY_BUDGET_TOKENS, estimate_tokens)
        history = "\n\n".join(
            f"[{t.role} via {t.tool}{' / ' + t.model if t.model else ''}]\n{t.content}" for t in chosen.turns
        )
    target = CliTarget(cli, model)
    job = cli_job_request(settings, target, _prompt(req, history), role_prompts[req.role], permission)
    job_id = await engine.submit_confirmed(job)  # a configured permission above the grant asks the person
    await wait_job(engine, job_id)
    ans = answer(engine, job_id)
    metadata = _metadata(req, cli, ans, permission or settings.default_permission)
    if not ans.ok:
        detail = (ans.error or {}).get("message", "")
        return Reply(
            {
                "status": "error",
                "content": f"CLI '{cli}' execution failed: {detail}",
                "content_type": "text",
                "metadata": metadata | {"error": ans.error},
                "continuation_offer": None,
            },
            is_error=True,
        )
    content, extra = _bounded(ans.text)
    with thread_store(settings) as threads:
        thread_id = thread_id_for(thread)
        saved = threads.add_turns(
            thread_id,
            [
                NewTurn(
                    "user", req.prompt, files=tuple(embeddable(req.absolute_file_paths, settings)[0]), job_id=job_id
                ),
                NewTurn(
                    "assistant",
                    ans.text,
                    provider=cli,
                    job_id=job_id,
                    metadata={"cli_name": cli, "cli_model": ans.model, "role": req.role},
                ),
            ],
            tool=TOOL,
            title=req.prompt,
        )
        cont = offer(threads, saved)
    return Reply(
        {
            "status": "continuation_available" if cont else "success",
            "content": content,
            "content_type": "text",
            "metadata": metadata | extra,
            "continuation_offer": cont,
        }
    )
