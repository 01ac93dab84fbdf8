"""A fake job process for engine tests: the test writes its output and decides when it exits."""

from __future__ import annotations

import anyio

from relay.agents.base import Invocation
from relay.runtime.supervisor import JobFiles


class FakeProcess:
    """Implements the JobProcess seam in memory; records kills."""

    next_pid = 900_000

    def __init__(self, invocation: Invocation, files: JobFiles) -> None:
        FakeProcess.next_pid += 1
        self.pid = FakeProcess.next_pid
        self.start_ticks: int | None = None
        self.invocation = invocation
        self.files = files
        self.exited = anyio.Event()
        self.code: int | None = None
        self.killed_with_grace: float | None = None
        files.dir.mkdir(parents=True, exist_ok=True)
        files.stdout.touch()

    def write(self, text: str) -> None:
        with self.files.stdout.open("a") as fh:
            fh.write(text)

    def exit(self, code: int) -> None:
        self.code = code
        self.exited.set()

    async def wait_exit(self, timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            await self.exited.wait()
        return self.exited.is_set()

    def exit_code(self) -> int | None:
        return self.code

    async def kill_group(self, grace: float) -> None:
        self.killed_with_grace = grace
        self.exit(-15)
        self.code = None

    def reap_group(self) -> None:
        pass

    def close(self) -> None:
        pass


class Spawner:
    """The spawn function handed to the engine; keeps every fake it made."""

    def __init__(self) -> None:
        self.procs: list[FakeProcess] = []
        self.spawned = anyio.Event()

    def __call__(self, invocation: Invocation, files: JobFiles) -> FakeProcess:
        # The engine spawns from a worker thread: record the process on the event loop's thread.
        try:
            return anyio.from_thread.run_sync(self._spawn, invocation, files)
        except RuntimeError:  # called from the event loop itself
            return self._spawn(invocation, files)

    def _spawn(self, invocation: Invocation, files: JobFiles) -> FakeProcess:
        proc = FakeProcess(invocation, files)
        self.procs.append(proc)
        self.spawned.set()
        self.spawned = anyio.Event()
        return proc

    def running(self, prompt: str) -> FakeProcess:
        """The process of the job submitted with `prompt` (jobs started together spawn in any order)."""
        (proc,) = [p for p in self.procs if prompt in p.invocation.argv]
        return proc

    async def wait_for(self, count: int) -> list[FakeProcess]:
        with anyio.fail_after(5):
            while len(self.procs) < count:
                await self.spawned.wait()
        return self.procs
