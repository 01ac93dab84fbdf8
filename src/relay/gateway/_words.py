"""Words of tool search: identifiers split the way people read them, a query's words with their weaker variants.

A query is split into words, stop words are dropped, and each word is looked up together with a few
general-language synonyms ("delete" also finds "remove") at a lower weight. Named things (a URL, a
file name, an issue key) count as the word for their kind, and a word also matches words it begins.
"""

from __future__ import annotations

import functools
import itertools
import re

SYNONYM_WEIGHT = 0.6
PREFIX_MIN, PREFIX_WEIGHT = 4, 0.5
FRAME_WEIGHT = 0.5
# The words of a file's or a page's name count, less than the user's own words.
NAMED_KINDS, NAMED_WEIGHT = ("file", "url"), 0.6

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][a-z]+)?")
_IDENT_SEP = re.compile(r"[^A-Za-z0-9]+")


def split_identifier(identifier: str) -> list[str]:
    """`browser_take_screenshot`, `getHTTPResponse`, `list-issues` → their lower-case words."""
    words: list[str] = []
    for chunk in _IDENT_SEP.split(identifier):
        words += [w.lower() for w in _CAMEL.findall(chunk)]
    return words


def doc_words(text: str) -> str:
    """Words of prose or identifiers, with a joined word also kept whole ("GitHub" → github git hub)."""
    return " ".join(filter(None, map(_token_words, _IDENT_SEP.split(text))))


@functools.lru_cache(maxsize=1 << 16)
def _token_words(raw: str) -> str:
    """One token's words (catalogs repeat most tokens, so each is worked out once)."""
    if not raw or (raw.isalpha() and raw[1:].islower()):  # plain prose ("Create", "file"): nothing to split
        return raw.lower()
    parts = [w.lower() for w in _CAMEL.findall(raw)]
    whole = raw.lower()
    if len(parts) != 1 or parts[0] != whole:
        parts.insert(0, whole)
    return " ".join(parts)


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
STOP = frozenset(_STOP_WORDS.split())
# Verbs among the stop words: a request's frame ("can you get me ...") more often than its action, but
# sometimes the action itself ("give BUG-9 to maria"), so they stay in the query at a low weight.
_STOP_VERBS = frozenset(
    ["tell", "give", "go", "get", "know", "see", "make", "use", "help", "need", "want", "like", "let", "sort"]
)
VERB_WEIGHT = 0.3
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


# Words of a URL that say nothing about the page.
_URL_NOISE = frozenset(
    ["http", "https", "www", "com", "org", "net", "io", "dev", "ai", "app", "co", "html", "htm", "php", "index"]
)


def _entities(query: str) -> tuple[str, list[str], list[str]]:
    """Things a query names rather than says (a URL, a file, an issue key, a #channel), as the word for
    their kind, and the words of the names of files and pages (".gitlab-ci.yml" → gitlab, ci, yml); the
    query comes back with them taken out, so they are not read as the user's own words."""
    kinds: list[str] = []
    named: list[str] = []
    for pattern, kind in ((_URL, "url"), (_FILENAME, "file"), (_ISSUE_KEY, "issue"), (_CHANNEL, "channel")):
        found = pattern.findall(query)
        for match in found:
            ext = match.rsplit(".", 1)[-1].lower()
            kinds.append("image" if kind == "file" and re.fullmatch(_IMAGE_EXT, ext) else kind)
            if kind in NAMED_KINDS:
                named += [w for w in split_identifier(match) if w not in _URL_NOISE and not w.isdigit()]
        query = pattern.sub(" ", query)
    return query, kinds, named


def variants(word: str, weight: float) -> dict[str, float]:
    group = {word: weight}
    for syn in _SYNONYMS.get(_light_stem(word), frozenset()):
        if syn != word and _light_stem(syn) != _light_stem(word):
            group.setdefault(syn, weight * SYNONYM_WEIGHT)
    if len(word) >= PREFIX_MIN:  # "mongo" finds "mongodb", "screen" finds "screenshot"
        group.setdefault(word + "*", weight * PREFIX_WEIGHT)
    return group


def query_terms(query: str) -> list[dict[str, float]]:
    """The query's words, each as {variant: weight}: the word itself at 1.0 and its synonyms lower.

    Named things (a URL, a file name, an issue key) count as the word for their kind, at a synonym's
    weight; two adjacent words are also tried joined ("roll back" finds "rollback").
    """
    return [group for group, _ in query_groups(query)]


def query_groups(query: str) -> list[tuple[dict[str, float], bool]]:
    """`query_terms`, each group with whether its first variant is a word as the user typed it."""
    text, kinds, named = _entities(query)
    words: list[str] = []
    for token in _IDENT.findall(text):
        if "_" in token or "-" in token:
            words += split_identifier(token)
        else:
            words.append(re.split("['’]", token.lower())[0])  # what's → what, don't → don
    words = [w for w in words if not w.isdigit()]  # a number is a value, not what the task is about
    # "show me ..." frames a request; the verb says little about which tool, so it counts for less.
    framed = {left for left, right in itertools.pairwise(words) if right in ("me", "us")}
    kept = [w for w in words if w not in STOP] or ([] if kinds else words)
    seen: set[str] = set()
    groups: list[tuple[dict[str, float], bool]] = []
    for word in kept:
        if word not in seen:
            seen.add(word)
            groups.append((variants(word, FRAME_WEIGHT if word in framed else 1.0), True))
    for word in words:
        if word in _STOP_VERBS and word not in seen and kept:
            seen.add(word)
            groups.append((variants(word, VERB_WEIGHT), False))
    for kind in kinds:
        if kind not in seen:
            seen.add(kind)
            groups.append((variants(kind, SYNONYM_WEIGHT), False))
    for word in named:
        if word not in seen and len(word) > 1:
            seen.add(word)
            groups.append((variants(word, NAMED_WEIGHT), False))
    for left, right in itertools.pairwise(words):
        joined = left + right
        if left in kept and right in kept and joined not in seen and len(left) > 1 and len(right) > 1:
            seen.add(joined)
            groups.append(({joined: SYNONYM_WEIGHT}, False))
    return groups
