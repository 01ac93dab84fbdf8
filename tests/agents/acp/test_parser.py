"""The ACP driver's lines into events and the envelope, on lines recorded from the real agents and written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relay import events as ev
from relay.agents.acp import SPECS, AcpAdapter
from relay.agents.acp import parser as acp
from relay.agents.acp.parser import AcpParser
from relay.errors import ErrorCode
from relay.events import Event

RECORDED = Path(__file__).parent / "recorded"


def feed_all(parser: AcpParser, lines: list[str]) -> list[Event]:
    found: list[Event] = []
    for line in lines:
        found += parser.feed(line)
    return found


def line(obj: dict[str, Any]) -> str:
    return json.dumps(obj) + "\n"


def update(update: dict[str, Any], session: str = "s-1") -> str:
    return line({"type": "update", "update": {"sessionId": session, "update": update}})


def chunk(text: str) -> str:
    return update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def test_gemini_over_acp_recorded_a_write_its_diff_and_the_answer() -> None:
    parser = AcpParser("gemini")
    found = feed_all(parser, (RECORDED / "gemini-write.jsonl").read_text().splitlines(keepends=True))
    result = parser.finish(0, "")
    types = [e.type for e in found]
    assert types[0] == ev.LOG  # gemini's "[MODE_UPDATE] autoEdit" chunk: not part of the answer
    assert ev.SESSION_STARTED in types and types[-1] == ev.TURN_COMPLETED
    assert result.ok, result.error
    assert result.text == (
        'wrote it DONE tool output was: {"output": "Successfully created and wrote to new file: '
        '/tmp/acpt/g/hello.txt. Here is the updated code:\\nhi\\n"}'
    )
    assert result.session_id == found[types.index(ev.SESSION_STARTED)].data["session_id"]
    assert result.files_changed == ("/tmp/acpt/g/hello.txt",)
    assert [(t["name"], t["kind"], t["status"], t["ok"]) for t in result.tool_uses] == [
        ("Writing to hello.txt", "edit", "completed", True)
    ]


def test_claude_over_acp_recorded_usage_cost_tool_output_and_the_answer() -> None:
    parser = AcpParser("claude")
    found = feed_all(parser, (RECORDED / "claude-write.jsonl").read_text().splitlines(keepends=True))
    result = parser.finish(0, "")
    assert result.ok, result.error
    assert result.text == "wrote it DONE tool output was: File created successfully at: /tmp/acpt/g/hello.txt"
    assert (result.usage.input, result.usage.output, result.usage.cached) == (62, 14, 0)
    assert result.cost_usd is not None and abs(result.cost_usd - 0.000396) < 1e-9
    assert result.files_changed == ("/tmp/acpt/g/hello.txt",)
    completed = [e.data for e in found if e.type == ev.TOOL_COMPLETED]
    assert completed == [
        {
            "id": result.tool_uses[0]["id"],
            "name": "Write hello.txt",
            "ok": True,
            "output": "File created successfully at: /tmp/acpt/g/hello.txt",
        }
    ]
    # The session's other updates (commands, config options) are not in the transcript.
    assert not [e for e in found if e.type == ev.LOG]


def test_plan_permission_request_answer_and_steering_become_events_and_a_denial() -> None:
    parser = AcpParser("gemini")
    call = {"toolCallId": "t-9", "title": "rm -rf build", "kind": "execute", "rawInput": {"command": "rm -rf build"}}
    options = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]
    found = feed_all(
        parser,
        [
            line({"type": "session", "sessionId": "s-1", "modes": ["default"], "mode": "default"}),
            update(
                {"sessionUpdate": "plan", "entries": [{"content": "clean", "status": "pending", "priority": "high"}]}
            ),
            chunk("first answer"),
            line({"type": "permission_request", "id": 1, "sessionId": "s-1", "toolCall": call, "options": options}),
            line({"type": "permission_answer", "id": 1, "outcome": "cancelled", "by": "timeout"}),
            line({"type": "sent", "id": "m-1", "text": "also add tests"}),
            chunk("second "),
            chunk("answer"),
            line({"type": "result", "stopReason": "end_turn", "sessionId": "s-1", "usage": None}),
        ],
    )
    assert [(e.type, e.data) for e in found if e.type in (acp.PLAN, acp.PERMISSION_REQUEST, acp.STEER)] == [
        (acp.PLAN, {"entries": [{"content": "clean", "status": "pending", "priority": "high"}]}),
        (acp.PERMISSION_REQUEST, {"id": 1, "session_id": "s-1", "tool_call": call, "options": options}),
        (acp.STEER, {"id": "m-1", "text": "also add tests"}),
    ]
    result = parser.finish(0, "")
    assert result.ok
    assert result.text == "first answer\n\nsecond answer"
    assert result.permission_denials == (
        {
            "tool_name": "rm -rf build",
            "tool_use_id": "t-9",
            "tool_input": {"command": "rm -rf build"},
            "message": "denied (timeout)",
        },
    )


def test_a_cancelled_turn_is_a_cancel_and_a_driver_error_is_the_jobs_error() -> None:
    cancelled = AcpParser("gemini")
    feed_all(cancelled, [chunk("partial"), line({"type": "result", "stopReason": "cancelled", "sessionId": "s"})])
    result = cancelled.finish(0, "")
    assert not result.ok and result.error is not None and result.error.code == ErrorCode.CANCELLED
    assert result.text == "partial"

    failed = AcpParser("claude")
    events = feed_all(failed, [line({"type": "error", "message": "ACP error -32603: Internal error"}), "not json\n"])
    result = failed.finish(1, "")
    assert [e.type for e in events] == [ev.TURN_FAILED, ev.LOG]
    assert result.error is not None and result.error.code == ErrorCode.AGENT_FAILED
    assert "Internal error" in result.error.message


def test_gemini_over_acp_names_an_upstream_failure_by_gemini_s_own_rules() -> None:
    parser = AcpAdapter(SPECS["gemini"]).parser()
    assert isinstance(parser, AcpParser)
    feed_all(
        parser,
        [
            line(
                {
                    "type": "error",
                    "message": 'ACP error -32603: Internal error: {"details": "[API Error: quota exceeded]"}',
                }
            )
        ],
    )
    result = parser.finish(1, "")
    assert result.error is not None and result.error.code == ErrorCode.RATE_LIMITED


def test_a_driver_that_ends_without_a_result_fails_with_its_stderr() -> None:
    parser = AcpParser("codex")
    feed_all(parser, [chunk("half")])
    result = parser.finish(137, "codex-acp: killed\n")
    assert not result.ok and result.error is not None
    assert result.error.code == ErrorCode.AGENT_FAILED and "codex-acp: killed" in result.error.message


def test_the_adapters_words_for_a_failed_model_api_become_relays_codes() -> None:
    gemini_500 = 'ACP error 500: {"error":{"code":500,"message":"vendor says no","status":"INTERNAL"}}'
    codex_500 = (
        'ACP error -32603: Internal error: {"message": "We\'re currently experiencing high demand, which may cause'
        ' temporary errors.", "codex_error_info": "internal_server_error"}'
    )
    cases = [("gemini", gemini_500, ErrorCode.UPSTREAM_ERROR), ("codex", codex_500, ErrorCode.UPSTREAM_ERROR)]
    for agent, message, code in cases:
        parser = AcpAdapter(SPECS[agent]).parser()
        assert isinstance(parser, AcpParser)
        feed_all(parser, [line({"type": "error", "message": message})])
        result = parser.finish(1, "")
        assert result.error is not None and result.error.code == code, (agent, result.error)
