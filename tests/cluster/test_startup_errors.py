"""Start-up that says what is wrong (issue 40): a front on a host of its own (a network namespace reaching PostgreSQL
over its link) that cannot reach its store, cannot log in to it, or finds no connection free says so in one coded
line and exits, before any "serving" line and with no traceback."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
from psycopg import sql

from tests.cluster.faults import RELAY, Hosts, base_env, fleet, home_for, ticking_agent

__all__ = ["fleet"]  # the fixture, used by name

# `relay`'s exit status for a store it cannot use now (os.EX_TEMPFAIL) and for a configuration it cannot use.
EXIT_CODES = {75, 78, 2, 1}


def test_a_front_that_cannot_reach_or_log_in_to_its_store_says_so_in_one_coded_line_and_exits(
    fleet: Hosts, pg_url: str, tmp_path: Path
) -> None:
    host = fleet.add("front-host")
    work = tmp_path / "work"
    work.mkdir()
    agent = ticking_agent(tmp_path / "bin", tmp_path / "ticks.log", 1)
    full = f"relay_full_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as conn:  # a role with no connection to spare
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 0").format(sql.Identifier(full)))
    there = pg_url.replace("127.0.0.1", host.root_addr)
    stores = {
        "unreachable": ("postgresql://postgres@" + host.root_addr + ":1/relay", "STORE_UNAVAILABLE"),
        "no such database": (there.rsplit("/", 1)[0] + "/no_such_database", "CONFIG_INVALID"),
        "no connection free": (there.replace("postgres@", f"{full}@"), ""),
    }
    try:
        for n, (what, (url, code)) in enumerate(stores.items()):
            env = home_for(tmp_path, f"front-{n}", agent, base_env(work, url, None))
            argv = [RELAY, "serve", "--http", "--no-worker", "--port", "0"]
            done = fleet.cluster.run(host, argv, env=env, cwd=work, timeout=60)
            said = done.stderr.strip().splitlines()
            assert done.returncode in EXIT_CODES, (what, done.returncode, done.stderr)
            assert len(said) == 1 and said[0].startswith("relay: "), (what, done.stderr)
            assert code in said[0] and "hint" in said[0] and "serving" not in done.stderr, (what, said)
            assert "Traceback" not in done.stderr
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(full)))
