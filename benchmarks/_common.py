"""Shared helpers for relay's benchmarks: temporary homes, results, statistics, process cleanup.

Every benchmark gets a fresh temporary RELAY_HOME whose config.toml points `agents.claude.command`
at the fake Claude CLI in tests/fakes/claude, and a temporary working directory. Nothing leaves
127.0.0.1 / this machine.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "benchmarks"
RESULTS_DIR = BENCH_DIR / "results"
FAKE_CLAUDE = REPO / "tests" / "fakes" / "claude"
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = VENV_BIN / "python"
RELAY_BIN = VENV_BIN / "relay"
BARE_SERVER = BENCH_DIR / "bare_server.py"


@dataclass
class Result:
    """One measured number, its target and whether it met it (None: informational only)."""

    benchmark: str
    metric: str
    value: float
    unit: str
    target: str = ""
    passed: bool | None = None
    details: dict[str, Any] = field(default_factory=lambda: {})


@dataclass(frozen=True)
class BenchEnv:
    """A fresh RELAY_HOME (with config.toml) and working directory, removed afterwards."""

    root: Path
    home: Path
    work: Path

    @property
    def env(self) -> dict[str, str]:
        """Environment for a relay server process (or for load_settings)."""
        return {"RELAY_HOME": str(self.home), "HOME": str(self.home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def settings(self) -> Any:
        from relay.config import load_settings

        return load_settings(self.env, cwd=self.work)


# Which store a benchmark that honours it runs on: `RELAY_BENCH_STORE=postgresql` starts a throwaway cluster
# (tests/postgres.py: initdb + pg_ctl on 127.0.0.1, fsync off); anything else is relay.db in the home.
BENCH_STORE = os.environ.get("RELAY_BENCH_STORE", "sqlite")


def store_suffix() -> str:
    """What a benchmark's results file adds to its name on PostgreSQL (`concurrency_pg.json`)."""
    return "_pg" if BENCH_STORE == "postgresql" else ""


@contextlib.contextmanager
def bench_store() -> Iterator[str | None]:
    """The store URL for `bench_env(store_url=...)`: a database of a throwaway PostgreSQL, or None (SQLite)."""
    if BENCH_STORE != "postgresql":
        yield None
        return
    with pg_cluster() as cluster:
        yield cluster.new_database()


@contextlib.contextmanager
def pg_cluster() -> Iterator[Any]:
    """A throwaway PostgreSQL cluster (tests/postgres.py's `Cluster`), stopped afterwards."""
    sys.path.insert(0, str(REPO))
    from tests.postgres import Cluster, pg_bin

    bin_dir = pg_bin()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL under /usr/lib/postgresql/*/bin: scripts/install-system-tools installs it")
    with Cluster(bin_dir) as cluster:
        yield cluster


@contextlib.contextmanager
def bench_env(config_extra: str = "", command: Path = FAKE_CLAUDE, store_url: str | None = None) -> Iterator[BenchEnv]:
    root = Path(tempfile.mkdtemp(prefix="relay-bench-")).resolve()
    home, work = root / "home", root / "work"
    home.mkdir()
    work.mkdir()
    store = f'[store]\nurl = "{store_url}"\n' if store_url else ""
    text = f'[agents.claude]\ncommand = "{command}"\n' + config_extra + store
    (home / "config.toml").write_text(text, encoding="utf-8")
    try:
        yield BenchEnv(root, home, work)
    finally:
        kill_descendants()
        shutil.rmtree(root, ignore_errors=True)


# statistics -------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# processes --------------------------------------------------------------------------------


def _ppid_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                stat = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid ..." where comm may contain spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, grandchildren, ...)."""
    parents = _ppid_map()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        for child, parent in parents.items():
            if parent == current and child not in found:
                found.append(child)
                frontier.append(child)
    return found


def kill_descendants(pid: int | None = None) -> list[int]:
    """SIGKILL whatever this benchmark (or `pid`, one of its processes) started and left running."""
    killed: list[int] = []
    for child in descendants(os.getpid() if pid is None else pid):
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
            killed.append(child)
    # Reap our own zombies so they do not linger.
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    return killed


def proc_status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def kib(value: str) -> int:
    """'12345 kB' -> 12345."""
    return int(value.split()[0])


# reporting --------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with contextlib.suppress(OSError, StopIteration):
        mem_kib = kib(proc_meminfo()["MemTotal"])
    import mcp

    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "mcp": getattr(mcp, "__version__", _dist_version("mcp")),
        "relay": _dist_version("relay-mcp"),
    }


def source_state() -> dict[str, Any]:
    """The commit measured and how many files under src/ differed from it (the tree may be in flux)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = [line for line in git("status", "--porcelain", "--", "src").splitlines() if line.strip()]
    return {"commit": git("rev-parse", "HEAD"), "src_files_modified": len(dirty)}


def proc_meminfo() -> dict[str, str]:
    out: dict[str, str] = {}
    with open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) >= 100:
        return f"{int(value):,}"
    return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"


def table(results: Sequence[Result]) -> str:
    rows = [
        [
            r.benchmark,
            r.metric,
            f"{_fmt(r.value)} {r.unit}",
            r.target or "-",
            "-" if r.passed is None else ("PASS" if r.passed else "FAIL"),
        ]
        for r in results
    ]
    headers = ["benchmark", "metric", "measured", "target", "result"]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def write_results(results: Sequence[Result], name: str, started: float) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "command": " ".join([".venv/bin/python", *[str(Path(a)) for a in sys.argv]]),
        "machine": machine(),
        "source": source_state(),
        "results": [asdict(r) for r in results],
        "all_passed": all(r.passed is not False for r in results),
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def loadavg() -> list[float]:
    """1, 5 and 15 minute load averages: other work on the machine shows up as noise in wall times."""
    with open("/proc/loadavg", encoding="utf-8") as fh:
        return [float(x) for x in fh.read().split()[:3]]


def run_benchmark(results_fn: Any) -> list[Result]:
    """Run one benchmark's `run()` and note the machine's load around it in its first result."""
    import anyio

    before = loadavg()
    results: list[Result] = anyio.run(results_fn)
    if results:
        results[0].details["loadavg_before"] = before
        results[0].details["loadavg_after"] = loadavg()
    kill_descendants()
    return results


def main_for(name: str, results_fn: Any) -> int:
    """Entry point shared by each benchmark run on its own: run, print the table, write results/NAME.json."""
    started = time.time()
    results = run_benchmark(results_fn)
    print(table(results))
    path = write_results(results, name, started)
    print(f"\nresults written to {path.relative_to(REPO)}")
    return 0 if all(r.passed is not False for r in results) else 1
