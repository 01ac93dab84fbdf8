"""Benchmark: search quality and speed of `recommend_tools`' ranking over a frozen catalog of real tools.

benchmarks/data/tool_catalog.json holds the `tools/list` of published MCP servers (recorded by
scripts/record-tool-catalog). Two query sets, each task labelled with every server/tool that does it:

- tool_queries.json, the project's own (155 tasks): the ranker was tuned looking at its misses;
- tool_queries_heldout.json (170 tasks), written from the catalog alone before the ranker was changed,
  without reading the project's queries or the ranker's code or output, and never used for tuning:
  the figure that says how the ranker does on words nobody tuned it for. Each query has a kind
  (plain, paraphrase, jargon, identifier, typo), reported separately.

For every query, `relay.gateway.search.rank` ranks the whole catalog (no model):

- recall@1 and recall@5: the share of queries with a correct tool first / among the first five
  (goal: recall@5 >= 0.90 on the held-out set);
- MRR: the mean of 1/rank of the first correct tool (0 when none is in the first 10);
- unshared: the share of queries none of whose words (Porter-stemmed) is in any correct tool's text;
- the time per query (index already built; goal: median <= 2 ms) and the time to build the index
  (goal: <= 100 ms for 600 tools), with and without the table that corrects misspelt words.

Run alone: .venv/bin/python benchmarks/bench_tool_search.py
Misses:    .venv/bin/python benchmarks/bench_tool_search.py --misses   (the project's set only)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from _common import Result, main_for, median, ms, percentile
from relay.gateway import _glossary, _words, search
from relay.gateway._words import STOP
from relay.gateway.search import Ranked, ToolDoc, ToolIndex, rank

NAME = "tool_search"
DATA = Path(__file__).resolve().parent / "data"
PROJECT_QUERIES = DATA / "tool_queries.json"
HELDOUT_QUERIES = DATA / "tool_queries_heldout.json"
TARGET_RECALL = 0.90
TARGET_QUERY_MS = 2.0
TARGET_BUILD_MS = 100.0
K = 5
DEPTH = 10

RankFn = Callable[[str, Sequence[ToolDoc], int], list[Ranked]]


@dataclass(frozen=True)
class Query:
    """A labelled task: what the user asked and every server/tool that does it."""

    id: str
    text: str
    expected: frozenset[str]
    kind: str = ""


@dataclass(frozen=True)
class Quality:
    queries: int
    recall_at_k: float
    mrr: float
    recall_at_1: float
    misses: tuple[tuple[str, tuple[str, ...]], ...]  # (query id, the top K it got instead)


def load_catalog(path: Path = DATA / "tool_catalog.json") -> list[ToolDoc]:
    """Every recorded tool as a ToolDoc; parameter names come from the input schema's properties."""
    docs: list[ToolDoc] = []
    for server in json.loads(path.read_text())["servers"]:
        for tool in server["tools"]:
            props: dict[str, Any] = (tool.get("inputSchema") or {}).get("properties") or {}
            docs.append(ToolDoc(server["server"], tool["name"], tool.get("description") or "", list(props)))
    return docs


def load_queries(path: Path = PROJECT_QUERIES) -> list[Query]:
    rows = json.loads(path.read_text())["queries"]
    return [Query(q["id"], q["query"], frozenset(q["expected"]), q.get("kind", "")) for q in rows]


def evaluate(rank_fn: RankFn, docs: Sequence[ToolDoc], queries: Sequence[Query], k: int = K) -> Quality:
    """recall@k (a correct tool in the first k) and MRR (first correct tool within DEPTH) of rank_fn."""
    if not queries:
        raise ValueError("no queries to evaluate")
    hits = firsts = 0
    reciprocal = 0.0
    misses: list[tuple[str, tuple[str, ...]]] = []
    for q in queries:
        ranked = [f"{r.doc.server}/{r.doc.name}" for r in rank_fn(q.text, docs, DEPTH)]
        first = next((i for i, key in enumerate(ranked, 1) if key in q.expected), None)
        if first is not None:
            reciprocal += 1.0 / first
            firsts += first == 1
        if first is not None and first <= k:
            hits += 1
        else:
            misses.append((q.id, tuple(ranked[:k])))
    n = len(queries)
    return Quality(n, hits / n, reciprocal / n, firsts / n, tuple(misses))


def unshared(docs: Sequence[ToolDoc], queries: Sequence[Query]) -> float:
    """The share of queries none of whose words (stemmed, stop words aside) is in any of their correct tools' text."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(key UNINDEXED, body, tokenize='porter unicode61')")
    db.executemany(
        "INSERT INTO t VALUES (?, ?)",
        [
            (f"{d.server}/{d.name}", " ".join([*re.split(r"[_\W]+", d.name), d.server, d.description, *d.params]))
            for d in docs
        ],
    )
    none = 0
    for q in queries:
        words = [w for w in re.findall(r"[a-z0-9]+", q.text.lower()) if w not in STOP]
        matched = False
        for word in words:
            rows = db.execute("SELECT key FROM t WHERE t MATCH ?", (f'body : "{word}"',)).fetchall()
            if q.expected & {r[0] for r in rows}:
                matched = True
                break
        none += not matched
    db.close()
    return none / len(queries)


def check_labels(docs: Sequence[ToolDoc], queries: Sequence[Query]) -> None:
    """Every label must name a tool that is in the catalog (a typo would count as a miss forever)."""
    known = {f"{d.server}/{d.name}" for d in docs}
    bad = sorted({e for q in queries for e in q.expected if e not in known})
    if bad:
        raise SystemExit(f"a query set names tools the catalog does not have: {', '.join(bad)}")


# Two queries are worded alike when half of their words (stop words aside) are the same (Jaccard >= 0.5).
ALIKE = 0.5


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}


def worded_like(query: Query, others: Sequence[Query]) -> bool:
    """True when `query` shares at least half its words with one of `others` (the held-out set was written
    without seeing the project's, yet some of its tasks came out in nearly the same words)."""
    mine = _content_words(query.text)
    for other in others:
        theirs = _content_words(other.text)
        if mine | theirs and len(mine & theirs) / len(mine | theirs) >= ALIKE:
            return True
    return False


def quality_results(label: str, docs: Sequence[ToolDoc], queries: Sequence[Query], goal: bool) -> list[Result]:
    quality = evaluate(rank, docs, queries)
    target = f">= {TARGET_RECALL}" if goal else ""
    passed = quality.recall_at_k >= TARGET_RECALL if goal else None
    details: dict[str, Any] = {"queries": quality.queries, "tools": len(docs), "misses": quality.misses}
    if label.startswith("held-out"):
        details = {"queries": quality.queries, "tools": len(docs)}  # its misses are not for looking at
    return [
        Result(NAME, f"recall@{K} ({label})", round(quality.recall_at_k, 3), "", target, passed, details),
        Result(NAME, f"recall@1 ({label})", round(quality.recall_at_1, 3), "", "", None, {}),
        Result(NAME, f"MRR ({label})", round(quality.mrr, 3), "", "", None, {}),
        Result(NAME, f"unshared ({label})", round(unshared(docs, queries), 3), "", "", None, {}),
    ]


async def run() -> list[Result]:
    docs = load_catalog()
    project = load_queries()
    heldout = load_queries(HELDOUT_QUERIES)
    check_labels(docs, [*project, *heldout])
    found = [index.stem for index, _ in _glossary.find_glossaries()]
    results = [Result(NAME, "computing glossaries found", len(found), "", "", None, {"glossaries": found})]
    if found:  # the same ranking with none, for comparison
        with _without_glossaries():
            for label, queries in (("project", project), ("held-out", heldout)):
                quality = evaluate(rank, docs, queries)
                for metric, value in ((f"recall@{K}", quality.recall_at_k), ("MRR", quality.mrr)):
                    results.append(Result(NAME, f"{metric} ({label}, no glossary)", round(value, 3), "", "", None, {}))
    results += quality_results("project", docs, project, goal=False)
    results += quality_results("held-out", docs, heldout, goal=True)
    unlike = [q for q in heldout if not worded_like(q, project)]
    results += quality_results(f"held-out, {len(unlike)} unlike the project's", docs, unlike, goal=False)[:3]
    for kind in sorted({q.kind for q in heldout}):
        subset = [q for q in heldout if q.kind == kind]
        quality = evaluate(rank, docs, subset)
        results.append(
            Result(
                NAME,
                f"recall@{K} (held-out, {kind})",
                round(quality.recall_at_k, 3),
                "",
                "",
                None,
                {"queries": len(subset)},
            )
        )

    # Wall time is what a caller waits; CPU time is the build's own cost, which a loaded machine does not inflate.
    load = round(os.getloadavg()[0], 1)
    # A rebuild alternates between the catalog and the catalog with one tool's description changed.
    catalogs = [docs, [replace(docs[0], description=docs[0].description + " (changed)"), *docs[1:]]]
    builds: tuple[tuple[str, Callable[[int], object]], ...] = (
        ("index build", lambda _: _cold_build(docs)),
        ("index build with the typo table", lambda _: _cold_build(docs).vocab.by_delete),
        ("index rebuild, one tool changed", lambda i: ToolIndex(catalogs[i % 2])),
    )
    for label, build in builds:
        walls: list[float] = []
        cpus: list[float] = []
        for i in range(7):
            t0, c0 = time.perf_counter(), time.process_time()
            build(i)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        for clock, times in (("wall", walls), ("CPU", cpus)):
            value = round(ms(median(times)), 2)
            details: dict[str, Any] = {"tools": len(docs), "load_average": load}
            results.append(
                Result(
                    NAME,
                    f"{label} ({clock})",
                    value,
                    "ms",
                    f"<= {TARGET_BUILD_MS:g}",
                    value <= TARGET_BUILD_MS,
                    details,
                )
            )

    queries = [*project, *heldout]
    rank(queries[0].text, docs)  # build the cached index once
    times: list[float] = []
    for _ in range(3):
        for q in queries:
            t0 = time.perf_counter()
            rank(q.text, docs, DEPTH)
            times.append(time.perf_counter() - t0)
    value = round(ms(median(times)), 3)
    results.append(
        Result(
            NAME,
            "per query (median)",
            value,
            "ms",
            f"<= {TARGET_QUERY_MS:g}",
            value <= TARGET_QUERY_MS,
            {"runs": len(times)},
        )
    )
    results.append(Result(NAME, "per query (p95)", round(ms(percentile(times, 95)), 3), "ms", "", None, {}))
    return results


@contextlib.contextmanager
def _without_glossaries() -> Iterator[None]:
    """Rank as on a machine with no computing glossary installed."""
    saved = os.environ.get("RELAY_GLOSSARY_DIR")
    with tempfile.TemporaryDirectory() as empty:
        os.environ["RELAY_GLOSSARY_DIR"] = empty
        _glossary.glossary.cache_clear()
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("RELAY_GLOSSARY_DIR", None)
            else:
                os.environ["RELAY_GLOSSARY_DIR"] = saved
            _glossary.glossary.cache_clear()


def _cold_build(docs: Sequence[ToolDoc]) -> ToolIndex:
    """An index built with nothing cached from an earlier build (each tool's words worked out afresh)."""
    search._row.cache_clear()
    _words._token_words.cache_clear()
    return ToolIndex(docs)


def show_misses() -> None:
    """Print each missed query of the project's set with what ranked instead (the held-out set's are not shown)."""
    docs = load_catalog()
    queries = load_queries()
    quality = evaluate(rank, docs, queries)
    by_id = {q.id: q for q in queries}
    for qid, got in quality.misses:
        q = by_id[qid]
        print(f"{qid}: {q.text}\n   want {sorted(q.expected)}\n   got  {list(got)}")
    print(f"recall@{K} {quality.recall_at_k:.3f} MRR {quality.mrr:.3f} over {quality.queries} (project)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--misses":
        show_misses()
        sys.exit(0)
    sys.exit(main_for(NAME, run))
