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

from relay.errors import ErrorCode, RelayError
from relay.server.app import build_server
from relay.store.dialect import Step
from relay.store.pg.conn import LOOP_CALL_S, PoolConn
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


async def test_a_batch_on_the_loop_against_a_frozen_server_fails_within_the_loops_limit_and_the_next_one_commits(
    own_cluster: Cluster,
) -> None:
    # A batch runs on the loop's own thread (no hop to a call thread): each of its waits has the loop's deadline,
    # and the connection it was cut on is dropped, so the pool's next one serves the batch after the thaw. (Like any
    # write cut from its answer, the cut batch may have committed: the server read it before it froze.)
    url = own_cluster.new_database()
    db = PoolConn(url, size=2, wait_s=5, name="test")
    try:
        db.exec("CREATE TABLE t (id INT PRIMARY KEY)")
        db.batch([Step("INSERT INTO t VALUES (?)", (1,))])
        with frozen(own_cluster):
            started = time.monotonic()
            with pytest.raises(RelayError) as cut:
                db.batch([Step("INSERT INTO t VALUES (?)", (2,))])
            assert cut.value.code is ErrorCode.STORE_UNAVAILABLE
            assert time.monotonic() - started < LOOP_CALL_S + 1.0
            assert db.away.is_away
        with anyio.fail_after(10):
            while db.away.is_away:
                await anyio.sleep(0.05)
        db.batch([Step("INSERT INTO t VALUES (?)", (3,))])
        ids = [r[0] for r in db.exec("SELECT id FROM t ORDER BY id")]
        assert ids in ([1, 3], [1, 2, 3])  # the cut one's outcome is unknown: its COMMIT was sent before the freeze
    finally:
        db.close()
