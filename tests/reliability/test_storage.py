"""Storage failures are results, not crashes: a full disk, a read-only home, a damaged or held database.

The disk and the read-only home are real (a small tmpfs mounted for the test; the suite runs as root
in CI); the lock is held by a second process; the damaged files are truncated or overwritten on disk.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from relay.config import Settings, load_settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.server.app import build_server
from relay.store import Store
from relay.store import db as store_db
from relay.store.health import check_store
from tests.reliability.conftest import ADVERSARIAL, RELAY, record, relay_env

pytestmark = pytest.mark.anyio


def settings_for(home: Path, workdir: Path, config: str = "") -> Settings:
    (home / "config.toml").write_text(f'[agents.claude]\ncommand = "{ADVERSARIAL}"\n{config}')
    env = {"RELAY_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HOME": str(home)}
    return load_settings(env, cwd=workdir)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs, unmounted after the test."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def cli(home: Path, workdir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args], env=relay_env(home), cwd=str(workdir), capture_output=True, text=True, timeout=timeout
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# disk full ---------------------------------------------------------------------------------------


async def test_a_job_whose_output_fills_the_disk_ends_failed_with_disk_full_and_the_server_keeps_answering(
    small_disk: Path, workdir: Path
) -> None:
    settings = settings_for(small_disk, workdir)
    ballast = small_disk / "ballast"
    async with Client(build_server(settings)) as client:
        ballast.write_bytes(b"\0" * (256 * 1024))  # freed later, in case even the final row cannot be written
        result = await client.call_tool(
            "delegate", {"prompt": "[[fake:flood=8]]", "cwd": str(workdir), "mode": "async"}
        )
        assert result.structured_content is not None, result
        job_id = result.structured_content["job_id"]
        waited = await client.call_tool("job_wait", {"job_ids": [job_id], "timeout_s": 30})
        assert waited.structured_content is not None
        freed = False
        if not waited.structured_content["done"]:
            status = await client.call_tool("status", {})
            assert not status.is_error  # the server answers while the disk is full
            ballast.unlink()
            freed = True
            waited = await client.call_tool("job_wait", {"job_ids": [job_id], "timeout_s": 30})
            assert waited.structured_content is not None and waited.structured_content["done"]
        final = await client.call_tool("job_status", {"job_id": job_id})
        assert final.structured_content is not None
        assert final.structured_content["status"] == "failed"
        assert final.structured_content["error"]["code"] == "DISK_FULL"
        assert final.structured_content["error"]["hint"]
        status = await client.call_tool("status", {})
        assert not status.is_error
        again = await client.call_tool(
            "delegate", {"prompt": "[[fake:pattern=1]]", "cwd": str(workdir), "mode": "async"}
        )
        # A new job is refused with a code or runs: either way an answer, never a crash.
        assert again.structured_content is not None
        assert not again.is_error or again.structured_content["error"]["code"] in ("DISK_FULL", "STORE_READONLY")
    record("storage", "disk_full", {"tmpfs_mb": 3, "needed_space_freed_to_record_end": freed})


# read-only home ----------------------------------------------------------------------------------


async def test_a_read_only_home_gives_store_readonly_in_one_line(small_disk: Path, workdir: Path) -> None:
    settings = settings_for(small_disk, workdir)
    Store(settings.db_path).close()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    run = cli(small_disk, workdir, "run", "claude", "hello", "--cwd", str(workdir))
    assert run.returncode == 74
    assert "STORE_READONLY" in one_line(run)
    jobs = cli(small_disk, workdir, "jobs")
    assert jobs.returncode == 0 or "STORE_READONLY" in one_line(jobs)


# damaged database --------------------------------------------------------------------------------


def make_db_with_jobs(settings: Settings, n: int) -> None:
    store = Store(settings.db_path)
    for i in range(n):
        store.insert_job(f"{i:016x}", "claude", "cli", {"prompt": "x" * 500}, None, None)
    store.close()


def damage_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def damage_garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def damage_empty(path: Path) -> None:
    path.write_bytes(b"")
    os.utime(path, (1_000_000_000, 1_000_000_000))


@pytest.mark.parametrize(
    "damage", [damage_truncate, damage_garbage, damage_empty], ids=["truncated", "garbage", "empty"]
)
async def test_a_damaged_db_is_moved_aside_with_a_recovery_hint_never_silently_replaced(
    damage: object, relay_home: Path, workdir: Path
) -> None:
    settings = settings_for(relay_home, workdir)
    make_db_with_jobs(settings, 300)
    assert callable(damage)
    damage(settings.db_path)
    original = settings.db_path.read_bytes()
    jobs = cli(relay_home, workdir, "jobs")
    line = one_line(jobs)
    assert jobs.returncode == 74
    assert "STORE_DAMAGED" in line and ".recover" in line
    moved = [
        p
        for p in relay_home.iterdir()
        if p.name.startswith("relay.db.damaged-") and p.name[-4:] not in ("-wal", "-shm")
    ]
    assert len(moved) == 1 and moved[0].read_bytes() == original  # kept as it was, for recovery
    assert moved[0].name in line
    again = cli(relay_home, workdir, "jobs")
    assert again.returncode == 0 and again.stdout.strip() == "no jobs", again.stderr


async def test_doctor_checks_the_db_integrity_and_free_space(relay_home: Path, workdir: Path) -> None:
    settings = settings_for(relay_home, workdir)
    make_db_with_jobs(settings, 300)
    sound = check_store(settings.db_path)
    assert sound.integrity == "ok" and sound.ok and sound.free_bytes
    doctor = cli(relay_home, workdir, "doctor")
    assert "relay.db" in doctor.stdout and "integrity ok" in doctor.stdout
    damage_truncate(settings.db_path)
    damaged = check_store(settings.db_path)
    assert damaged.integrity != "ok" and not damaged.ok
    doctor = cli(relay_home, workdir, "doctor")
    assert doctor.returncode != 0 and "DAMAGED" in doctor.stdout


# a held lock -------------------------------------------------------------------------------------

HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("UPDATE jobs SET stop_reason = stop_reason")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def held_lock(relay_home: Path, workdir: Path) -> Iterator[Settings]:
    settings = settings_for(relay_home, workdir)
    Store(settings.db_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(settings.db_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    try:
        yield settings
    finally:
        holder.kill()
        holder.wait()


async def test_a_write_lock_held_by_another_process_is_store_busy_after_a_bounded_wait(
    held_lock: Settings, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_db, "BUSY_TIMEOUT_MS", 500)
    async with Client(build_server(held_lock)) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "async"})
        assert result.is_error and result.structured_content is not None
        assert result.structured_content["error"]["code"] == "STORE_BUSY"
        assert result.structured_content["error"]["hint"]
        status = await client.call_tool("status", {})
        assert not status.is_error
    async with Engine(held_lock).running() as engine:
        with pytest.raises(RelayError) as caught:
            engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
    assert caught.value.code is ErrorCode.STORE_BUSY


async def test_relay_run_with_the_db_lock_held_prints_store_busy_in_one_line(
    held_lock: Settings, relay_home: Path, workdir: Path
) -> None:
    run = cli(relay_home, workdir, "run", "claude", "hello", "--cwd", str(workdir))
    assert run.returncode == 75
    assert "STORE_BUSY" in one_line(run)
    # Readers are not blocked by a writer (WAL).
    jobs = cli(relay_home, workdir, "jobs")
    assert jobs.returncode == 0, jobs.stderr


def test_sqlite_failures_never_escape_untranslated(tmp_path: Path) -> None:
    from relay.store.health import sqlite_error

    for exc in (
        sqlite3.OperationalError("database is locked"),
        sqlite3.OperationalError("database or disk is full"),
        sqlite3.DatabaseError("database disk image is malformed"),
        sqlite3.DatabaseError("file is not a database"),
        sqlite3.OperationalError("attempt to write a readonly database"),
        sqlite3.OperationalError("unable to open database file"),
        sqlite3.OperationalError("disk I/O error"),
    ):
        err = sqlite_error(exc, tmp_path / "relay.db", 1.0)
        assert err.code is not ErrorCode.INTERNAL and err.hint, exc


def test_opening_the_store_while_another_connection_checkpoints_never_moves_it_aside(
    relay_home: Path, workdir: Path
) -> None:
    import threading

    settings = settings_for(relay_home, workdir)
    writer = Store(settings.db_path)
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            writer.insert_job(f"{i:016x}", "claude", "cli", {"prompt": "x" * 2000}, None, None)
            if i % 20 == 0:
                writer._exec("PRAGMA wal_checkpoint(PASSIVE)")  # pyright: ignore[reportPrivateUsage]
            i += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        for _ in range(800):
            Store(settings.db_path).close()
    finally:
        stop.set()
        thread.join()
    assert [p.name for p in relay_home.iterdir() if ".damaged-" in p.name] == []
    assert writer.get_job("0000000000000000") is not None
