"""Tool search for `recommend_tools`: BM25 (SQLite FTS5) over tool names, descriptions and parameter names.

Every reachable tool becomes one row of an in-memory FTS5 table with six columns: the tool name
split into words, the server name, the description's first sentence, the whole description, the
parameter names, and the parts of the joined words of the name, server and parameters ("worklog" →
work log). Identifiers are split the way people read them (`browser_take_screenshot`,
`getFileContents`, `list-issues`) and the Porter stemmer folds inflections. The query's words come
from `_words` (stop words dropped, stop-word verbs kept low, synonyms and prefixes weaker, the words
of named files and pages kept); a typed word no tool uses is then looked up in the catalog's own
vocabulary (`_vocab`): as the word one edit away ("comit" → commit) or as the two catalog words it
joins ("flowchart" → flow, chart), and, far below it, as the words of its definition in a computing
glossary when one is installed (`_glossary`: "du" → disk usage). Only the best variant of each word scores, so a tool that says
both "delete" and "remove" is not counted twice; BM25 is a sum over query terms, so scoring each
term on its own and adding the results is BM25 with the weighting on top. Two boosts follow: the
share of the tool name's words the query covers, and whether the query names the tool's server.

The index is kept while the set of tools is unchanged and rebuilt when it changes; building one
for 581 real tools takes about 35 ms of CPU, and rebuilding it after one tool changed about 18 ms,
since each tool's words are kept from the last build (benchmarks/bench_tool_search.py).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import re
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from relay.errors import invalid
from relay.gateway._glossary import glossary
from relay.gateway._vocab import Vocabulary
from relay.gateway._words import STOP, SYNONYM_WEIGHT, doc_words, query_groups, query_terms, split_identifier, variants

__all__ = [
    "Ranked",
    "ToolDoc",
    "ToolIndex",
    "catalog_version",
    "query_terms",
    "rank",
    "split_identifier",
    "template_recommendation",
]

# Column weights for bm25(): a word in the tool's name says more than one in a long description.
_W_NAME, _W_SERVER, _W_SUMMARY, _W_DESC, _W_PARAMS = 3.0, 2.5, 1.5, 1.0, 0.3
# The parts of the tool's joined words ("worklog" → work log, "screenshot" → screen shot), so a
# query's "log" finds a worklog; weaker than the words themselves.
_W_PARTS = 1.5
# After BM25: a tool whose name the query's words cover is what the user asked for by name
# ("list merge requests" → list_merge_requests), and a tool of a server the query names ("on
# GitHub") beats the same words elsewhere. Both multiply the score: 1 + weight × share.
_NAME_COVER, _SERVER_NAMED = 1.0, 0.5
# A word the tools never use stands for the catalog word one edit away ("comit" → commit) or for the
# two catalog words it joins ("flowchart" → flow, chart), each a little below a word the user typed.
TYPO_WEIGHT, PART_WEIGHT = 0.8, 0.8
# A word the tools never use also stands for the words of its definition in a computing glossary, when
# one is installed (`_glossary`: "du" → disk usage, "cron" → commands at specified times), far below it.
MEANING_WEIGHT = 0.2


@dataclass(frozen=True)
class ToolDoc:
    """One searchable tool: the server that has it (an internal toolset or a downstream server)."""

    server: str
    name: str
    description: str
    params: Sequence[str] = field(default_factory=tuple[str, ...])

    def __post_init__(self) -> None:
        # A tuple keeps the value hashable, so a set of docs can key the index cache.
        object.__setattr__(self, "params", tuple(self.params))


@dataclass(frozen=True)
class Ranked:
    """A tool with its relevance to the query (higher is better; only comparable within one query)."""

    doc: ToolDoc
    score: float


# --- the index -----------------------------------------------------------------------------


_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


def _summary(description: str) -> str:
    """The description's first sentence: what the tool does, before usage notes and caveats."""
    return _SENTENCE_END.split(description.strip(), maxsplit=1)[0]


@functools.lru_cache(maxsize=8192)
def _row(doc: ToolDoc) -> tuple[str, str, str, str, str]:
    """A tool's words by column (name, server, first sentence, description, parameters): worked out once
    per tool, so rebuilding the index when one server's tools change re-reads only those."""
    return (
        doc_words(doc.name),
        doc_words(doc.server),
        doc_words(_summary(doc.description)),
        doc_words(doc.description),
        doc_words(" ".join(doc.params)),
    )


class ToolIndex:
    """An in-memory FTS5 index over one set of tools."""

    def __init__(self, docs: Sequence[ToolDoc]) -> None:
        self.docs: tuple[ToolDoc, ...] = tuple(docs)
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE VIRTUAL TABLE tools USING fts5(name, server, summary, description, params, parts, "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        rows = [_row(d) for d in self.docs]
        self.vocab = Vocabulary((" ".join(row) for row in rows), STOP)
        self._db.executemany(
            "INSERT INTO tools(rowid, name, server, summary, description, params, parts) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(i, *row, self._parts(" ".join(row[:2]) + " " + row[4])) for i, row in enumerate(rows)],
        )
        self._term_cache: dict[str, dict[int, float]] = {}
        self._hits_cache: dict[str, frozenset[int]] = {}
        self._name_words = [len(split_identifier(d.name)) or 1 for d in self.docs]
        digest = hashlib.sha256()
        for d in self.docs:
            digest.update("\x1f".join([d.server, d.name, d.description, *d.params, "\x1e"]).encode())
        self.version = digest.hexdigest()[:16]

    def _parts(self, text: str) -> str:
        """The parts of every joined word of `text`."""
        splits = (self.vocab.split(w) for w in dict.fromkeys(text.split()))
        return " ".join(" ".join(parts) for parts in splits if parts)

    def _known_words(self, groups: list[tuple[dict[str, float], bool]]) -> list[dict[str, float]]:
        """Each typed word the tools never use, as the catalog word one edit away or the two words it joins."""
        out: list[dict[str, float]] = []
        for group, typed in groups:
            word, weight = next(iter(group.items()))
            if not typed or self._term_scores(word):
                out.append(group)
                continue
            lookup = glossary()
            for term in lookup.meaning(word) if lookup else ():
                group.setdefault(term, weight * MEANING_WEIGHT)
            fixes = self.vocab.corrections(word)
            if fixes:
                for fix in fixes:
                    for term, w in variants(fix, weight * TYPO_WEIGHT).items():
                        if w > group.get(term, 0.0):
                            group[term] = w
                out.append(group)
                continue
            parts = self.vocab.parts(word)
            if parts:
                out += [variants(part, weight * PART_WEIGHT) for part in parts]
                continue
            out.append(group)
        return out

    def _term_scores(self, term: str) -> dict[int, float]:
        """BM25 of one term for every row that has it (FTS5's bm25() is negative: better is lower)."""
        cached = self._term_cache.get(term)
        if cached is not None:
            return cached
        prefix = term.endswith("*")
        phrase = '"' + term.rstrip("*").replace('"', "") + '"' + ("*" if prefix else "")
        try:
            rows = self._db.execute(
                "SELECT rowid, bm25(tools, ?, ?, ?, ?, ?, ?) FROM tools WHERE tools MATCH ?",
                (_W_NAME, _W_SERVER, _W_SUMMARY, _W_DESC, _W_PARAMS, _W_PARTS, phrase),
            ).fetchall()
        except sqlite3.OperationalError:  # a term the tokenizer reduces to nothing
            rows = []
        scores = {int(rowid): -float(score) for rowid, score in rows}
        self._term_cache[term] = scores
        return scores

    def _column_hits(self, column: str, term: str) -> frozenset[int]:
        """Rows whose `column` has the term."""
        key = f"{column}:{term}"
        cached = self._hits_cache.get(key)
        if cached is not None:
            return cached
        prefix = term.endswith("*")
        phrase = '"' + term.rstrip("*").replace('"', "") + '"' + ("*" if prefix else "")
        try:
            rows = self._db.execute("SELECT rowid FROM tools WHERE tools MATCH ?", (f"{column} : {phrase}",)).fetchall()
        except sqlite3.OperationalError:
            rows = []
        hits = frozenset(int(r[0]) for r in rows)
        self._hits_cache[key] = hits
        return hits

    def search(self, query: str, limit: int = 10) -> list[Ranked]:
        """The `limit` best tools for the query, best first; ties broken by server and name."""
        totals: dict[int, float] = {}
        name_hits: dict[int, int] = {}
        server_named: set[int] = set()
        with self._lock:
            groups = self._known_words(query_groups(query))
            for group in groups:
                best: dict[int, float] = {}
                for term, weight in group.items():
                    for rowid, score in self._term_scores(term).items():
                        value = weight * score
                        if value > best.get(rowid, 0.0):
                            best[rowid] = value
                for rowid, value in best.items():
                    totals[rowid] = totals.get(rowid, 0.0) + value
                exact = [t for t, w in group.items() if w >= 1.0 and not t.endswith("*")]
                for term in exact:
                    server_named |= self._column_hits("server", term)
                named: set[int] = set()
                for term, weight in group.items():
                    if weight >= SYNONYM_WEIGHT:
                        named |= self._column_hits("name", term)
                for rowid in named:
                    name_hits[rowid] = name_hits.get(rowid, 0) + 1
        for rowid in totals:
            totals[rowid] *= 1.0 + _NAME_COVER * min(1.0, name_hits.get(rowid, 0) / self._name_words[rowid])
            if rowid in server_named:
                totals[rowid] *= 1.0 + _SERVER_NAMED
        order = heapq.nsmallest(limit, totals, key=lambda r: (-totals[r], self.docs[r].server, self.docs[r].name))
        return [Ranked(self.docs[r], round(totals[r], 6)) for r in order]


_cache_lock = threading.Lock()
_cached: tuple[tuple[ToolDoc, ...], ToolIndex] | None = None


def _index_for(docs: Sequence[ToolDoc]) -> ToolIndex:
    """The index for this set of tools: the last one built when the set is unchanged, else a new one."""
    global _cached
    key = tuple(docs)
    with _cache_lock:
        if _cached is not None and _cached[0] == key:
            return _cached[1]
        index = ToolIndex(key)
        _cached = (key, index)
        return index


def catalog_version(docs: Sequence[ToolDoc]) -> str:
    """A short digest of the tools (servers, names, descriptions, parameters): changes when any of them does."""
    return _index_for(docs).version if docs else ""


def rank(query: str, docs: Sequence[ToolDoc], limit: int = 10) -> list[Ranked]:
    """Rank `docs` for a task description by BM25 over names, descriptions and parameter names."""
    if not query.strip():
        raise invalid(
            "task_description is empty",
            "Describe the task in a few words, e.g. task_description='take a screenshot of a web page'",
        )
    if limit < 1:
        raise invalid(f"limit must be at least 1, got {limit}", "Pass limit=10 (the default) or any positive number")
    if not docs:
        return []
    return _index_for(docs).search(query, limit)


# --- the written recommendation -------------------------------------------------------------


def template_recommendation(query: str, top: Sequence[Ranked]) -> str:
    """The recommendation without a model: the best matches, named so they can be called at once."""
    if not top:
        return (
            f"No tool matches {query.strip()!r}. Call list_tools to see every server's tools, "
            "or add a server that does this with add_mcp_server."
        )
    best = top[0].doc
    others = ", ".join(f"{r.doc.server}/{r.doc.name}" for r in top[1:4])
    text = f"Best match: {best.server}/{best.name} — call_tool(server_name={best.server!r}, tool_name={best.name!r})."
    return text + (f" Also relevant: {others}." if others else "")
