"""A front cut from its PostgreSQL store keeps answering: store calls leave its event loop, with a time limit.

The server is frozen (SIGSTOP on every PostgreSQL process: connections stay open and nothing answers, the
worst kind of cut), on a cluster of this test's own so no other test sees it.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.store.pg.conn import LOOP_CALL_S
from tests.conftest import SettingsFactory
from tests.postgres import Cluster, pg_bin

pytestmark = pytest.mark.anyio


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    bin_dir = pg_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    with Cluster(bin_dir) as cluster:
        yield cluster


# How long the cluster stays frozen at most: a front that blocks its loop on the store (the fault this test is
# about) is let go then, and fails its time checks instead of hanging the run.
THAW_AFTER_S = 20.0


@contextmanager
def frozen(cluster: Cluster) -> Iterator[None]:
    """Every process of the cluster stopped (SIGSTOP) for the block, at most THAW_AFTER_S, then let go on."""
    assert cluster.pid is not None
    postmaster = psutil.Process(cluster.pid)
    processes = [postmaster, *postmaster.children(recursive=True)]

    def thaw() -> None:
        for proc in processes:
            with suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGCONT)

    for proc in processes:
        proc.send_signal(signal.SIGSTOP)
    watchdog = threading.Timer(THAW_AFTER_S, thaw)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
        thaw()


async def test_a_front_whose_postgresql_froze_lists_its_tools_within_a_second_and_refuses_store_calls_as_unavailable(
    own_cluster: Cluster, make_settings: SettingsFactory, relay_home: Path
) -> None:
    settings = make_settings(RELAY_STORE=own_cluster.new_database(), RELAY_RUN_JOBS="0")
    async with Client(build_server(settings)) as client:
        listed = await client.call_tool("job_list", {})
        assert not listed.is_error
        with frozen(own_cluster):
            started = time.monotonic()
            with anyio.fail_after(LOOP_CALL_S + 8):
                refused = await client.call_tool("job_list", {})
            waited = time.monotonic() - started
            assert refused.is_error and "STORE_UNAVAILABLE" in json.dumps(refused.model_dump(mode="json"))
            assert waited < LOOP_CALL_S + 1.5
            for _ in range(3):
                started = time.monotonic()
                with anyio.fail_after(10):
                    tools = await client.list_tools()
                assert time.monotonic() - started < 1.0
                assert any(tool.name == "delegate" for tool in tools.tools)
                again = time.monotonic()
                refused = await client.call_tool("job_list", {})
                assert refused.is_error and time.monotonic() - again < 1.0  # known away: refused at once
                await anyio.sleep(0.5)
