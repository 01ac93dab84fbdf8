"""The inbox relay posts to and a running ACP driver tails."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from relay.agents.acp import inbox


def test_posted_messages_are_read_back_in_order_and_only_once(tmp_path: Path) -> None:
    box = inbox.Inbox(tmp_path)
    assert box.read() == []
    inbox.post(tmp_path, {"type": "send", "id": "s1", "text": "also add tests\n"})
    inbox.post(tmp_path, {"type": "cancel"})
    assert box.read() == [{"type": "send", "id": "s1", "text": "also add tests\n"}, {"type": "cancel"}]
    assert box.read() == []
    inbox.post(tmp_path, {"type": "permission_answer", "id": 3, "outcome": "cancelled"})
    assert box.read() == [{"type": "permission_answer", "id": 3, "outcome": "cancelled"}]


def test_a_partial_last_line_waits_for_its_end_and_junk_lines_are_skipped(tmp_path: Path) -> None:
    box = inbox.Inbox(tmp_path)
    path = inbox.inbox_path(tmp_path)
    path.write_bytes(b'not json\n{"type":"nope"}\n{"type":"can')
    assert box.read() == []
    with open(path, "ab") as fh:
        fh.write(b'cel"}\n')
    assert box.read() == [{"type": "cancel"}]


def test_a_message_without_a_known_type_is_refused_before_it_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        inbox.post(tmp_path, {"type": "rm -rf"})
    with pytest.raises(ValueError):
        inbox.post(tmp_path, {"type": "send", "id": "x", "text": "y" * inbox.MAX_MESSAGE_BYTES})
    assert not inbox.inbox_path(tmp_path).exists()


def _post_many(folder: str, tag: int) -> None:
    for i in range(200):
        inbox.post(Path(folder), {"type": "send", "id": f"{tag}-{i}", "text": "x" * 5000})


def test_concurrent_posters_never_interleave_lines(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_post_many, args=(str(tmp_path), tag)) for tag in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    box = inbox.Inbox(tmp_path)
    got: list[dict[str, object]] = []
    while batch := box.read():  # one read takes at most READ_CHUNK bytes
        got += batch
    assert sorted(m["id"] for m in got) == sorted(f"{t}-{i}" for t in range(3) for i in range(200))


def test_a_run_reads_from_where_it_started_and_only_the_messages_posted_for_it(tmp_path: Path) -> None:
    inbox.post(tmp_path, {"type": "cancel"})  # an earlier run's
    run, offset = inbox.start_run(tmp_path)
    box = inbox.Inbox(tmp_path, offset, run)
    assert inbox.current_run(tmp_path) == run and box.read() == []
    inbox.post(tmp_path, {"type": "permission_answer", "id": 1, "run": "0123abcd", "outcome": "cancelled"})
    inbox.post(tmp_path, {"type": "send", "id": "s1", "text": "for the run live now"})
    assert box.read() == [{"type": "send", "id": "s1", "text": "for the run live now", "run": run}]
    again, _ = inbox.start_run(tmp_path)
    assert again != run
    inbox.post(tmp_path, {"type": "cancel"})  # for the new run: the old one's reader never sees it
    assert box.read() == []
