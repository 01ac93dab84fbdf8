"""The ACP driver's JSON lines (relay.agents.acp.driver) into relay's events and the job's result. Pure.

What the transcript holds: the answer (agent_message_chunk), reasoning (agent_thought_chunk), the plan,
each tool call with its status and output, the files its diffs touch, every permission request and its
answer, every steering message delivered, and the driver's notices. The session's other updates
(available commands, modes, config options, session info) stay in the job's raw stdout only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from relay import events as ev
from relay.agents.base import (
    TextTail,
    agent_failed,
    as_dict,
    as_int,
    as_list,
    parse_json_line,
    stderr_last_line,
    upstream_failed,
)
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult, Event, Usage

# Event types of ACP jobs beside relay's own (relay.events).
PLAN = "plan"  # data: entries [{content, status, priority}]
PERMISSION_REQUEST = "permission_request"  # data: id, session_id, tool_call, options
PERMISSION_ANSWER = "permission_answer"  # data: id, outcome, option_id, by
STEER = "steer"  # data: id, text (a steering message the driver delivered to the session)

# Stop reasons that end a turn as the agent meant it to (the rest are failures or a cancel).
DONE_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests"})
# Gemini reports a mode change as an answer chunk: not part of the answer.
MODE_NOTE = re.compile(r"^\[MODE_UPDATE\]")

ErrorFor = Callable[[str, int | None, str], RelayError]


def _content_text(content: Any) -> str:
    """The text of an ACP content block, or of a tool call's content list."""
    if isinstance(content, list):
        return "".join(_content_text(item) for item in content)  # pyright: ignore[reportUnknownVariableType]
    block = as_dict(content)
    if block.get("type") == "content":
        return _content_text(block.get("content"))
    if block.get("type") == "text":
        return str(block.get("text", ""))
    return ""


# What an agent's ACP error says about its model API, by the words the adapters pass on (codex-acp:
# `codex_error_info`; claude-agent-acp: the API's status and error type).
_UPSTREAM = re.compile(r"internal_server_error|high demand|overloaded|api error|\b50[0-4]\b|server_error", re.I)
_RATE = re.compile(r"\b429\b|rate.?limit|usage_limit|quota", re.I)
_AUTH = re.compile(r"\b401\b|\b403\b|unauthori[sz]ed|authentication|invalid.api.key|api key", re.I)


def _known_failure(message: str) -> RelayError | None:
    if _AUTH.search(message):
        return RelayError(ErrorCode.AUTH_INVALID, message, "check the agent's API key (or its login) and retry")
    if _RATE.search(message):
        return RelayError(ErrorCode.RATE_LIMITED, message, "the provider is rate limiting: wait and retry")
    if _UPSTREAM.search(message):
        return upstream_failed(message)
    return None


class AcpParser:
    """Reads the driver's lines; the answer is every agent message chunk, the verdict the `result` line."""

    def __init__(self, agent: str, error_for: ErrorFor | None = None) -> None:
        self.agent = agent
        self.error_for = error_for
        self.session_id: str | None = None
        self.answer = TextTail()
        self.turn_has_text = False
        self.tools: dict[str, dict[str, Any]] = {}
        self.tool_order: list[str] = []
        self.files: list[str] = []
        self.requests: dict[int, dict[str, Any]] = {}
        self.denials: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None
        self.errors: list[str] = []
        self.cost_usd: float | None = None

    def feed(self, line: str) -> list[Event]:
        obj = parse_json_line(line)
        if obj is None:
            text = line.rstrip("\r\n")
            return [Event(ev.LOG, {"text": text})] if text.strip() else []
        kind = obj.get("type")
        if kind == "update":
            return self._update(as_dict(as_dict(obj.get("update")).get("update")))
        if kind == "session":
            if isinstance(obj.get("sessionId"), str):
                self.session_id = obj["sessionId"]
            return [Event(ev.SESSION_STARTED, {"session_id": self.session_id, "model": None, "mode": obj.get("mode")})]
        if kind == "permission_request":
            return self._permission_request(obj)
        if kind == "permission_answer":
            return self._permission_answer(obj)
        if kind == "sent":
            self.turn_has_text = False
            return [Event(STEER, {"id": obj.get("id"), "text": obj.get("text")})]
        if kind == "notice":
            return [Event(ev.WARNING, {"message": str(obj.get("message", ""))})]
        if kind == "error":
            message = str(obj.get("message") or "the ACP driver failed")
            self.errors.append(message)
            return [Event(ev.TURN_FAILED, {"message": message})]
        if kind == "result":
            self.result = obj
            if self.session_id is None and isinstance(obj.get("sessionId"), str):
                self.session_id = obj["sessionId"]
            reason = str(obj.get("stopReason"))
            if reason in DONE_REASONS:
                return [Event(ev.TURN_COMPLETED, {"usage": self._usage().to_dict(), "stop_reason": reason})]
            return [Event(ev.TURN_FAILED, {"message": f"the turn ended: {reason}", "stop_reason": reason})]
        return []

    def _update(self, update: dict[str, Any]) -> list[Event]:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _content_text(update.get("content"))
            if not text:
                return []
            if MODE_NOTE.match(text):
                return [Event(ev.LOG, {"text": text})]
            if not self.turn_has_text and self.answer:
                self.answer.append("")  # a steered turn's answer starts a new paragraph
                self.answer.append(text)
            else:
                self.answer.extend_last(text)
            self.turn_has_text = True
            return [Event(ev.MESSAGE_DELTA, {"text": text})]
        if kind == "agent_thought_chunk":
            text = _content_text(update.get("content"))
            return [Event(ev.REASONING, {"text": text})] if text else []
        if kind == "plan":
            entries = [
                {"content": e.get("content"), "status": e.get("status"), "priority": e.get("priority")}
                for e in map(as_dict, as_list(update.get("entries")))
            ]
            return [Event(PLAN, {"entries": entries})]
        if kind in ("tool_call", "tool_call_update"):
            return self._tool(update, started=kind == "tool_call")
        if kind == "usage_update":
            amount = as_dict(update.get("cost")).get("amount")
            if isinstance(amount, int | float) and not isinstance(amount, bool):
                self.cost_usd = float(amount)
        return []

    def _tool(self, update: dict[str, Any], started: bool) -> list[Event]:
        tool_id = str(update.get("toolCallId", ""))
        entry = self.tools.get(tool_id)
        fresh = entry is None
        if entry is None:
            entry = dict[str, Any](id=tool_id, name=None, kind=None, status=None, input=None)
            self.tools[tool_id] = entry
            self.tool_order.append(tool_id)
        was_done = entry.get("status") in ("completed", "failed")
        for key, field_ in (("name", "title"), ("kind", "kind"), ("status", "status"), ("input", "rawInput")):
            value = update.get(field_)
            if value not in (None, {}, []):
                entry[key] = value
        for item in map(as_dict, as_list(update.get("content"))):
            path = item.get("path")
            if item.get("type") == "diff" and isinstance(path, str) and path not in self.files:
                self.files.append(path)
        found: list[Event] = []
        if started or fresh:
            found.append(Event(ev.TOOL_STARTED, {k: entry[k] for k in ("id", "name", "kind", "input")}))
        status = entry.get("status")
        if status in ("completed", "failed") and not was_done:
            ok = status == "completed"
            entry["ok"] = ok
            output = update.get("rawOutput")
            if output is None or (isinstance(output, str) and not output):
                output = _content_text(update.get("content")) or None
            found.append(
                Event(ev.TOOL_COMPLETED, {"id": tool_id, "name": entry.get("name"), "ok": ok, "output": output})
            )
        return found

    def _permission_request(self, obj: dict[str, Any]) -> list[Event]:
        rid = as_int(obj.get("id"))
        tool_call = as_dict(obj.get("toolCall"))
        options = [as_dict(o) for o in as_list(obj.get("options"))]
        self.requests[rid] = {"tool_call": tool_call, "options": options}
        data = {"id": rid, "session_id": obj.get("sessionId"), "tool_call": tool_call, "options": options}
        if isinstance(obj.get("run"), str) and obj["run"]:  # the driver run it came from (relay.agents.acp.inbox)
            data["run"] = obj["run"]
        return [Event(PERMISSION_REQUEST, data)]

    def _permission_answer(self, obj: dict[str, Any]) -> list[Event]:
        rid = as_int(obj.get("id"))
        request = self.requests.get(rid, {})
        option_id = obj.get("optionId")
        kinds = {o.get("optionId"): o.get("kind") for o in request.get("options", [])}
        denied = obj.get("outcome") != "selected" or str(kinds.get(option_id, "")).startswith("reject")
        if denied:
            tool_call = as_dict(request.get("tool_call"))
            self.denials.append(
                {
                    "tool_name": tool_call.get("title"),
                    "tool_use_id": tool_call.get("toolCallId"),
                    "tool_input": tool_call.get("rawInput"),
                    "message": f"denied ({obj.get('by') or 'inbox'})",
                }
            )
        data = {"id": rid, "outcome": obj.get("outcome"), "option_id": option_id, "by": obj.get("by")}
        return [Event(PERMISSION_ANSWER, data)]

    def _usage(self) -> Usage:
        usage = as_dict((self.result or {}).get("usage"))
        return Usage(
            input=as_int(usage.get("inputTokens")),
            output=as_int(usage.get("outputTokens")),
            cached=as_int(usage.get("cachedReadTokens")),
        )

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult:
        res = self.result or {}
        reason = res.get("stopReason")
        common: dict[str, Any] = {
            "session_id": self.session_id,
            "usage": self._usage(),
            "cost_usd": self.cost_usd,
            "tool_uses": tuple(self.tools[t] for t in self.tool_order),
            "permission_denials": tuple(self.denials),
            "files_changed": tuple(self.files),
        }
        text = self.answer.join("\n")
        if res and reason in DONE_REASONS and exit_code in (0, None):
            return AgentResult(ok=True, text=text, **common)
        if reason == "cancelled":
            error = RelayError(ErrorCode.CANCELLED, "the agent's turn was cancelled", "delegate again to carry on")
        elif reason == "refusal":
            error = RelayError(
                ErrorCode.AGENT_FAILED, f"{self.agent} refused to go on", "rephrase the prompt or use another agent"
            )
        else:
            message = (
                "; ".join(self.errors)
                or stderr_last_line(stderr_tail)
                or f"the ACP driver of {self.agent} ended without a result (exit code {exit_code})"
            )
            error = self.error_for(message, exit_code, stderr_tail) if self.error_for else None
            error = error or _known_failure(message) or agent_failed(self.agent, message, exit_code)
        return AgentResult(ok=False, text=text, error=error, **common)
