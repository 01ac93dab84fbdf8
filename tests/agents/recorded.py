"""The project's own golden runs: each real CLI, at its pinned version, against the e2e tier's mock model server.

`scripts/record-golden` plays every `Scenario` below with every agent and writes what the CLI
printed under `tests/agents/golden/<agent>/recorded/`: `<scenario>.stdout` (the stream relay
parses), `<scenario>.stderr`, and `<scenario>.json` (exit code, argv, CLI version). The parser
tests in `test_recorded.py` replay those files and check the result against what the scenario
scripted, so a re-recording after a pin change keeps them meaningful.

Paths are stable in the files: the run's temporary root reads `<root>` and the mock's address
`<mock-url>` (or `<mock-host>` without the scheme); the workspace is `<root>/work`, the CLIs'
install folder `.e2e/clis/node_modules`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.agents.base import Permission
from tests.e2e.mocks import Reply, WriteFile

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
AGENTS = ("claude", "codex", "gemini", "copilot")
ROOT_MARK = "<root>"
MOCK_MARK = "<mock-url>"
MOCK_HOST_MARK = "<mock-host>"
# The file a writing scenario asks the agent to create (`<root>` is the run's temporary root).
TARGET = f"{ROOT_MARK}/work/hello.txt"
TARGET_CONTENT = "written by the mock model\n"


@dataclass(frozen=True)
class Scenario:
    """One scripted run: the prompt, the model turns the mock serves, the permission relay asks for.

    `always` answers every turn (an upstream error, retries included); `resume` first runs the
    prompt `FIRST_PROMPT` against `replies[0]` and then records the resumed run, which gets the
    remaining replies.
    """

    name: str
    prompt: str
    replies: tuple[Reply, ...] = ()
    always: Reply | None = None
    permission: Permission = "read-only"
    resume: bool = False


WRITE = WriteFile(TARGET, TARGET_CONTENT)
FIRST_PROMPT = "first question ASK-1a"
TEXT = "plain answer ANS-7f3"
WROTE = "wrote it DONE-5e1"
REFUSED = "could not write DONE-0b2"
RESUMED = "second answer ANS-2b"
INPUT_TOKENS = 123
OUTPUT_TOKENS = 45
# The vendor's error message the mock sends with an HTTP status (the CLI may print its own instead).
ERROR_STATUSES = (401, 429, 500)


def vendor_message(status: int) -> str:
    return f"vendor says no ERR-{status}-d4"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "text",
        "say something PROMPT-91c",
        (Reply(text=TEXT, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS),),
    ),
    Scenario(
        "tool_write",
        "write hello.txt",
        (Reply(write=WRITE), Reply(text=WROTE, echo_tool_result=True)),
        permission="edit",
    ),
    Scenario(
        "tool_write_read_only",
        "write hello.txt",
        (Reply(write=WRITE), Reply(text=REFUSED, echo_tool_result=True)),
    ),
    Scenario(
        "resume",
        "second question ASK-2b",
        (Reply(text="first answer ANS-1a"), Reply(text=RESUMED)),
        resume=True,
    ),
    *(
        Scenario(f"error_{status}", "this will fail", always=Reply(status=status, error=vendor_message(status)))
        for status in ERROR_STATUSES
    ),
)
SCENARIO_NAMES = tuple(s.name for s in SCENARIOS)


@dataclass(frozen=True)
class Recording:
    """One recorded run of a CLI, as the parser tests read it back."""

    stdout: str
    stderr: str
    exit_code: int
    meta: dict[str, Any]


def recorded_dir(agent: str) -> Path:
    return GOLDEN_DIR / agent / "recorded"


def load(agent: str, scenario: str) -> Recording:
    """A recorded run; a missing file is an error (the recordings are part of the repository)."""
    folder = recorded_dir(agent)
    meta = json.loads((folder / f"{scenario}.json").read_text(encoding="utf-8"))
    return Recording(
        stdout=(folder / f"{scenario}.stdout").read_text(encoding="utf-8"),
        stderr=(folder / f"{scenario}.stderr").read_text(encoding="utf-8"),
        exit_code=int(meta["exit_code"]),
        meta=meta,
    )
