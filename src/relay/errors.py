"""The one error type relay raises: a code a program can branch on, a message, and a hint for the user."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """The small, stable set of error codes; tests and callers branch on these, never on message text."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    AGENT_NOT_INSTALLED = "AGENT_NOT_INSTALLED"
    AGENT_UNKNOWN = "AGENT_UNKNOWN"
    AGENT_FAILED = "AGENT_FAILED"
    AUTH_MISSING = "AUTH_MISSING"
    AUTH_INVALID = "AUTH_INVALID"
    RATE_LIMITED = "RATE_LIMITED"
    UPSTREAM_ERROR = "UPSTREAM_ERROR"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    JOB_NOT_FOUND = "JOB_NOT_FOUND"
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    SERVER_NOT_FOUND = "SERVER_NOT_FOUND"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    INTERRUPTED = "INTERRUPTED"
    CWD_NOT_ALLOWED = "CWD_NOT_ALLOWED"
    PERMISSION_NOT_GRANTED = "PERMISSION_NOT_GRANTED"  # above the person's grant, and no person confirmed it
    LIMIT_REACHED = "LIMIT_REACHED"
    CONFIG_INVALID = "CONFIG_INVALID"
    UNSUPPORTED_PLATFORM = "UNSUPPORTED_PLATFORM"  # a CLI job on a platform with no job runtime (Windows)
    TOOL_CHANGED = "TOOL_CHANGED"
    MAX_TURNS = "MAX_TURNS"
    STORE_BUSY = "STORE_BUSY"
    STORE_DAMAGED = "STORE_DAMAGED"
    STORE_READONLY = "STORE_READONLY"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"  # the store's server (PostgreSQL) cannot be reached now: try again
    DISK_FULL = "DISK_FULL"
    GIT_FAILED = "GIT_FAILED"  # a git command of a worktree job failed (the message has git's own words)
    LAND_CONFLICT = "LAND_CONFLICT"  # a job's branch does not apply onto the target: nothing was changed
    LAND_TEST_FAILED = "LAND_TEST_FAILED"  # the land's test command failed: nothing was changed
    PUSH_REFUSED = "PUSH_REFUSED"  # a repository reached by URL refused a job's branch (it stays on the worker)
    SETUP_FAILED = "SETUP_FAILED"  # a new worktree's setup command failed: its agent was not started
    NOT_STEERABLE = "NOT_STEERABLE"  # job_send: the job cannot take a message (ended, print mode, out of reach)
    INTERNAL = "INTERNAL"


class RelayError(Exception):
    """A failure explained to the user: `code` for programs, `message` for people, `hint` says what to do."""

    def __init__(self, code: ErrorCode, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "hint": self.hint}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RelayError:
        try:
            code = ErrorCode(str(data.get("code", "INTERNAL")))
        except ValueError:
            code = ErrorCode.INTERNAL
        return cls(code, str(data.get("message", "")), str(data.get("hint", "")))

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}" + (f" (hint: {self.hint})" if self.hint else "")

    def __repr__(self) -> str:
        return f"RelayError({self.code.value!r}, {self.message!r}, {self.hint!r})"


def invalid(message: str, hint: str) -> RelayError:
    """Shorthand for the most common error: the caller passed something relay cannot use."""
    return RelayError(ErrorCode.INVALID_ARGUMENT, message, hint)
