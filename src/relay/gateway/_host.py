"""A task group that outlives the request which first needs it: downstream connections live here.

A connection's `async with Client(...)` must be entered and left by one task, and it must stay
open across many tool calls, so each connection gets an owner task in this group. The group
starts on first use (in a task of its own, outside any request's cancel scope) and ends with
relay.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc


class TaskHost:
    """Starts background tasks on demand; `aclose` cancels what is left and waits for it."""

    def __init__(self) -> None:
        self._tg: anyio.abc.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: anyio.Event | None = None
        self._stop: anyio.Event | None = None

    async def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        if self._tg is None:
            await self._boot()
        assert self._tg is not None
        self._tg.start_soon(fn, *args)

    async def _boot(self) -> None:
        if self._ready is None:
            self._ready = anyio.Event()
            self._stop = anyio.Event()
            # A fresh context: the request that happens to start the host must not leak its context vars.
            self._task = asyncio.get_running_loop().create_task(self._main(), context=contextvars.Context())
        await self._ready.wait()

    async def _main(self) -> None:
        assert self._ready is not None and self._stop is not None
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._ready.set()
            await self._stop.wait()
            tg.cancel_scope.cancel()
        self._tg = None

    async def aclose(self) -> None:
        if self._task is None or self._stop is None:
            return
        self._stop.set()
        task, self._task = self._task, None
        await task
        self._ready = self._stop = None  # a later use starts a fresh group
