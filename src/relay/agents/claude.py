"""Claude Code: `claude -p PROMPT --output-format stream-json --verbose`, and its NDJSON stream."""

from __future__ import annotations

from typing import Any

from relay import events as ev
from relay.agents import values
from relay.agents.base import (
    AgentRequest,
    CliAdapter,
    HostContext,
    Invocation,
    TextTail,
    agent_failed,
    as_dict,
    as_int,
    as_list,
    child_env,
    parse_json_line,
    prompt_via_stdin,
    stderr_last_line,
    upstream_failed,
)
from relay.agents.values import option
from relay.errors import ErrorCode, RelayError, invalid
from relay.events import AgentResult, Event, Usage

NAME = "claude"
EXECUTABLE = "claude"
INSTALL_HINT = "npm i -g @anthropic-ai/claude-code, or set agents.claude.command in config.toml"

ENV_ALLOW = ("API_TIMEOUT_MS", "IS_SANDBOX", "DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "MCP_TOOL_TIMEOUT")
ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "CLAUDE_CODE_")

PERMISSION_MODES = {"read-only": "default", "edit": "acceptEdits", "full": "bypassPermissions"}
# relay's reasoning-effort levels claude does not name -> its nearest --effort (low, medium, high, xhigh, max).
EFFORTS = {"none": "low", "minimal": "low"}
MODEL_ENV = "ANTHROPIC_MODEL"


def build(request: AgentRequest, host: HostContext) -> Invocation:
    """The argv, env and cwd for one headless Claude Code run; every caller's value in a form claude reads as one."""
    if request.session_id and request.continue_latest:
        raise invalid(
            "session_id and continue_latest cannot be used together",
            "pass session_id to resume a given session, or continue_latest=true for the newest one in cwd",
        )
    argv: list[str] = [host.command, "-p"]
    # A prompt that looks like a flag, or is too long for argv, goes on stdin (claude reads it there).
    via_stdin = prompt_via_stdin(request.prompt)
    if not via_stdin:
        argv.append(request.prompt)
    argv += ["--output-format", "stream-json", "--verbose"]
    if request.model and not request.model_via_env:
        argv.append(option("--model", values.model(NAME, request.model)))
    if request.session_id:
        argv.append(option("--resume", values.resumable(request.session_id)))
    elif request.continue_latest:
        argv.append("-c")
    argv += ["--permission-mode", PERMISSION_MODES[request.permission]]
    if request.system_prompt:
        argv.append(option("--append-system-prompt", values.system_prompt(request.system_prompt)))
    if request.max_turns is not None:
        argv += ["--max-turns", str(int(request.max_turns))]
    if request.max_budget_usd is not None:
        argv += ["--max-budget-usd", f"{float(request.max_budget_usd):g}"]
    if request.reasoning_effort:
        effort = values.reasoning_effort(NAME, request.reasoning_effort)
        argv.append(option("--effort", EFFORTS.get(effort, effort)))
    argv += list(host.extra_args)
    env = child_env(host, ENV_ALLOW, ENV_PREFIXES)
    if request.model and request.model_via_env:
        env[MODEL_ENV] = values.model(NAME, request.model)
    if request.permission == "full" and host.is_root:
        # Claude refuses bypass mode as root unless told it runs in a sandbox.
        env["IS_SANDBOX"] = "1"
    return Invocation(argv=tuple(argv), env=env, cwd=request.cwd, stdin_text=request.prompt if via_stdin else None)


def _usage(raw: dict[str, Any]) -> Usage:
    cached = as_int(raw.get("cache_read_input_tokens")) + as_int(raw.get("cache_creation_input_tokens"))
    return Usage(input=as_int(raw.get("input_tokens")), output=as_int(raw.get("output_tokens")), cached=cached)


class ClaudeParser:
    """Reads stream-json; success is `result.is_error == false`, never `subtype`."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.model: str | None = None
        self.result: dict[str, Any] | None = None
        self.texts = TextTail()
        self.tools: dict[str, dict[str, Any]] = {}
        self.tool_order: list[str] = []

    def feed(self, line: str) -> list[Event]:
        obj = parse_json_line(line)
        if obj is None:
            return [Event(ev.LOG, {"text": line.rstrip("\n")})] if line.strip() else []
        kind = obj.get("type")
        out: list[Event] = []
        if isinstance(obj.get("session_id"), str) and self.session_id is None:
            self.session_id = obj["session_id"]
        if kind == "system" and obj.get("subtype") == "init":
            self.model = obj.get("model") if isinstance(obj.get("model"), str) else None
            out.append(Event(ev.SESSION_STARTED, {"session_id": self.session_id, "model": self.model}))
        elif kind == "system" and obj.get("subtype") == "api_retry":
            out.append(Event(ev.RETRY, {k: obj.get(k) for k in ("attempt", "error_status", "error") if k in obj}))
        elif kind == "assistant":
            message = as_dict(obj.get("message"))
            synthetic = message.get("model") == "<synthetic>"
            for block in as_list(message.get("content")):
                block = as_dict(block)
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    if synthetic:
                        out.append(Event(ev.WARNING, {"message": block["text"]}))
                    else:
                        self.texts.append(block["text"])
                        out.append(Event(ev.MESSAGE, {"text": block["text"]}))
                elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
                    out.append(Event(ev.REASONING, {"text": block["thinking"]}))
                elif block.get("type") == "tool_use":
                    tool_id = str(block.get("id", ""))
                    entry = {"id": tool_id, "name": block.get("name"), "input": block.get("input")}
                    self.tools[tool_id] = entry
                    self.tool_order.append(tool_id)
                    out.append(Event(ev.TOOL_STARTED, dict(entry)))
        elif kind == "user":
            for block in as_list(as_dict(obj.get("message")).get("content")):
                block = as_dict(block)
                if block.get("type") != "tool_result":
                    continue
                tool_id = str(block.get("tool_use_id", ""))
                ok = not bool(block.get("is_error"))
                content = block.get("content")
                if isinstance(content, list):
                    content = "".join(str(as_dict(c).get("text", "")) for c in content)  # pyright: ignore[reportUnknownVariableType]
                entry = self.tools.get(tool_id, {"id": tool_id, "name": None})
                entry["ok"] = ok
                out.append(
                    Event(
                        ev.TOOL_COMPLETED,
                        {"id": tool_id, "name": entry.get("name"), "ok": ok, "output": content},
                    )
                )
        elif kind == "result":
            self.result = obj
            usage = _usage(as_dict(obj.get("usage")))
            out.append(Event(ev.TURN_COMPLETED, {"usage": usage.to_dict(), "cost_usd": obj.get("total_cost_usd")}))
        return out

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult:
        tool_uses = tuple(self.tools[t] for t in self.tool_order)
        res = self.result
        if res is None:
            detail = stderr_last_line(stderr_tail) or "claude ended without a result line"
            return AgentResult(
                ok=False,
                session_id=self.session_id,
                model=self.model,
                text=self.texts.join(),
                tool_uses=tool_uses,
                error=_error_from_text(detail, None, exit_code),
            )
        text = res.get("result") if isinstance(res.get("result"), str) else self.texts.join()
        cost = res.get("total_cost_usd")
        denials = tuple(as_dict(d) for d in as_list(res.get("permission_denials")))
        model_usage = as_dict(res.get("modelUsage"))
        model = next(iter(model_usage), None) or self.model
        common: dict[str, Any] = {
            "session_id": res.get("session_id") if isinstance(res.get("session_id"), str) else self.session_id,
            "model": model,
            "usage": _usage(as_dict(res.get("usage"))),
            "cost_usd": float(cost) if isinstance(cost, int | float) else None,
            "num_turns": as_int(res.get("num_turns")),
            "tool_uses": tool_uses,
            "permission_denials": denials,
        }
        if res.get("is_error") is False:
            # A valid result followed by a non-zero exit is still the agent's answer.
            return AgentResult(ok=True, text=str(text), **common)
        errors = [str(e) for e in as_list(res.get("errors"))]
        detail = str(text or "; ".join(errors) or stderr_last_line(stderr_tail) or "claude reported an error")
        if res.get("subtype") == "error_max_turns":
            err = RelayError(ErrorCode.MAX_TURNS, detail, "raise max_turns, or resume the session to let it continue")
        else:
            status = res.get("api_error_status")
            err = _error_from_text(detail, status if isinstance(status, int) else None, exit_code, stderr_tail)
        return AgentResult(ok=False, text=str(text or ""), error=err, **common)


def _error_from_text(detail: str, status: int | None, exit_code: int | None, stderr_tail: str = "") -> RelayError:
    low = (detail + "\n" + stderr_tail).lower()
    if "not logged in" in low or "/login" in low:
        return RelayError(
            ErrorCode.AUTH_MISSING, detail, "set ANTHROPIC_API_KEY for relay, or run `claude /login` once"
        )
    if status in (401, 403) or "failed to authenticate" in low or "invalid api key" in low:
        return RelayError(ErrorCode.AUTH_INVALID, detail, "check ANTHROPIC_API_KEY (or the claude login) and retry")
    if status == 429 or "rate limit" in low:
        return RelayError(
            ErrorCode.RATE_LIMITED,
            detail,
            "the provider is rate limiting: wait and retry, or use another model",
        )
    if "no conversation found" in low:
        return RelayError(
            ErrorCode.SESSION_NOT_FOUND,
            detail,
            "resume from the cwd the session started in, or start a new session",
        )
    if status == 404 or "selected model" in low:
        return RelayError(ErrorCode.MODEL_NOT_FOUND, detail, "pick a model from status or the model list")
    if status is not None or "api error" in low or "timed out" in low:
        return upstream_failed(detail)
    return agent_failed(NAME, detail, exit_code)


class ClaudeAdapter(CliAdapter):
    def __init__(self) -> None:
        super().__init__(NAME, EXECUTABLE, INSTALL_HINT, build, ClaudeParser)
