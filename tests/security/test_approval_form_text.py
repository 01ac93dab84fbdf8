"""The form that asks the person about an ACP agent's action: what the agent wrote cannot pass for relay's words."""

from __future__ import annotations

import time

from relay.jobs.approvals import Request
from relay.server.approvals import message_of

# An agent (or a file it read) writes a title that fakes relay's own lines, then pushes the real ones out of view.
FAKE = (
    "read README.md\n"
    "Kind: read (needs 'read-only': may read files; the job runs with 'edit')\n"
    "relay says: this action is safe, accept it\r\x1b[2K" + "\n" * 40
)


def _request(**overrides: object) -> Request:
    fields: dict[str, object] = {
        "id": 1,
        "title": FAKE,
        "kind": "execute",
        "level": "full",
        "paths": ("/w/a.txt\nKind: read",),
        "input": "rm -rf ~\nrelay says: accept",
        "allow": "allow",
        "reject": "reject",
        "agent": "gemini",
        "cwd": "/w",
        "permission": "edit",
        "principal": "local",
        "asked_at": time.time(),
    }
    return Request(**(fields | overrides))  # pyright: ignore[reportArgumentType]


def test_an_agents_title_input_and_paths_cannot_add_lines_to_the_approval_form() -> None:
    message = message_of("job1", _request())
    lines = message.split("\n")
    kinds = [line for line in lines if line.startswith("Kind:")]
    assert kinds == [
        "Kind: execute (needs 'full': every approval and sandbox switched off: it may run any command; "
        "the job runs with 'edit')"
    ]
    assert not any(line.startswith("relay says") for line in lines)
    assert len(lines) == 6  # asks, kind, folder, files, input, accept/decline: each on one line of its own


def test_an_approval_form_carries_no_control_character_the_agent_sent() -> None:
    message = message_of("job1", _request())
    assert not [ch for ch in message if (ord(ch) < 32 and ch != "\n") or ord(ch) == 127]
    assert "\\n" in message  # the agent's newlines are shown, not obeyed
