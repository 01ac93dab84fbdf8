"""Jobs submitted together, recorded together: one transaction and one claim for those that arrive while another is
in flight.

On a store whose calls are round trips to a server (PostgreSQL), a burst of submissions (an agent's parallel tool
calls, a workflow's fan-out) would each hold the event loop for its insert's round trip. Here the first one's insert
goes to a thread; the ones submitted while it is in flight wait, then go together in the next: their inserts and a
claim for this process's free slots in one round trip, as one job's insert and claim go (store/queue.py). The claim's
slots are held meanwhile (Admission.hold), so nothing else claims them twice. A transaction the server refused is
sent again one job at a time: a value of one caller's job fails that job only.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from relay.errors import ErrorCode, RelayError
from relay.jobs.admission import Admission
from relay.jobs.state import JobState
from relay.store import NewJob


class _Sent:
    """One job's insert, and its outcome once its transaction was answered."""

    def __init__(self, job: NewJob) -> None:
        self.job = job
        self.done = anyio.Event()
        self.error: BaseException | None = None

    def end(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done.set()


class Inserts:
    """The inserts of jobs submitted together; `start(job_id)` runs each job a claim won."""

    def __init__(self, state: JobState, admission: Admission, start: Callable[[str], None]) -> None:
        self._state = state
        self._admission = admission
        self._start = start
        self._waiting: list[_Sent] = []
        self._flying: list[_Sent] = []
        self.busy = False  # a transaction is in flight (a job submitted now joins the next)

    async def send(self, job: NewJob) -> None:
        """Record `job` (and claim with it); returns once its transaction was answered, or raises its failure."""
        sent = _Sent(job)
        self._waiting.append(sent)
        if not self.busy:
            self.busy = True
            self._state.task_group().start_soon(self._fly)
        with anyio.CancelScope(shield=True):  # its row may be written by now: its caller learns which
            await sent.done.wait()
        if sent.error is not None:
            raise sent.error

    async def _fly(self) -> None:
        try:
            while self._waiting:
                self._flying, self._waiting = self._waiting, []
                await self._send(self._flying)
                self._flying = []
        finally:
            self.busy = False
            stopped = RelayError(
                ErrorCode.INTERNAL,
                "relay stopped while it recorded the job",
                "look for it with job_list before you submit it again: it may be queued",
            )
            for sent in [*self._flying, *self._waiting]:  # cancelled (the engine stopping): none is left waiting
                if not sent.done.is_set():
                    sent.end(stopped)
            self._flying, self._waiting = [], []

    async def _send(self, batch: list[_Sent]) -> None:
        admission = self._admission
        ask = admission.ask()
        admission.hold(ask)
        try:
            won = await anyio.to_thread.run_sync(self._state.store.insert_jobs, [sent.job for sent in batch], ask)
        except Exception as exc:
            if len(batch) == 1:
                batch[0].end(exc)
                return
            failed = True
        else:
            failed = False
            admission.took(won, self._start)
            for sent in batch:
                sent.end()
        finally:
            admission.hold(ask, held=False)
        if failed:
            for sent in batch:  # one at a time: the one the server refused fails alone
                await self._send([sent])
