"""GitHub Copilot CLI: `copilot -p PROMPT --output-format json`, and its JSONL session/tool stream."""

from __future__ import annotations

import re
import uuid
from typing import Any

from relay import events as ev
from relay.agents import values
from relay.agents.base import (
    MAX_ARGV_PROMPT_BYTES,
    UPSTREAM_HINT,
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
    stderr_last_line,
)
from relay.agents.values import option
from relay.errors import ErrorCode, RelayError, invalid
from relay.events import AgentResult, Event

NAME = "copilot"
EXECUTABLE = "copilot"
INSTALL_HINT = "npm i -g @github/copilot, or set agents.copilot.command in config.toml"

# GitHub tokens only under the names copilot reads; COPILOT_GITHUB_TOKEN is covered by the prefix.
ENV_ALLOW = ("GH_TOKEN", "GITHUB_TOKEN")
ENV_PREFIXES = ("COPILOT_",)

PERMISSION_FLAGS: dict[str, tuple[str, ...]] = {
    "read-only": ("--deny-tool", "shell", "--deny-tool", "write"),
    "edit": ("--allow-tool", "write"),
    "full": ("--allow-all-tools",),
}

# relay's reasoning-effort levels copilot does not name -> its nearest --reasoning-effort (none ... max).
EFFORTS = {"minimal": "low"}

# Copilot prints its session id only in the last line; relay names new sessions itself, from the job id.
_SESSION_NAMESPACE = uuid.UUID("6f1c3a52-8d0e-4c55-9d7e-2b7a1e0c4f11")


def session_id_for(job_id: str) -> str:
    """The session id relay gives a new copilot session: a uuid derived from the job id (build stays pure)."""
    return str(uuid.uuid5(_SESSION_NAMESPACE, job_id))


def build(request: AgentRequest, host: HostContext) -> Invocation:
    """The argv, env and cwd for one headless Copilot CLI run."""
    if request.session_id and request.continue_latest:
        raise invalid(
            "session_id and continue_latest cannot be used together",
            "pass session_id to resume a given session, or continue_latest=true for the newest one",
        )
    if len(request.prompt.encode()) > MAX_ARGV_PROMPT_BYTES:
        raise invalid(
            f"the prompt is longer than copilot accepts on its command line ({MAX_ARGV_PROMPT_BYTES} bytes)",
            "write the long context to a file in cwd and ask copilot to read it",
        )
    # A leading space keeps a prompt that starts with '-' from being read as a flag.
    prompt = " " + request.prompt if request.prompt.startswith("-") else request.prompt
    argv: list[str] = [host.command, "--no-auto-update", "-p", prompt, "-s", "--output-format", "json"]
    argv += ["-C", request.cwd]
    if request.model:
        argv.append(option("--model", values.model(NAME, request.model)))
    argv += PERMISSION_FLAGS[request.permission]
    if request.reasoning_effort:
        effort = values.reasoning_effort(NAME, request.reasoning_effort)
        argv.append(option("--reasoning-effort", EFFORTS.get(effort, effort)))
    if request.session_id:
        argv.append(option("--resume", values.resumable(request.session_id)))
    elif request.continue_latest:
        argv.append("--continue")
    elif host.job_id:
        argv.append(f"--session-id={session_id_for(host.job_id)}")
    argv += list(host.extra_args)
    env = child_env(host, ENV_ALLOW, ENV_PREFIXES)
    return Invocation(argv=tuple(argv), env=env, cwd=request.cwd)


class CopilotParser:
    """Reads `--output-format json`: the answer is the last non-empty assistant.message."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.model: str | None = None
        self.text = ""
        self.turns = 0
        self.result: dict[str, Any] | None = None
        self.session_error: dict[str, Any] | None = None
        self.aborted: str | None = None
        self.last_failure: dict[str, Any] = {}
        self.tools: dict[str, dict[str, Any]] = {}
        self.tool_order: list[str] = []
        self.denials: list[dict[str, Any]] = []

    def feed(self, line: str) -> list[Event]:
        obj = parse_json_line(line)
        if obj is None:
            text = line.rstrip("\r\n")
            return [Event(ev.LOG, {"text": text})] if text.strip() else []
        kind = obj.get("type")
        data = as_dict(obj.get("data"))
        if isinstance(data.get("model"), str) and kind in ("session.tools_updated", "assistant.message"):
            self.model = data["model"]
        if kind == "assistant.turn_start":
            self.turns += 1
        elif kind == "assistant.message_delta":
            return [Event(ev.MESSAGE_DELTA, {"text": str(data.get("deltaContent", ""))})]
        elif kind == "assistant.message":
            content = data.get("content")
            if isinstance(content, str) and content:
                self.text = content
                return [Event(ev.MESSAGE, {"text": content})]
        elif kind == "assistant.reasoning":
            return [Event(ev.REASONING, {"text": str(data.get("content", ""))})]
        elif kind == "tool.execution_start":
            tool_id = str(data.get("toolCallId", ""))
            entry: dict[str, Any] = {
                "id": tool_id,
                "name": data.get("toolName"),
                "input": data.get("arguments"),
            }
            self.tools[tool_id] = entry
            self.tool_order.append(tool_id)
            return [Event(ev.TOOL_STARTED, dict(entry))]
        elif kind == "tool.execution_complete":
            return self._tool_complete(data)
        elif kind == "model.call_failure":
            self.last_failure = data
        elif kind == "session.info" and data.get("infoType") == "model_retry":
            failure = self.last_failure
            retry = {"attempt": as_int(failure.get("retryAttempt")) + 1, "status": failure.get("statusCode")}
            return [Event(ev.RETRY, {**retry, "message": data.get("message")})]
        elif kind == "session.warning":
            return [Event(ev.WARNING, {"message": data.get("message")})]
        elif kind == "session.error":
            self.session_error = data
            return [Event(ev.TURN_FAILED, {"message": str(data.get("message", ""))})]
        elif kind == "abort":
            self.aborted = str(data.get("reason") or "aborted")
            return [Event(ev.WARNING, {"message": f"copilot aborted the run ({self.aborted})"})]
        elif kind == "result":
            self.result = obj
            out: list[Event] = []
            if isinstance(obj.get("sessionId"), str) and self.session_id is None:
                self.session_id = obj["sessionId"]
                out.append(Event(ev.SESSION_STARTED, {"session_id": self.session_id, "model": self.model}))
            if obj.get("exitCode") == 0 and self.session_error is None:
                out.append(Event(ev.TURN_COMPLETED, {"usage": {"input": 0, "output": 0, "cached": 0}}))
            return out
        return []

    def _tool_complete(self, data: dict[str, Any]) -> list[Event]:
        tool_id = str(data.get("toolCallId", ""))
        entry = self.tools.setdefault(tool_id, {"id": tool_id, "name": None, "input": None})
        ok = data.get("success") is True
        entry["ok"] = ok
        error = as_dict(data.get("error"))
        if error.get("code") == "denied":
            self.denials.append(
                {
                    "tool_name": entry.get("name"),
                    "tool_use_id": tool_id,
                    "tool_input": entry.get("input"),
                    "message": error.get("message"),
                }
            )
        output = as_dict(data.get("result")).get("content") if ok else error.get("message")
        return [Event(ev.TOOL_COMPLETED, {"id": tool_id, "name": entry.get("name"), "ok": ok, "output": output})]

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult:
        res = self.result or {}
        changes = as_dict(as_dict(res.get("usage")).get("codeChanges"))
        common: dict[str, Any] = {
            "session_id": self.session_id,
            "model": self.model,
            "num_turns": self.turns or None,
            "tool_uses": tuple(self.tools[t] for t in self.tool_order),
            "permission_denials": tuple(self.denials),
            "files_changed": tuple(str(f) for f in as_list(changes.get("filesModified"))),
        }
        if self.session_error is not None:
            err = _session_error(self.session_error)
        elif self.aborted is not None:
            # Copilot reports exitCode 0 after SIGTERM; the answer is incomplete whatever it says.
            err = RelayError(
                ErrorCode.CANCELLED,
                f"copilot aborted the run ({self.aborted})",
                "resume the session to let it continue, or run the task again",
            )
        elif res and as_int(res.get("exitCode")) == 0 and exit_code in (0, None):
            return AgentResult(ok=True, text=self.text, **common)
        elif res:
            detail = stderr_last_line(stderr_tail) or f"copilot reported exit code {res.get('exitCode')}"
            err = error_from_stderr(detail, exit_code, stderr_tail)
        else:
            detail = _stderr_error_line(stderr_tail) or "copilot ended without a result line"
            err = error_from_stderr(detail, exit_code, stderr_tail)
        return AgentResult(ok=False, text=self.text, error=err, **common)


def _session_error(data: dict[str, Any]) -> RelayError:
    message = str(data.get("message") or "copilot reported an error")
    kind = data.get("errorType")
    status = data.get("statusCode")
    low = message.lower()
    if kind == "authentication" or status in (401, 403):
        return RelayError(
            ErrorCode.AUTH_INVALID,
            message,
            "check the provider key (COPILOT_PROVIDER_API_KEY) or the GitHub token copilot uses, then retry",
        )
    if kind == "rate_limit" or status == 429:
        return RelayError(
            ErrorCode.RATE_LIMITED,
            message,
            "the provider is rate limiting: wait and retry, or use another model",
        )
    if status == 404 or ("model" in low and ("does not exist" in low or "not found" in low)):
        return RelayError(
            ErrorCode.MODEL_NOT_FOUND, message, "pick a model the provider serves (--model / COPILOT_MODEL)"
        )
    suffix = f" (HTTP {status})" if isinstance(status, int) and f"{status}" not in message else ""
    return RelayError(ErrorCode.UPSTREAM_ERROR, message + suffix, UPSTREAM_HINT)


def _stderr_error_line(stderr_tail: str) -> str:
    """The first meaningful stderr line: copilot puts its error first, then advice."""
    for raw in stderr_tail.splitlines():
        line = raw.strip()
        if line:
            return re.sub(r"^Error:\s*", "", line)
    return ""


def error_from_stderr(detail: str, exit_code: int | None, stderr_tail: str) -> RelayError:
    """The most specific relay error for a copilot failure that printed no JSON (login, config, resume)."""
    low = (detail + "\n" + stderr_tail).lower()
    if "no authentication information found" in low:
        return RelayError(
            ErrorCode.AUTH_MISSING,
            detail,
            "log in by running `copilot` once (/login), set COPILOT_GITHUB_TOKEN for relay, "
            "or use BYOK with COPILOT_PROVIDER_BASE_URL and COPILOT_MODEL",
        )
    if "classic personal access tokens" in low:
        return RelayError(
            ErrorCode.AUTH_INVALID,
            detail,
            "use a fine-grained token or an OAuth login instead of a ghp_ token",
        )
    if "byok providers require an explicit model" in low:
        return RelayError(
            ErrorCode.CONFIG_INVALID, detail, "pass a model, or set COPILOT_MODEL in [agents.copilot].env"
        )
    if "offline mode requires" in low:
        return RelayError(
            ErrorCode.CONFIG_INVALID,
            detail,
            "set COPILOT_PROVIDER_BASE_URL in [agents.copilot].env, or unset COPILOT_OFFLINE",
        )
    if "no session, task, or name matched" in low:
        return RelayError(
            ErrorCode.SESSION_NOT_FOUND,
            detail,
            "check the session id, or start a new session without session_id",
        )
    if "authentication failed" in low:
        return RelayError(
            ErrorCode.AUTH_INVALID, detail, "check COPILOT_PROVIDER_API_KEY (or the copilot login) and retry"
        )
    return agent_failed(NAME, detail, exit_code)


class CopilotAdapter(CliAdapter):
    def __init__(self) -> None:
        super().__init__(NAME, EXECUTABLE, INSTALL_HINT, build, CopilotParser)
