"""A CLI declared in config.toml: argv from an argument template, output read as plain text or JSON lines."""

from __future__ import annotations

from typing import Any

from relay import events as ev
from relay.agents import values
from relay.agents.base import (
    MAX_ARGV_PROMPT_BYTES,
    AgentRequest,
    HostContext,
    Invocation,
    TextTail,
    agent_failed,
    as_dict,
    child_env,
    parse_json_line,
    stderr_last_line,
)
from relay.config import AgentConfig
from relay.errors import ErrorCode, RelayError, invalid
from relay.events import AgentResult, Event

OUTPUT_MODES = ("text", "jsonl")
PLACEHOLDERS = ("prompt", "model", "cwd", "session_id", "permission")

# Keys that commonly hold a JSON line's text, session id, or error, in order of preference.
TEXT_KEYS = ("text", "content", "result", "message", "response", "output")
SESSION_KEYS = ("session_id", "sessionId", "thread_id", "threadId", "conversation_id")


def render(template: tuple[str, ...], values: dict[str, str | None]) -> list[str]:
    """Fill `{name}` placeholders; an argument that is only an unset placeholder is dropped.

    A value never turns an argument into an option: where the template's argument does not start with '-'
    but the filled one does (only a prompt can: the other values are refused with a leading '-'), it gets a
    leading space, as copilot's prompt does, so the CLI reads it as text."""
    out: list[str] = []
    for arg in template:
        if arg.startswith("{") and arg.endswith("}") and arg[1:-1] in values and values[arg[1:-1]] is None:
            continue
        filled = arg
        for name in PLACEHOLDERS:
            filled = filled.replace("{" + name + "}", values.get(name) or "")
        if filled.startswith("-") and not arg.startswith("-"):
            filled = " " + filled
        out.append(filled)
    return out


def build(name: str, cfg: AgentConfig, request: AgentRequest, host: HostContext) -> Invocation:
    """The argv, env and cwd for a declared CLI; the prompt goes on stdin when the template lacks it."""
    if cfg.output not in OUTPUT_MODES:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"agents.{name}.output is {cfg.output!r}",
            f"set agents.{name}.output to one of: {', '.join(OUTPUT_MODES)}",
        )
    if request.continue_latest:
        raise invalid(f"{name} cannot continue the latest session", "pass the session_id to resume instead")
    if request.session_id and not cfg.resume_args:
        raise invalid(
            f"{name} has no resume_args, so it cannot resume a session",
            f'omit session_id, or declare agents.{name}.resume_args (e.g. ["--resume", "{{session_id}}"])',
        )
    in_template = any("{prompt}" in arg for arg in (*cfg.args, *cfg.model_args, *cfg.resume_args))
    if in_template and len(request.prompt.encode()) > MAX_ARGV_PROMPT_BYTES:
        raise invalid(
            f"the prompt is longer than {name} accepts on its command line ({MAX_ARGV_PROMPT_BYTES} bytes)",
            "write the long context to a file in cwd and ask the agent to read it",
        )
    filled: dict[str, str | None] = {
        "prompt": request.prompt,
        "model": values.model(name, request.model) if request.model else None,
        "cwd": request.cwd,
        "session_id": values.resumable(request.session_id) if request.session_id else None,
        "permission": request.permission,
    }
    argv = [host.command, *render(cfg.args, filled)]
    if request.model:
        argv += render(cfg.model_args, filled)
    if request.session_id:
        argv += render(cfg.resume_args, filled)
    argv += list(host.extra_args)
    env = child_env(host)
    return Invocation(argv=tuple(argv), env=env, cwd=request.cwd, stdin_text=None if in_template else request.prompt)


def _first_str(obj: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = obj.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            nested = _first_str(as_dict(value), ("text", "content", "message"))
            if nested is not None:
                return nested
    return None


class GenericParser:
    """Reads a declared CLI's stdout: all of it as the answer (text), or text from JSON lines (jsonl)."""

    def __init__(self, name: str, output: str) -> None:
        self.name = name
        self.output = output
        self.lines = TextTail()
        self.pieces = TextTail()
        self.last_was_delta = False
        self.final: str | None = None
        self.session_id: str | None = None
        self.model: str | None = None
        self.error: str | None = None

    def feed(self, line: str) -> list[Event]:
        text = line.rstrip("\r\n")
        if self.output != "jsonl":
            self.lines.append(text)
            return [Event(ev.MESSAGE_DELTA, {"text": text + "\n"})]
        obj = parse_json_line(text)
        if obj is None:
            return [Event(ev.LOG, {"text": text})] if text.strip() else []
        out: list[Event] = []
        session = _first_str(obj, SESSION_KEYS)
        if session and self.session_id is None:
            self.session_id = session
            model = obj.get("model")
            self.model = model if isinstance(model, str) else None
            out.append(Event(ev.SESSION_STARTED, {"session_id": session, "model": self.model}))
        error = obj.get("error")
        if error:
            self.error = _first_str(obj, ("error",)) or str(error)
            out.append(Event(ev.WARNING, {"message": self.error}))
        if isinstance(obj.get("result"), str):
            # A `result` line carries the whole answer, like claude's and many CLIs' final line.
            self.final = obj["result"]
            return out
        piece = _first_str(obj, TEXT_KEYS)
        if piece is None or obj.get("role") in ("user", "system"):
            return out
        delta = obj.get("delta") is True
        if delta and self.last_was_delta and self.pieces:
            self.pieces.extend_last(piece)
        else:
            self.pieces.append(piece)
        self.last_was_delta = delta
        out.append(Event(ev.MESSAGE_DELTA if delta else ev.MESSAGE, {"text": piece}))
        return out

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult:
        if self.output == "jsonl":
            text = self.final if self.final is not None else self.pieces.join()
        else:
            text = self.lines.join().strip("\n")
        if exit_code == 0:
            return AgentResult(ok=True, text=text, session_id=self.session_id, model=self.model)
        detail = self.error or stderr_last_line(stderr_tail) or f"{self.name} exited with code {exit_code}"
        err = agent_failed(self.name, detail, exit_code)
        return AgentResult(ok=False, text=text, session_id=self.session_id, model=self.model, error=err)


class GenericAdapter:
    """An agent CLI relay knows only from its `[agents.NAME]` table in config.toml."""

    def __init__(self, name: str, cfg: AgentConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.executable = cfg.command or name
        self.install_hint = f"install {name}, or set agents.{name}.command in config.toml to its path"

    def build(self, request: AgentRequest, host: HostContext) -> Invocation:
        return build(self.name, self.cfg, request, host)

    def parser(self) -> GenericParser:
        return GenericParser(self.name, self.cfg.output)
