"""A stdio downstream server's pipes, read in time linear in a line's length (POSIX).

The SDK's `stdio_client` joins a long line chunk by chunk as text (`buffer + chunk`, then a split of
the whole), which is quadratic: a 50 MB answer did not arrive within a minute. This transport keeps
the same contract (the same pair of streams, a line it cannot parse handed on as an exception, the
spec's shutdown: close stdin, wait, SIGTERM the group, SIGKILL) and gathers a line's bytes in one
buffer, or in a file once it is longer than the result cap (`_spill.py`: a 50 MB answer costs about
one cap of memory). Bytes that are not UTF-8 become U+FFFD. Windows keeps the SDK's transport.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
from anyio.abc import Process
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from relay.gateway._spill import Gathered, Spiller

# The server's grace to exit once its stdin is closed, then the grace between SIGTERM and SIGKILL.
EXIT_GRACE_S = 2.0
KILL_GRACE_S = 2.0
# How long messages already accepted may take to reach the server's stdin at shutdown.
FLUSH_S = 0.5
# How often the exit is looked for while waiting (not process.wait(): a grandchild holding the pipes
# would make an exited server look alive).
EXIT_POLL_S = 0.01

_PIPE_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError, OSError)


async def _exited(process: Process, within_s: float) -> bool:
    deadline = anyio.current_time() + within_s
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(EXIT_POLL_S)
    return True


@asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, errlog: TextIO, spiller: Spiller | None = None
) -> AsyncGenerator[tuple[Any, Any]]:
    """Start the server in its own session and yield (read stream, write stream) of its messages.

    With a `spiller`, a line longer than its threshold goes to a file as it arrives and is read back as a stream.
    """
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        stderr=errlog,
        cwd=params.cwd,
        start_new_session=True,
    )
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None and stdout is not None
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    flushed = anyio.Event()

    async def reader() -> None:
        line = Gathered(spiller)
        try:
            with contextlib.suppress(*_PIPE_GONE):
                async with to_session:
                    async for chunk in stdout:
                        start = 0
                        while (end := chunk.find(b"\n", start)) >= 0:
                            line.add(chunk[start:end])
                            start = end + 1
                            await to_session.send(await line.message())
                        line.add(chunk[start:])
        finally:
            line.drop()

    async def writer() -> None:
        try:
            async with from_session:
                async for message in from_session:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((text + "\n").encode("utf-8", "replace"))
        except _PIPE_GONE:
            await to_session.aclose()  # the session sees the connection end instead of waiting forever
        finally:
            flushed.set()

    async with anyio.create_task_group() as tg:
        for task in (reader, writer):
            tg.start_soon(task)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # the server is stopped even when the caller is cancelled
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(FLUSH_S):
                    await flushed.wait()
                await _stop(process)
                for stream in (read_stream, write_stream, to_session, from_session):
                    await stream.aclose()
            tg.cancel_scope.cancel()


async def _stop(process: Process) -> None:
    """The spec's shutdown: close stdin, let the server exit, else SIGTERM its group and then SIGKILL it."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(*_PIPE_GONE):
        await process.stdin.aclose()
    if not await _exited(process, EXIT_GRACE_S):
        await terminate_posix_process_tree(process, KILL_GRACE_S)
        await _exited(process, KILL_GRACE_S)
    with contextlib.suppress(*_PIPE_GONE):
        await process.stdout.aclose()  # a survivor holding the pipe must not keep the reader waiting
