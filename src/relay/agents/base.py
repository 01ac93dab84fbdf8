"""The contract every agent CLI adapter follows: build an invocation, parse the output. Both pure."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult, Event
from relay.runtime.invocation import Invocation as Invocation  # adapters build it; the runtime runs it

Permission = Literal["read-only", "edit", "full"]

# Linux refuses a single argv string longer than this (MAX_ARG_STRLEN); longer prompts go via stdin.
MAX_ARGV_PROMPT_BYTES = 100_000

# Variables any child may see. Everything else in relay's environment stays out unless an
# adapter or the agent's config asks for it (keys of other vendors never leak to a child).
BASE_ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "NODE_OPTIONS",
    "NVM_DIR",
)
BASE_ENV_PREFIXES = ("LC_",)


@dataclass(frozen=True)
class AgentRequest:
    """What the caller asked an agent CLI to do, already validated."""

    prompt: str
    cwd: str
    model: str | None = None
    session_id: str | None = None
    continue_latest: bool = False
    permission: Permission = "read-only"
    system_prompt: str | None = None
    max_turns: int | None = None
    reasoning_effort: str | None = None
    model_via_env: bool = False  # the model in the CLI's environment instead of a flag (claude: ANTHROPIC_MODEL)
    max_budget_usd: float | None = None


@dataclass(frozen=True)
class HostContext:
    """Facts about the host the adapter needs but must not look up itself (it stays pure)."""

    command: str
    environ: Mapping[str, str] = field(default_factory=lambda: {})
    extra_args: tuple[str, ...] = ()
    agent_env: Mapping[str, str] = field(default_factory=lambda: {})
    is_root: bool = False
    depth: int = 0
    job_id: str = ""
    job_dir: str = ""  # the job's folder (an ACP job's driver reads its inbox there)


class Parser(Protocol):
    """Turns an agent's stdout, one line at a time, into events, then into a result."""

    def feed(self, line: str) -> list[Event]: ...

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult: ...


class Adapter(Protocol):
    """One agent CLI: its name, how to launch it, and how to read what it prints."""

    name: str
    executable: str
    install_hint: str

    def build(self, request: AgentRequest, host: HostContext) -> Invocation: ...

    def parser(self) -> Parser: ...


def child_env(host: HostContext, allow: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """The child's environment: the base allowlist, the adapter's own names, the agent's config env."""
    env: dict[str, str] = {}
    names = set(BASE_ENV_ALLOWLIST) | set(allow)
    all_prefixes = BASE_ENV_PREFIXES + prefixes
    for key, value in host.environ.items():
        if key in names or key.startswith(all_prefixes):
            env[key] = value
    env.update(host.agent_env)
    env["RELAY_DEPTH"] = str(host.depth + 1)
    if host.job_id:
        env["RELAY_JOB_ID"] = host.job_id
    return env


def prompt_via_stdin(prompt: str) -> bool:
    """A prompt that looks like a flag, or is too long for argv, must go on stdin instead."""
    return prompt.startswith("-") or len(prompt.encode()) > MAX_ARGV_PROMPT_BYTES


UPSTREAM_HINT = "the model API failed; retry later or pick another model"


def upstream_failed(detail: str) -> RelayError:
    """The agent's model API failed (5xx, timeouts, broken streams)."""
    return RelayError(ErrorCode.UPSTREAM_ERROR, detail, UPSTREAM_HINT)


def agent_failed(agent: str, detail: str, exit_code: int | None) -> RelayError:
    """The fallback when no more specific cause is recognised in the agent's output."""
    return RelayError(
        ErrorCode.AGENT_FAILED, detail, f"{agent} exited with code {exit_code}; see job_result(view='stderr')"
    )


class CliAdapter:
    """An agent CLI backed by its module's pure `build` function and parser class."""

    def __init__(
        self,
        name: str,
        executable: str,
        install_hint: str,
        build: Callable[[AgentRequest, HostContext], Invocation],
        parser: Callable[[], Parser],
    ) -> None:
        self.name = name
        self.executable = executable
        self.install_hint = install_hint
        self._build = build
        self._parser = parser

    def build(self, request: AgentRequest, host: HostContext) -> Invocation:
        return self._build(request, host)

    def parser(self) -> Parser:
        return self._parser()


def parse_json_line(line: str) -> dict[str, Any] | None:
    """A JSON object from one output line, or None for noise (banners, blank lines, partial output)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None  # pyright: ignore[reportUnknownVariableType]


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}  # pyright: ignore[reportUnknownVariableType]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []  # pyright: ignore[reportUnknownVariableType]


def as_int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


# The most answer text a parser keeps in memory: past it, the oldest text is dropped from the answer
# (all of it stays in the job's stdout and transcript), so memory stays flat however much an agent prints.
ANSWER_KEEP_CHARS = 4 << 20


class TextTail:
    """Appended pieces of an answer, keeping only the last ANSWER_KEEP_CHARS characters (and saying so)."""

    def __init__(self, keep: int = ANSWER_KEEP_CHARS) -> None:
        self.keep = keep
        self.pieces: deque[str] = deque()
        self.size = 0
        self.dropped = 0

    def __bool__(self) -> bool:
        return bool(self.pieces)

    def append(self, piece: str) -> None:
        self.pieces.append(piece)
        self.size += len(piece) + 1
        while self.size > self.keep and len(self.pieces) > 1:
            first = self.pieces.popleft()
            self.size -= len(first) + 1
            self.dropped += len(first) + 1
        if self.size > self.keep:  # one piece alone is too long: keep its end
            cut = self.size - self.keep
            self.pieces[0] = self.pieces[0][cut:]
            self.size -= cut
            self.dropped += cut

    def extend_last(self, piece: str) -> None:
        """Add to the last piece (a streamed delta) instead of starting a new one."""
        if not self.pieces:
            self.append(piece)
            return
        last = self.pieces.pop()
        self.size -= len(last) + 1
        self.append(last + piece)

    def join(self, sep: str = "\n") -> str:
        text = sep.join(self.pieces)
        if self.dropped:
            return f"[{self.dropped} earlier characters of this answer are in the job's transcript]\n{text}"
        return text


def stderr_last_line(stderr_tail: str) -> str:
    lines = [ln.strip() for ln in stderr_tail.splitlines() if ln.strip()]
    return lines[-1] if lines else ""
