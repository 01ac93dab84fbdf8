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


class JobSummary(BaseModel):
    job_id: str
    agent: str
    status: str
    model: str | None = None
    created_at: float
    title: str = ""
    session_id: str | None = None


class JobList(BaseModel):
    jobs: list[JobSummary]


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


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class AgentInfo(BaseModel):
    name: str
    found: bool
    path: str | None = None


class StatusInfo(BaseModel):
    version: str
    pid: int
    uptime_s: float
    home: str
    agents: list[AgentInfo]
    running_jobs: int
    queued_jobs: int
    models: dict[str, list[str]] = {}
