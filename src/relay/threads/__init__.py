"""Conversation threads (`continuation_id`): relay's own memory, shared across tools and models.

Stored in relay.db (migration m004_threads), so a thread survives restarts; when the job store is
PostgreSQL (RELAY_STORE), in that store's tables of the same name (threads/pg.py), so every front of
the store continues every thread. A thread expires after its lifetime without a new turn and holds
at most `max_turns` turns (a turn is one user or assistant message, as in Zen). Any tool and any
model may continue any thread. `open_threads` opens the one the settings name.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, LiteralString

from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.osfiles import private_home
from relay.principal import current
from relay.store.dialect import Conn
from relay.store.migrations import migrate
from relay.store.open import is_pg_url
from relay.store.release import connect
from relay.store.sqlite_conn import SqliteConn
from relay.text import is_utf8, mend_surrogates

# Zen's defaults are 3 h and 50 turns; relay's threads persist, so a day is the default lifetime.
DEFAULT_TTL_HOURS = 24.0
DEFAULT_MAX_TURNS = 50
BUSY_TIMEOUT_S = 10.0
TITLE_CHARS = 80


@dataclass(frozen=True)
class ThreadSettings:
    ttl_s: float = DEFAULT_TTL_HOURS * 3600
    max_turns: int = DEFAULT_MAX_TURNS


def thread_settings(settings: Settings) -> ThreadSettings:
    """Lifetime and turn limit: env RELAY_THREAD_TTL_HOURS / RELAY_THREAD_MAX_TURNS (Zen's
    CONVERSATION_TIMEOUT_HOURS / MAX_CONVERSATION_TURNS also work), else `[threads]` in config.toml."""
    from relay.agents.api.registry import read_config_table

    table = read_config_table(settings, "threads")
    env = settings.environ

    def pick(env_keys: tuple[str, str], key: str, default: float) -> float:
        for name in env_keys:
            raw = env.get(name, "").strip()
            if raw:
                try:
                    value = float(raw)
                except ValueError:
                    raise RelayError(
                        ErrorCode.CONFIG_INVALID,
                        f"{name}={raw!r} is not a number",
                        f"set {name} to a positive number",
                    ) from None
                if value <= 0:
                    raise RelayError(ErrorCode.CONFIG_INVALID, f"{name} must be positive", f"set {name} above 0")
                return value
        value = table.get(key, default)
        if not isinstance(value, int | float) or value <= 0:
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"threads.{key}={value!r}",
                f"set threads.{key} to a positive number",
            )
        return float(value)

    ttl_h = pick(("RELAY_THREAD_TTL_HOURS", "CONVERSATION_TIMEOUT_HOURS"), "ttl_hours", DEFAULT_TTL_HOURS)
    turns = pick(("RELAY_THREAD_MAX_TURNS", "MAX_CONVERSATION_TURNS"), "max_turns", DEFAULT_MAX_TURNS)
    return ThreadSettings(ttl_s=ttl_h * 3600, max_turns=max(2, int(turns)))


@dataclass(frozen=True)
class Turn:
    """One message of a thread: who said it, with which tool and model, about which files."""

    seq: int
    role: str
    content: str
    created_at: float
    tool: str
    files: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    provider: str | None = None
    model: str | None = None
    job_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=lambda: {})

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "role": self.role,
            "content": self.content,
            "created_at": self.created_at,
            "tool": self.tool,
            "files": list(self.files),
            "images": list(self.images),
            "provider": self.provider,
            "model": self.model,
            "job_id": self.job_id,
            "metadata": self.metadata,
        }


@dataclass(frozen=True)
class NewTurn:
    role: str
    content: str
    files: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    provider: str | None = None
    model: str | None = None
    job_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=lambda: {})


@dataclass(frozen=True)
class Thread:
    id: str
    parent_id: str | None
    tool: str
    title: str
    created_at: float
    updated_at: float
    expires_at: float
    turn_count: int
    total_cost_usd: float
    turns: tuple[Turn, ...] = ()
    principal: str = "local"  # who started it: a `user` principal finds only its own threads

    def remaining_turns(self, max_turns: int) -> int:
        return max(0, max_turns - self.turn_count)

    @property
    def last_model(self) -> str | None:
        return next((t.model for t in reversed(self.turns) if t.role == "assistant" and t.model), None)

    def to_dict(self, max_turns: int, with_turns: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "continuation_id": self.id,
            "parent_id": self.parent_id,
            "tool": self.tool,
            "title": self.title,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "turn_count": self.turn_count,
            "remaining_turns": self.remaining_turns(max_turns),
            "total_cost_usd": round(self.total_cost_usd, 8),
        }
        if with_turns:
            data["turns"] = [t.to_dict() for t in self.turns]
        return data


def new_thread_id() -> str:
    return str(uuid.uuid4())


def not_found(thread_id: str) -> RelayError:
    return RelayError(
        ErrorCode.SESSION_NOT_FOUND,
        f"conversation thread {thread_id!r} was not found or has expired",
        "start a new conversation: send the full question without continuation_id (thread_list shows live threads)",
    )


def valid_id(thread_id: str) -> bool:
    try:
        uuid.UUID(thread_id)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


def checked_id(thread_id: str) -> str:
    if not valid_id(thread_id):
        raise invalid(f"continuation id {thread_id!r} is not a UUID", "use the continuation_id relay returned")
    return thread_id


def too_many_turns(thread_id: str, count: int, max_turns: int) -> RelayError:
    return RelayError(
        ErrorCode.MAX_TURNS,
        f"thread {thread_id} has {count} of {max_turns} turns",
        "start a new conversation without continuation_id (summarize the old one in the prompt)",
    )


def heading(title: str) -> str:
    """A thread's title: one line, no NUL, and no lone surrogate (valid in JSON, refused by both stores' text)."""
    return " ".join(mend_surrogates(title).replace("\x00", " ").split())[:TITLE_CHARS]


def stored_text(content: str) -> str | bytes:
    """A turn's content as relay.db keeps it: text, or its UTF-8 bytes where it holds a lone surrogate.

    JSON may carry a lone surrogate ("\\ud800") and a turn is kept whole, but SQLite's text is UTF-8,
    which has no such character; `turn_of` reads either back as the same string.
    """
    return content if is_utf8(content) else content.encode("utf-8", "surrogatepass")


def turn_of(r: Mapping[str, Any]) -> Turn:
    """A stored turn (a row of thread_turns, JSON columns as text)."""
    return Turn(
        seq=int(r["seq"]),
        role=str(r["role"]),
        content=r["content"].decode("utf-8", "surrogatepass") if isinstance(r["content"], bytes) else str(r["content"]),
        created_at=float(r["created_at"]),
        tool=str(r["tool"]),
        files=tuple(json.loads(r["files"])),
        images=tuple(json.loads(r["images"])),
        provider=r["provider"],
        model=r["model"],
        job_id=r["job_id"],
        metadata=json.loads(r["metadata"]),
    )


def turn_row(
    thread_id: str,
    seq: int,
    turn: NewTurn,
    now: float,
    tool: str,
    content: Callable[[str], str | bytes] = stored_text,
) -> tuple[Any, ...]:
    """The values of a new row of thread_turns, in the column order of TURN_COLUMNS; `content` is how the store
    keeps a turn's text (relay.db: `stored_text`)."""
    return (
        thread_id,
        seq,
        turn.role,
        content(turn.content),
        now,
        tool,
        json.dumps(list(turn.files)),
        json.dumps(list(turn.images)),
        turn.provider,
        turn.model,
        turn.job_id,
        json.dumps(turn.metadata, default=str),
    )


TURN_COLUMNS: LiteralString = (
    "thread_id, seq, role, content, created_at, tool, files, images, provider, model, job_id, metadata"
)


THREAD_COLUMNS = "id, parent_id, tool, title, created_at, updated_at, turn_count, total_cost_usd, principal"
_THREAD_NAMES: tuple[str, ...] = tuple(THREAD_COLUMNS.split(", "))
_TURN_NAMES: tuple[str, ...] = tuple(TURN_COLUMNS.split(", "))


class ThreadStore:
    """Where threads are kept (relay.db, or the PostgreSQL store): one body over either backend's Conn
    (relay.store.dialect), what every caller uses, whichever it is. `_content`: how the store keeps a turn's
    text (relay.db: `stored_text`; PostgreSQL's bytea: its UTF-8)."""

    _db: Conn

    def __init__(
        self, config: ThreadSettings | None, clock: Callable[[], float], content: Callable[[str], str | bytes]
    ) -> None:
        self.config = config or ThreadSettings()
        self._clock = clock
        self._content = content

    def close(self) -> None:
        self._db.close()

    def find(self, thread_id: str) -> Thread | None:
        """A live thread with its turns, or None when unknown or expired."""
        if not valid_id(thread_id):
            return None
        # One snapshot for the thread and its turns (a turn added meanwhile by another front is in both or neither).
        with self._db.tx(snapshot=True) as tx:
            found = tx.exec(f"SELECT {THREAD_COLUMNS} FROM threads WHERE id=?", (thread_id,)).fetchone()
            row = dict(zip(_THREAD_NAMES, found, strict=True)) if found is not None else None
            if row is None or not self._live(row, self._clock()):
                return None  # another principal's thread is as unknown as one that never was
            turns = tx.exec(f"SELECT {TURN_COLUMNS} FROM thread_turns WHERE thread_id=? ORDER BY seq", (thread_id,))
            rows = [dict(zip(_TURN_NAMES, r, strict=True)) for r in turns]
        return self._thread(row, tuple(turn_of(r) for r in rows))

    def list(self, *, limit: int = 20, include_expired: bool = False) -> list[Thread]:
        """Threads, most recently updated first (without their turns)."""
        if limit < 1:
            raise invalid("limit must be at least 1", "pass a positive limit")
        who = current()
        mine = "" if who.is_admin else " AND principal = ?"
        params = (self._cutoff(include_expired), *(() if who.is_admin else (who.name,)), limit)
        rows = self._db.exec(
            f"SELECT {THREAD_COLUMNS} FROM threads WHERE updated_at > ?{mine} ORDER BY updated_at DESC LIMIT ?",
            params,
        )
        return [self._thread(dict(zip(_THREAD_NAMES, r, strict=True))) for r in rows]

    def add_turns(
        self,
        thread_id: str,
        turns: Sequence[NewTurn],
        *,
        tool: str,
        title: str = "",
        parent_id: str | None = None,
        cost_usd: float = 0.0,
    ) -> Thread:
        """Append turns, creating the thread if needed; refreshes its lifetime. MAX_TURNS past the limit.

        The thread's row is held from its first read to the commit, so two fronts adding to one thread at once
        number their turns one after the other; a new thread is made here (undone with the rest if the turns do
        not fit), and one another front makes at the same moment is waited for, then found."""
        checked_id(thread_id)
        now = self._clock()
        with self._db.tx(lock=True) as tx:
            tx.exec(
                "INSERT INTO threads (id, parent_id, tool, title, created_at, updated_at, turn_count, total_cost_usd,"
                " principal) VALUES (?,?,?,?,?,?,0,0,?) ON CONFLICT (id) DO NOTHING",
                (thread_id, parent_id, tool, heading(title), now, now, current().name),
            )
            found = tx.exec(
                f"SELECT turn_count, updated_at, principal FROM threads WHERE id=?{self._db.dialect.for_update}",
                (thread_id,),
            ).fetchone()
            if found is None or not self._live({"updated_at": found[1], "principal": found[2]}, now):
                raise not_found(thread_id)
            count = int(found[0])
            if count + len(turns) > self.config.max_turns:
                raise too_many_turns(thread_id, count, self.config.max_turns)
            tx.many(
                f"INSERT INTO thread_turns ({TURN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [turn_row(thread_id, count + i, turn, now, tool, self._content) for i, turn in enumerate(turns)],
            )
            tx.exec(
                "UPDATE threads SET turn_count=turn_count+?, updated_at=?, total_cost_usd=total_cost_usd+? WHERE id=?",
                (len(turns), now, cost_usd, thread_id),
            )
        return self.get(thread_id)

    def purge_expired(self) -> int:
        """Delete threads past their lifetime (their turns go with them: ON DELETE CASCADE); returns how many."""
        cutoff = self._clock() - self.config.ttl_s
        return self._db.exec("DELETE FROM threads WHERE updated_at <= ?", (cutoff,)).rowcount

    def get(self, thread_id: str) -> Thread:
        thread = self.find(thread_id)
        if thread is None:
            raise not_found(thread_id)
        return thread

    def check_room(self, thread: Thread | None, adding: int) -> None:
        """MAX_TURNS when `adding` more turns would pass the limit."""
        count = thread.turn_count if thread is not None else 0
        if count + adding > self.config.max_turns:
            raise too_many_turns(thread.id if thread else "", count, self.config.max_turns)

    def _thread(self, row: Mapping[str, Any], turns: tuple[Turn, ...] = ()) -> Thread:
        d = dict(row)
        return Thread(**d, expires_at=float(d["updated_at"]) + self.config.ttl_s, turns=turns)

    def _live(self, row: Mapping[str, Any], now: float) -> bool:
        """Whether a stored thread is within its lifetime and the current principal's to see."""
        return float(row["updated_at"]) + self.config.ttl_s > now and current().sees(row["principal"])

    def _cutoff(self, include_expired: bool) -> float:
        return -1.0 if include_expired else self._clock() - self.config.ttl_s


class Threads(ThreadStore):
    """Thread storage in relay.db; safe to share between the event loop and worker threads."""

    def __init__(
        self, db_path: Path, config: ThreadSettings | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(config, clock, stored_text)
        private_home(db_path.parent)
        # Turns are prompts and answers of any size: no statement keeps the last one bound (store/release.py).
        db = connect(db_path, timeout=BUSY_TIMEOUT_S)
        db.execute("PRAGMA foreign_keys = ON")
        migrate(db)
        self._db = SqliteConn(db, db_path, BUSY_TIMEOUT_S, release=False)

    @classmethod
    def open(cls, settings: Settings) -> Threads:
        return cls(settings.db_path, thread_settings(settings))


def open_threads(settings: Settings) -> ThreadStore:
    """The threads of these settings: in the PostgreSQL store when RELAY_STORE names one (every front of it
    continues every thread), else in relay.db of RELAY_HOME."""
    target = settings.store_target
    if is_pg_url(target):
        from relay.threads.pg import PgThreads  # psycopg is loaded only by a relay that uses PostgreSQL

        return PgThreads(str(target), thread_settings(settings))
    return Threads.open(settings)


@dataclass(frozen=True)
class History:
    """The part of a thread that fits a model's budget: whole exchanges, oldest first."""

    turns: tuple[Turn, ...]
    omitted_turns: int
    files: tuple[str, ...]  # files of earlier turns, newest reference first, each once
    tokens: int


def select_history(
    turns: Sequence[Turn],
    budget_tokens: int,
    estimate: Callable[[str], int],
    exclude_files: Sequence[str] = (),
) -> History:
    """Newest turns first while they fit the budget (a user/assistant pair stays together)."""
    groups: list[list[Turn]] = []
    for turn in turns:
        if turn.role == "user" or not groups:
            groups.append([turn])
        else:
            groups[-1].append(turn)
    kept: list[list[Turn]] = []
    used = 0
    for group in reversed(groups):
        cost = sum(estimate(t.content) + 4 for t in group)
        if used + cost > budget_tokens:
            break
        kept.append(group)
        used += cost
    kept.reverse()
    chosen = tuple(t for g in kept for t in g)
    seen = set(exclude_files)
    files: list[str] = []
    for turn in reversed(turns):
        for path in turn.files:
            if path not in seen:
                seen.add(path)
                files.append(path)
    return History(chosen, len(turns) - len(chosen), tuple(files), used)
