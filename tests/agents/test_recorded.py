"""Every parser on the project's own recordings: the pinned CLIs against the mock model server (scripts/record-golden).

Each recording is replayed through its agent's parser and the result is compared with what the
scenario scripted: the answer, the tokens the mock served, the tool the CLI used and whether it
was refused, the error code of an upstream failure. Session ids change with every recording, so
they are checked against the stream itself (or the id relay resumed).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from relay.agents.base import Parser
from relay.agents.claude import ClaudeParser
from relay.agents.codex import CodexParser
from relay.agents.copilot import CopilotParser, session_id_for
from relay.agents.gemini import GeminiParser
from relay.events import AgentResult, Usage
from tests.agents.golden import REPO, feed
from tests.agents.recorded import (
    AGENTS,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    REFUSED,
    RESUMED,
    SCENARIO_NAMES,
    TARGET,
    TEXT,
    WROTE,
    Recording,
    load,
    recorded_dir,
    vendor_message,
)

PARSERS: dict[str, type[Parser]] = {
    "claude": ClaudeParser,
    "codex": CodexParser,
    "gemini": GeminiParser,
    "copilot": CopilotParser,
}
CASES = [(agent, scenario) for agent in AGENTS for scenario in SCENARIO_NAMES]
IDS = [f"{agent}-{scenario}" for agent, scenario in CASES]

# Tokens: what the scenario scripted, or the mock's default 31 in / 7 out per turn.
SERVED = Usage(input=INPUT_TOKENS, output=OUTPUT_TOKENS, cached=0)
ONE_TURN = Usage(input=31, output=7, cached=0)
TWO_TURNS = Usage(input=62, output=14, cached=0)
# Copilot prints no token counts in its JSON stream.
USAGE = {
    "text": {"claude": SERVED, "codex": SERVED, "gemini": SERVED, "copilot": Usage()},
    "tool_write": {"claude": TWO_TURNS, "codex": TWO_TURNS, "gemini": TWO_TURNS, "copilot": Usage()},
    "tool_write_read_only": {"claude": TWO_TURNS, "codex": TWO_TURNS, "gemini": TWO_TURNS, "copilot": Usage()},
    # Codex reports the whole thread's tokens on a resumed run.
    "resume": {"claude": ONE_TURN, "codex": TWO_TURNS, "gemini": ONE_TURN, "copilot": Usage()},
}
# The tool each CLI writes a file with.
WRITE_TOOL = {"claude": "Write", "codex": "shell", "gemini": "write_file", "copilot": "create"}
ERROR_CODES = {"error_401": "AUTH_INVALID", "error_429": "RATE_LIMITED", "error_500": "UPSTREAM_ERROR"}
# Some CLIs drop the vendor's error text and print their own; the parser can only pass that on.
CLI_OWN_MESSAGE = {
    ("codex", "error_429"): "429",
    ("codex", "error_500"): "high demand",
    ("copilot", "error_401"): "HTTP 401",
}
# The model's echo of the tool output follows this, after the scripted answer.
ECHO = " tool output was: "
# What `summary` shows as the answer of a CLI that prints its error as the result text (claude).
REPEATS_ERROR = "<the error message>"


def replay(agent: str, rec: Recording) -> AgentResult:
    parser = PARSERS[agent]()
    feed(parser, rec.stdout)
    return parser.finish(rec.exit_code, rec.stderr)


def session_in_stream(agent: str, rec: Recording) -> str:
    """The session id the CLI announced (copilot's is the one relay named from the job id)."""
    if agent == "copilot":
        return session_id_for(rec.meta["job_id"])
    for line in rec.stdout.splitlines():
        if line.startswith("{"):
            event: dict[str, Any] = json.loads(line)
            for key in ("session_id", "thread_id"):
                if isinstance(event.get(key), str):
                    return event[key]
    raise AssertionError(f"no session id in {agent}'s stream")


def summary(result: AgentResult) -> dict[str, Any]:
    """The facts a scenario determines, in one object."""
    answer = result.text.split(ECHO)[0]
    if result.error is not None and result.text == result.error.message:
        answer = REPEATS_ERROR
    return {
        "ok": result.ok,
        "answer": answer,
        "usage": result.usage,
        "tools": [(t["name"], t["ok"]) for t in result.tool_uses],
        "denied": [d["tool_name"] for d in result.permission_denials],
        "files_changed": list(result.files_changed),
        "error": result.error.code.value if result.error else None,
    }


def expected(agent: str, scenario: str) -> dict[str, Any]:
    base: dict[str, Any] = {"ok": True, "tools": [], "denied": [], "files_changed": [], "error": None}
    if scenario == "text":
        return {**base, "answer": TEXT, "usage": USAGE[scenario][agent]}
    if scenario == "resume":
        return {**base, "answer": RESUMED, "usage": USAGE[scenario][agent]}
    tool = WRITE_TOOL[agent]
    if scenario == "tool_write":
        # Only copilot names the files it changed; relay asks git for the others.
        changed = [TARGET] if agent == "copilot" else []
        return {
            **base,
            "answer": WROTE,
            "usage": USAGE[scenario][agent],
            "tools": [(tool, True)],
            "files_changed": changed,
        }
    if scenario == "tool_write_read_only":
        if agent == "codex":
            # Codex's sandbox refuses the command without an item: only the model's echo shows it.
            return {**base, "answer": REFUSED, "usage": USAGE[scenario][agent]}
        return {**base, "answer": REFUSED, "usage": USAGE[scenario][agent], "tools": [(tool, False)], "denied": [tool]}
    answer = REPEATS_ERROR if agent == "claude" else ""
    return {**base, "ok": False, "answer": answer, "usage": Usage(), "error": ERROR_CODES[scenario]}


@pytest.mark.parametrize(("agent", "scenario"), CASES, ids=IDS)
def test_a_recorded_run_parses_to_what_its_scenario_scripted(agent: str, scenario: str) -> None:
    assert summary(replay(agent, load(agent, scenario))) == expected(agent, scenario)


@pytest.mark.parametrize(("agent", "scenario"), CASES, ids=IDS)
def test_a_recorded_run_keeps_the_session_the_cli_announced_or_resumed(agent: str, scenario: str) -> None:
    rec = load(agent, scenario)
    result = replay(agent, rec)
    if scenario == "resume":
        assert result.session_id == rec.meta["resumed_session_id"]
        if agent != "copilot":
            assert result.session_id == session_in_stream(agent, rec)
    else:
        assert result.session_id == session_in_stream(agent, rec)


@pytest.mark.parametrize(("agent", "scenario"), [c for c in CASES if c[1].startswith("error_")], ids=str)
def test_an_upstream_error_carries_the_vendors_message_or_the_clis_own(agent: str, scenario: str) -> None:
    result = replay(agent, load(agent, scenario))
    assert result.error is not None and result.error.hint
    status = int(scenario.removeprefix("error_"))
    assert CLI_OWN_MESSAGE.get((agent, scenario), vendor_message(status)) in result.error.message


@pytest.mark.parametrize("agent", AGENTS)
def test_the_echoed_tool_output_shows_the_write_and_the_refusal(agent: str) -> None:
    wrote = replay(agent, load(agent, "tool_write")).text
    refused = replay(agent, load(agent, "tool_write_read_only")).text
    assert ECHO in wrote and ECHO in refused
    if agent == "codex":
        assert "Read-only file system" in refused
    else:
        assert "hello.txt" in wrote


def _pins() -> dict[str, str]:
    """The agents' pins; the ACP adapters pinned beside them (@zed-industries) record no golden."""
    text = (REPO / "scripts" / "install-clis").read_text(encoding="utf-8")
    found = dict(re.findall(r'"(@[\w.-]+/[\w.-]+)@([\w.-]+)"', text))
    return {package: version for package, version in found.items() if not package.startswith("@zed-industries/")}


@pytest.mark.parametrize("agent", AGENTS)
def test_every_recording_comes_from_the_cli_version_install_clis_pins(agent: str) -> None:
    pins = _pins()
    assert len(pins) == len(AGENTS), pins
    for scenario in SCENARIO_NAMES:
        package, _, version = load(agent, scenario).meta["package"].rpartition("@")
        assert (package, version) == (package, pins.get(package)), (
            f"{agent}/{scenario} was recorded with {package}@{version}; run scripts/record-golden after a pin change"
        )


@pytest.mark.parametrize("agent", AGENTS)
def test_the_recordings_folder_holds_exactly_the_scenarios(agent: str) -> None:
    names = sorted(p.name for p in recorded_dir(agent).iterdir())
    assert names == sorted(f"{s}.{ext}" for s in SCENARIO_NAMES for ext in ("json", "stderr", "stdout"))
