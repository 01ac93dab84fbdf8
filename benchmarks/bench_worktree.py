"""Benchmark: a job's git worktree in a 10,000-file repository: made, removed, and its branch landed.

A repository of 10,000 files (100 folders of 100 files, 2 KB each: about 20 MB checked out) is
generated, committed on branch main and packed, as a clone is (setup, not measured). Then, RUNS times each:
  - relay's worktree creation (`relay.workspaces.make.create`: find the repository, resolve the
    base, `git worktree add -b relay/<job-id>`, the row in relay.db) and removal
    (`relay.workspaces.cleanup.remove_worktree`);
  - `git worktree add -b` / `git worktree remove --force` alone, beside them;
  - a land of a 10-commit branch without a test command (`relay.workspaces.land.land`, rebase
    strategy): the branch is on top of main, which is checked out and clean in the caller's
    checkout, so the land moves main and updates that checkout as `git merge --ff-only` would, then
    removes the landed worktree. Making the branch (a worktree and 10 commits) is setup.
Goals: ≤ 1 s each for creation and removal, ≤ 200 ms for the land (medians).

Wall times on a shared machine include waits for a core; the CPU time of the benchmark and of
the git processes it ran (os.times: self + children) is reported beside them.

Run alone: .venv/bin/python benchmarks/bench_worktree.py [runs]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from _common import Result, bench_env, main_for, median, ms

NAME = "worktree"
FOLDERS = 100
FILES_PER_FOLDER = 100
FILE_BYTES = 2048
BRANCH_COMMITS = 10
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
CREATE_GOAL_S = 1.0
REMOVE_GOAL_S = 1.0
LAND_GOAL_MS = 200.0
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}
T = TypeVar("T")


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return out.stdout.strip()


def make_repo(repo: Path) -> int:
    """FOLDERS x FILES_PER_FOLDER files committed on main; returns the number of files."""
    git(repo, "init", "-q", "-b", "main")
    line = ("x" * 63 + "\n").encode()
    body = line * (FILE_BYTES // len(line))
    for d in range(FOLDERS):
        folder = repo / f"pkg{d:03d}"
        folder.mkdir()
        for f in range(FILES_PER_FOLDER):
            (folder / f"mod{f:03d}.py").write_bytes(f"# {d}/{f}\n".encode() + body)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "10,000 files")
    git(repo, "repack", "-a", "-d", "-q")  # packed, as a clone is (10,000 loose objects cost a file each)
    git(repo, "prune-packed")
    return int(git(repo, "ls-files", "--cached", "-z").count("\0"))


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """(fn's result, wall seconds, CPU seconds of this process and the processes it waited for)."""
    before = os.times()
    t0 = time.perf_counter()
    value = fn()
    wall = time.perf_counter() - t0
    after = os.times()
    cpu = sum(after[:4]) - sum(before[:4])
    return value, wall, cpu


def summary(wall: list[float], cpu: list[float]) -> dict[str, Any]:
    return {
        "median_ms": ms(median(wall)),
        "min_ms": ms(min(wall)),
        "max_ms": ms(max(wall)),
        "cpu_median_ms": ms(median(cpu)),
        "runs": len(wall),
        "samples_ms": [ms(w) for w in wall],
    }


async def run() -> list[Result]:
    from relay.workspaces import cleanup, land, make
    from relay.workspaces.records import WorkspaceStore

    with bench_env() as env:
        settings = env.settings()
        repo = env.work
        t0 = time.perf_counter()
        files = make_repo(repo)
        setup_s = time.perf_counter() - t0
        store = WorkspaceStore(settings.db_path)
        worktrees = settings.worktrees_dir
        samples: dict[str, tuple[list[float], list[float]]] = {
            k: ([], []) for k in ("create", "remove", "git add", "git remove", "land")
        }

        def note(key: str, wall: float, cpu: float) -> None:
            samples[key][0].append(wall)
            samples[key][1].append(cpu)

        for i in range(RUNS):
            # relay's creation and removal
            rec, wall, cpu = timed(lambda i=i: make.create(worktrees, store, f"bench{i:04d}", str(repo)))
            note("create", wall, cpu)
            assert (Path(rec.path) / "pkg099" / "mod099.py").is_file()
            _, wall, cpu = timed(lambda rec=rec: cleanup.remove_worktree(rec))
            note("remove", wall, cpu)
            assert not Path(rec.path).exists()
            git(repo, "branch", "-D", rec.branch)
            # git alone, beside it
            path = worktrees / f"plain{i:04d}"
            _, wall, cpu = timed(
                lambda path=path, i=i: git(repo, "worktree", "add", "-q", "-b", f"plain/{i}", str(path))
            )
            note("git add", wall, cpu)
            _, wall, cpu = timed(lambda path=path: git(repo, "worktree", "remove", "--force", str(path)))
            note("git remove", wall, cpu)
            git(repo, "branch", "-D", f"plain/{i}")
            # a 10-commit branch, landed into main (checked out and clean in the caller's checkout)
            rec = make.create(worktrees, store, f"land{i:04d}", str(repo))
            for c in range(BRANCH_COMMITS):
                target = Path(rec.path) / f"pkg{c:03d}" / "mod000.py"
                target.write_text(target.read_text() + f"# land {i} commit {c}\n")
                git(Path(rec.path), "commit", "-q", "-am", f"land {i} commit {c}")
            head = git(repo, "rev-parse", rec.branch)
            log = env.root / f"land{i}.log"
            landed, wall, cpu = timed(
                lambda rec=rec, log=log: land.land(
                    rec,
                    into="main",
                    strategy="rebase",
                    test_command=None,
                    test_timeout_s=60,
                    test_log=log,
                    message="bench land",
                )
            )
            note("land", wall, cpu)
            assert landed["new"] == head and landed["commits"] == BRANCH_COMMITS, landed
            assert git(repo, "rev-parse", "main") == head and git(repo, "status", "--porcelain") == ""
            assert not Path(rec.path).exists()
        store.close()

    def result(key: str, metric: str, goal_ms: float | None) -> Result:
        wall, cpu = samples[key]
        value = ms(median(wall))
        if goal_ms is None:
            return Result(NAME, metric, value, "ms", details=summary(wall, cpu))
        goal = f"≤ {goal_ms / 1000:g} s" if goal_ms >= 1000 else f"≤ {goal_ms:g} ms"
        return Result(NAME, metric, value, "ms", target=goal, passed=value <= goal_ms, details=summary(wall, cpu))

    return [
        result("create", f"relay worktree creation, {files:,} files, median", CREATE_GOAL_S * 1000),
        result("remove", f"relay worktree removal, {files:,} files, median", REMOVE_GOAL_S * 1000),
        result("git add", "`git worktree add -b` alone, median", None),
        result("git remove", "`git worktree remove --force` alone, median", None),
        result(
            "land", f"land of a {BRANCH_COMMITS}-commit branch (fast-forward, checkout updated), median", LAND_GOAL_MS
        ),
        Result(NAME, f"generating the {files:,}-file repository (setup)", round(setup_s * 1000), "ms"),
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main_for(NAME, run))
