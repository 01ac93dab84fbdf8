"""The ACP driver as a real process against a tiny ACP agent written with the SDK's agent side (fake_agent.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.agents.acp import inbox

pytestmark = pytest.mark.slow  # each test starts the driver and an ACP agent: two Pythons importing the SDK

FAKE_AGENT = Path(__file__).parent / "fake_agent.py"
# Every wait is bounded by this many seconds.
WAIT_S = 20.0


class Run:
    """A driver process started on a prompt, with its job folder and cwd."""

    def __init__(self, tmp: Path, prompt: str, *options: str) -> None:
        self.job_dir = tmp / "job"
        self.cwd = tmp / "work"
        self.job_dir.mkdir(exist_ok=True)  # a second run in the same folder: a retry
        self.cwd.mkdir(exist_ok=True)
        self.stdout = self.job_dir / "stdout"
        argv = [
            sys.executable,
            "-m",
            "relay.agents.acp.driver",
            f"--cwd={self.cwd}",
            f"--job-dir={self.job_dir}",
            *options,
            "--",
            sys.executable,
            str(FAKE_AGENT),
        ]
        with open(self.stdout, "wb") as out:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE, cwd=self.cwd, start_new_session=True
            )
        assert self.proc.stdin is not None
        self.proc.stdin.write(prompt.encode())
        self.proc.stdin.close()

    def lines(self) -> list[dict[str, Any]]:
        text = self.stdout.read_text(encoding="utf-8")
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]

    def wait_for(self, kind: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            found = [ln for ln in self.lines() if ln["type"] == kind]
            if found:
                return found[0]
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"no {kind} line; the driver printed {self.lines()}")

    def finish(self) -> tuple[int, list[dict[str, Any]], str]:
        code = self.proc.wait(WAIT_S)
        assert self.proc.stderr is not None
        return code, self.lines(), self.proc.stderr.read().decode()

    def answer(self, lines: list[dict[str, Any]]) -> str:
        return "".join(
            ln["update"]["update"]["content"]["text"]
            for ln in lines
            if ln["type"] == "update" and ln["update"]["update"]["sessionUpdate"] == "agent_message_chunk"
        )


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Any]:
    started: list[Run] = []

    def start(prompt: str, *options: str) -> Run:
        folder = tmp_path / f"run-{len(started)}"
        folder.mkdir()
        r = Run(folder, prompt, *options)
        started.append(r)
        return r

    yield start
    for r in started:
        if r.proc.poll() is None:
            os.killpg(r.proc.pid, signal.SIGKILL)
            r.proc.wait(WAIT_S)


def test_a_prompt_runs_to_a_result_with_the_session_its_updates_and_the_mode_the_permission_maps_to(run: Any) -> None:
    r = run("-rf looks like a flag but is the prompt", "--mode=bypass", "--mode=accept-edits")
    code, lines, stderr = r.finish()
    assert code == 0, stderr
    kinds = [ln["type"] for ln in lines]
    assert kinds[0] == "session" and kinds[-1] == "result"
    session = lines[0]
    assert session["modes"] == ["default", "accept-edits"] and session["mode"] == "accept-edits"
    assert "mode set to accept-edits" in stderr
    assert r.answer(lines) == "echo 1: -rf looks like a flag but is the prompt"
    assert lines[-1] == {
        "type": "result",
        "stopReason": "end_turn",
        "sessionId": session["sessionId"],
        "usage": {"totalTokens": 15, "inputTokens": 10, "outputTokens": 5},
    }
    assert (r.job_dir / inbox.INBOX_NAME).exists(), "the driver makes its inbox, so relay knows to post there"


def test_a_permission_request_is_answered_from_the_inbox_with_an_offered_option(run: Any) -> None:
    r = run("please ASK")
    request = r.wait_for("permission_request")
    assert request["toolCall"]["title"] == "rm -rf build"
    assert [o["optionId"] for o in request["options"]] == ["allow", "deny"]
    inbox.post(
        r.job_dir, {"type": "permission_answer", "id": request["id"], "outcome": "selected", "optionId": "allow"}
    )
    code, lines, stderr = r.finish()
    assert code == 0, stderr
    assert "permission=selected:allow" in r.answer(lines)
    answer = next(ln for ln in lines if ln["type"] == "permission_answer")
    assert answer == {
        "type": "permission_answer",
        "id": request["id"],
        "run": request["run"],
        "outcome": "selected",
        "optionId": "allow",
        "by": "inbox",
    }


def test_an_answer_naming_an_option_not_offered_denies(run: Any) -> None:
    r = run("please ASK")
    request = r.wait_for("permission_request")
    inbox.post(
        r.job_dir, {"type": "permission_answer", "id": request["id"], "outcome": "selected", "optionId": "always"}
    )
    _, lines, _ = r.finish()
    assert "permission=cancelled:-" in r.answer(lines)


def test_a_permission_request_nobody_answers_is_denied_after_the_timeout_never_allowed(run: Any) -> None:
    r = run("please ASK", "--permission-timeout=0.5")
    code, lines, stderr = r.finish()
    assert code == 0, stderr
    assert "permission=cancelled:-" in r.answer(lines)
    assert next(ln for ln in lines if ln["type"] == "permission_answer")["by"] == "timeout"


def test_a_steering_message_is_sent_into_the_same_session_after_the_turn(run: Any) -> None:
    r = run("first SLOW")
    r.wait_for("session")
    inbox.post(r.job_dir, {"type": "send", "id": "m-1", "text": "also add tests"})
    inbox.post(r.job_dir, {"type": "cancel"})  # ends the slow first turn; queued messages go with it
    code, lines, _ = r.finish()
    assert code == 0
    assert lines[-1]["stopReason"] == "cancelled"
    assert not [ln for ln in lines if ln["type"] == "sent"]

    r2 = run("first ASK")  # its first turn waits for an answer: the message is posted while it runs
    asked = r2.wait_for("permission_request")
    inbox.post(r2.job_dir, {"type": "send", "id": "m-2", "text": "second turn"})
    inbox.post(r2.job_dir, {"type": "permission_answer", "id": asked["id"], "outcome": "selected", "optionId": "allow"})
    code, lines, _ = r2.finish()
    assert code == 0
    sent = [ln for ln in lines if ln["type"] == "sent"]
    assert sent == [{"type": "sent", "id": "m-2", "text": "second turn"}]
    assert r2.answer(lines) == "echo 1: first ASK permission=selected:allowecho 2: second turn"
    assert lines[-1]["usage"] == {"totalTokens": 30, "inputTokens": 20, "outputTokens": 10}
    sessions = {ln["update"]["sessionId"] for ln in lines if ln["type"] == "update"}
    assert len(sessions) == 1


def test_sigterm_sends_acps_cancel_and_the_driver_ends_with_a_cancelled_result(run: Any) -> None:
    r = run("wait SLOW")
    r.wait_for("session")
    deadline = time.monotonic() + WAIT_S
    while "waiting" not in r.answer(r.lines()) and time.monotonic() < deadline:
        time.sleep(0.02)
    r.proc.send_signal(signal.SIGTERM)
    code, lines, _ = r.finish()
    assert code == 0
    assert {"type": "notice", "message": "cancel (signal)"} in lines
    assert lines[-1]["type"] == "result" and lines[-1]["stopReason"] == "cancelled"


def test_client_file_access_stays_inside_the_jobs_folder_and_read_only_refuses_writes(run: Any) -> None:
    r = run("WRITE and OUTSIDE", "--client-fs")
    code, lines, stderr = r.finish()
    assert code == 0, stderr
    assert (r.cwd / "out.txt").read_text() == "written by the fake agent\n"
    assert "outside=refused(-32602)" in r.answer(lines)


def test_a_read_only_job_cannot_write_through_the_client(tmp_path: Path, run: Any) -> None:
    r = run("WRITE", "--client-fs", "--read-only")
    code, lines, _ = r.finish()
    assert not (r.cwd / "out.txt").exists()
    assert code == 1 and lines[-1]["type"] == "error" and "read-only" in lines[-1]["message"]


def test_a_resumed_session_is_loaded_without_its_replayed_history_in_the_output(run: Any) -> None:
    r = run("again", "--session-id=fake-old")
    code, lines, _ = r.finish()
    assert code == 0
    assert lines[0]["type"] == "session" and lines[0]["sessionId"] == "fake-old"
    assert "REPLAYED" not in r.answer(lines)


def test_a_replay_sent_after_the_answer_to_the_load_is_kept_out_of_the_output_too(run: Any) -> None:
    r = run("again PAUSE", "--session-id=fake-late")
    code, lines, _ = r.finish()
    assert code == 0
    answer = r.answer(lines)
    assert "REPLAYED" not in answer and answer.startswith("echo 1: again PAUSE"), answer


def test_an_agent_that_cannot_start_is_an_error_line_not_a_traceback(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "relay.agents.acp.driver", f"--cwd={tmp_path}", "--", str(tmp_path / "no-such-agent")]
    proc = subprocess.run(argv, input="hello", capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == 1
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["type"] == "error" and "no-such-agent" in last["message"]
