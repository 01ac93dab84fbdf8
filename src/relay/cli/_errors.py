"""How the CLI reports a failure: one line on stderr (`relay: CODE: message — hint: ...`), a traceback only with --debug."""

from __future__ import annotations

import sys
import traceback
from typing import TextIO, cast

from relay.errors import ErrorCode, RelayError

# Exit status of a command that failed with a RelayError (bad input, missing CLI or key, unknown job).
EXIT_ERROR = 2
# Exit status of a command that failed with an exception relay did not expect (a bug; EX_SOFTWARE).
EXIT_INTERNAL = 70
# Exit status when relay's storage failed: the disk is full, RELAY_HOME is read-only, relay.db is
# damaged (EX_IOERR); and when relay.db stayed locked by another process or the PostgreSQL store cannot be
# reached (EX_TEMPFAIL: try again).
EXIT_STORAGE = 74
EXIT_STORE_BUSY = 75
_STORAGE = (ErrorCode.DISK_FULL, ErrorCode.STORE_READONLY, ErrorCode.STORE_DAMAGED)
INTERNAL_HINT = "rerun with --debug and report it"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def error_line(code: str, message: str, hint: str = "") -> str:
    """The one line the CLI prints for an error: `relay: CODE: message — hint: ...`."""
    line = f"relay: {code}: {_one_line(message)}"
    return f"{line} — hint: {_one_line(hint)}" if hint.strip() else line


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", exc)
        return [leaf for sub in group.exceptions for leaf in _leaves(sub)]
    return [exc]


def as_relay_error(exc: BaseException) -> RelayError:
    """The error to show for `exc`: a RelayError as raised (even inside a task group's ExceptionGroup), else INTERNAL."""
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, RelayError):
            return leaf
    leaf = leaves[0] if leaves else exc
    detail = str(leaf)
    message = f"{type(leaf).__name__}: {detail}" if detail else type(leaf).__name__
    return RelayError(ErrorCode.INTERNAL, message, INTERNAL_HINT)


def report(exc: BaseException, *, debug: bool, stream: TextIO | None = None) -> int:
    """Print `exc` as one line (after its traceback when `debug`) and return the command's exit status."""
    out = stream or sys.stderr
    if debug:
        traceback.print_exception(exc, file=out)
    err = as_relay_error(exc)
    print(error_line(err.code.value, err.message, err.hint), file=out)
    return exit_status(err)


def exit_status(err: RelayError) -> int:
    """A command's exit status for `err`: refusals 2, storage failures 74, a busy store 75, a bug 70."""
    if err.code is ErrorCode.INTERNAL:
        return EXIT_INTERNAL
    if err.code in (ErrorCode.STORE_BUSY, ErrorCode.STORE_UNAVAILABLE):
        return EXIT_STORE_BUSY
    return EXIT_STORAGE if err.code in _STORAGE else EXIT_ERROR
