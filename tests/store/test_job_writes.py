"""A job's writes sent together (store/jobwrite.py): its running mark, events, outputs and end land in one transaction,
only under the job's claim, on both backends; the store's copy of the job follows this process's own writes."""

from __future__ import annotations

from relay.audit import iter_lines, parse_loose
from relay.events import Event
from relay.store import JobStore, SessionTurn
from relay.store.jobwrite import End, JobWrite, Running
from relay.store.outputs import CHUNK_BYTES
from tests.store.test_claims import W, limits, queue, worker

RUNNING = Running(at=1000.0, pid=4242, pid_start_ticks=9, boot_id="boot-a", owner_pid=1, owner_start_ticks=None,
                  deadline_at=5000.0, idle_timeout_s=60.0)  # fmt: skip


def audit_events(store: JobStore, job_id: str) -> list[str]:
    return [
        str(e["event"]) for line in iter_lines(store.audit.path) if (e := parse_loose(line)) and e["job_id"] == job_id
    ]


def whole(store: JobStore, job_id: str, stream: str) -> bytes:
    data, _ = store.read_output_page(job_id, stream, 0, 8 * CHUNK_BYTES)
    return data


def test_a_job_that_ended_at_its_first_look_is_written_whole_in_one_write(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    turn = SessionTurn("claude", "s-1", "/w", None, "edit", "title", 0.5)
    big = bytes(range(256)) * (CHUNK_BYTES // 128)  # two chunks
    done = store.write_job(
        JobWrite(
            "j",
            epoch,
            running=RUNNING,
            first_seq=0,
            events=[Event("session.started", {"session_id": "s-1"}), Event("message", {"text": "hi"})],
            session_id="s-1",
            outputs=[("stdout", b"line\n"), ("transcript", b"hi\n"), ("result", big)],
            end=End("completed", 0, {"cost_usd": 0.5}, None, "s-1", "m", output="hi", session=turn),
        )
    )
    assert done.held and done.ended
    assert done.sizes == {"stdout": 5, "transcript": 3, "result": len(big)}
    job = store.get_job("j")
    assert job is not None
    assert (job.status, job.pid, job.started_at, job.session_id, job.exit_code) == ("completed", 4242, 1000.0, "s-1", 0)
    assert [e.type for _, _, e in store.events("j")] == ["session.started", "message"]
    assert (whole(store, "j", "stdout"), whole(store, "j", "result")) == (b"line\n", big)
    session = store.get_session("s-1", "claude")
    assert session is not None and session.turns == 1
    assert audit_events(store, "j") == ["queued", "running", "completed"]


def test_nothing_of_a_write_under_a_claim_taken_over_lands(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    assert store.take_over("j", epoch, worker("other")) == epoch + 1
    late = JobWrite(
        "j",
        epoch,
        running=RUNNING,
        events=[Event("message", {"text": "late"})],
        session_id="s-late",
        outputs=[("stdout", b"late\n")],
        end=End("completed", 0, None, None, None, None),
    )
    assert not store.write_job(late).held
    job = store.get_job("j")
    assert job is not None and (job.status, job.pid, job.session_id) == ("queued", None, None)
    assert store.events("j") == [] and store.output_sizes("j")["stdout"] == 0
    assert audit_events(store, "j") == ["queued"]


def test_a_running_mark_refused_for_a_job_that_ended_leaves_its_events_and_output_out(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    # Cancelled before its first look (another front ended it, under the same claim).
    assert store.finish_job("j", "cancelled", exit_code=None, result=None, error=None, session_id=None, model=None)
    first = JobWrite("j", epoch, running=RUNNING, events=[Event("message", {"text": "x"})], outputs=[("stdout", b"x")])
    assert not store.write_job(first).held
    assert store.events("j") == [] and store.output_sizes("j")["stdout"] == 0
    job = store.get_job("j")
    assert job is not None and job.status == "cancelled" and job.pid is None


def test_the_store_reads_a_job_after_this_process_wrote_it_as_the_write_left_it(store: JobStore) -> None:
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    claimed = store.get_job("j")
    assert claimed is not None and (claimed.worker, claimed.epoch, claimed.owner_pid) == ("w/1", epoch, 100)
    assert store.write_job(JobWrite("j", epoch, running=RUNNING)).held
    running = store.get_job("j")
    assert running is not None and (running.status, running.pid) == ("running", 4242)
    store.write_job(JobWrite("j", epoch, end=End("failed", 2, None, {"code": "AGENT_FAILED"}, None, None)))
    ended = store.get_job("j")
    assert ended is not None and (ended.status, ended.exit_code, ended.error) == ("failed", 2, {"code": "AGENT_FAILED"})
