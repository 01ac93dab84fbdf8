"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl from Debian's packages, on 127.0.0.1.

The cluster lives in a temporary folder, listens on a free port on 127.0.0.1 and on a unix socket in
that folder, and runs as the `postgres` user when the tests run as root (PostgreSQL refuses to run as
root). Each test gets a database of its own (`CREATE DATABASE ... TEMPLATE`, a file copy: cheap). The
cluster is stopped by its postmaster's pid at the end of the session.

`scripts/install-system-tools` installs PostgreSQL when it is missing; under CI=true a missing
PostgreSQL fails the tests that need it, elsewhere it skips them with the reason.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import psutil

# How long the cluster may take to start, restart or stop (initdb on a busy 2-core machine included).
START_TIMEOUT_S = 60
# Settings for a cluster whose data is thrown away: no durability work, room for many connections.
TEST_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
}
_names = itertools.count(1)


def pg_bin() -> Path | None:
    """The bin folder of the newest PostgreSQL under /usr/lib/postgresql that has initdb and pg_ctl."""
    found: list[tuple[int, Path]] = []
    for folder in glob.glob("/usr/lib/postgresql/*/bin"):
        path = Path(folder)
        version = path.parent.name
        if version.isdigit() and (path / "initdb").exists() and (path / "pg_ctl").exists():
            found.append((int(version), path))
    return max(found)[1] if found else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """One PostgreSQL cluster started for the tests; `url(name)` reaches a database of it."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        # /tmp itself, not pytest's 0700 folders: the postgres user must reach the data folder.
        self.root = Path(tempfile.mkdtemp(prefix="relay-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        self.pid: int | None = None

    def _run(self, args: Sequence[str]) -> None:
        argv = [*(["runuser", "-u", "postgres", "--"] if self._as_postgres else []), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}\n{log}")

    def start(self) -> None:
        self.socket_dir.mkdir()
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"])
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            for key, value in {**TEST_SETTINGS, "port": str(self.port)}.items():
                conf.write(f"{key} = {value}\n")
            conf.write(f"unix_socket_directories = '{self.socket_dir}'\n")
        self._pg_ctl("start")

    def _pg_ctl(self, action: str) -> None:
        mode = ["-m", "fast"] if action == "restart" else []
        pg_ctl = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(START_TIMEOUT_S)]
        self._run([*pg_ctl, action, *mode])
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def restart(self) -> None:
        """Stop the server (fast: every connection is closed) and start it again on the same port."""
        self._pg_ctl("restart")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A new, empty database (copied from template0) and its URL."""
        import psycopg  # only the tests that use the cluster pay for it

        name = f"relay_test_{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY FILE_COPY')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __enter__(self) -> Cluster:
        """Started (and, past the block, stopped with its files removed, even when starting failed half-way)."""
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the server by its postmaster's pid (SIGINT: fast shutdown, then SIGKILL) and remove its files."""
        if self.pid is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                postmaster = psutil.Process(self.pid)
                postmaster.send_signal(signal.SIGINT)
                try:
                    postmaster.wait(START_TIMEOUT_S)
                except psutil.TimeoutExpired:
                    postmaster.kill()
            self.pid = None
        shutil.rmtree(self.root, ignore_errors=True)
