"""Append-only numbered schema migrations, recorded in `migrations` as they run."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager

from relay.errors import ErrorCode, RelayError
from relay.osfiles import lock


def m001_jobs(db: sqlite3.Connection) -> None:
    db.executescript(
        """
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            kind TEXT NOT NULL DEFAULT 'cli',
            status TEXT NOT NULL,
            request TEXT NOT NULL,
            model TEXT,
            cwd TEXT,
            session_id TEXT,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            deadline_at REAL,
            idle_timeout_s REAL,
            pid INTEGER,
            pid_start_ticks INTEGER,
            boot_id TEXT,
            owner_pid INTEGER,
            owner_start_ticks INTEGER,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            stop_reason TEXT,
            exit_code INTEGER,
            result TEXT,
            error TEXT
        );
        CREATE INDEX jobs_status ON jobs(status);
        CREATE INDEX jobs_created ON jobs(created_at);
        CREATE INDEX jobs_session ON jobs(session_id);
        """
    )


def m002_events(db: sqlite3.Connection) -> None:
    db.executescript(
        """
        CREATE TABLE events (
            job_id TEXT NOT NULL REFERENCES jobs(id),
            seq INTEGER NOT NULL,
            ts REAL NOT NULL,
            type TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (job_id, seq)
        );
        """
    )


def m003_sessions(db: sqlite3.Connection) -> None:
    db.executescript(
        """
        CREATE TABLE sessions (
            agent TEXT NOT NULL,
            session_id TEXT NOT NULL,
            cwd TEXT NOT NULL,
            model TEXT,
            permission TEXT NOT NULL,
            title TEXT NOT NULL,
            turns INTEGER NOT NULL DEFAULT 0,
            total_cost_usd REAL NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            last_used_at REAL NOT NULL,
            PRIMARY KEY (agent, session_id)
        );
        CREATE INDEX sessions_last_used ON sessions(last_used_at);
        """
    )


def m004_threads(db: sqlite3.Connection) -> None:
    """Conversation threads (continuation ids) shared across tools and models; turns in order."""
    db.executescript(
        """
        CREATE TABLE threads (
            id TEXT PRIMARY KEY,
            parent_id TEXT,
            tool TEXT NOT NULL,
            title TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            turn_count INTEGER NOT NULL DEFAULT 0,
            total_cost_usd REAL NOT NULL DEFAULT 0
        );
        CREATE INDEX threads_updated ON threads(updated_at);
        CREATE TABLE thread_turns (
            thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at REAL NOT NULL,
            tool TEXT NOT NULL,
            files TEXT NOT NULL DEFAULT '[]',
            images TEXT NOT NULL DEFAULT '[]',
            provider TEXT,
            model TEXT,
            job_id TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (thread_id, seq)
        );
        """
    )


def m005_mcp_servers(db: sqlite3.Connection) -> None:
    """Downstream MCP servers (global when scope is '', else a project directory) and their pinned tools."""
    db.executescript(
        """
        CREATE TABLE mcp_servers (
            scope TEXT NOT NULL,
            name TEXT NOT NULL,
            transport TEXT NOT NULL,
            command TEXT,
            args TEXT NOT NULL DEFAULT '[]',
            url TEXT,
            cwd TEXT,
            env_keys TEXT NOT NULL DEFAULT '[]',
            header_keys TEXT NOT NULL DEFAULT '[]',
            description TEXT NOT NULL DEFAULT '',
            enabled INTEGER NOT NULL DEFAULT 1,
            source TEXT NOT NULL DEFAULT 'add',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (scope, name)
        );
        CREATE TABLE mcp_tool_pins (
            scope TEXT NOT NULL,
            server TEXT NOT NULL,
            tool TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            definition TEXT NOT NULL,
            pending_sha256 TEXT,
            pending_definition TEXT,
            pinned_at REAL NOT NULL,
            changed_at REAL,
            PRIMARY KEY (scope, server, tool)
        );
        """
    )


def m006_tasks(db: sqlite3.Connection) -> None:
    """The task tracker: tasks scoped by project, typed dependencies, task-session links."""
    db.executescript(
        """
        CREATE TABLE tasks (
            project TEXT NOT NULL,
            id TEXT NOT NULL,
            project_id TEXT NOT NULL,
            title TEXT NOT NULL,
            description TEXT,
            status TEXT NOT NULL DEFAULT 'open',
            priority INTEGER NOT NULL DEFAULT 2,
            task_type TEXT NOT NULL DEFAULT 'task',
            parent_task_id TEXT,
            discovered_in_session_id TEXT,
            assignee TEXT,
            labels TEXT NOT NULL DEFAULT '[]',
            closed_reason TEXT,
            closed_at TEXT,
            platform_id TEXT,
            validation_status TEXT,
            validation_feedback TEXT,
            original_instruction TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (project, id)
        );
        CREATE INDEX tasks_ready ON tasks(project, status, priority, created_at);
        CREATE INDEX tasks_parent ON tasks(project, parent_task_id);
        CREATE TABLE task_dependencies (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            project TEXT NOT NULL,
            task_id TEXT NOT NULL,
            depends_on TEXT NOT NULL,
            dep_type TEXT NOT NULL,
            created_at TEXT NOT NULL,
            UNIQUE (project, task_id, depends_on, dep_type),
            FOREIGN KEY (project, task_id) REFERENCES tasks(project, id) ON DELETE CASCADE,
            FOREIGN KEY (project, depends_on) REFERENCES tasks(project, id) ON DELETE CASCADE
        );
        CREATE INDEX task_dependencies_blocker ON task_dependencies(project, depends_on);
        CREATE TABLE task_sessions (
            project TEXT NOT NULL,
            task_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            action TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (project, task_id, session_id, action),
            FOREIGN KEY (project, task_id) REFERENCES tasks(project, id) ON DELETE CASCADE
        );
        CREATE INDEX task_sessions_session ON task_sessions(session_id);
        """
    )


def m007_hook_sessions(db: sqlite3.Connection) -> None:
    """Sessions CLIs report through call_hook (id, source CLI, project, parent, title, summary) and their hook events."""
    db.executescript(
        """
        CREATE TABLE hook_sessions (
            id TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            start_source TEXT,
            machine_id TEXT NOT NULL,
            cwd TEXT NOT NULL,
            project TEXT NOT NULL,
            project_id TEXT NOT NULL,
            parent_session_id TEXT,
            transcript_path TEXT,
            title TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL,
            summary TEXT,
            summary_source TEXT,
            prompts TEXT NOT NULL DEFAULT '[]',
            prompt_count INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            ended_at REAL
        );
        CREATE INDEX hook_sessions_project ON hook_sessions(project, updated_at);
        CREATE INDEX hook_sessions_updated ON hook_sessions(updated_at);
        CREATE TABLE hook_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            hook_type TEXT NOT NULL,
            data TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX hook_events_session ON hook_events(session_id, id);
        """
    )


def m008_indexes(db: sqlite3.Connection) -> None:
    """List orders walk an index (newest first, ties by id) instead of sorting the table; these replace the
    single-column created_at and status indexes they extend."""
    db.executescript(
        """
        CREATE INDEX IF NOT EXISTS jobs_created_id ON jobs(created_at, id);
        CREATE INDEX IF NOT EXISTS jobs_status_created_id ON jobs(status, created_at, id);
        CREATE INDEX IF NOT EXISTS jobs_agent_created_id ON jobs(agent, created_at, id);
        DROP INDEX IF EXISTS jobs_created;
        DROP INDEX IF EXISTS jobs_status;
        """
    )


def m009_mcp_tasks(db: sqlite3.Connection) -> None:
    """MCP Tasks (server/tasks_ext.py): an unguessable task id per job, and a whole tool call's result."""
    db.executescript(
        """
        CREATE TABLE mcp_tasks (
            task_id TEXT PRIMARY KEY,
            job_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            kind TEXT NOT NULL,
            created_at REAL NOT NULL,
            result TEXT
        );
        CREATE INDEX mcp_tasks_job ON mcp_tasks(job_id);
        """
    )


def m010_task_tombstones(db: sqlite3.Connection) -> None:
    """Deleted tasks (tracker/tombstones.py), so that a deletion travels through `.gobby/tasks.jsonl` like an edit."""
    db.executescript(
        """
        CREATE TABLE task_tombstones (
            project TEXT NOT NULL,
            id TEXT NOT NULL,
            project_id TEXT NOT NULL,
            deleted_at TEXT NOT NULL,
            cascaded INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (project, id)
        );
        """
    )


def m011_workspaces(db: sqlite3.Connection) -> None:
    """Git worktrees of `workspace="worktree"` jobs (workspaces/): where each is, its branch and base, landed or not."""
    db.executescript(
        """
        CREATE TABLE workspaces (
            job_id TEXT PRIMARY KEY,
            repo TEXT NOT NULL,
            common_dir TEXT NOT NULL,
            path TEXT NOT NULL,
            subdir TEXT NOT NULL,
            branch TEXT NOT NULL,
            base_ref TEXT,
            base_sha TEXT NOT NULL,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            ended_at REAL,
            head_sha TEXT,
            landed_at REAL,
            landed_into TEXT,
            landed_sha TEXT,
            removed_at REAL
        );
        CREATE INDEX workspaces_state ON workspaces(state, ended_at);
        """
    )


def m012_audit_mark(db: sqlite3.Connection) -> None:
    """How far relay has written the audit log (the seq and hash of its last entry), so a log removed
    together with audit.head is still found missing (`relay audit verify`)."""
    db.executescript(
        """
        CREATE TABLE audit_mark (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            seq INTEGER NOT NULL,
            hash TEXT NOT NULL,
            updated_at REAL NOT NULL
        );
        """
    )


def m013_mcp_server_state(db: sqlite3.Connection) -> None:
    """The state a relay process last saw each downstream server in, for `relay mcp list` in another process."""
    db.executescript(
        """
        CREATE TABLE mcp_server_state (
            scope TEXT NOT NULL,
            name TEXT NOT NULL,
            state TEXT NOT NULL,
            last_error TEXT,
            skipped_lines INTEGER NOT NULL DEFAULT 0,
            starts INTEGER NOT NULL DEFAULT 0,
            pid INTEGER,
            updated_at REAL NOT NULL,
            PRIMARY KEY (scope, name)
        );
        """
    )


def m014_principals(db: sqlite3.Connection) -> None:
    """Who each row belongs to (relay/principal.py): jobs, MCP tasks, threads and agent sessions record the
    principal that started them (rows from before: the local user); tracker tasks record who created and who
    last changed them. Lists filter by principal, newest first, through the index."""
    db.executescript(
        """
        ALTER TABLE jobs ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE mcp_tasks ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE threads ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE sessions ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE tasks ADD COLUMN created_by TEXT;
        ALTER TABLE tasks ADD COLUMN changed_by TEXT;
        CREATE INDEX jobs_principal_created_id ON jobs(principal, created_at, id);
        CREATE INDEX threads_principal_updated ON threads(principal, updated_at);
        """
    )


def m015_claims(db: sqlite3.Connection) -> None:
    """Admission through the store (store/claims.py): a job runs only under a claim, a lease held by one
    worker (`worker`, `lease_until`) with a fencing `epoch` that every later write of the job must match;
    `labels` a job needs of its worker, `retry` what happens when its worker is lost; the workers table."""
    db.executescript(
        """
        ALTER TABLE jobs ADD COLUMN worker TEXT;
        ALTER TABLE jobs ADD COLUMN lease_until REAL;
        ALTER TABLE jobs ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE jobs ADD COLUMN labels TEXT;
        ALTER TABLE jobs ADD COLUMN retry TEXT;
        CREATE INDEX jobs_active_worker ON jobs(status, worker) WHERE status IN ('queued', 'running');
        CREATE TABLE workers (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            start_ticks INTEGER,
            boot_id TEXT,
            agents TEXT,
            labels TEXT NOT NULL DEFAULT '[]',
            slots INTEGER NOT NULL,
            lease_s REAL NOT NULL,
            started_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL,
            stopped_at REAL,
            state TEXT NOT NULL DEFAULT 'running',
            ran INTEGER NOT NULL DEFAULT 0
        );
        """
    )


def m016_outputs(db: sqlite3.Connection) -> None:
    """A job's outputs (stdout, stderr, transcript, result) in chunks of at most 1 MiB (store/outputs.py)."""
    db.executescript(
        """
        CREATE TABLE outputs (
            job_id TEXT NOT NULL REFERENCES jobs(id),
            stream TEXT NOT NULL,
            seq INTEGER NOT NULL,
            byte_offset INTEGER NOT NULL,
            size INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (job_id, stream, seq)
        );
        CREATE UNIQUE INDEX outputs_offset ON outputs(job_id, stream, byte_offset);
        """
    )


def m017_jobs_worker_index(db: sqlite3.Connection) -> None:
    """The jobs a worker ran, newest first (the dashboard's filter by worker), walk an index instead of the whole list."""
    db.executescript("CREATE INDEX IF NOT EXISTS jobs_worker_created_id ON jobs(worker, created_at, id);")


def m018_hook_principals(db: sqlite3.Connection) -> None:
    """Hook sessions and their events belong to the principal that reported them (relay/hooks/store.py): a
    session's key becomes (principal, id), so one principal's session id names nothing of another's; rows
    from before are the local user's. The table is rebuilt (SQLite cannot change a primary key) in one
    transaction; lists and the project's last session read through the new indexes."""
    db.executescript(
        """
        BEGIN;
        CREATE TABLE hook_sessions_new (
            id TEXT NOT NULL,
            principal TEXT NOT NULL DEFAULT 'local',
            source TEXT NOT NULL,
            start_source TEXT,
            machine_id TEXT NOT NULL,
            cwd TEXT NOT NULL,
            project TEXT NOT NULL,
            project_id TEXT NOT NULL,
            parent_session_id TEXT,
            transcript_path TEXT,
            title TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL,
            summary TEXT,
            summary_source TEXT,
            prompts TEXT NOT NULL DEFAULT '[]',
            prompt_count INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            ended_at REAL,
            PRIMARY KEY (principal, id)
        );
        INSERT INTO hook_sessions_new (id, principal, source, start_source, machine_id, cwd, project, project_id,
            parent_session_id, transcript_path, title, status, summary, summary_source, prompts, prompt_count,
            created_at, updated_at, ended_at)
        SELECT id, 'local', source, start_source, machine_id, cwd, project, project_id, parent_session_id,
            transcript_path, title, status, summary, summary_source, prompts, prompt_count, created_at, updated_at,
            ended_at FROM hook_sessions;
        DROP TABLE hook_sessions;
        ALTER TABLE hook_sessions_new RENAME TO hook_sessions;
        CREATE INDEX hook_sessions_project ON hook_sessions(principal, project, updated_at);
        CREATE INDEX hook_sessions_updated ON hook_sessions(updated_at);
        CREATE INDEX hook_sessions_principal_updated ON hook_sessions(principal, updated_at);
        ALTER TABLE hook_events ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
        DROP INDEX hook_events_session;
        CREATE INDEX hook_events_session ON hook_events(principal, session_id, id);
        COMMIT;
        """
    )


def m019_task_principals(db: sqlite3.Connection) -> None:
    """Tracker session links and tombstones record whose they are (relay/tracker/principals.py): a link shows only
    to the principal that made it, a tombstone travels to the repository file only with a task that did; rows
    from before are the local user's. Tasks belong to `created_by` (m014_principals); reads filter by it."""
    db.executescript(
        """
        ALTER TABLE task_sessions ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
        ALTER TABLE task_tombstones ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
        """
    )


def m020_workspace_ports(db: sqlite3.Connection) -> None:
    """Each worktree's block of ports for its agents (relay.workspaces.ready), "FIRST-LAST": held while it is there."""
    db.execute("ALTER TABLE workspaces ADD COLUMN ports TEXT")


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_jobs", m001_jobs),
    ("m002_events", m002_events),
    ("m003_sessions", m003_sessions),
    ("m004_threads", m004_threads),
    ("m005_mcp_servers", m005_mcp_servers),
    ("m006_tasks", m006_tasks),
    ("m007_hook_sessions", m007_hook_sessions),
    ("m008_indexes", m008_indexes),
    ("m009_mcp_tasks", m009_mcp_tasks),
    ("m010_task_tombstones", m010_task_tombstones),
    ("m011_workspaces", m011_workspaces),
    ("m012_audit_mark", m012_audit_mark),
    ("m013_mcp_server_state", m013_mcp_server_state),
    ("m014_principals", m014_principals),
    ("m015_claims", m015_claims),
    ("m016_outputs", m016_outputs),
    ("m017_jobs_worker_index", m017_jobs_worker_index),
    ("m018_hook_principals", m018_hook_principals),
    ("m019_task_principals", m019_task_principals),
    ("m020_workspace_ports", m020_workspace_ports),
]


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet recorded; return the names applied now.

    Processes that start together on one new database take turns (a lock on a file beside it): each
    step's `executescript()` commits the `BEGIN IMMEDIATE` taken before it, so the database's own lock
    would let two of them run one step at once ("table ... already exists").
    """
    db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    refuse_newer([str(r[0]) for r in db.execute("SELECT name FROM migrations")], [n for n, _ in MIGRATIONS], "relay.db")
    if _pending(db):
        with _migrating(db):
            return [name for name, step in _pending(db) if _apply(db, name, step)]
    return []


def refuse_newer(done: list[str], known: list[str], where: str) -> None:
    """A store migrated by a newer relay (steps this one does not know) is refused: its tables may hold what this
    relay would misread or overwrite."""
    unknown = sorted(set(done) - set(known))
    if unknown:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{where} was migrated by a newer relay: its steps {', '.join(unknown)} are unknown to this one",
            "upgrade relay here to the version that migrated it (relay --version on the other fronts and workers)",
        )


def _pending(db: sqlite3.Connection) -> list[tuple[str, Callable[[sqlite3.Connection], None]]]:
    done = {row[0] for row in db.execute("SELECT name FROM migrations")}
    return [(name, step) for name, step in MIGRATIONS if name not in done]


def _apply(db: sqlite3.Connection, name: str, step: Callable[[sqlite3.Connection], None]) -> bool:
    with db:
        db.execute("BEGIN IMMEDIATE")
        # Another process may have applied it between our read and our lock.
        if db.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone():
            return False
        step(db)
        db.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
    return True


@contextmanager
def _migrating(db: sqlite3.Connection) -> Generator[None]:
    """Hold the lock on `<database>.migrating` (none for an in-memory database) while migrations run."""
    # Read whole: a statement left open would hold a read transaction (an old snapshot) while this waits for the
    # lock, and the write after it would then fail at once as "database is locked".
    rows = db.execute("PRAGMA database_list").fetchall()
    path = next((str(row[2]) for row in rows if row[1] == "main"), "")
    if not path:
        yield
        return
    fd = os.open(path + ".migrating", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        lock(fd)
        yield
    finally:
        os.close(fd)
