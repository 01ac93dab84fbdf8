"""The PostgreSQL store: picked by URL, loaded only then, its failures coded with hints, its migrations race-free."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.store import Store, WorkerInfo, open_store
from relay.store.pg import PgStore
from relay.store.pg.errors import code_of, pg_error, redact
from relay.store.pg.schema import MIGRATIONS
from tests.conftest import SettingsFactory
from tests.postgres import Cluster, free_port


def test_a_postgresql_url_opens_the_postgresql_store_and_a_path_the_sqlite_one(
    pg_url: str, tmp_path: Path, relay_home: Path
) -> None:
    pg = open_store(pg_url, home=relay_home)
    assert isinstance(pg, PgStore)
    pg.close()
    for target in (tmp_path / "a.db", f"sqlite://{tmp_path / 'b.db'}"):
        lite = open_store(target, home=relay_home)
        assert isinstance(lite, Store) and lite.path.parent == tmp_path
        lite.close()


def test_a_store_url_of_another_kind_is_refused_with_a_hint(relay_home: Path) -> None:
    with pytest.raises(RelayError) as err:
        open_store("mysql://u@h/db", home=relay_home)
    assert err.value.code is ErrorCode.CONFIG_INVALID and "postgresql://" in err.value.hint


def test_relay_on_sqlite_never_loads_psycopg(tmp_path: Path) -> None:
    script = (
        "import sys, pathlib; from relay.store import open_store; import relay.cli.main, relay.server;"
        " from relay.config import load_settings; from relay.threads import open_threads;"
        f" open_store(pathlib.Path({str(tmp_path / 'relay.db')!r}), home=pathlib.Path({str(tmp_path)!r})).close();"
        f" open_threads(load_settings({{'RELAY_HOME': {str(tmp_path)!r}}})).close();"
        " print(sorted(m for m in sys.modules if m.startswith(('psycopg', 'psycopg_pool'))))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_server_that_refuses_connections_is_store_unavailable_naming_the_url_without_its_password(
    relay_home: Path,
) -> None:
    url = f"postgresql://relay:s3cret-pw@127.0.0.1:{free_port()}/queue"
    with pytest.raises(RelayError) as err:
        open_store(url, home=relay_home)
    assert err.value.code is ErrorCode.STORE_UNAVAILABLE
    text = f"{err.value.message} {err.value.hint}"
    assert "s3cret-pw" not in text and "postgresql://relay@127.0.0.1:" in text and "pg_isready" in err.value.hint


def test_an_unknown_database_or_user_is_a_configuration_error(pg_cluster: Cluster, relay_home: Path) -> None:
    for url in (pg_cluster.url("no_such_db"), pg_cluster.url().replace("postgres@", "nobody@")):
        with pytest.raises(RelayError) as err:
            open_store(url, home=relay_home)
        assert err.value.code is ErrorCode.CONFIG_INVALID and "RELAY_STORE" in err.value.hint


def test_a_password_is_removed_from_the_authority_and_from_the_query() -> None:
    assert (
        redact("postgresql://u:pw@h:5432/db?password=pw&sslmode=require") == "postgresql://u@h:5432/db?sslmode=require"
    )
    assert redact("postgres://h/db") == "postgres://h/db"


@pytest.mark.parametrize(
    ("sqlstate", "code"),
    [
        ("08006", ErrorCode.STORE_UNAVAILABLE),
        ("57P01", ErrorCode.STORE_UNAVAILABLE),
        ("57P03", ErrorCode.STORE_UNAVAILABLE),
        ("40001", ErrorCode.STORE_BUSY),
        ("40P01", ErrorCode.STORE_BUSY),
        ("55P03", ErrorCode.STORE_BUSY),
        ("53300", ErrorCode.STORE_BUSY),
        ("53100", ErrorCode.DISK_FULL),
        ("28P01", ErrorCode.CONFIG_INVALID),
        ("3D000", ErrorCode.CONFIG_INVALID),
        ("25006", ErrorCode.STORE_READONLY),
        ("42501", ErrorCode.STORE_READONLY),
        ("XX001", ErrorCode.STORE_DAMAGED),
        ("22021", ErrorCode.INVALID_ARGUMENT),
    ],
)
def test_each_kind_of_postgresql_failure_has_its_own_code(sqlstate: str, code: ErrorCode) -> None:
    exc = psycopg.errors.lookup(sqlstate)("boom")
    assert code_of(exc) is code
    err = pg_error(exc, "postgresql://u:pw@h/db")
    assert err.code is code and err.hint and "pw@" not in err.message


def test_a_connection_failure_without_a_sqlstate_is_store_unavailable() -> None:
    assert code_of(psycopg.OperationalError("connection failed")) is ErrorCode.STORE_UNAVAILABLE


def test_a_store_whose_server_went_away_answers_with_a_relay_error_and_works_again_after_a_restart(
    pg_cluster: Cluster, pg_url: str, relay_home: Path
) -> None:
    store = PgStore(pg_url, open_store(relay_home / "relay.db", home=relay_home).audit, wait_s=2)
    store.insert_job("before", "claude", "cli", {"prompt": "p"}, None, "/w")
    pg_cluster.restart()  # every pooled connection is now closed by the server
    store.insert_job("after", "claude", "cli", {"prompt": "p"}, None, "/w")
    assert [r.id for r in store.list_jobs()] == ["after", "before"]
    store.close()


def test_two_relays_migrating_a_new_database_at_once_both_start(pg_url: str, relay_home: Path) -> None:
    results: list[object] = []

    def start() -> None:
        try:
            store = open_store(pg_url, home=relay_home)
            results.append(store.applied_migrations())
            store.close()
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [sorted(name for name, _ in MIGRATIONS)] * 3


def test_relay_store_or_the_config_file_names_the_postgresql_store(relay_home: Path) -> None:
    base = {"RELAY_HOME": str(relay_home)}
    assert load_settings(base).store_target == relay_home / "relay.db"
    (relay_home / "config.toml").write_text('[store]\nurl = "postgresql://team@db.example/queue"\n')
    assert load_settings(base).store_target == "postgresql://team@db.example/queue"
    env = base | {"RELAY_STORE": "postgres://me@127.0.0.1/q"}
    assert load_settings(env).store_target == "postgres://me@127.0.0.1/q"
    with pytest.raises(RelayError) as err:
        load_settings(base | {"RELAY_STORE": "mysql://u:secret@h/db"})
    assert err.value.code is ErrorCode.CONFIG_INVALID and "RELAY_STORE" in err.value.message
    assert "secret" not in err.value.message


def test_relay_workers_lists_the_workers_of_the_postgresql_store_relay_store_names(
    pg_url: str, relay_home: Path
) -> None:
    store = open_store(pg_url, home=relay_home)
    store.register_worker(WorkerInfo("far/1", "far", "host-b", 42, None, "boot-b", ("codex",), ("gpu",), 3, 15.0))
    store.close()
    env = {**os.environ, "RELAY_HOME": str(relay_home), "RELAY_STORE": pg_url}
    out = subprocess.run(
        [sys.executable, "-m", "relay.cli.main", "workers", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    [far] = json.loads(out.stdout)
    assert (far["name"], far["host"], far["agents"], far["labels"], far["slots"]) == (
        "far",
        "host-b",
        ["codex"],
        ["gpu"],
        3,
    )


def test_relay_doctor_says_whether_the_postgresql_store_answers_and_reads_its_queue(
    pg_url: str, relay_home: Path
) -> None:
    from relay.doctor import queue_report, store_report

    store = open_store(pg_url, home=relay_home)
    store.register_worker(WorkerInfo("far/1", "far", "host-b", 42, None, "boot-b", None, (), 3, 600.0))
    store.close()
    settings = load_settings({"RELAY_HOME": str(relay_home), "RELAY_STORE": pg_url})
    line, ok = store_report(settings)
    assert ok and "answers" in line and "m017_jobs_worker_index" in line
    queue, details = queue_report(settings)
    assert queue.startswith("queue: 1 worker running") and details["workers_running"][0]["name"] == "far"
    dead = f"postgresql://relay:pw@127.0.0.1:{free_port()}/q"
    line, ok = store_report(load_settings({"RELAY_HOME": str(relay_home), "RELAY_STORE": dead}))
    assert not ok and "STORE_UNAVAILABLE" in line and ":pw@" not in line


def test_the_job_stores_pool_size_comes_from_the_environment_or_the_config_file_and_reaches_its_pool(
    pg_url: str, relay_home: Path
) -> None:
    base = {"RELAY_HOME": str(relay_home), "RELAY_STORE": pg_url}
    assert load_settings(base).store_pool_size == 4
    (relay_home / "config.toml").write_text("[store]\npool_size = 9\n")
    settings = load_settings(base)
    assert settings.store_pool_size == 9
    assert load_settings(base | {"RELAY_STORE_POOL_SIZE": "2"}).store_pool_size == 2
    store = open_store(settings.store_target, home=relay_home, pool_size=settings.store_pool_size)
    assert isinstance(store, PgStore) and store._pool.pool.max_size == 9  # pyright: ignore[reportPrivateUsage]
    store.close()
    for bad in ("0", "-3", "many", "2.5"):
        with pytest.raises(RelayError) as err:
            load_settings(base | {"RELAY_STORE_POOL_SIZE": bad})
        assert err.value.code is ErrorCode.CONFIG_INVALID and "RELAY_STORE_POOL_SIZE" in err.value.message
    (relay_home / "config.toml").write_text("[store]\npool_size = 0\n")
    with pytest.raises(RelayError) as err:
        load_settings(base)
    assert "[store] pool_size" in err.value.message and "at least 1" in err.value.message


def test_an_engine_opens_its_postgresql_store_with_the_pool_size_its_settings_name(
    make_settings: SettingsFactory, pg_url: str
) -> None:
    engine = Engine(make_settings(RELAY_STORE=pg_url, RELAY_STORE_POOL_SIZE="3"))
    assert isinstance(engine.store, PgStore) and engine.store._pool.pool.max_size == 3  # pyright: ignore[reportPrivateUsage]
    engine.store.close()
