"""Parse and publish: a job's new output lines become events, stored, written to the transcript and forwarded."""

from __future__ import annotations

import anyio

from relay.agents.base import Parser
from relay.events import Event
from relay.jobs.envelope import clip_event, render_event
from relay.jobs.output import LineReader, write_bytes
from relay.jobs.state import LEASE_LOST, JobState, Live

# Events are stored and forwarded in batches bounded in count and in text, so a flood of output
# never sits in memory at once.
PUBLISH_BATCH_EVENTS = 200
PUBLISH_BATCH_CHARS = 1 << 20
# Events that do not count as activity for the idle timeout: an agent that only reports
# retries (codex's endless "Reconnecting..." when its upstream is down) is not making progress.
NOT_ACTIVITY = frozenset({"retry"})


class Publisher:
    """Turns output into events for the store, the transcript, the cost cap and progress listeners."""

    def __init__(self, state: JobState) -> None:
        self._state = state

    def consume(
        self, job_id: str, live: Live, reader: LineReader, parser: Parser, seq: int, stored_seq: int, *, final: bool
    ) -> tuple[int, bool]:
        """Feed new output lines to the parser; store and forward events past `stored_seq` in bounded batches.

        Returns the last event sequence number and whether any event showed activity.
        """
        batch: list[tuple[int, Event]] = []
        batch_chars = 0
        active = False
        for line in reader.read(final=final):
            for event in parser.feed(line):
                active = active or event.type not in NOT_ACTIVITY
                seq += 1
                if seq > stored_seq:
                    batch.append((seq, event))
            batch_chars += len(line)
            if len(batch) >= PUBLISH_BATCH_EVENTS or batch_chars >= PUBLISH_BATCH_CHARS:
                self.publish(job_id, live, batch)
                batch, batch_chars = [], 0
        self.publish(job_id, live, batch)
        return seq, active

    def publish(self, job_id: str, live: Live, events: list[tuple[int, Event]]) -> None:
        if not events:
            return
        state = self._state
        events = [(seq, Event(e.type, state.redacted(e.data))) for seq, e in events]
        session_id: str | None = None
        for _, event in events:
            if event.type == "session.started" and event.data.get("session_id"):
                session_id = str(event.data["session_id"])
        # The events and the session id they announce: one transaction, one commit.
        clipped = [clip_event(e) for _, e in events]
        if not state.store.add_events(
            job_id, events[0][0], clipped, session_id=session_id, epoch=state.epochs.get(job_id)
        ):
            # Another worker holds the job's claim now (this one's lease ran out): nothing of it is ours to write.
            live.stop_reason = LEASE_LOST
            live.stop.set()
            return
        transcript = "".join(render_event(event) + "\n" for _, event in events)
        write_bytes(state.files(job_id).dir / "transcript.txt", transcript.encode("utf-8"), append=True)
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
