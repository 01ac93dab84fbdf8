"""The audit log's hash chain: every job state change is one entry, and any tampering is found and named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from relay.audit import GENESIS, HEAD_FILE, LOG_FILE, AuditLog, iter_lines, parse_loose, verify
from relay.audit.log import sha256, unseal
from relay.cli.main import main
from relay.jobs.engine import Engine, JobRequest
from tests.conftest import REPO, SettingsFactory

LINES = 8


def entries(home: Path) -> list[dict[str, object]]:
    return [e for e in (parse_loose(line) for line in iter_lines(home / LOG_FILE)) if e is not None]


def write_log(home: Path, count: int = LINES) -> list[bytes]:
    log = AuditLog(home)
    for n in range(count):
        log.append("queued" if n % 2 == 0 else "completed", f"job{n // 2:04d}", {"n": n})
    return (home / LOG_FILE).read_bytes().splitlines()


def rewrite(home: Path, lines: list[bytes]) -> None:
    (home / LOG_FILE).write_bytes(b"".join(line + b"\n" for line in lines))


def problems(home: Path) -> list[int]:
    return [p.line for p in verify(home).problems]


def test_each_line_carries_the_hash_of_the_line_before_and_its_own(tmp_path: Path) -> None:
    lines = write_log(tmp_path)
    parsed = [unseal(line) for line in lines]
    assert all(p is not None for p in parsed)
    assert [p["seq"] for p in parsed if p] == list(range(1, LINES + 1))
    assert [p["prev"] for p in parsed if p] == [GENESIS, *(sha256(line) for line in lines[:-1])]
    head = json.loads((tmp_path / HEAD_FILE).read_text())
    assert head == {"seq": LINES, "hash": sha256(lines[-1])}
    report = verify(tmp_path)
    assert (report.ok, report.lines, report.problems, report.notes) == (True, LINES, [], [])


@pytest.mark.parametrize("where", ["body", "hash", "prev"])
def test_one_changed_byte_names_its_line(tmp_path: Path, where: str) -> None:
    lines = write_log(tmp_path)
    line = bytearray(lines[2])
    if where == "body":
        at = line.index(b'"n":2') + 4
        line[at] = ord("7")
    elif where == "hash":
        at = line.index(b'"hash":"') + 10
        line[at] = ord("0") if line[at] != ord("0") else ord("1")
    else:
        at = line.index(b'"prev":"') + 10
        line[at] = ord("0") if line[at] != ord("0") else ord("1")
    lines[2] = bytes(line)
    rewrite(tmp_path, lines)
    report = verify(tmp_path)
    assert [p.line for p in report.problems] == [3]
    assert "line 3" in report.problems[0].message


def test_an_edited_line_with_a_recomputed_hash_is_named_by_the_broken_link_after_it(tmp_path: Path) -> None:
    from relay.audit.log import seal

    lines = write_log(tmp_path)
    forged = unseal(lines[2])
    assert forged is not None
    forged["data"] = {"n": 99}
    lines[2] = seal(forged)
    rewrite(tmp_path, lines)
    report = verify(tmp_path)
    assert [p.line for p in report.problems] == [4]
    assert "line 3 was changed" in report.problems[0].message


def test_a_removed_line_is_named(tmp_path: Path) -> None:
    lines = write_log(tmp_path)
    rewrite(tmp_path, lines[:3] + lines[4:])
    report = verify(tmp_path)
    assert [p.line for p in report.problems] == [4]
    assert "seq 4 removed" in report.problems[0].message


def test_swapped_lines_are_both_named(tmp_path: Path) -> None:
    lines = write_log(tmp_path)
    lines[3], lines[4] = lines[4], lines[3]
    rewrite(tmp_path, lines)
    assert problems(tmp_path) == [4, 5]


def test_lines_cut_off_the_end_are_found_through_the_head(tmp_path: Path) -> None:
    lines = write_log(tmp_path)
    rewrite(tmp_path, lines[:-2])
    report = verify(tmp_path)
    assert [p.line for p in report.problems] == [LINES - 1]
    assert "the last 2 lines (from line 7) were removed" in report.problems[0].message


def test_a_last_line_cut_short_is_named(tmp_path: Path) -> None:
    lines = write_log(tmp_path)
    (tmp_path / LOG_FILE).write_bytes(b"".join(line + b"\n" for line in lines[:-1]) + lines[-1][:40])
    assert problems(tmp_path) == [LINES]


def test_a_removed_log_is_found_through_the_head(tmp_path: Path) -> None:
    write_log(tmp_path)
    (tmp_path / LOG_FILE).unlink()
    assert problems(tmp_path) == [1]


def test_an_append_after_a_cut_short_line_starts_a_fresh_line_and_keeps_counting(tmp_path: Path) -> None:
    lines = write_log(tmp_path, 3)
    (tmp_path / LOG_FILE).write_bytes(lines[0] + b"\n" + lines[1] + b"\n" + lines[2][:30])
    AuditLog(tmp_path).append("queued", "next", {})
    after = (tmp_path / LOG_FILE).read_bytes().splitlines()
    last = unseal(after[-1])
    assert last is not None and last["seq"] == 4 and last["prev"] == sha256(lines[2][:30])
    assert problems(tmp_path) == [3]


APPENDER = """
import sys
from pathlib import Path
sys.path.insert(0, {src!r})
from relay.audit import AuditLog
log = AuditLog(Path(sys.argv[1]))
for n in range(int(sys.argv[2])):
    log.append("running", f"{{sys.argv[3]}}-{{n}}", {{"n": n}})
"""


def test_two_processes_appending_at_once_keep_one_valid_chain(tmp_path: Path) -> None:
    per_process = 300
    code = APPENDER.format(src=str(REPO / "src"))
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(per_process), name]) for name in ("a", "b")
    ]
    # Verified while they write: a line being appended is never taken for a cut or broken one.
    midway = []
    while any(p.poll() is None for p in procs):
        midway.append(verify(tmp_path))
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert midway and all(r.ok for r in midway), [r.problems for r in midway if not r.ok][:1]
    found = entries(tmp_path)
    assert len(found) == 2 * per_process
    assert [e["seq"] for e in found] == list(range(1, 2 * per_process + 1))
    assert {str(e["job_id"]).split("-")[0] for e in found} == {"a", "b"}
    report = verify(tmp_path)
    assert report.ok, report.problems


def test_the_cli_passes_an_untouched_log_and_names_the_changed_line(
    relay_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = write_log(relay_home)
    assert main(["audit", "verify"]) == 0
    assert f"audit log intact: {LINES} lines" in capsys.readouterr().out
    lines[4] = lines[4].replace(b'"n":4', b'"n":5')
    rewrite(relay_home, lines)
    assert main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert "line 5: line 5 was edited" in out
    assert main(["audit", "verify", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [p["line"] for p in report["problems"]] == [5]


def test_audit_show_prints_the_newest_entries(relay_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(relay_home)
    assert main(["audit", "show", "--limit", "3", "--json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["seq"] for e in shown] == [6, 7, 8]
    assert main(["audit", "show", "--job", "job0001"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all("job0001" in line for line in out)


@pytest.mark.anyio
async def test_every_state_change_of_a_job_is_one_entry_in_the_chain(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="audit me", cwd=str(workdir)))
        with anyio.fail_after(60):
            rec = await engine.wait_one(job_id, 60)
        answer = engine.read_output(job_id, "final", 0, 10_000)["text"]
    assert rec.status == "completed"
    mine = [e for e in entries(relay_home) if e["job_id"] == job_id]
    assert [e["event"] for e in mine] == ["queued", "running", "completed"]
    queued, running, completed = (e["data"] for e in mine)
    assert isinstance(queued, dict) and isinstance(running, dict) and isinstance(completed, dict)
    assert (queued["agent"], queued["kind"], queued["prompt"], queued["cwd"]) == (
        "claude",
        "cli",
        "audit me",
        str(workdir),
    )
    assert running["pid"] == rec.pid
    assert (completed["status"], completed["exit_code"], completed["output"]) == ("completed", 0, answer)
    assert completed["cost_usd"] == (rec.result or {}).get("cost_usd")
    assert verify(relay_home).ok


@pytest.mark.anyio
async def test_a_log_that_cannot_be_written_never_fails_the_job_and_the_gap_is_recorded(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    (relay_home / LOG_FILE).mkdir()  # appending to it fails
    async with Engine(make_settings()).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        with anyio.fail_after(60):
            rec = await engine.wait_one(job_id, 60)
        assert rec.status == "completed"
        failures = list(engine.store.audit.failures)
        assert len(failures) == 3 and all(job_id in f for f in failures)
        (relay_home / LOG_FILE).rmdir()
        second = engine.submit(JobRequest(agent="claude", prompt="again", cwd=str(workdir)))
        with anyio.fail_after(60):
            await engine.wait_one(second, 60)
    found = entries(relay_home)
    assert found[0]["event"] == "audit.gap"
    gap = found[0]["data"]
    assert isinstance(gap, dict) and gap["lost"] == 3
    assert [e["event"] for e in found[1:]] == ["queued", "running", "completed"]
    assert verify(relay_home).ok


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("removed", [(LOG_FILE, HEAD_FILE), (LOG_FILE,), (HEAD_FILE,)])
async def test_a_log_removed_with_its_head_is_reported_missing_from_what_the_store_recorded(
    make_settings: SettingsFactory,
    workdir: Path,
    relay_home: Path,
    capsys: pytest.CaptureFixture[str],
    removed: tuple[str, ...],
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    # On PostgreSQL the store is shared by every front: it keeps the mark of this home's log by name.
    store = ["--store", str(request.getfixturevalue("pg_url"))] if backend == "postgresql" else []
    settings = make_settings(**({"RELAY_STORE": store[1]} if store else {}))
    async with Engine(settings).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="audit me", cwd=str(workdir)))
        with anyio.fail_after(60):
            await engine.wait_one(job_id, 60)
    assert main(["audit", "verify", *store]) == 0
    capsys.readouterr()
    written = len(entries(relay_home))
    kept = (relay_home / LOG_FILE).read_bytes().splitlines(keepends=True)
    for name in removed:
        (relay_home / name).unlink()
    if removed == (HEAD_FILE,):  # the head alone goes, and the last line is cut off: the store still counts it
        (relay_home / LOG_FILE).write_bytes(b"".join(kept[:-1]))
    if store:  # the home's relay.db is not what tells: a PostgreSQL front has none worth reading
        (relay_home / "relay.db").unlink(missing_ok=True)
    assert main(["audit", "verify", *store]) == 1
    out = capsys.readouterr().out
    assert "audit log BROKEN" in out
    assert "removed" in out
    assert main(["audit", "verify", "--json", *store]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and report["lines"] == (written - 1 if removed == (HEAD_FILE,) else 0)


def test_a_home_with_jobs_but_no_log_and_no_mark_is_not_called_intact(tmp_path: Path) -> None:
    report = verify(tmp_path, None, jobs=3)
    assert not report.ok
    assert "holds 3 job(s)" in report.problems[0].message
    assert verify(tmp_path, None, jobs=0).ok  # a fresh home: nothing written, nothing missing
