"""Tool search for `recommend_tools`: BM25 (SQLite FTS5) over tool names, descriptions and parameter names.

Every reachable tool becomes one row of an in-memory FTS5 table with five columns: the tool name
split into words, the server name, the description's first sentence, the whole description and the
parameter names. Identifiers are split the way people read them (`browser_take_screenshot`,
`getFileContents`, `list-issues`) and the Porter stemmer folds inflections. A query is split into
words, stop words are dropped, and each word is looked up together with a few general-language
synonyms ("delete" also finds "remove"); a synonym counts for less than the word itself and only the
best variant of each word scores, so a tool that says both "delete" and "remove" is not counted
twice. Named things (a URL, a file name, an issue key) count as the word for their kind, and a word
also matches words it begins. BM25 is a sum over query terms, so scoring each term on its own and
adding the results is BM25 with the synonym weighting on top. Two boosts follow: the share of the
tool name's words the query covers, and whether the query names the tool's server.

The index is kept while the set of tools is unchanged and rebuilt when it changes; building one
for 581 real tools takes about 50 ms (benchmarks/bench_tool_search.py).
"""

from __future__ import annotations

import heapq
import itertools
import re
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from relay.errors import invalid

__all__ = [
    "Ranked",
    "ToolDoc",
    "ToolIndex",
    "query_terms",
    "rank",
    "recommend_with_model",
    "split_identifier",
    "template_recommendation",
]

# Column weights for bm25(): a word in the tool's name says more than one in a long description.
_W_NAME, _W_SERVER, _W_SUMMARY, _W_DESC, _W_PARAMS = 3.0, 2.5, 1.5, 1.0, 0.3
_SYNONYM_WEIGHT = 0.6
# After BM25: a tool whose name the query's words cover is what the user asked for by name
# ("list merge requests" → list_merge_requests), and a tool of a server the query names ("on
# GitHub") beats the same words elsewhere. Both multiply the score: 1 + weight × share.
_NAME_COVER, _SERVER_NAMED = 1.0, 0.5
_PREFIX_MIN, _PREFIX_WEIGHT = 4, 0.5
_FRAME_WEIGHT = 0.5


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


# --- words ---------------------------------------------------------------------------------

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][a-z]+)?")
_IDENT_SEP = re.compile(r"[^A-Za-z0-9]+")


def split_identifier(identifier: str) -> list[str]:
    """`browser_take_screenshot`, `getHTTPResponse`, `list-issues` → their lower-case words."""
    words: list[str] = []
    for chunk in _IDENT_SEP.split(identifier):
        words += [w.lower() for w in _CAMEL.findall(chunk)]
    return words


def _doc_words(text: str) -> str:
    """Words of prose or identifiers, with a joined word also kept whole ("GitHub" → github git hub)."""
    out: list[str] = []
    for raw in _IDENT_SEP.split(text):
        if not raw:
            continue
        if raw.isalpha() and raw[1:].islower():  # plain prose ("Create", "file"): nothing to split
            out.append(raw.lower())
            continue
        parts = [w.lower() for w in _CAMEL.findall(raw)]
        whole = raw.lower()
        if len(parts) != 1 or parts[0] != whole:
            out.append(whole)
        out += parts
    return " ".join(out)


_STOP_WORDS = """a about above after again all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers him his how i if in into is it its itself just let me
    more most my myself no nor not now of off on once only or other our ours out over own please
    same she should so some such than that the their them then there these they this those
    through to too under until up very via was we were what when where which while who whom why
    will with would you your yours yourself thing things something anything everything someone
    want wanted wants need needs needed help like would'd i'd i'm i've we're we've it's that's
    let's kind sort way bit lot really actually quickly currently also maybe sure ok okay
    tell give go going get got gets getting know see make sure able possible using use
    don doesn didn isn aren wasn weren won wouldn shouldn couldn haven hasn ll ve re"""
_STOP = frozenset(_STOP_WORDS.split())
# "get", "use", "make" are stop words in a request ("can you get me ...") but the words of tools
# that do getting are kept in tool names; the query loses nothing because the object carries it.

# General-language synonym groups: words people use for the same action or thing. Each word is
# looked up with its group's other words as weaker alternatives.
_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("delete", "remove", "erase", "drop", "destroy", "discard", "forget"),
    ("create", "add", "new", "make", "open", "start", "insert", "post"),
    ("find", "search", "lookup", "look", "query", "locate", "seek"),
    ("list", "show", "enumerate", "all"),
    ("read", "view", "open", "show", "display", "print", "cat"),
    ("write", "save", "store", "put", "record"),
    ("update", "edit", "modify", "change", "patch", "alter", "set"),
    ("move", "rename", "relocate", "transition"),
    ("copy", "duplicate", "clone"),
    ("run", "execute", "exec", "launch", "invoke", "trigger"),
    ("stop", "kill", "terminate", "end", "cancel", "abort"),
    ("fetch", "download", "retrieve", "get", "pull", "grab", "scrape"),
    ("upload", "push", "send", "publish"),
    ("send", "post", "message", "reply", "notify"),
    ("message", "chat", "conversation", "dm"),
    ("email", "mail", "gmail"),
    ("file", "files", "document", "doc"),
    ("folder", "directory", "dir"),
    ("repository", "repo", "project"),
    ("issue", "ticket", "bug", "task"),
    ("pr", "pull request", "merge request"),
    ("mr", "merge request"),
    ("stage", "add", "index"),
    ("uncommitted", "status", "modified", "unstaged", "staged"),
    ("branch", "ref"),
    ("commit", "revision", "changeset"),
    ("difference", "diff", "changes", "compare"),
    ("page", "webpage", "website", "site", "url", "link", "web"),
    ("browser", "chrome", "tab"),
    ("click", "press", "tap"),
    ("type", "fill", "enter", "input"),
    ("screenshot", "snapshot", "capture", "screen", "image", "picture"),
    ("picture", "image", "photo", "graphic"),
    ("chart", "graph", "plot", "visualize", "visualization", "diagram"),
    ("database", "db", "sql", "table"),
    ("table", "collection"),
    ("row", "record", "document", "entry"),
    ("schema", "structure", "columns", "fields"),
    ("log", "logs", "event", "events"),
    ("error", "errors", "exception", "crash", "failure", "issue"),
    ("metric", "metrics", "measurement", "stats", "statistics"),
    ("monitor", "dashboard", "observability", "watch", "track"),
    ("cpu", "metric", "utilization", "load"),
    ("aggregate", "group", "sum", "total", "average", "count"),
    ("deploy", "deployment", "release", "ship"),
    ("build", "pipeline", "ci", "workflow", "job"),
    ("test", "tests", "testing"),
    ("user", "member", "person", "people", "account"),
    ("team", "organization", "org", "workspace"),
    ("comment", "note", "remark", "feedback", "review"),
    ("time", "clock", "date", "timezone", "zone"),
    ("convert", "translate", "transform"),
    ("place", "location", "address", "places", "map"),
    ("direction", "directions", "route", "navigate", "travel", "distance"),
    ("payment", "pay", "charge", "invoice", "billing", "subscription"),
    ("customer", "client", "buyer"),
    ("refund", "reimburse"),
    ("remember", "memory", "memorize", "recall", "knowledge", "stored", "entity", "observation"),
    ("relation", "relationship", "link", "connection"),
    ("think", "reason", "reasoning", "plan", "thought", "step"),
    ("documentation", "docs", "reference", "manual", "guide", "library", "api"),
    ("paper", "papers", "article", "research", "publication", "arxiv"),
    ("news", "headlines", "current", "latest", "recent"),
    ("internet", "online", "web"),
    ("summary", "summarize", "overview"),
    ("wait", "pause", "sleep", "delay"),
    ("script", "javascript", "js", "code", "evaluate"),
    ("network", "request", "requests", "http", "traffic"),
    ("performance", "speed", "slow", "trace", "profile"),
    ("console", "devtools"),
    ("terminal", "shell", "command", "process", "cli"),
    ("process", "processes", "program"),
    ("content", "contents", "text", "body", "inside"),
    ("size", "info", "metadata", "details", "information", "properties"),
    ("spreadsheet", "sheet", "csv", "excel"),
    ("wiki", "confluence", "space"),
    ("jira", "sprint", "board", "epic"),
    ("calendar", "meeting", "schedule", "appointment", "event"),
    ("channel", "room", "slack"),
    ("react", "reaction", "emoji"),
    ("history", "previous", "past", "earlier"),
    ("weather", "forecast"),
    ("tag", "label", "tags", "labels"),
    ("function", "functions", "edge", "lambda", "serverless"),
    ("migration", "migrate", "ddl"),
    ("cluster", "instance", "server"),
    ("secret", "key", "keys", "token", "credential", "credentials"),
    ("cost", "price", "pricing", "spend", "usage"),
    ("host", "incident", "alert", "alerts", "downtime", "outage"),
    ("close", "resolve", "done", "complete", "finish"),
    ("check", "verify", "validate", "status", "inspect"),
    ("many", "count", "number"),
    ("replace", "edit", "substitute", "swap"),
    ("retry", "rerun", "restart", "again"),
    ("rollback", "revert", "undo", "restore"),
    ("mute", "silence", "snooze", "quiet"),
    ("dialog", "popup", "alert", "confirm", "prompt", "modal"),
    ("dropdown", "select", "option", "choose", "pick", "menu"),
    ("window", "viewport", "resize", "width", "mobile"),
    ("navigate", "visit", "goto", "open", "browse"),
    ("back", "previous"),
    ("reply", "respond", "answer", "thread"),
    ("archive", "trash", "delete"),
    ("append", "add", "children", "insert"),
    ("attach", "attachment", "upload"),
    ("analyze", "analysis", "diagnose", "debug", "root cause", "investigate"),
    ("assign", "assignee", "owner"),
    ("author", "blame", "wrote"),
    ("cite", "citation", "cited", "references", "bibliography", "bibtex"),
    ("credits", "credit", "balance", "quota", "remaining"),
    ("coordinates", "geocode", "latitude", "longitude"),
    ("near", "nearby", "around", "local"),
    ("altitude", "elevation", "height"),
    ("structure", "tree", "hierarchy"),
    ("finished", "status", "progress"),
    ("slow", "latency", "performance", "trace", "plan", "explain"),
    ("heap", "memory", "leak"),
    ("flaky", "intermittent", "unstable"),
    ("share", "proportion", "percentage", "pie"),
    ("hierarchy", "organization", "org"),
    ("conversion", "funnel", "drop off"),
    ("now", "current"),
    ("sum", "add", "plus", "total"),
    ("repeat", "echo", "ping"),
)


def _light_stem(word: str) -> str:
    """A small suffix stripper used only to look words up in the synonym table."""
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + repl
    if word.endswith("s") and not word.endswith("ss") and len(word) >= 3:
        return word[:-1]
    return word


def _build_synonyms() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for group in _SYNONYM_GROUPS:
        for word in group:
            table.setdefault(_light_stem(word), set()).update(group)
    return {k: frozenset(v) for k, v in table.items()}


_SYNONYMS = _build_synonyms()


_URL = re.compile(r"\b(?:https?://|www\.)\S+|\b[\w-]+(?:\.[\w-]+)*\.(?:com|org|net|io|dev|ai|app|co)(?:/\S*)?", re.I)
_IMAGE_EXT = "png|jpe?g|gif|svg|webp|bmp|ico"
_FILE_EXT = (
    "txt|md|json|ya?ml|toml|py|js|ts|tsx|jsx|csv|pdf|html|css|conf|cfg|ini|env|log|sql|xml|zip|gz|sh|lock|dump|db"
)
_FILENAME = re.compile(rf"(?<![\w/])\.?[\w-]*(?:\.[\w-]+)*\.(?:{_IMAGE_EXT}|{_FILE_EXT})\b", re.I)
_ISSUE_KEY = re.compile(r"\b[A-Z][A-Z0-9]+-\d+\b")
_CHANNEL = re.compile(r"(?<!\w)#[a-z][\w-]*")
_IDENT = re.compile(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+|[A-Za-z0-9]+(?:['’][a-z]+)?")


def _entities(query: str) -> tuple[str, list[str]]:
    """Things a query names rather than says (a URL, a file, an issue key, a #channel), as the word for
    their kind; the query comes back with them taken out, so their letters do not count as words."""
    kinds: list[str] = []
    for pattern, kind in ((_URL, "url"), (_FILENAME, "file"), (_ISSUE_KEY, "issue"), (_CHANNEL, "channel")):
        found = pattern.findall(query)
        for match in found:
            ext = match.rsplit(".", 1)[-1].lower()
            kinds.append("image" if kind == "file" and re.fullmatch(_IMAGE_EXT, ext) else kind)
        query = pattern.sub(" ", query)
    return query, kinds


def _variants(word: str, weight: float) -> dict[str, float]:
    group = {word: weight}
    for syn in _SYNONYMS.get(_light_stem(word), frozenset()):
        if syn != word and _light_stem(syn) != _light_stem(word):
            group.setdefault(syn, weight * _SYNONYM_WEIGHT)
    if len(word) >= _PREFIX_MIN:  # "mongo" finds "mongodb", "screen" finds "screenshot"
        group.setdefault(word + "*", weight * _PREFIX_WEIGHT)
    return group


def query_terms(query: str) -> list[dict[str, float]]:
    """The query's words, each as {variant: weight}: the word itself at 1.0 and its synonyms lower.

    Named things (a URL, a file name, an issue key) count as the word for their kind, at a synonym's
    weight; two adjacent words are also tried joined ("roll back" finds "rollback").
    """
    text, kinds = _entities(query)
    words: list[str] = []
    for token in _IDENT.findall(text):
        if "_" in token or "-" in token:
            words += split_identifier(token)
        else:
            words.append(re.split("['’]", token.lower())[0])  # what's → what, don't → don
    words = [w for w in words if not w.isdigit()]  # a number is a value, not what the task is about
    # "show me ..." frames a request; the verb says little about which tool, so it counts for less.
    framed = {left for left, right in itertools.pairwise(words) if right in ("me", "us")}
    kept = [w for w in words if w not in _STOP] or ([] if kinds else words)
    seen: set[str] = set()
    groups: list[dict[str, float]] = []
    for word in kept:
        if word not in seen:
            seen.add(word)
            groups.append(_variants(word, _FRAME_WEIGHT if word in framed else 1.0))
    for kind in kinds:
        if kind not in seen:
            seen.add(kind)
            groups.append(_variants(kind, _SYNONYM_WEIGHT))
    for left, right in itertools.pairwise(words):
        joined = left + right
        if left in kept and right in kept and joined not in seen and len(left) > 1 and len(right) > 1:
            seen.add(joined)
            groups.append({joined: _SYNONYM_WEIGHT})
    return groups


# --- the index -----------------------------------------------------------------------------


_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


def _summary(description: str) -> str:
    """The description's first sentence: what the tool does, before usage notes and caveats."""
    return _SENTENCE_END.split(description.strip(), maxsplit=1)[0]


class ToolIndex:
    """An in-memory FTS5 index over one set of tools."""

    def __init__(self, docs: Sequence[ToolDoc]) -> None:
        self.docs: tuple[ToolDoc, ...] = tuple(docs)
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE VIRTUAL TABLE tools USING fts5(name, server, summary, description, params, "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        self._db.executemany(
            "INSERT INTO tools(rowid, name, server, summary, description, params) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    i,
                    _doc_words(d.name),
                    _doc_words(d.server),
                    _doc_words(_summary(d.description)),
                    _doc_words(d.description),
                    _doc_words(" ".join(d.params)),
                )
                for i, d in enumerate(self.docs)
            ],
        )
        self._term_cache: dict[str, dict[int, float]] = {}
        self._hits_cache: dict[str, frozenset[int]] = {}
        self._name_words = [len(split_identifier(d.name)) or 1 for d in self.docs]

    def _term_scores(self, term: str) -> dict[int, float]:
        """BM25 of one term for every row that has it (FTS5's bm25() is negative: better is lower)."""
        cached = self._term_cache.get(term)
        if cached is not None:
            return cached
        prefix = term.endswith("*")
        phrase = '"' + term.rstrip("*").replace('"', "") + '"' + ("*" if prefix else "")
        try:
            rows = self._db.execute(
                "SELECT rowid, bm25(tools, ?, ?, ?, ?, ?) FROM tools WHERE tools MATCH ?",
                (_W_NAME, _W_SERVER, _W_SUMMARY, _W_DESC, _W_PARAMS, phrase),
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
        groups = query_terms(query)
        totals: dict[int, float] = {}
        name_hits: dict[int, int] = {}
        server_named: set[int] = set()
        with self._lock:
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
                    if weight >= _SYNONYM_WEIGHT:
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


def _candidate_lines(top: Sequence[Ranked], width: int = 240) -> list[str]:
    lines: list[str] = []
    for i, r in enumerate(top, 1):
        desc = " ".join(r.doc.description.split())
        if len(desc) > width:
            desc = desc[: width - 1].rstrip() + "…"
        params = f" (arguments: {', '.join(r.doc.params)})" if r.doc.params else ""
        lines.append(f"{i}. {r.doc.server}/{r.doc.name}{params}: {desc}")
    return lines


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


AskFn = Callable[[str], Awaitable[str]]


async def recommend_with_model(query: str, top: Sequence[Ranked], ask_fn: AskFn) -> str:
    """A model-written recommendation over the top candidates; `ask_fn(prompt) -> answer` is the model.

    The model only sees the ranked candidates, so it chooses among tools that exist. With no
    candidates, or an empty answer, the template recommendation is returned instead.
    """
    if not top:
        return template_recommendation(query, top)
    prompt = "\n".join(
        [
            "A user gave an agent this task:",
            query.strip(),
            "",
            "These tools are available, ranked by a keyword search (server/tool):",
            *_candidate_lines(top),
            "",
            "In at most four sentences, say which of these tools the agent should call for the task, in what "
            "order and with which key arguments. Name tools exactly as server/tool. Recommend only tools from "
            "the list; if none fits, say so.",
        ]
    )
    answer = (await ask_fn(prompt)).strip()
    if not answer:
        return template_recommendation(query, top)
    return answer
