"""Agents driven over the Agent Client Protocol: a driver process per job, its inbox, and the adapters.

An ACP job's process is relay's driver (`python -I -m relay.agents.acp.driver`), which starts the
agent's ACP server (`gemini --acp`, `claude-agent-acp`, `codex-acp`, or a command from config.toml)
and drives one session with the official SDK; the runtime runs it like any print-mode CLI. The
adapters here are pure like the others: they build the driver's invocation and parse its lines.
Chosen per agent by `protocol = "acp"` in `[agents.NAME]` (docs/acp.md); print mode stays the default.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from relay.agents import gemini, values
from relay.agents.acp.inbox import JOB_DIR_ENV
from relay.agents.acp.parser import AcpParser
from relay.agents.base import AgentRequest, HostContext, Invocation, Parser, as_dict, child_env
from relay.agents.values import option
from relay.config import AgentConfig
from relay.errors import ErrorCode, RelayError, invalid

DRIVER_MODULE = "relay.agents.acp.driver"


@dataclass(frozen=True)
class AcpSpec:
    """One agent's ACP server: its command and arguments, its modes per permission, its model and environment."""

    name: str
    executable: str
    install_hint: str
    args: tuple[str, ...] = ()
    # The agent's session modes for relay's permissions, most wanted first (the driver sets the first it offers).
    modes: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: {})
    env_allow: tuple[str, ...] = ()
    env_prefixes: tuple[str, ...] = ()
    # The argv words and environment that choose the model, or None when a model cannot be chosen.
    model: Callable[[str], tuple[tuple[str, ...], dict[str, str]]] | None = None
    default_model: str | None = None
    error_for: Callable[[str, int | None, str], RelayError] | None = None


def _gemini_model(name: str) -> tuple[tuple[str, ...], dict[str, str]]:
    return (option("--model", values.model("gemini", name)),), {}


def _claude_model(name: str) -> tuple[tuple[str, ...], dict[str, str]]:
    return (), {"ANTHROPIC_MODEL": values.model("claude", name)}


def _codex_model(name: str) -> tuple[tuple[str, ...], dict[str, str]]:
    # The model rule admits no quote, so the TOML string cannot be closed early.
    return (option("--config", f'model="{values.model("codex", name)}"'),), {}


def _gemini_error(message: str, exit_code: int | None, stderr_tail: str) -> RelayError:
    if "no previous sessions found" in message.lower():
        # gemini 0.61.0's session/load looks for its sessions before it knows the project (docs/acp.md, Limits).
        return RelayError(
            ErrorCode.SESSION_NOT_FOUND,
            message,
            "gemini 0.61.0 over ACP cannot load a session: start a new one, or resume it with gemini on print mode",
        )
    # gemini answers a failed API call with the HTTP status as the JSON-RPC code and the API's error as JSON.
    status, vendor = None, message
    start = message.find("{")
    try:
        body = json.JSONDecoder().raw_decode(message[start:])[0] if start >= 0 else None
    except ValueError:
        body = None
    error = as_dict(as_dict(body).get("error"))
    if isinstance(error.get("code"), int):
        status = int(error["code"])
        vendor = str(error.get("message") or message) + (f" ({error['status']})" if error.get("status") else "")
    return gemini.error_for(vendor, status, exit_code, stderr_tail)


SPECS: dict[str, AcpSpec] = {
    "gemini": AcpSpec(
        name="gemini",
        executable="gemini",
        install_hint=gemini.INSTALL_HINT,
        args=("--acp",),
        modes={"read-only": ("default",), "edit": ("autoEdit",), "full": ("yolo",)},
        env_allow=gemini.ENV_ALLOW,
        env_prefixes=gemini.ENV_PREFIXES,
        model=_gemini_model,
        default_model=gemini.DEFAULT_MODEL,
        error_for=_gemini_error,
    ),
    "claude": AcpSpec(
        name="claude",
        executable="claude-agent-acp",
        install_hint="npm i -g @zed-industries/claude-agent-acp, or set agents.claude.acp_command in config.toml",
        modes={"read-only": ("default",), "edit": ("acceptEdits",), "full": ("bypassPermissions", "acceptEdits")},
        env_allow=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"),
        env_prefixes=("CLAUDE_", "ANTHROPIC_"),
        model=_claude_model,
    ),
    "codex": AcpSpec(
        name="codex",
        executable="codex-acp",
        install_hint="npm i -g @zed-industries/codex-acp, or set agents.codex.acp_command in config.toml",
        modes={"read-only": ("read-only",), "edit": ("auto",), "full": ("full-access",)},
        env_allow=("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME"),
        env_prefixes=("CODEX_",),
        model=_codex_model,
    ),
}


def build(spec: AcpSpec, request: AgentRequest, host: HostContext) -> Invocation:
    """The driver's argv (every caller's value as `--opt=value`, the agent's argv after `--`), env and stdin."""
    if request.continue_latest:
        raise invalid(
            f"continue_latest is not supported for {spec.name} over ACP",
            "pass the session_id to resume (session_list lists them)",
        )
    argv: list[str] = [sys.executable, "-I", "-m", DRIVER_MODULE, option("--cwd", request.cwd)]
    if request.session_id:
        argv.append(option("--session-id", values.resumable(request.session_id)))
    for mode in spec.modes.get(request.permission, ()):
        argv.append(option("--mode", mode))
    if request.permission == "read-only":
        argv.append("--read-only")
    if host.job_dir:
        argv.append(option("--job-dir", host.job_dir))
    model_argv: tuple[str, ...] = ()
    model_env: dict[str, str] = {}
    chosen = request.model or spec.default_model
    if chosen and spec.model is not None:
        model_argv, model_env = spec.model(chosen)
    argv += ["--", host.command, *spec.args, *model_argv, *host.extra_args]
    env = child_env(host, spec.env_allow, spec.env_prefixes)
    env.update(model_env)
    if host.job_dir:
        env[JOB_DIR_ENV] = host.job_dir
    prompt = request.prompt
    if request.system_prompt:  # ACP has no system prompt: the instructions travel at the head of the prompt
        prompt = f"<instructions>\n{values.system_prompt(request.system_prompt)}\n</instructions>\n\n{prompt}"
    return Invocation(argv=tuple(argv), env=env, cwd=request.cwd, stdin_text=prompt)


class AcpAdapter:
    """An agent over ACP: `build` launches the driver, the parser reads its JSON lines."""

    protocol = "acp"

    def __init__(self, spec: AcpSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.executable = spec.executable
        self.install_hint = spec.install_hint

    def build(self, request: AgentRequest, host: HostContext) -> Invocation:
        return build(self.spec, request, host)

    def parser(self) -> Parser:
        return AcpParser(self.spec.name, self.spec.error_for)


def acp_adapter(name: str, cfg: AgentConfig) -> AcpAdapter | None:
    """The ACP adapter for agent `name` as config.toml sets it up, or None when it has none (print mode then).

    The command is `acp_command`, else the built-in one (gemini's: its `command`, with `--acp`); a CLI
    declared in config.toml runs over ACP when it names its `acp_command` (and `acp_args`).
    """
    spec = SPECS.get(name)
    if spec is not None:
        command = cfg.acp_command or (cfg.command if name == "gemini" else None) or spec.executable
        args = cfg.acp_args or spec.args
        return AcpAdapter(replace(spec, executable=command, args=args))
    if cfg.acp_command:
        hint = f"install {cfg.acp_command!r} or fix agents.{name}.acp_command in config.toml"
        return AcpAdapter(AcpSpec(name=name, executable=cfg.acp_command, install_hint=hint, args=cfg.acp_args))
    return None


__all__ = ["SPECS", "AcpAdapter", "AcpSpec", "acp_adapter", "build"]
