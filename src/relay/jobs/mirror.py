"""Mirror: a job's output files copied into the store as they grow, for fronts on other hosts.

A worker writes a job's stdout, stderr, transcript and final text to files in its own home (the shim
writes them there). When the store is shared across hosts (PostgreSQL), a front on another host has
no such files: the worker appends what each file gained to the store's `outputs` (in chunks, from an
offset it remembers, so memory stays flat whatever the size), and the front pages it from there. On a
store of one host (SQLite, the home's files shared), nothing is copied.
"""

from __future__ import annotations

import codecs
import functools
from pathlib import Path

from relay.jobs.fence import Fence
from relay.runtime.supervisor import JobFiles
from relay.store.api import JobStore
from relay.store.jobwrite import Pending, Written

# The most read from a file and appended at once.
MIRROR_CHUNK = 1 << 20
# The most output that rides in a look's transaction (which holds the job's row from its first statement): a larger
# piece is appended first, alone, so a transaction cut off half-sent (a worker paused or its link cut) holds the row
# while a few packets are missing, not a megabyte.
INLINE_BYTES = 16 << 10


def streams_of(files: JobFiles) -> dict[str, Path]:
    """Each stream of the store's `outputs` and the job file it mirrors."""
    return {
        "stdout": files.stdout,
        "stderr": files.stderr,
        "transcript": files.dir / "transcript.txt",
        "result": files.result,
    }


class Mirror:
    """Copies what a job's files gained since the last call; one per job, kept by the job's monitor."""

    def __init__(
        self,
        store: JobStore,
        job_id: str,
        files: JobFiles,
        *,
        fresh: bool = False,
        epoch: int | None = None,
        fence: Fence | None = None,
    ) -> None:
        self._store = store
        self._job_id = job_id
        # The claim it copies under: once the job is another's (or ended), nothing more is appended; nor once
        # the worker is past the lease it last renewed (its fence: jobs/fence.py).
        self._epoch = epoch
        self._fence = fence
        self._folder = files.dir
        self.refused = False
        self._paths = streams_of(files)
        # What the store holds already (a job re-attached after a restart was mirrored up to there); nothing
        # of a job `fresh`ly spawned.
        self._copied = dict.fromkeys(self._paths, 0) if fresh else store.output_sizes(job_id)

    def sync(self, streams: tuple[str, ...] = ("stdout", "transcript"), into: Pending | None = None) -> None:
        """Append what `streams` gained (at the job's end: every stream, the final text and stderr too).

        With `into` (the job's pending writes), the last piece of each stream goes with them (one transaction with
        the job's events and state); what comes before goes first, a chunk at a time."""
        for stream in streams:
            if self.refused or (self._fence is not None and self._fence.cut(self._job_id, self._folder)):
                return
            last = b""
            try:
                fh = self._paths[stream].open("rb")
            except FileNotFoundError:
                pass
            else:
                with fh:
                    fh.seek(self._copied[stream])
                    while chunk := fh.read(MIRROR_CHUNK):
                        if last and not self._append(stream, last):
                            return
                        last = chunk
            if not last:
                continue
            if into is None or into.write.output_bytes() + len(last) > INLINE_BYTES:
                if not self._append(stream, last):
                    return
                continue
            into.write.outputs.append((stream, last))
            into.after.append(functools.partial(self._sent, stream, len(last)))

    def _append(self, stream: str, data: bytes) -> bool:
        """Append now; False once the claim is no longer this worker's."""
        if self._store.append_output(self._job_id, stream, data, epoch=self._epoch) < 0:
            self.refused = True
            return False
        self._copied[stream] += len(data)
        return True

    def _sent(self, stream: str, size: int, done: Written) -> None:
        if done.held:
            self._copied[stream] += size
        else:
            self.refused = True  # the claim is no longer this worker's

    def sync_all(self, into: Pending | None = None) -> None:
        self.sync(tuple(self._paths), into)


def store_text_page(store: JobStore, job_id: str, stream: str, offset: int, limit: int) -> tuple[str, int]:
    """Up to `limit` characters of a stream kept in the store, from character `offset`; (text, total chars).

    The stream is decoded from its start a chunk at a time (the store pages bytes; a page of characters
    needs the characters before it), so memory stays within a chunk and the page.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    parts: list[str] = []
    seen = wanted = 0
    at = 0
    while True:
        data, total = store.read_output_page(job_id, stream, at, MIRROR_CHUNK)
        at += len(data)
        text = decoder.decode(data, final=at >= total or not data)
        start = max(offset - seen, 0)
        if start < len(text) and wanted < limit:
            piece = text[start : start + limit - wanted]
            parts.append(piece)
            wanted += len(piece)
        seen += len(text)
        if at >= total or not data:
            return "".join(parts), seen
