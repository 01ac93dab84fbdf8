"""Codex CLI: `codex exec --json PROMPT`, and its JSONL thread/turn/item stream."""

from __future__ import annotations

import json
import re
from typing import Any

from relay import events as ev
from relay.agents import values
from relay.agents.base import (
    AgentRequest,
    CliAdapter,
    HostContext,
    Invocation,
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

NAME = "codex"
EXECUTABLE = "codex"
INSTALL_HINT = "npm i -g @openai/codex, or set agents.codex.command in config.toml"

# OPENAI_API_KEY is codex's default key; a custom provider's `env_key` must be added via agent env.
ENV_ALLOW = ("RUST_LOG",)
ENV_PREFIXES = ("CODEX_", "OPENAI_")

SANDBOX_MODES = {"read-only": "read-only", "edit": "workspace-write", "full": "danger-full-access"}
# relay's reasoning-effort levels codex does not name -> its nearest model_reasoning_effort.
EFFORTS = {"max": "xhigh"}

# Tool-like item types and the tool name relay reports for them.
_TOOL_ITEMS = {
    "command_execution": "shell",
    "file_change": "apply_patch",
    "mcp_tool_call": "mcp",
    "web_search": "web_search",
}


def _toml_string(value: str) -> str:
    """A TOML basic string for a `-c key=value` override."""
    return json.dumps(value)


def build(request: AgentRequest, host: HostContext) -> Invocation:
    """The argv, env and cwd for one `codex exec --json` run (new, resumed, or continuing the latest).

    Every caller's value is one argv string codex cannot misread: `--opt=value`, and `--` before the
    positionals (a session id, the prompt), so neither is taken for an option or a subcommand (a prompt
    `review` or `help` would otherwise run `codex exec review` / print the help)."""
    if request.session_id and request.continue_latest:
        raise invalid(
            "session_id and continue_latest cannot be used together",
            "pass session_id to resume a given session, or continue_latest=true for the newest one in cwd",
        )
    resuming = bool(request.session_id or request.continue_latest)
    sandbox = SANDBOX_MODES[request.permission]
    argv: list[str] = [host.command, "exec", "--json"]
    if resuming:
        # `exec resume` has no -s/-C: the sandbox comes from a config override, the cwd from the process.
        argv += ["--skip-git-repo-check", option("--config", f"sandbox_mode={_toml_string(sandbox)}")]
    else:
        argv += [option("--cd", request.cwd), "--skip-git-repo-check", "-s", sandbox]
    # Codex does not restore the model on resume, so it is always re-passed.
    if request.model:
        argv.append(option("--model", values.model(NAME, request.model)))
    if request.reasoning_effort:
        level = values.reasoning_effort(NAME, request.reasoning_effort)
        effort = EFFORTS.get(level, level)
        argv.append(option("--config", f"model_reasoning_effort={_toml_string(effort)}"))
    argv += list(host.extra_args)
    if request.session_id:
        argv += ["resume", "--", values.resumable(request.session_id)]
    elif request.continue_latest:
        argv += ["resume", "--last", "--"]
    else:
        argv.append("--")
    # A prompt that looks like a flag, or is too long for argv, goes on stdin (codex reads `-` from there).
    via_stdin = prompt_via_stdin(request.prompt)
    argv.append("-" if via_stdin else request.prompt)
    env = child_env(host, ENV_ALLOW, ENV_PREFIXES)
    return Invocation(argv=tuple(argv), env=env, cwd=request.cwd, stdin_text=request.prompt if via_stdin else None)


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage(
        input=as_int(raw.get("input_tokens")),
        output=as_int(raw.get("output_tokens")),
        cached=as_int(raw.get("cached_input_tokens")),
    )


class CodexParser:
    """Reads `exec --json`; a run succeeds on `turn.completed`, fails on `turn.failed` or a non-zero exit."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.last_message: str | None = None
        self.usage = Usage()
        self.completed = False
        self.failure: str | None = None
        self.last_error: str | None = None
        self.tools: dict[str, dict[str, Any]] = {}
        self.tool_order: list[str] = []
        self.files_changed: list[str] = []

    def feed(self, line: str) -> list[Event]:
        obj = parse_json_line(line)
        if obj is None:
            text = line.rstrip("\r\n")
            return [Event(ev.LOG, {"text": text})] if text.strip() else []
        kind = obj.get("type")
        if kind == "thread.started":
            if self.session_id is None and isinstance(obj.get("thread_id"), str):
                self.session_id = obj["thread_id"]
            return [Event(ev.SESSION_STARTED, {"session_id": self.session_id, "model": None})]
        if kind in ("item.started", "item.updated", "item.completed"):
            return self._item(str(kind), as_dict(obj.get("item")))
        if kind == "turn.completed":
            self.completed = True
            usage = _usage(as_dict(obj.get("usage")))
            self.usage = self.usage + usage
            return [Event(ev.TURN_COMPLETED, {"usage": usage.to_dict()})]
        if kind == "turn.failed":
            message = str(as_dict(obj.get("error")).get("message") or self.last_error or "codex turn failed")
            self.failure = message
            return [Event(ev.TURN_FAILED, {"message": message})]
        if kind == "error":
            # Not fatal by itself: codex also uses it for reconnect notices; turn.failed decides.
            message = str(obj.get("message", ""))
            self.last_error = message
            if message.startswith("Reconnecting"):
                return [Event(ev.RETRY, {"message": message})]
            return [Event(ev.WARNING, {"message": message})]
        return []

    def _item(self, kind: str, item: dict[str, Any]) -> list[Event]:
        item_type = item.get("type")
        item_id = str(item.get("id", ""))
        done = kind == "item.completed"
        if item_type == "agent_message" and done:
            text = str(item.get("text", ""))
            self.last_message = text
            return [Event(ev.MESSAGE, {"text": text})]
        if item_type == "reasoning" and done:
            return [Event(ev.REASONING, {"text": str(item.get("text", ""))})]
        if item_type == "error" and done:
            return [Event(ev.WARNING, {"message": str(item.get("message", ""))})]
        if not isinstance(item_type, str) or item_type not in _TOOL_ITEMS:
            return []
        out: list[Event] = []
        if item_id not in self.tools:
            entry: dict[str, Any] = {"id": item_id, "name": _tool_name(item), "input": _tool_input(item)}
            self.tools[item_id] = entry
            self.tool_order.append(item_id)
            out.append(Event(ev.TOOL_STARTED, dict(entry)))
        if done:
            entry = self.tools[item_id]
            ok = item.get("status") == "completed"
            entry["ok"] = ok
            if item_type == "file_change" and ok:
                for change in as_list(item.get("changes")):
                    path = as_dict(change).get("path")
                    if isinstance(path, str) and path not in self.files_changed:
                        self.files_changed.append(path)
            output = item.get("aggregated_output") if item_type == "command_execution" else item.get("changes")
            out.append(Event(ev.TOOL_COMPLETED, {"id": item_id, "name": entry["name"], "ok": ok, "output": output}))
        return out

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult:
        common: dict[str, Any] = {
            "session_id": self.session_id,
            "usage": self.usage,
            "tool_uses": tuple(self.tools[t] for t in self.tool_order),
            "files_changed": tuple(self.files_changed),
        }
        text = self.last_message or ""
        if self.completed and self.failure is None and exit_code in (0, None):
            return AgentResult(ok=True, text=text, **common)
        if self.failure is not None:
            err = error_from_text(self.failure, exit_code)
        else:
            detail = (
                _stderr_error(stderr_tail)
                or self.last_error
                or (
                    f"codex exited with code {exit_code}"
                    if self.completed
                    else "codex ended without finishing its turn"
                )
            )
            err = error_from_text(detail, exit_code, stderr_tail)
        return AgentResult(ok=False, text=text, error=err, **common)


def _tool_name(item: dict[str, Any]) -> str:
    item_type = str(item.get("type"))
    if item_type == "mcp_tool_call":
        return f"{item.get('server', 'mcp')}.{item.get('tool', '?')}"
    return _TOOL_ITEMS[item_type]


def _tool_input(item: dict[str, Any]) -> dict[str, Any]:
    item_type = item.get("type")
    if item_type == "command_execution":
        return {"command": item.get("command")}
    if item_type == "file_change":
        return {"changes": item.get("changes")}
    if item_type == "web_search":
        return {"query": item.get("query")}
    return {"arguments": item.get("arguments")}


def _stderr_error(stderr_tail: str) -> str:
    """The line of codex's stderr that explains a failure (it may be followed by a backtrace)."""
    for raw in stderr_tail.splitlines():
        line = raw.strip()
        low = line.lower()
        if "no rollout found" in low or "not inside a trusted directory" in low or line.startswith("error:"):
            return line
    return stderr_last_line(stderr_tail)


def _status(low: str, pattern: str) -> bool:
    """Whether an HTTP status matching `pattern` appears as a word (not inside a port or id)."""
    return re.search(rf"(?<![\w.:/-]){pattern}(?![\w.:/-])", low) is not None


def error_from_text(detail: str, exit_code: int | None, stderr_tail: str = "") -> RelayError:
    """The most specific relay error for a codex failure message (from turn.failed or stderr)."""
    low = (detail + "\n" + stderr_tail).lower()
    if "missing environment variable" in low:
        return RelayError(
            ErrorCode.AUTH_MISSING,
            detail,
            "set the variable named in the message for relay (add it to [agents.codex].env in config.toml), "
            "or run `codex login` once",
        )
    if _status(low, "401") or "unauthorized" in low or "incorrect api key" in low or "invalid_api_key" in low:
        return RelayError(
            ErrorCode.AUTH_INVALID,
            detail,
            "check OPENAI_API_KEY (or the provider's env_key) or run `codex login`",
        )
    if _status(low, "429") or "too many requests" in low or "rate limit" in low or "retry limit" in low:
        return RelayError(
            ErrorCode.RATE_LIMITED,
            detail,
            "the provider is rate limiting: wait and retry, or use another model",
        )
    if "no rollout found" in low:
        return RelayError(
            ErrorCode.SESSION_NOT_FOUND,
            detail,
            "resume from the cwd the session started in, or start a new session",
        )
    if "not inside a trusted directory" in low:
        return RelayError(
            ErrorCode.INVALID_ARGUMENT,
            detail,
            "use a cwd inside a git repository, or make agents.codex.command forward --skip-git-repo-check",
        )
    if "model" in low and ("does not exist" in low or "not found" in low or "model_not_found" in low):
        return RelayError(ErrorCode.MODEL_NOT_FOUND, detail, "pick a model from the codex model catalog, e.g. gpt-5.5")
    if _status(low, r"5\d\d") or any(
        s in low for s in ("high demand", "stream disconnected", "reconnecting", "internal server error", "overloaded")
    ):
        return upstream_failed(detail)
    if "unexpected argument" in low or exit_code == 2:
        return RelayError(
            ErrorCode.CONFIG_INVALID,
            detail,
            "check agents.codex.extra_args and the codex version (relay targets 0.169)",
        )
    return agent_failed(NAME, detail, exit_code)


class CodexAdapter(CliAdapter):
    def __init__(self) -> None:
        super().__init__(NAME, EXECUTABLE, INSTALL_HINT, build, CodexParser)
