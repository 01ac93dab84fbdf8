"""The output mirror puts only a small piece of output into a look's transaction (which holds the job's row from its
first statement); a larger piece is appended alone, first, so a transaction cut off half-sent holds the row while
a few packets are missing, not a megabyte."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.jobs.mirror import INLINE_BYTES, Mirror
from relay.runtime.supervisor import JobFiles
from relay.store import JobStore
from relay.store.jobwrite import JobWrite, Pending
from tests.store.conftest import store  # noqa: F401  (the fixture: both backends)
from tests.store.test_claims import W, limits, queue


@pytest.mark.parametrize("size", [INLINE_BYTES // 4, INLINE_BYTES * 4])
def test_a_looks_output_rides_with_its_write_only_when_it_is_small(store: JobStore, tmp_path: Path, size: int) -> None:  # noqa: F811
    queue(store, ("j", "claude"))
    [(_, _, epoch)] = store.claim(W, free=1, **limits())  # type: ignore[arg-type]
    files = JobFiles(tmp_path / "j")
    files.dir.mkdir()
    files.stdout.write_bytes(b"x" * size)
    mirror = Mirror(store, "j", files, fresh=True, epoch=epoch)
    pending = Pending(JobWrite("j", epoch))
    mirror.sync(("stdout",), into=pending)
    inline = pending.write.output_bytes()
    before_write = store.read_output_page("j", "stdout", 0, size)[1]
    assert (inline, before_write) == ((size, 0) if size <= INLINE_BYTES else (0, size))
    assert pending.send(store).held
    assert store.read_output_page("j", "stdout", 0, size) == (b"x" * size, size)
