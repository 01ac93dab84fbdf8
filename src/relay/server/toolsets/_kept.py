"""A downstream result too large for one reply, kept whole as a finished job's output so `job_result` pages it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relay.events import AgentResult, Event
from relay.gateway.bounded import Bounded
from relay.jobs.engine import Engine

# The agent name the kept results' jobs carry (job_list shows them as such).
AGENT = "gateway"
# Writing the kept text to the job's files is local disk work: this bounds it generously.
KEEP_TIMEOUT_S = 120.0


async def keep_result(engine: Engine, server: str, tool: str, bounded: Bounded) -> dict[str, Any]:
    """Record the whole result as a completed job; returns what the reply says about the rest and how to page it.

    A result kept in a file (too large to hold) becomes the job's result file without being read whole.
    """
    text, path = bounded.full_text or "", bounded.full_path
    returned = sum(len(getattr(block, "text", "") or "") for block in bounded.result.content)

    async def task(emit: Callable[[Event], None]) -> AgentResult:
        return AgentResult(ok=True, text=text, text_file=path)

    request = {"tool": "call_tool", "prompt": f"result of {server}.{tool}", "server": server, "tool_name": tool}
    job_id = engine.submit_task(AGENT, request, task, timeout_s=KEEP_TIMEOUT_S)
    await engine.wait_one(job_id, KEEP_TIMEOUT_S)
    return {
        "returned_chars": returned,
        "total_chars": bounded.total_chars,
        "job_id": job_id,
        "next_offset": returned,
        "how": f"the result was cut to its first {returned} of {bounded.total_chars} characters; "
        f"job_result(job_id='{job_id}', offset={returned}) returns the next page "
        "(add the page's length to offset until next_offset is null)",
    }
