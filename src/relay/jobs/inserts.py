"""Jobs submitted together, recorded together: one transaction and one claim for those that arrive while another is
in flight.

On a store whose calls are round trips to a server (PostgreSQL), a burst of submissions (an agent's parallel tool
calls, a workflow's fan-out) would each hold the event loop for its insert's round trip. Here the first one's insert
goes to a thread; the ones submitted while it is in flight wait, then go together in the next: their inserts and a
claim for this process's free slots in one round trip, as one job's insert and claim go (store/queue.py). The claim's
slots are held meanwhile (Admission.hold), so nothing else claims them twice. A transaction the server refused is
sent again one job at a time: a value of one caller's job fails that job only.

`Queueing` is the engine's way from an admitted job to its row: its folder made, its row inserted (with the claim
for this process's free slots), its principal and quietness noted; on such a store a job submitted within
TOGETHER_S of the last one, or while a transaction is in flight, goes through `Inserts`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from relay.errors import ErrorCode, RelayError
from relay.jobs.admission import Admission
from relay.jobs.door import Admitted
from relay.jobs.known import Known, asks_nothing
from relay.jobs.lifecycle import Lifecycle
from relay.jobs.state import JobState
from relay.principal import current
from relay.store import NewJob
from relay.store.health import os_error
from relay.telemetry import job as telemetry
from relay.telemetry.tracing import Submit

# A job submitted this soon after the last one is taken for part of a burst (Queueing.queue_together).
TOGETHER_S = 0.005


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
        finally:
            self.busy = False
            left = [sent for sent in (*self._flying, *self._waiting) if not sent.done.is_set()]
            self._flying, self._waiting = [], []
            for sent in left:  # cancelled (the engine stopping): none is left waiting
                sent.end(
                    RelayError(
                        ErrorCode.INTERNAL,
                        "relay stopped while it recorded the job",
                        "look for it with job_list before you submit it again: it may be queued",
                    )
                )

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
            won = None
        finally:
            admission.hold(ask, held=False)
        if won is None:
            for sent in batch:  # one at a time: the one the server refused fails alone
                await self._send([sent])
            return
        admission.took(won, self._start)
        for sent in batch:
            sent.end()


class Queueing:
    """An admitted job recorded and queued: alone (`queue`) or with the jobs submitted together (`queue_together`)."""

    def __init__(self, state: JobState, admission: Admission, lifecycle: Lifecycle, known: Known) -> None:
        self._state = state
        self._admission = admission
        self._lifecycle = lifecycle
        self._known = known
        self._inserts = Inserts(state, admission, lifecycle.start)
        self._submitted_at = float("-inf")  # when the last job reached its insert (or, inserted on the loop, left it)

    def make_dir(self, job_id: str) -> None:
        """The job's folder, made before its row exists (a row without a folder could not run)."""
        folder = self._state.files(job_id).dir
        try:
            if not self._state.spares.take(folder):
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise os_error(exc, self._state.settings.jobs_dir) from None

    def queue(self, admitted: Admitted) -> str:
        """An admitted job recorded (its folder first) and queued; the insert claims for this process's free slots
        in the same transaction (one round trip, not two)."""
        job, submit = self._recording(admitted)
        won = self._state.store.insert_jobs([job], self._admission.ask())
        self._queued(admitted)
        self._admission.took(won, self._lifecycle.start)
        return self._noted(admitted, submit)

    async def queue_together(self, admitted: Admitted) -> str:
        """`queue`; on a store whose calls are round trips to a server, a job submitted within TOGETHER_S of the
        last one (a burst's calls reach the loop one after another), or while a transaction of such jobs is in
        flight, is recorded with the others submitted meanwhile (`Inserts`): the loop serves the next call while
        its insert is on its way."""
        now, last = time.monotonic(), self._submitted_at
        self._submitted_at = now
        if not self._state.store.overlaps_calls or (now - last >= TOGETHER_S and not self._inserts.busy):
            try:
                return self.queue(admitted)
            finally:  # its round trip held the loop: a call that waited for it came together with it
                self._submitted_at = time.monotonic()
        job, submit = self._recording(admitted)
        self._queued(admitted)  # before the claim that may start it
        try:
            await self._inserts.send(job)
        except BaseException:
            self._lifecycle.prepared.pop(job.id, None)
            self._state.live.pop(job.id, None)
            raise
        return self._noted(admitted, submit)

    def _recording(self, admitted: Admitted) -> tuple[NewJob, Submit]:
        """The job's folder made, its submit span begun, its row ready to insert."""
        req, prepared, job_id = admitted.request, admitted.prepared, admitted.job_id
        ar = prepared.agent_request
        # vars: a flat dataclass of scalars, its fields as they are (asdict deep-copies each)
        submit = telemetry.submitted(job_id, req.agent)  # its trace context is stored with it (a worker continues it)
        stored = vars(req) | admitted.placed | prepared.stored(self._state.settings.depth) | submit.stored
        self.make_dir(job_id)
        return self._state.new_job(job_id, req.agent, "cli", stored, ar.model, ar.cwd), submit

    def _queued(self, admitted: Admitted) -> None:
        self._lifecycle.prepared[admitted.job_id] = admitted.prepared
        self._admission.enqueue(admitted.job_id)

    def _noted(self, admitted: Admitted, submit: Submit) -> str:
        job_id = admitted.job_id
        quiet = self._state.runs_here(job_id) and asks_nothing(admitted.prepared.adapter)
        self._known.add(job_id, current().name, quiet=quiet)
        submit.end()
        return job_id
