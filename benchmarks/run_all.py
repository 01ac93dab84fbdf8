"""Run every relay benchmark, print one summary table, write benchmarks/results/latest.json.

Usage: .venv/bin/python benchmarks/run_all.py [name ...]   (names: cold_start tools_list
delegate_overhead concurrency large_output; default all). Each benchmark also runs alone:
.venv/bin/python benchmarks/bench_<name>.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable

import bench_cold_start
import bench_concurrency
import bench_delegate_overhead
import bench_large_output
import bench_tools_list
from _common import REPO, Result, run_benchmark, table, write_results

BENCHMARKS: dict[str, Callable[[], Awaitable[list[Result]]]] = {
    bench_cold_start.NAME: bench_cold_start.run,
    bench_tools_list.NAME: bench_tools_list.run,
    bench_delegate_overhead.NAME: bench_delegate_overhead.run,
    bench_concurrency.NAME: bench_concurrency.run,
    bench_large_output.NAME: bench_large_output.run,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    started = time.time()
    results: list[Result] = []
    for name in names:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        part = run_benchmark(BENCHMARKS[name])
        print(table(part))
        print(f"({time.perf_counter() - t0:.1f} s)\n", flush=True)
        results += part
    print("== summary")
    print(table(results))
    path = write_results(results, "latest", started)
    print(f"\nresults written to {path.relative_to(REPO)}")
    return 0 if all(r.passed is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
