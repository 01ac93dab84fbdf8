"""What the fault scenarios of the cluster tier share (issue 40): a ticking agent, worker hosts, a PostgreSQL of
their own that can be stopped, a clock moved for one process.

- `ticking_agent`: a /bin/sh claude that writes `tick JOB RUN NS` to a log and to its stdout every TICK_S for
  `work_s`, then answers; each run of a job is told apart by its RUN (its pid and its start in ns: two hosts' pid
  namespaces give the same pids), so two copies at once show in the log.
- `Hosts`: `relay worker`s, each on a host (a network namespace) as the first process of a pid namespace of its
  own, reaching PostgreSQL at its link's root-side address; `start(..., clock_s=N)` runs the worker with its
  clock N seconds off (tests/cluster/skewed.py).
- `own_pg`: a PostgreSQL cluster for one test, so it can be stopped and started (an outage) without touching
  the session's.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

import relay
from tests.cluster.forward import Forwarder
from tests.cluster.netns import Cluster, Host
from tests.postgres import START_TIMEOUT_S, pg_bin
from tests.postgres import Cluster as PgCluster

RELAY = str(Path(sys.executable).with_name("relay"))
REPO = Path(__file__).resolve().parents[2]
SRC = Path(relay.__file__).resolve().parents[1]
# How often the ticking agent ticks.
TICK_S = 0.1


def ticking_agent(folder: Path, log: Path, work_s: float, *, short_s: float | None = None) -> Path:
    """A claude that ticks (`tick JOB RUN NS`, to `log` and its stdout) every TICK_S for `work_s`, then answers.
    `short_s`: a job whose prompt ends in `-short`, and a job's second run, tick that long only."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ticking-claude"
    sid = "c0c0c0c0-0000-4000-8000-000000000040"
    result = (
        '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,'
        f'"session_id":"{sid}","total_cost_usd":0,"usage":{{"input_tokens":1,"output_tokens":1}}}}'
    )
    ticks = max(int(work_s / TICK_S), 1)
    short = max(int((short_s or 0) / TICK_S), 1)
    path.write_text(
        "#!/bin/sh\n"
        'for a; do case "$a" in job-*) J="$a";; esac; done\n'
        f'printf \'%s\\n\' \'{{"type":"system","subtype":"init","session_id":"{sid}","model":"m"}}\'\n'
        f'k={ticks}; R="$$-$(date +%s%N)"\n'
        + (
            f'case "$J" in *-short) k={short};; esac\ngrep -q "^tick $J " {log} 2>/dev/null && k={short}\n'
            if short_s is not None
            else ""
        )
        + "n=0; while [ $n -lt $k ]; do\n"
        f'  l="tick $J $R $(date +%s%N)"; echo "$l" >> {log}; echo "$l"; n=$((n+1)); sleep {TICK_S}\n'
        "done\n"
        f"printf '%s\\n' '{result}'\n"
    )
    path.chmod(0o755)
    return path


def ticks(log: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """For each job, each run (the agent's pid and start) and its first and last tick (ns since the epoch)."""
    runs: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    if not log.exists():
        return runs
    for line in log.read_text().splitlines():
        words = line.split()
        if len(words) != 4 or words[0] != "tick":
            continue
        job, run, ns = words[1], words[2], int(words[3])
        first, last = runs[job].get(run, (ns, ns))
        runs[job][run] = (min(first, ns), max(last, ns))
    return runs


def last_tick(log: Path) -> float:
    """The time of the newest tick of any job (seconds since the epoch), 0 with none."""
    return max((last for runs in ticks(log).values() for _, last in runs.values()), default=0) / 1e9


def overlapping(runs: dict[str, tuple[int, int]]) -> list[tuple[str, str]]:
    """Pairs of runs of one job that ticked at the same time (two copies at once)."""
    spans = sorted(runs.items(), key=lambda r: r[1][0])
    return [(a, b) for (a, (_, a_end)), (b, (b_start, _)) in itertools.pairwise(spans) if b_start <= a_end]


def home_for(tmp_path: Path, name: str, agent: Path, env: dict[str, str]) -> dict[str, str]:
    """A home of its own (config naming the agent) and the environment of a relay process using it."""
    home = tmp_path / f"home-{name}"
    home.mkdir()
    (home / "config.toml").write_text(f'[agents.claude]\ncommand = "{agent}"\n')
    return env | {"RELAY_HOME": str(home), "HOME": str(home)}


def base_env(work: Path, store: str, lease_s: float | None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "RELAY_STORE": store,
        "RELAY_ALLOWED_ROOTS": str(work),
        # The relay under test (the tree this test is in, whatever the venv's install points at), and the tests.
        "PYTHONPATH": f"{SRC}{os.pathsep}{REPO}",
    }
    return env | ({"RELAY_LEASE_S": str(lease_s)} if lease_s is not None else {})


@dataclass
class Hosts:
    """Worker hosts of one test, each reaching the store `pg_port` through its own link."""

    cluster: Cluster
    pg_port: int
    forwarders: list[Forwarder] = field(default_factory=lambda: [])
    workers: dict[str, subprocess.Popen[str]] = field(default_factory=lambda: {})
    hosts: dict[str, Host] = field(default_factory=lambda: {})

    def add(self, name: str) -> Host:
        host = self.cluster.add_host()
        self.forwarders.append(Forwarder([host.root_addr], self.pg_port, self.pg_port))
        self.hosts[name] = host
        return host

    def start(
        self, name: str, env: dict[str, str], work: Path, *args: str, clock_s: float = 0.0
    ) -> subprocess.Popen[str]:
        """`relay worker --name NAME ARGS` on the host `name` (added by `add`), its clock `clock_s` off."""
        host = self.hosts[name]
        there = env | {"RELAY_STORE": env["RELAY_STORE"].replace("127.0.0.1", host.root_addr)}
        relay = [sys.executable, "-m", "tests.cluster.skewed", str(clock_s)] if clock_s else [RELAY]
        argv = ["unshare", "--pid", "--fork", "--mount", "--mount-proc", *relay, "worker", "--name", name, *args]
        # What it says (a failure's one line, its warnings) is kept in its home: `worker.log`.
        with (Path(env["RELAY_HOME"]) / "worker.log").open("ab") as said:
            proc = self.cluster.popen(host, argv, env=there, cwd=work, stdout=subprocess.DEVNULL, stderr=said.fileno())
        self.workers[name] = proc
        return proc

    def worker_pid(self, name: str) -> int:
        """The worker process itself (the first of its host's pid namespace), as this namespace sees it."""
        with_init = psutil.Process(self.workers[name].pid)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            children = with_init.children()
            if children:
                return children[0].pid
            time.sleep(0.02)
        raise AssertionError(f"the worker {name} has no process")

    def close(self) -> None:
        for forwarder in self.forwarders:
            forwarder.close()


@pytest.fixture
def fleet(cluster: Cluster, pg_cluster: PgCluster) -> Iterator[Hosts]:
    """Worker hosts reaching the session's PostgreSQL."""
    made = Hosts(cluster, pg_cluster.port)
    try:
        yield made
    finally:
        made.close()


class OwnPg(PgCluster):
    """A PostgreSQL of one test: `away()` stops it, `back()` starts it again on the same port.

    The stop is PostgreSQL's `fast` shutdown (every connection cut at once, what was committed kept): the test
    clusters run with synchronous_commit off, so a crash would also lose the last commits, which a production
    server does not."""

    def away(self) -> None:
        pg_ctl = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w"]
        self._run([*pg_ctl, "-t", str(START_TIMEOUT_S), "stop", "-m", "fast"])

    def back(self) -> None:
        self._pg_ctl("start")


@pytest.fixture
def own_pg() -> Iterator[OwnPg]:
    bin_dir = pg_bin()
    if bin_dir is None:
        message = "no PostgreSQL under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    made = OwnPg(bin_dir)
    with made:
        yield made
