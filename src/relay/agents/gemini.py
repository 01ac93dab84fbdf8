"""Gemini CLI: `gemini -p PROMPT -m MODEL -o stream-json`, and its NDJSON init/message/tool/result stream."""

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
    child_env,
    parse_json_line,
    prompt_via_stdin,
    stderr_last_line,
    upstream_failed,
)
from relay.agents.values import option
from relay.errors import ErrorCode, RelayError, invalid
from relay.events import AgentResult, Event, Usage

NAME = "gemini"
EXECUTABLE = "gemini"
INSTALL_HINT = "npm i -g @google/gemini-cli, or set agents.gemini.command in config.toml"

# Always pass a model: the CLI's default `auto` adds a classifier request before every turn.
DEFAULT_MODEL = "gemini-2.5-flash"

ENV_ALLOW = ("GOOGLE_GEMINI_BASE_URL",)
ENV_PREFIXES = ("GEMINI_", "GOOGLE_")

# read-only passes no flag: the default mode does not even declare write tools.
APPROVAL_MODES: dict[str, str | None] = {"read-only": None, "edit": "auto_edit", "full": "yolo"}

# Gemini exits with the HTTP status of a failed API call, mod 256.
EXIT_HTTP_STATUS = {144: 400, 145: 401, 147: 403, 148: 404, 173: 429, 244: 500, 246: 502, 247: 503, 248: 504}
EXIT_AUTH = 41
EXIT_INPUT = 42
EXIT_UNTRUSTED = 55


def build(request: AgentRequest, host: HostContext) -> Invocation:
    """The argv, env and cwd for one headless Gemini CLI run; every caller's value as `--opt=value`, which
    gemini's parser reads as that option's value even when it looks like a flag (`--resume -y` is YOLO)."""
    if request.session_id and request.continue_latest:
        raise invalid(
            "session_id and continue_latest cannot be used together",
            "pass session_id to resume a given session, or continue_latest=true for the newest one in cwd",
        )
    argv: list[str] = [host.command]
    # A prompt that looks like a flag, or is too long for argv, goes on stdin: without -p, gemini
    # reads piped stdin as the prompt and still runs headless.
    via_stdin = prompt_via_stdin(request.prompt)
    if not via_stdin:
        argv += ["-p", request.prompt]
    argv += [option("--model", values.model(NAME, request.model or DEFAULT_MODEL)), "-o", "stream-json"]
    mode = APPROVAL_MODES[request.permission]
    if mode is not None:
        argv += ["--approval-mode", mode]
    if request.session_id:
        argv.append(option("--resume", values.resumable(request.session_id)))
    elif request.continue_latest:
        argv.append(option("--resume", "latest"))
    argv += list(host.extra_args)
    env = child_env(host, ENV_ALLOW, ENV_PREFIXES)
    return Invocation(argv=tuple(argv), env=env, cwd=request.cwd, stdin_text=request.prompt if via_stdin else None)


def _usage(stats: dict[str, Any]) -> Usage:
    return Usage(
        input=as_int(stats.get("input_tokens")),
        output=as_int(stats.get("output_tokens")),
        cached=as_int(stats.get("cached")),
    )


class GeminiParser:
    """Reads stream-json; the answer is the concatenated assistant deltas, the verdict the `result` line."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.model: str | None = None
        self.parts: list[str] = []
        self.result: dict[str, Any] | None = None
        self.errors: list[str] = []
        self.tools: dict[str, dict[str, Any]] = {}
        self.tool_order: list[str] = []
        self.denials: list[dict[str, Any]] = []

    def feed(self, line: str) -> list[Event]:
        obj = parse_json_line(line)
        if obj is None:
            text = line.rstrip("\r\n")
            return [Event(ev.LOG, {"text": text})] if text.strip() else []
        kind = obj.get("type")
        if kind == "init":
            if self.session_id is None and isinstance(obj.get("session_id"), str):
                self.session_id = obj["session_id"]
            self.model = obj.get("model") if isinstance(obj.get("model"), str) else None
            return [Event(ev.SESSION_STARTED, {"session_id": self.session_id, "model": self.model})]
        if kind == "message" and obj.get("role") == "assistant":
            text = str(obj.get("content", ""))
            self.parts.append(text)
            return [Event(ev.MESSAGE_DELTA if obj.get("delta") else ev.MESSAGE, {"text": text})]
        if kind == "tool_use":
            tool_id = str(obj.get("tool_id", ""))
            entry: dict[str, Any] = {
                "id": tool_id,
                "name": obj.get("tool_name"),
                "input": obj.get("parameters"),
            }
            self.tools[tool_id] = entry
            self.tool_order.append(tool_id)
            return [Event(ev.TOOL_STARTED, dict(entry))]
        if kind == "tool_result":
            return self._tool_result(obj)
        if kind == "error":
            message = str(obj.get("message") or as_dict(obj.get("error")).get("message") or "gemini reported an error")
            self.errors.append(message)
            return [Event(ev.WARNING, {"message": message})]
        if kind == "result":
            self.result = obj
            stats = as_dict(obj.get("stats"))
            if obj.get("status") == "success":
                return [Event(ev.TURN_COMPLETED, {"usage": _usage(stats).to_dict()})]
            message = str(as_dict(obj.get("error")).get("message") or "gemini reported an error")
            return [Event(ev.TURN_FAILED, {"message": message})]
        return []

    def _tool_result(self, obj: dict[str, Any]) -> list[Event]:
        tool_id = str(obj.get("tool_id", ""))
        entry = self.tools.setdefault(tool_id, {"id": tool_id, "name": None, "input": None})
        ok = obj.get("status") == "success"
        entry["ok"] = ok
        error = as_dict(obj.get("error"))
        if error.get("type") == "tool_not_registered":
            # The approval mode did not declare this tool: the run was not allowed to use it.
            self.denials.append(
                {
                    "tool_name": entry.get("name"),
                    "tool_use_id": tool_id,
                    "tool_input": entry.get("input"),
                    "message": error.get("message"),
                }
            )
        output = obj.get("output") if ok else error.get("message")
        return [Event(ev.TOOL_COMPLETED, {"id": tool_id, "name": entry.get("name"), "ok": ok, "output": output})]

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult:
        res = self.result or {}
        usage = _usage(as_dict(res.get("stats")))
        common: dict[str, Any] = {
            "session_id": self.session_id,
            "model": self.model,
            "usage": usage,
            "tool_uses": tuple(self.tools[t] for t in self.tool_order),
            "permission_denials": tuple(self.denials),
        }
        text = "".join(self.parts)
        # Any non-zero exit is a failure; stderr output alone is not (it is full of notices).
        if res.get("status") == "success" and exit_code in (0, None):
            return AgentResult(ok=True, text=text, **common)
        stderr_error = None if res else _stderr_error_json(stderr_tail)
        if res and res.get("status") != "success":
            message, status = _api_error(as_dict(res.get("error")))
        elif stderr_error is not None:
            # `-o json` style: stdout is empty and the error object follows stack traces on stderr.
            if common["session_id"] is None and isinstance(stderr_error.get("session_id"), str):
                common["session_id"] = stderr_error["session_id"]
            message, status = _api_error(as_dict(stderr_error.get("error")))
        else:
            message = (
                "; ".join(self.errors)
                or stderr_last_line(stderr_tail)
                or (f"gemini exited with code {exit_code}" if res else "gemini ended without a result line")
            )
            status = None
        if status is None and exit_code is not None:
            status = EXIT_HTTP_STATUS.get(exit_code)
        return AgentResult(ok=False, text=text, error=error_for(message, status, exit_code, stderr_tail), **common)


def _stderr_error_json(stderr_tail: str) -> dict[str, Any] | None:
    """The `{session_id, error}` object gemini prints on stderr after stack traces (last one wins)."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^\{", stderr_tail)]
    for start in reversed(starts):
        try:
            value, _ = decoder.raw_decode(stderr_tail[start:])
        except ValueError:
            continue
        if isinstance(value, dict) and "error" in value:
            return value  # pyright: ignore[reportUnknownVariableType]
    return None


def _embedded_json(text: str) -> Any:
    """The JSON value embedded in a message like `[API Error: {...}]`, or None."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except ValueError:
        return None


def _api_error(error: dict[str, Any]) -> tuple[str, int | None]:
    """The vendor's message and HTTP status from a gemini error object, unwrapping an embedded API error."""
    message = str(error.get("message") or "gemini reported an error")
    code = error.get("code")
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    inner_error = as_dict(as_dict(_embedded_json(message)).get("error"))
    if inner_error:
        inner_code = inner_error.get("code")
        if status is None and isinstance(inner_code, int):
            status = inner_code
        label = inner_error.get("status")
        message = str(inner_error.get("message") or message) + (f" ({label})" if label else "")
    elif status is None:
        found = re.search(r"\b(?:status|code)\D{0,3}([45]\d\d)\b", message, re.IGNORECASE)
        status = int(found.group(1)) if found else None
    return message, status


def error_for(message: str, status: int | None, exit_code: int | None, stderr_tail: str = "") -> RelayError:
    """The most specific relay error for a gemini failure (exit code, HTTP status, then message text)."""
    low = (message + "\n" + stderr_tail).lower()
    if exit_code == EXIT_AUTH or "invalid auth method" in low:
        return RelayError(
            ErrorCode.AUTH_MISSING,
            message,
            'set GEMINI_API_KEY for relay, and security.auth.selectedType="gemini-api-key" in ~/.gemini/settings.json',
        )
    if exit_code == EXIT_UNTRUSTED or "trusted directory" in low or "trusted folder" in low:
        return RelayError(
            ErrorCode.CONFIG_INVALID,
            message,
            "trust the folder in gemini, or set GEMINI_CLI_TRUST_WORKSPACE=true in [agents.gemini].env",
        )
    if exit_code == EXIT_INPUT or "error resuming session" in low:
        if "already exists" in low:
            return RelayError(ErrorCode.INVALID_ARGUMENT, message, "start the session without a fixed session id")
        return RelayError(
            ErrorCode.SESSION_NOT_FOUND,
            message,
            "resume from the cwd the session started in, or start a new session",
        )
    if status in (401, 403) or "api key not valid" in low or "permission_denied" in low or "unauthenticated" in low:
        return RelayError(ErrorCode.AUTH_INVALID, message, "check GEMINI_API_KEY (or the gemini login) and retry")
    if status == 429 or "resource_exhausted" in low or "quota" in low:
        return RelayError(
            ErrorCode.RATE_LIMITED,
            message,
            "the provider is rate limiting: wait and retry, or use another model",
        )
    # The words alone only when no HTTP status is known: gemini's stderr may mention a model "not found"
    # (a fallback it tried) while the request itself failed with a 500.
    if status == 404 or (status is None and "model" in low and "not found" in low):
        return RelayError(ErrorCode.MODEL_NOT_FOUND, message, "pick a model from the model list, e.g. gemini-2.5-flash")
    if status == 400:
        return RelayError(
            ErrorCode.INVALID_ARGUMENT,
            message,
            "the model API rejected the request: check the model name and the prompt",
        )
    if (status is not None and status >= 500) or "fetch failed" in low or "api error" in low:
        return upstream_failed(message)
    return agent_failed(NAME, message, exit_code)


class GeminiAdapter(CliAdapter):
    def __init__(self) -> None:
        super().__init__(NAME, EXECUTABLE, INSTALL_HINT, build, GeminiParser)
