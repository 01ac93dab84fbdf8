"""Parse and publish: a job's new output lines become events, stored, written to the transcript and forwarded.

A batch published on its own is stored, then its lines are appended to the transcript; the last batch of a look at
the job goes to the store with the rest of that look's writes (its output, at the process's end the end itself),
its lines appended just before (the job's output mirror sends them in the same write). So a relay killed between
the two leaves a transcript short of the stored events, or ahead of them (or in the middle of a line). The next
relay parses the job's output from its start again (recovery.py, lifecycle.py): that replay rewrites the transcript
from the output, up to the stored events, so a recovered job's transcript is always its output's events, each once.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import anyio

from relay.agents.base import Parser
from relay.events import Event
from relay.jobs.approvals import PERMISSION_REQUEST, arrived
from relay.jobs.envelope import clip_event, render_event
from relay.jobs.output import LineReader, write_bytes
from relay.jobs.state import LEASE_LOST, JobState, Live
from relay.osfiles import write_all
from relay.store.jobwrite import Pending

# Events are stored and forwarded in batches bounded in count and in text, so a flood of output
# never sits in memory at once.
PUBLISH_BATCH_EVENTS = 200
PUBLISH_BATCH_CHARS = 1 << 20
# Events that do not count as activity for the idle timeout: an agent that only reports
# retries (codex's endless "Reconnecting..." when its upstream is down) is not making progress.
NOT_ACTIVITY = frozenset({"retry"})
TRANSCRIPT_FILE = "transcript.txt"
# The transcript a replay writes, renamed over the old one once every stored event is in it.
REBUILT_SUFFIX = ".rebuilt"


class Rebuild:
    """A job's transcript written again from its replayed events: to a new file, renamed over the old one at the end
    (a relay killed meanwhile leaves the old one whole, and the next replay starts over: the same bytes again)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(path.name + REBUILT_SUFFIX)
        self._fd: int | None = None
        self._pending: list[str] = []
        self._pending_chars = 0

    def add(self, text: str) -> None:
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars >= PUBLISH_BATCH_CHARS:
            self._flush()

    def _flush(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        write_all(self._fd, "".join(self._pending).encode("utf-8"))
        self._pending, self._pending_chars = [], 0

    def finish(self) -> None:
        """Put the rebuilt transcript in place."""
        self._flush()
        self._close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        """Leave the old transcript as it is (the replay stopped short of the stored events: an error, or output
        missing; a transcript is never replaced by a shorter account)."""
        self._close()
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _has_lines(transcript: Path) -> bool:
    """Whether the transcript holds anything (a new job's is made empty ahead: nothing to start over)."""
    try:
        return os.stat(transcript).st_size > 0
    except OSError:
        return False


class Publisher:
    """Turns output into events for the store, the transcript, the cost cap and progress listeners."""

    def __init__(self, state: JobState) -> None:
        self._state = state

    def consume(
        self,
        job_id: str,
        live: Live,
        reader: LineReader,
        parser: Parser,
        seq: int,
        stored_seq: int,
        final: bool,
        pending: Pending | None = None,
    ) -> tuple[int, bool]:
        """Feed new output lines to the parser; store and forward events past `stored_seq` in bounded batches
        (the last one into `pending` when given: stored with the job's other writes, forwarded after).

        A pass from the job's first event (`seq` -1) while events are stored already (`stored_seq` >= 0) is a replay
        after a restart: the stored events are not stored again, and the transcript is written again from them (the
        relay that stored them may have died before writing their lines, or halfway through one).
        Returns the last event sequence number and whether any event showed activity.
        """
        if self._state.fence.cut(job_id, self._state.files(job_id).dir):
            # Past the lease this worker last renewed (jobs/fence.py): the run is stopped, nothing more of it recorded.
            live.stop_reason = LEASE_LOST
            live.stop.set()
            return seq, False
        batch: list[tuple[int, Event]] = []
        batch_chars = 0
        active = False
        transcript = self._state.files(job_id).dir / TRANSCRIPT_FILE
        rebuild = Rebuild(transcript) if seq < 0 <= stored_seq else None
        if seq < 0 and stored_seq < 0 and _has_lines(transcript):  # a replay, no event stored: its lines start over
            Rebuild(transcript).finish()
        try:
            for line in reader.read(final=final):
                for event in parser.feed(line):
                    active = active or event.type not in NOT_ACTIVITY
                    seq += 1
                    if seq > stored_seq:
                        batch.append((seq, event))
                    elif rebuild is not None:
                        rebuild.add(self._line(event))
                        if seq == stored_seq:  # every stored event is in it: in place before any new line goes on
                            rebuild.finish()
                            rebuild = None
                batch_chars += len(line)
                if len(batch) >= PUBLISH_BATCH_EVENTS or batch_chars >= PUBLISH_BATCH_CHARS:
                    self.publish(job_id, live, batch)
                    batch, batch_chars = [], 0
        finally:
            if rebuild is not None:
                rebuild.discard()
        if pending is None:
            self.publish(job_id, live, batch)
        else:
            self.defer(job_id, live, batch, pending)
        return seq, active

    def replay(self, job_id: str, parser: Parser) -> None:
        """Feed `parser` the job's whole stdout (its process ended, or no monitor watches it) and store the events the
        store does not hold yet: a job's end written from its files."""
        stored = self._state.store.max_event_seq(job_id)
        self.consume(job_id, Live(), LineReader(self._state.files(job_id).stdout), parser, -1, stored, final=True)

    def _line(self, event: Event) -> str:
        """An event's transcript text, as `publish` writes it."""
        return render_event(Event(event.type, self._state.redacted(event.data))) + "\n"

    def publish(self, job_id: str, live: Live, events: list[tuple[int, Event]]) -> None:
        """Store the events (and the session id they announce: one transaction, one commit), then forward them."""
        if not events:
            return
        state = self._state
        redacted, clipped, session_id = self._prepared(events)
        held = state.store.add_events(
            job_id, events[0][0], clipped, session_id=session_id, epoch=state.epochs.get(job_id)
        )
        self._stored(job_id, live, redacted, held)

    def defer(self, job_id: str, live: Live, events: list[tuple[int, Event]], pending: Pending) -> None:
        """The events into the job's pending writes, their lines into the transcript now (the mirror reads them from
        there into the same write); forwarded once they are stored."""
        if not events:
            return
        redacted, clipped, session_id = self._prepared(events)
        write = pending.write
        write.first_seq, write.events, write.session_id = events[0][0], clipped, session_id
        write_bytes(self._state.files(job_id).dir / TRANSCRIPT_FILE, _transcript(redacted), append=True)
        pending.after.append(lambda done: self._forward(job_id, live, redacted) if done.held else None)

    def _prepared(self, events: list[tuple[int, Event]]) -> tuple[list[tuple[int, Event]], list[Event], str | None]:
        """The events redacted, clipped for the store, and the session id they announce."""
        redacted = [(seq, Event(e.type, self._state.redacted(e.data))) for seq, e in events]
        session_id: str | None = None
        for _, event in redacted:
            if event.type == "session.started" and event.data.get("session_id"):
                session_id = str(event.data["session_id"])
        return redacted, [clip_event(e) for _, e in redacted], session_id

    def _stored(self, job_id: str, live: Live, events: list[tuple[int, Event]], held: bool) -> None:
        """Once the events are stored: the transcript's lines, then what `_forward` does."""
        if not held:
            # Another worker holds the job's claim now (this one's lease ran out): nothing of it is ours to write.
            live.stop_reason = LEASE_LOST
            live.stop.set()
            return
        write_bytes(self._state.files(job_id).dir / TRANSCRIPT_FILE, _transcript(events), append=True)
        self._forward(job_id, live, events)

    def _forward(self, job_id: str, live: Live, events: list[tuple[int, Event]]) -> None:
        """Stored events: permission requests, the cost cap, the listeners."""
        state = self._state
        for _, event in events:
            if event.type == PERMISSION_REQUEST:  # an ACP agent asks permission (relay.jobs.approvals)
                arrived(state, job_id, event.data)
        cap = state.settings.max_cost_usd
        if cap is not None and not live.stop.is_set():
            for _, event in events:
                cost = event.data.get("cost_usd")
                if isinstance(cost, int | float) and cost > cap:
                    live.stop_reason = "limit:cost"
                    live.stop.set()
        if not live.listeners:
            return
        for seq, event in events:
            for listener in list(live.listeners):
                try:
                    listener.send_nowait((seq, event))
                except anyio.WouldBlock:
                    pass
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    live.listeners.remove(listener)


def _transcript(events: list[tuple[int, Event]]) -> bytes:
    """The transcript's lines of (redacted) events."""
    return "".join(render_event(event) + "\n" for _, event in events).encode("utf-8")
