"""A job request and the steps of its admission (relay.jobs.door runs them in order): `check` every value,
`resolve` its session, model, permission and folder, and `build` its invocation once it is permitted."""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.agents import get_adapter, launch_command, values
from relay.agents.base import Adapter, AgentRequest, HostContext, Invocation
from relay.agents.models import resolve_model
from relay.config import PERMISSIONS, AgentConfig, Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.jobs import sessions
from relay.jobs.depth import check_depth
from relay.jobs.grants import Permit
from relay.osfiles import expand_home
from relay.runtime import choice
from relay.store import JobRecord, JobStore
from relay.workspaces import shown_url

# Agents whose CLI takes a system prompt / a turn limit as flags.
SYSTEM_PROMPT_AGENTS = ("claude",)
MAX_TURNS_AGENTS = ("claude",)
# Agents whose CLI has a reasoning-effort setting (claude --effort, codex model_reasoning_effort, copilot
# --reasoning-effort), and the levels a caller may name (each adapter maps them to its CLI's nearest).
REASONING_EFFORT_AGENTS = ("claude", "codex", "copilot")
REASONING_EFFORTS = values.REASONING_EFFORTS

SUBMITTED_VIA: ContextVar[str | None] = ContextVar("relay_submitted_via", default=None)
"""Which tool or command submits jobs in this context: `toolset/tool` for an MCP tool ("core/delegate",
"powerspawn/spawn_codex", "zen/consensus"), `+task` appended when called as an MCP Task, `cli/<command>`
for the CLI ("cli/run", "cli/ask"). The engine stores it as the request's `via` when the request has none."""


@contextmanager
def submitted_via(via: str) -> Generator[None]:
    """Jobs submitted inside this block record `via` as where they came from."""
    token = SUBMITTED_VIA.set(via)
    try:
        yield
    finally:
        SUBMITTED_VIA.reset(token)


def via_of(rec: JobRecord) -> str | None:
    """Where a stored job came from (None for a job stored before relay recorded it)."""
    via = rec.request.get("via")
    return via if isinstance(via, str) else None


@dataclass(frozen=True)
class JobRequest:
    """A delegation to an agent CLI, as the MCP tools and the CLI submit it."""

    agent: str
    prompt: str
    cwd: str | None = None
    model: str | None = None
    session_id: str | None = None
    continue_latest: bool = False
    permission: str | None = None
    system_prompt: str | None = None
    max_turns: int | None = None
    timeout_s: float | None = None
    idle_timeout_s: float | None = None
    reasoning_effort: str | None = None
    # Where the agent works: None/"cwd" the folder as it is, "worktree" a new git worktree, "job:<id>" an earlier one's.
    workspace: str | None = None
    base: str | None = None  # the ref a new worktree starts from (default: HEAD of cwd's repository)
    carry_changes: bool = False  # start a new worktree from the checkout's uncommitted state
    # A job by repository URL: the worker that claims it fetches `repo` at `base` (default: its default branch)
    # into its cache, runs in a worktree of it (in `subdir`), and pushes relay/<job-id> back; `cwd` is the
    # caller's checkout, where job_land fetches and lands that branch (it need not exist where the job runs).
    repo: str | None = None
    subdir: str = ""
    # What the job asks of the worker that claims it (store/claims.py): labels it must have, and whether the job
    # runs again on another worker when its worker is lost ("on_lost_worker"; by default it ends interrupted).
    labels: tuple[str, ...] = ()
    retry: str | None = None
    # Set by compat profiles only, never from a caller's arguments: flags the seed names for the CLI,
    # added after relay's own, and the model passed in the CLI's environment as the seed does (claude).
    cli_args: tuple[str, ...] = ()
    model_via_env: bool = False
    via: str | None = None  # which tool or command submitted it; the engine fills it from SUBMITTED_VIA


@dataclass
class Prepared:
    """A validated request: the adapter, the agent-level request, the command to run, its limits."""

    adapter: Adapter
    agent_request: AgentRequest
    invocation: Invocation
    timeout_s: float
    idle_timeout_s: float
    in_worktree: bool = False  # the job runs in a worktree of relay's (workspace "worktree" or "job:<id>")
    permit: Permit | None = None  # why the job may run at its permission (the grant, or the person's yes)

    def stored(self, depth: int) -> dict[str, Any]:
        """What a job's row keeps of its validation beside the request's own fields: where, what, its limits,
        and what allowed its permission (relay.jobs.grants)."""
        ar = self.agent_request
        return {
            "cwd": ar.cwd,
            "model": ar.model,
            "permission": ar.permission,
            "timeout_s": self.timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
            "depth": depth,
            "grant": self.permit.record() if self.permit else None,
            # continue_latest resolved to the caller's own newest session: the job resumes it by id, also when
            # it is prepared again (after a restart, by another worker) where no one acts for its principal.
            "session_id": ar.session_id,
            "continue_latest": ar.continue_latest,
        }


def request_from(rec: JobRecord) -> JobRequest:
    """The request a stored job was submitted with (to prepare it again after a restart)."""
    fields = JobRequest.__dataclass_fields__
    return JobRequest(**{k: v for k, v in rec.request.items() if k in fields})


def check_cwd_unchanged(settings: Settings, cwd: str) -> None:
    """At the job's start: its cwd must still resolve to itself, inside the allowed roots (no swap since submit)."""
    now = resolve_cwd(settings, cwd)
    if now != cwd:
        raise RelayError(
            ErrorCode.CWD_NOT_ALLOWED,
            f"cwd {cwd!r} changed after the job was submitted: it now resolves to {now!r}",
            "submit the job again with the directory you mean",
        )


def _check_utf8(name: str, value: str) -> None:
    """Refuse text that is not valid UTF-8 (bytes a shell passed as-is arrive as lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        shown = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"code point U+{ord(bad):04X}"
        raise invalid(
            f"{name} is not valid UTF-8 ({shown} at position {exc.start})",
            f"pass {name} as UTF-8 text (check the terminal's or the file's encoding)",
        ) from None


def resolve_cwd(settings: Settings, raw: str | None) -> str:
    """`raw` (None: relay's own cwd) resolved: every symlink followed, an existing directory inside the allowed roots.

    Strings and os.path, not pathlib: this runs twice on every job's way (at submit, and at its start)."""
    path = os.fspath(expand_home(raw)) if raw else os.getcwd()
    if not os.path.isabs(path):
        raise invalid(
            f"cwd must be an absolute path, got {raw!r}",
            "pass the absolute path of the project directory",
        )
    try:
        resolved = os.path.realpath(path, strict=True)
    except (OSError, RuntimeError, ValueError):
        raise invalid(f"cwd {raw!r} does not exist", "pass an existing directory") from None
    if not os.path.isdir(resolved):
        raise invalid(f"cwd {raw!r} is not a directory", "pass a directory, not a file")
    # relay's own worktrees are made from checkouts inside the allowed roots: jobs may run in them.
    configured = settings.allowed_roots
    if configured and not any(_within(resolved, str(r)) for r in (*configured, _real(settings.worktrees_dir))):
        raise RelayError(
            ErrorCode.CWD_NOT_ALLOWED,
            f"cwd {resolved!r} is outside the allowed roots",
            f"use a directory under {', '.join(map(str, configured))}, or add it to security.allowed_roots in config.toml",
        )
    return resolved


def _within(path: str, root: str) -> bool:
    """Whether `path` is `root` or under it (both absolute and normalised: resolved)."""
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


def _real(path: Path) -> str:
    """`path` with its symlinks followed, as far as it exists (Path.resolve's non-strict rule)."""
    return os.path.realpath(path)


def check_values(req: JobRequest) -> None:
    """Every value of `req` that reaches the agent's argv, or git's, by its CLI's rule for that slot
    (relay.agents.values); the session id is checked when it is resolved (relay.jobs.sessions)."""
    if req.model is not None and req.model.strip():
        values.model(req.agent, req.model.strip())
    if req.reasoning_effort is not None:
        check_reasoning_effort(req.agent, req.reasoning_effort)
        values.reasoning_effort(req.agent, req.reasoning_effort)
    if req.system_prompt and req.agent in SYSTEM_PROMPT_AGENTS:  # elsewhere it heads the prompt
        values.system_prompt(req.system_prompt)
    if req.base is not None:
        values.git_ref("base", req.base)


def check_reasoning_effort(agent: str, effort: str | None) -> None:
    if effort is None:
        return
    if agent not in REASONING_EFFORT_AGENTS:
        raise invalid(
            f"{agent} has no reasoning effort setting",
            f"omit reasoning_effort for {agent}, or use one of: {', '.join(REASONING_EFFORT_AGENTS)}",
        )
    if effort not in REASONING_EFFORTS:
        raise invalid(
            f"reasoning_effort {effort!r} is not one of {', '.join(REASONING_EFFORTS)}",
            "pass one of those levels (each CLI gets its nearest setting)",
        )


RETRY_CHOICES = ("on_lost_worker",)


def check_claim_needs(labels: tuple[str, ...], retry: str | None) -> None:
    """Labels are short names (a worker's `--labels`); retry is None or one of RETRY_CHOICES."""
    if retry is not None and retry not in RETRY_CHOICES:
        raise invalid(f"retry={retry!r} is not one of {', '.join(RETRY_CHOICES)}", "omit retry, or pass on_lost_worker")
    for label in labels:
        if not (0 < len(label) <= 64) or not all(c.isalnum() or c in "-_.:" for c in label):
            raise invalid(
                f"label {label!r} is not a worker label",
                "labels are 1-64 letters, digits, '-', '_', '.' or ':' (as `relay worker --labels` takes them)",
            )


@dataclass(frozen=True)
class Checked:
    """A request whose every value passed its typed rule: the agent's adapter and configuration."""

    adapter: Adapter
    cfg: AgentConfig


def check(settings: Settings, req: JobRequest) -> Checked:
    """Admission, step 1: every value the caller sent, by its typed rule, before anything is looked up."""
    check_depth(settings)
    if not req.prompt.strip():
        raise invalid("prompt is empty", "pass the task to delegate as prompt")
    for name in ("prompt", "model", "session_id", "system_prompt", "cwd", "agent"):
        value = getattr(req, name)
        if isinstance(value, str) and "\x00" in value:
            raise invalid(f"{name} contains a NUL byte", f"remove the \\x00 character from {name}")
        if isinstance(value, str) and not value.isascii():
            _check_utf8(name, value)
    check_claim_needs(req.labels, req.retry)
    adapter = get_adapter(req.agent, settings)
    choice.active().runtime.check_spawn()  # no CLI jobs where there is no job runtime (Windows): say so now
    check_values(req)
    if req.max_turns is not None and req.max_turns < 1:
        raise invalid("max_turns must be at least 1", "omit max_turns or pass a positive number")
    if req.max_turns is not None and req.agent not in MAX_TURNS_AGENTS:
        raise invalid(
            f"{req.agent} has no way to limit its turns",
            f"omit max_turns for {req.agent}, or use one of: {', '.join(MAX_TURNS_AGENTS)}",
        )
    for name, value in (("timeout_s", req.timeout_s), ("idle_timeout_s", req.idle_timeout_s)):
        if value is not None and not (0 < value <= 7 * 86400):
            raise invalid(f"{name} must be between 0 and 604800 seconds", f"omit {name} for the default")
    return Checked(adapter, settings.agent(req.agent))


@dataclass(frozen=True)
class Resolved:
    """What a checked request resolves to: the session it resumes, its model, permission and folder, the
    agent's executable, and the prompt as the CLI gets it."""

    checked: Checked
    resumed: sessions.Resumed
    model: str | None
    permission: str
    cwd: str
    command: str
    prompt: str
    system_prompt: str | None


def resolve(
    settings: Settings,
    store: JobStore,
    which: Callable[[str], str | None],
    req: JobRequest,
    checked: Checked,
    *,
    place_later: bool = False,
) -> Resolved:
    """Admission, step 2: the session `req` resumes (the principal's own), its model, permission and folder.

    `place_later`: a job by repository URL at its submit: its folder is made by the worker that claims it
    (and admitted again there), so no cwd is checked here; the URL stands for it (what a person is asked about).
    """
    cfg = checked.cfg
    model, permission, cwd_raw = req.model, req.permission, req.cwd
    resumed = sessions.resolve(
        settings, store, req.agent, req.session_id, req.continue_latest, lambda: resolve_cwd(settings, req.cwd)
    )
    session = resumed.record
    if session is not None:
        # A CLI resumes only from the cwd that started the session; keep its settings.
        if cwd_raw and resolve_cwd(settings, cwd_raw) != session.cwd:
            raise invalid(
                f"session {session.session_id} started in {session.cwd}, not {cwd_raw}",
                "omit cwd to resume in the session's own directory, or start a new session",
            )
        cwd_raw = session.cwd
        model = model or session.model
        permission = permission or session.permission
        sessions.check_cost(settings, session)
    permission = permission or settings.default_permission
    if permission not in PERMISSIONS:
        raise invalid(
            f"permission {permission!r} is not one of {', '.join(PERMISSIONS)}",
            "use read-only, edit or full",
        )
    model = resolve_model(req.agent, model or cfg.default_model, cfg.aliases)
    cwd = shown_url(req.repo) if place_later and req.repo else resolve_cwd(settings, cwd_raw)
    prompt, system_prompt = req.prompt, req.system_prompt
    if system_prompt and req.agent not in SYSTEM_PROMPT_AGENTS:
        # No flag for it: the instructions travel at the head of the prompt instead.
        prompt = f"<instructions>\n{system_prompt}\n</instructions>\n\n{prompt}"
        system_prompt = None
    command = launch_command(checked.adapter, cfg)
    resolved = which(command)
    if resolved is None:
        raise RelayError(
            ErrorCode.AGENT_NOT_INSTALLED,
            f"{req.agent} is not installed ({command!r} not found)",
            checked.adapter.install_hint,
        )
    return Resolved(checked, resumed, model, permission, cwd, resolved, prompt, system_prompt)


def build(
    settings: Settings,
    req: JobRequest,
    resolved: Resolved,
    allowed: Permit,
    job_id: str,
    env: Mapping[str, str] | None = None,
) -> Prepared:
    """Admission, step 4: the agent's invocation, for a request resolved and permitted (step 3, grants.permit).
    `env`: what its workspace adds to the agent's environment (a worktree's ports), over the agent's config."""
    cfg = resolved.checked.cfg
    agent_request = AgentRequest(
        prompt=resolved.prompt,
        cwd=resolved.cwd,
        model=resolved.model,
        session_id=resolved.resumed.session_id,
        continue_latest=resolved.resumed.continue_latest,
        permission=resolved.permission,  # pyright: ignore[reportArgumentType]
        system_prompt=resolved.system_prompt,
        max_turns=req.max_turns,
        reasoning_effort=req.reasoning_effort,
        model_via_env=req.model_via_env,
        max_budget_usd=settings.max_cost_usd if req.agent == "claude" else None,
    )
    host = HostContext(
        command=resolved.command,
        environ=settings.environ,
        extra_args=(*cfg.extra_args, *req.cli_args),
        agent_env={**cfg.env, **(env or {})},
        is_root=os.geteuid() == 0,
        depth=settings.depth,
        job_id=job_id,
        job_dir=str(settings.jobs_dir / job_id),
    )
    return Prepared(
        adapter=resolved.checked.adapter,
        agent_request=agent_request,
        invocation=resolved.checked.adapter.build(agent_request, host),
        timeout_s=req.timeout_s or cfg.timeout_s or settings.job_timeout_s,
        idle_timeout_s=req.idle_timeout_s or cfg.idle_timeout_s or settings.idle_timeout_s,
        in_worktree=req.workspace not in (None, "cwd"),
        permit=allowed,
    )
