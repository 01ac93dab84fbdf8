#!/usr/bin/env -S python3 -S
"""A fake ACP driver for relay's tests: prints the driver's JSON lines and reads the job's inbox, as the real one.

    driver.py JOB_FOLDER PROMPT

Directives ride in the prompt as `[[acp:key=value,flag,...]]`:
  ask=KIND[+KIND...]  ask permission for one tool call of each kind (execute, edit, read, other...), one after the
                      other, each waiting for its `permission_answer` in the inbox; it then says what it got:
                      "allowed" (the allow option), "rejected" (the reject option), "cancelled", or "no answer"
                      (none within WAIT_S: it denies by itself, as the real driver does)
  steer               wait for one `send` message in the inbox, report it delivered (a `steer` line) and end
                      with "got: TEXT"
  again               after the asks, start a second driver run in the same folder (as a retry does) and ask
                      them again, numbered from 1 again
Like relay's driver, each run writes a fresh id to the folder's `inbox.run`, reads the inbox from its end and takes
only the messages for its run (one naming another run is ignored; one naming none is taken, as from an old relay).
Lines it prints: {"type": "session.started"}, {"type": "permission_request", "id", "run", "toolCall", "options"},
{"type": "message", "text"}, {"type": "steer", "id", "text"}, then {"type": "result", "text"}.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

# How long it waits for an answer or a message before it goes on without one (the real driver's timeout, shortened).
WAIT_S = 60.0
POLL_S = 0.02
TITLES = {
    "execute": ("Run rm -rf build/", {"command": "rm -rf build/"}),
    "edit": ("Edit notes.txt", {"path": "notes.txt", "new": "hello"}),
    "read": ("Read notes.txt", {"path": "notes.txt"}),
}
OPTIONS = [
    {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
]


def say(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class Inbox:
    def __init__(self, folder: Path) -> None:
        """A new run in `folder`: its id in `inbox.run`, the inbox read from its end."""
        self.path = folder / "inbox.jsonl"
        self.run = secrets.token_hex(4)
        (folder / "inbox.run").write_text(self.run + "\n")
        self.offset = os.path.getsize(self.path) if self.path.exists() else 0
        self.path.touch()  # the real driver makes its inbox as it starts
        self.partial = b""

    def next(self, wanted: Any) -> dict[str, Any] | None:
        """The next message `wanted` accepts, waiting at most WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(self.offset)
                    chunk = fh.read()
            except FileNotFoundError:
                chunk = b""
            self.offset += len(chunk)
            *lines, self.partial = (self.partial + chunk).split(b"\n")
            for line in lines:
                message = json.loads(line)
                if message.get("run", self.run) == self.run and wanted(message):
                    return message
            time.sleep(POLL_S)
        return None


def main() -> int:
    folder, prompt = Path(sys.argv[1]), sys.argv[2]
    found = re.search(r"\[\[acp:([^\]]*)\]\]", prompt)
    parts = [part for part in (found.group(1).split(",") if found else []) if part]
    directives = {part.partition("=")[0]: part.partition("=")[2] for part in parts}
    inbox = Inbox(folder)
    say({"type": "session.started", "session_id": "fake-acp-session", "model": "fake-acp"})
    said: list[str] = []
    kinds = [k for k in directives.get("ask", "").split("+") if k]
    asks = list(enumerate(kinds, start=1))
    for rerun, (number, kind) in enumerate(asks + (asks if "again" in directives else [])):
        if rerun == len(asks):
            inbox = Inbox(folder)  # the second run
        title, raw = TITLES.get(kind, (f"Do something ({kind})", {"what": kind}))
        call = {"toolCallId": f"call-{number}", "title": title, "kind": kind, "rawInput": raw}
        call["locations"] = [{"path": str(Path.cwd() / "notes.txt")}] if kind in ("edit", "read") else []  # its folder
        say({"type": "permission_request", "id": number, "run": inbox.run, "toolCall": call, "options": OPTIONS})
        got = inbox.next(lambda m, n=number: m.get("type") == "permission_answer" and m.get("id") == n)
        if got is None:
            outcome = "no answer"
        elif got.get("outcome") == "cancelled":
            outcome = "cancelled"
        else:
            outcome = "allowed" if str(got.get("optionId", "")).startswith("allow") else "rejected"
        said.append(f"{kind}: {outcome}")
        say({"type": "message", "text": f"{kind}: {outcome}"})
    if "steer" in directives:
        got = inbox.next(lambda m: m.get("type") == "send")
        if got is None:
            said.append("no message")
        else:
            say({"type": "steer", "id": got["id"], "text": got["text"]})
            said.append(f"got: {got['text']}")
    say({"type": "result", "text": "\n".join(said) or "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
