"""A running ACP job's inbox: relay appends JSON lines to `<job folder>/inbox.jsonl`, the driver tails them.

The inbox is how relay (any relay: the one that started the job or one started after a restart) talks to
a job's driver process without a socket: `post` appends one whole line with one O_APPEND write and an
fsync, so concurrent posters never interleave and a line is either absent or complete; `Inbox` reads
what was appended since its offset, keeping a partial last line for the next read.

Messages (each a JSON object with a string "type"):
- `{"type": "send", "id": "<str>", "text": "..."}`: a steering message for the live session.
- `{"type": "permission_answer", "id": <int>, "outcome": "selected", "optionId": "..."}`, or
  `{"type": "permission_answer", "id": <int>, "outcome": "cancelled"}`: the answer to a pending request.
- `{"type": "cancel"}`: send ACP's session/cancel.

Each message carries `"run"`: the id of the driver run it is for. A job folder outlives one driver run (a retry
after a lost worker, a run started again in the same folder), so each run starts reading at the inbox's end and
takes only the messages for its own run: an earlier run's `send`, `cancel` or answer never reaches it. The driver
writes its run's id to `inbox.run` (`start_run`) and prints it in its lines; `post` stamps a message that names no
run with the run of that file, the run live in the folder when it is posted.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

INBOX_NAME = "inbox.jsonl"
# The id of the driver run that reads the inbox now (written by the driver as it starts).
RUN_NAME = "inbox.run"
# Where the driver learns its job's folder when --job-dir is not given.
JOB_DIR_ENV = "RELAY_JOB_DIR"
# One message is at most this many bytes once encoded (a steering text is a prompt; prompts are bounded).
MAX_MESSAGE_BYTES = 1 << 20
# The most the driver reads in one go; the rest waits for the next read.
READ_CHUNK = 1 << 20

SEND = "send"
PERMISSION_ANSWER = "permission_answer"
CANCEL = "cancel"
TYPES = frozenset({SEND, PERMISSION_ANSWER, CANCEL})


def inbox_path(folder: Path) -> Path:
    return folder / INBOX_NAME


def encode(message: dict[str, Any]) -> bytes:
    """One message as one line; ValueError when it has no known type, is not JSON or is too long."""
    kind = message.get("type")
    if kind not in TYPES:
        raise ValueError(f"inbox message type must be one of {sorted(TYPES)}, not {kind!r}")
    # ensure_ascii keeps the line free of raw newlines and of bytes a reader could split.
    data = (json.dumps(message, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"inbox message is {len(data)} bytes; the most is {MAX_MESSAGE_BYTES}")
    return data


def current_run(folder: Path) -> str | None:
    """The id of the driver run live in the folder (its `inbox.run`), or None when no driver wrote one."""
    try:
        run = (folder / RUN_NAME).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None
    return run or None


def start_run(folder: Path) -> tuple[str, int]:
    """A new driver run in the folder: its id, written to `inbox.run` (so posts from now on are for it), and the
    inbox's size, where it starts reading (what earlier runs were sent is theirs). Makes the inbox if absent."""
    run = secrets.token_hex(8)
    tmp = folder / f"{RUN_NAME}.{run}.tmp"
    tmp.write_text(run + "\n", encoding="ascii")
    os.replace(tmp, folder / RUN_NAME)
    try:
        offset = os.stat(inbox_path(folder)).st_size
    except FileNotFoundError:
        offset = 0
    open_inbox(folder)
    return run, offset


def post(folder: Path, message: dict[str, Any]) -> None:
    """Append one message to the job folder's inbox: one O_APPEND write of the whole line, then fsync.

    A message that names no `run` is for the run live in the folder now (`current_run`).
    Raises ValueError for a message `encode` refuses, OSError when the folder is gone or unwritable.
    """
    if "run" not in message:
        run = current_run(folder)
        message = message | ({"run": run} if run else {})
    data = encode(message)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(inbox_path(folder), flags, 0o600)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a regular file takes a whole append or fails (disk full): never half a line
            raise OSError(f"short write to the inbox ({written} of {len(data)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)


def open_inbox(folder: Path) -> None:
    """Make the folder's inbox (empty) if it is not there: the driver does at start, saying it reads one."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    os.close(os.open(inbox_path(folder), flags, 0o600))


def post_if_open(folder: Path, message: dict[str, Any]) -> bool:
    """Post `message` when the folder has an inbox (an ACP job's driver made it); False when it has none."""
    if not inbox_path(folder).is_file():
        return False
    try:
        post(folder, message)
    except OSError:
        return False
    return True


def decode(line: bytes) -> dict[str, Any] | None:
    """A message from one line, or None for a line that is not a JSON object with a known type."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("type") not in TYPES:  # pyright: ignore[reportUnknownMemberType]
        return None
    return value  # pyright: ignore[reportUnknownVariableType]


class Inbox:
    """Tails a job folder's inbox from an offset: `read()` returns the whole messages appended since (with `run`,
    only those for that run)."""

    def __init__(self, folder: Path, offset: int = 0, run: str | None = None) -> None:
        self.path = inbox_path(folder)
        self.offset = offset
        self.run = run
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        """New complete messages (invalid lines skipped); an absent inbox has none. Never blocks."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(READ_CHUNK)
        except FileNotFoundError:
            return []
        if not chunk:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        if len(self._partial) > MAX_MESSAGE_BYTES:  # no newline in sight: not a message anyone posted
            self._partial = b""
        found: list[dict[str, Any]] = []
        for line in lines:
            message = decode(line)
            if message is not None and (self.run is None or message.get("run") == self.run):
                found.append(message)
        return found
