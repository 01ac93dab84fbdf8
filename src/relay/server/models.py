"""Pydantic shapes that cross the MCP boundary: what the calling model reads in the tool schemas."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorInfo(BaseModel):
    code: str
    message: str
    hint: str = ""


class Usage(BaseModel):
    input: int = 0
    output: int = 0
    cached: int = 0


class Envelope(BaseModel):
    """A job's state and result; the same shape for every agent."""

    job_id: str
    status: str = Field(description="queued, running, completed, failed, cancelled, timed_out or interrupted")
    agent: str
    model: str | None = None
    via: str | None = Field(None, description="the tool or command that started it, e.g. core/delegate")
    output: str = Field("", description="final answer, at most the output limit")
    truncated: bool = False
    output_chars: int = 0
    next: str | None = Field(None, description="the call to make next, if any")
    session_id: str | None = Field(None, description="pass as session_id to continue this conversation")
    usage: Usage = Usage()
    cost_usd: float | None = None
    duration_ms: int | None = None
    exit_code: int | None = None
    files_changed: list[str] = []
    permission_denials: list[dict[str, Any]] = []
    tool_uses: int = 0
    error: ErrorInfo | None = None
    warnings: list[str] = Field([], description="what to know about a job that did not fail")
    workspace: dict[str, Any] | None = Field(None, description="worktree jobs: path, branch, base, head, diffstat")


class JobSummary(BaseModel):
    job_id: str
    agent: str
    via: str | None = None
    status: str
    model: str | None = None
    created_at: float
    title: str = ""
    session_id: str | None = None


class JobList(BaseModel):
    jobs: list[JobSummary]
    next_cursor: str | None = Field(None, description="pass as cursor for the next page; null on the last page")


class WaitResult(BaseModel):
    done: bool = Field(description="whether the any/all condition was met before the timeout")
    jobs: list[Envelope]


class OutputPage(BaseModel):
    job_id: str
    status: str
    view: str
    offset: int
    text: str
    total_chars: int
    next_offset: int | None = Field(None, description="offset of the next page; null when this is the end")
    complete: bool = Field(description="true when the job has ended and this page reaches the end")


class SessionInfo(BaseModel):
    agent: str
    session_id: str
    cwd: str
    model: str | None
    permission: str
    title: str
    turns: int
    total_cost_usd: float
    last_used_at: float
    # relay: a relay job ran it (resumable with delegate); hook: a CLI reported it through call_hook.
    origin: str = "relay"
    # A hook session's state: active, paused, ended or archived (None for relay's own).
    status: str | None = None


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class AgentInfo(BaseModel):
    name: str
    found: bool
    path: str | None = None


class McpServerState(BaseModel):
    name: str
    state: str = Field(description="configured, connecting, connected, failed or disabled")
    project_id: str | None = None
    description: str = ""
    connected: bool = False
    tools: int | None = None
    last_error: str | None = None


class AllowedRoot(BaseModel):
    path: str
    source: str = Field(
        description="where it came from: config.toml, RELAY_ALLOWED_ROOTS, the folder relay started in, or a client's roots"
    )


class GrantInfo(BaseModel):
    """The highest permission a calling model gets without the person confirming (relay.jobs.grants)."""

    level: str = Field(description="read-only, edit or full")
    source: str = Field(description="where it is set")
    profile_grants: dict[str, str] = Field(default={}, description="toolset -> level its chosen profile grants")


class StatusInfo(BaseModel):
    status: str = "running"
    version: str
    pid: int
    port: int | None = None
    uptime: str = Field(description="e.g. 2h 15m 30s")
    uptime_s: float
    uptime_seconds: int
    home: str
    agents: list[AgentInfo]
    running_jobs: int
    queued_jobs: int
    models: dict[str, list[str]] = {}
    toolsets: list[str] = Field(default=[], description="toolsets exposed in tools/list")
    allowed_roots: list[AllowedRoot] = Field(default=[], description="folders a job's cwd may be under")
    mcp_servers: list[McpServerState] = []
    mcp_server_count: int = 0
    grant: GrantInfo | None = None
    formatted_message: str = ""


class AskEnvelope(Envelope):
    """The job envelope of an ask, plus the thread to continue."""

    continuation_id: str | None = Field(None, description="pass as continuation_id to continue this conversation")
    remaining_turns: int | None = Field(None, description="turns left in the thread")


class TurnInfo(BaseModel):
    seq: int
    role: str
    content: str
    created_at: float
    tool: str
    files: list[str] = []
    images: list[str] = []
    provider: str | None = None
    model: str | None = None
    job_id: str | None = None


class ThreadInfo(BaseModel):
    continuation_id: str
    tool: str
    title: str
    created_at: float
    updated_at: float
    expires_at: float
    turn_count: int
    remaining_turns: int
    total_cost_usd: float
    turns: list[TurnInfo] = []


class ThreadList(BaseModel):
    threads: list[ThreadInfo]


class ModelInfoOut(BaseModel):
    id: str = Field(description="pass as model (provider:model); aliases work too")
    provider: str
    model: str
    aliases: list[str]
    context_window: int
    max_output: int
    input_per_mtok: float | None = Field(None, description="USD per million input tokens")
    output_per_mtok: float | None = Field(None, description="USD per million output tokens")
    cached_per_mtok: float | None = None
    reasoning: bool = Field(description="accepts thinking_mode")
    key_source: str | None = Field(None, description="where the key comes from (a variable name, never the key)")


class ProviderOut(BaseModel):
    name: str
    base_url: str
    local: bool
    key_env: list[str]
    key_source: str | None
    reachable: bool
    fallback_model: str | None = None


class ModelList(BaseModel):
    models: list[ModelInfoOut] = Field(description="models that can be asked now")
    providers: list[ProviderOut] = Field(description="every provider; set one of key_env to enable it")


class LandTest(BaseModel):
    command: str
    passed: bool
    exit_code: int | None = None
    timed_out: bool = False
    duration_ms: int = 0
    output_tail: str = Field("", description="the end of its output; job_result view=test pages all of it")
    output_chars: int = 0


class LandResult(BaseModel):
    """What a land did: the target moved from old to new, or (error) nothing changed and why."""

    job_id: str
    branch: str
    landed: bool
    into: str | None = None
    strategy: str | None = None
    old: str | None = None
    new: str | None = None
    commits: int = 0
    test: LandTest | None = None
    conflicts: list[str] = Field([], description="files that do not apply onto the target")
    resolved_by: str | None = Field(
        None, description="the follow-up job that resolved a conflict (on_conflict='agent')"
    )
    error: ErrorInfo | None = None


class DiscardResult(BaseModel):
    job_id: str
    branch: str
    discarded: bool
    path: str
