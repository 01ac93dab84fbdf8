"""Benchmark: search quality and speed of `recommend_tools`' ranking over a frozen catalog of real tools.

benchmarks/data/tool_catalog.json holds the `tools/list` of published MCP servers (recorded by
scripts/record-tool-catalog); benchmarks/data/tool_queries.json holds task descriptions, phrased as
a user would give them to an agent, each labelled with the one or more server/tool that do it.
For every query, `relay.gateway.search.rank` ranks the whole catalog:

- recall@5: the share of queries with a correct tool among the first five (target ≥ 0.90);
- MRR: the mean of 1/rank of the first correct tool (0 when none is in the first 10);
- the time per query (index already built) and the time to build the index.

The queries are split in two halves by a hash of their text, not by hand: the synonym table and
field weights were tuned looking at the "tune" half only; the "held-out" half measures how well
that generalises. Both are reported, and the target applies to all queries.

Run alone: .venv/bin/python benchmarks/bench_tool_search.py
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import Result, main_for, median, ms, percentile
from relay.gateway.search import Ranked, ToolDoc, ToolIndex, rank

NAME = "tool_search"
DATA = Path(__file__).resolve().parent / "data"
TARGET_RECALL = 0.90
K = 5
DEPTH = 10

RankFn = Callable[[str, Sequence[ToolDoc], int], list[Ranked]]


@dataclass(frozen=True)
class Query:
    """A labelled task: what the user asked and every server/tool that does it."""

    id: str
    text: str
    expected: frozenset[str]

    @property
    def split(self) -> str:
        """'tune' or 'held-out', fixed by a hash of the text so nobody picks which query goes where."""
        return "tune" if hashlib.sha256(self.text.encode()).digest()[0] % 2 == 0 else "held-out"


@dataclass(frozen=True)
class Quality:
    queries: int
    recall_at_k: float
    mrr: float
    misses: tuple[tuple[str, tuple[str, ...]], ...]  # (query id, the top K it got instead)


def load_catalog(path: Path = DATA / "tool_catalog.json") -> list[ToolDoc]:
    """Every recorded tool as a ToolDoc; parameter names come from the input schema's properties."""
    docs: list[ToolDoc] = []
    for server in json.loads(path.read_text())["servers"]:
        for tool in server["tools"]:
            props: dict[str, Any] = (tool.get("inputSchema") or {}).get("properties") or {}
            docs.append(ToolDoc(server["server"], tool["name"], tool.get("description") or "", list(props)))
    return docs


def load_queries(path: Path = DATA / "tool_queries.json") -> list[Query]:
    return [Query(q["id"], q["query"], frozenset(q["expected"])) for q in json.loads(path.read_text())["queries"]]


def evaluate(rank_fn: RankFn, docs: Sequence[ToolDoc], queries: Sequence[Query], k: int = K) -> Quality:
    """recall@k (a correct tool in the first k) and MRR (first correct tool within DEPTH) of rank_fn."""
    if not queries:
        raise ValueError("no queries to evaluate")
    hits = 0
    reciprocal = 0.0
    misses: list[tuple[str, tuple[str, ...]]] = []
    for q in queries:
        ranked = [f"{r.doc.server}/{r.doc.name}" for r in rank_fn(q.text, docs, DEPTH)]
        first = next((i for i, key in enumerate(ranked, 1) if key in q.expected), None)
        if first is not None:
            reciprocal += 1.0 / first
        if first is not None and first <= k:
            hits += 1
        else:
            misses.append((q.id, tuple(ranked[:k])))
    return Quality(len(queries), hits / len(queries), reciprocal / len(queries), tuple(misses))


def check_labels(docs: Sequence[ToolDoc], queries: Sequence[Query]) -> None:
    """Every label must name a tool that is in the catalog (a typo would count as a miss forever)."""
    known = {f"{d.server}/{d.name}" for d in docs}
    bad = sorted({e for q in queries for e in q.expected if e not in known})
    if bad:
        raise SystemExit(f"tool_queries.json names tools the catalog does not have: {', '.join(bad)}")


async def run() -> list[Result]:
    docs = load_catalog()
    queries = load_queries()
    check_labels(docs, queries)
    results: list[Result] = []
    splits = {
        "all": list(queries),
        "tune": [q for q in queries if q.split == "tune"],
        "held-out": [q for q in queries if q.split == "held-out"],
    }
    for split, subset in splits.items():
        quality = evaluate(rank, docs, subset)
        target = f">= {TARGET_RECALL}" if split == "all" else ""
        passed = quality.recall_at_k >= TARGET_RECALL if split == "all" else None
        details: dict[str, Any] = {"queries": quality.queries, "tools": len(docs), "misses": quality.misses}
        results.append(
            Result(NAME, f"recall@{K} ({split})", round(quality.recall_at_k, 3), "", target, passed, details)
        )
        results.append(
            Result(NAME, f"MRR ({split})", round(quality.mrr, 3), "", "", None, {"queries": quality.queries})
        )

    builds: list[float] = []
    for _ in range(5):
        t0 = time.perf_counter()
        ToolIndex(docs)
        builds.append(time.perf_counter() - t0)
    results.append(Result(NAME, "index build", round(ms(median(builds)), 2), "ms", "", None, {"tools": len(docs)}))

    rank(queries[0].text, docs)  # build the cached index once
    times: list[float] = []
    for _ in range(3):
        for q in queries:
            t0 = time.perf_counter()
            rank(q.text, docs, DEPTH)
            times.append(time.perf_counter() - t0)
    results.append(
        Result(NAME, "per query (median)", round(ms(median(times)), 3), "ms", "", None, {"runs": len(times)})
    )
    results.append(Result(NAME, "per query (p95)", round(ms(percentile(times, 95)), 3), "ms", "", None, {}))
    return results


def show_misses(split: str = "all") -> None:
    """Print each missed query with what ranked instead (for looking at failures on the tune half)."""
    docs = load_catalog()
    queries = [q for q in load_queries() if split == "all" or q.split == split]
    quality = evaluate(rank, docs, queries)
    by_id = {q.id: q for q in queries}
    for qid, got in quality.misses:
        q = by_id[qid]
        print(f"{qid}: {q.text}\n   want {sorted(q.expected)}\n   got  {list(got)}")
    print(f"recall@{K} {quality.recall_at_k:.3f} MRR {quality.mrr:.3f} over {quality.queries} ({split})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--misses":
        show_misses(sys.argv[2] if len(sys.argv) > 2 else "tune")
        sys.exit(0)
    sys.exit(main_for(NAME, run))
