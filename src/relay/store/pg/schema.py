"""The PostgreSQL store's numbered migrations: the queue's tables under the names SQLite's migrations have.

The tables of the queue (jobs, events, sessions, the audit mark, workers, outputs) and the conversation
threads (relay/threads/pg.py) live in PostgreSQL; the stores beside them (tracker, gateway, hooks,
workspaces) keep their SQLite file in each front's home, so their migrations (m005 - m007, m009 - m011,
m013, m018 - m020) have no PostgreSQL side. Each step is the PostgreSQL translation of the SQLite step of the same
name: REAL is double precision, pids and ticks bigint, flags boolean, ids compare byte by byte (COLLATE
"C", as SQLite does). A database made before a step existed gets it on the next start (m004 came after
m016 and m017): steps are applied by name, each once, whatever came before.

Every change of a job row, new events and new output notify channel `relay_jobs` with the job's id,
and a job that becomes queued also `relay_queue` (triggers, so no writer can forget one).
"""

from __future__ import annotations

import time

import psycopg

from relay.store.migrations import refuse_newer

# The advisory lock key (any constant) that serializes relays migrating one database at once.
MIGRATION_LOCK = 0x72656C6179  # "relay"
JOBS_CHANNEL = "relay_jobs"
QUEUE_CHANNEL = "relay_queue"

# The columns whose change is a change of a job's state (an update that sets none of them, such as a
# lease renewal, announces nothing).
_STATE_COLUMNS = "status, owner_pid, pid, started_at, finished_at, cancel_requested, stop_reason, session_id"

M001_JOBS = f"""
CREATE TABLE jobs (
    id TEXT COLLATE "C" PRIMARY KEY,
    agent TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'cli',
    status TEXT NOT NULL,
    request TEXT NOT NULL,
    model TEXT,
    cwd TEXT,
    session_id TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    started_at DOUBLE PRECISION,
    finished_at DOUBLE PRECISION,
    deadline_at DOUBLE PRECISION,
    idle_timeout_s DOUBLE PRECISION,
    pid BIGINT,
    pid_start_ticks BIGINT,
    boot_id TEXT,
    owner_pid BIGINT,
    owner_start_ticks BIGINT,
    cancel_requested BOOLEAN NOT NULL DEFAULT false,
    stop_reason TEXT,
    exit_code INTEGER,
    result TEXT,
    error TEXT
);
CREATE INDEX jobs_session ON jobs(session_id);
CREATE FUNCTION relay_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('relay_jobs', NEW.id);
    IF NEW.status = 'queued' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'queued') THEN
        PERFORM pg_notify('relay_queue', NEW.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION relay_job_changed();
CREATE TRIGGER jobs_changed AFTER UPDATE OF {_STATE_COLUMNS} ON jobs
    FOR EACH ROW EXECUTE FUNCTION relay_job_changed();
"""

# New rows of a job's table (events, outputs) notify once per job and statement.
_ROWS_ADDED = """
CREATE FUNCTION relay_rows_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('relay_jobs', job_id) FROM (SELECT DISTINCT job_id FROM added) AS jobs;
    RETURN NULL;
END $$;
"""

M002_EVENTS = (
    """
CREATE TABLE events (
    job_id TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    seq INTEGER NOT NULL,
    ts DOUBLE PRECISION NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
"""
    + _ROWS_ADDED
    + """
CREATE TRIGGER events_added AFTER INSERT ON events REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION relay_rows_added();
"""
)

M003_SESSIONS = """
CREATE TABLE sessions (
    agent TEXT NOT NULL,
    session_id TEXT NOT NULL,
    cwd TEXT NOT NULL,
    model TEXT,
    permission TEXT NOT NULL,
    title TEXT NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0,
    total_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    last_used_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (agent, session_id)
);
CREATE INDEX sessions_last_used ON sessions(last_used_at);
"""

# SQLite's m004 plus the threads' part of its m014 (who started each thread; a user lists only its own).
M004_THREADS = """
CREATE TABLE threads (
    id TEXT COLLATE "C" PRIMARY KEY,
    parent_id TEXT,
    tool TEXT NOT NULL,
    title TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    turn_count INTEGER NOT NULL DEFAULT 0,
    total_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    principal TEXT NOT NULL DEFAULT 'local'
);
CREATE INDEX threads_updated ON threads(updated_at);
CREATE INDEX threads_principal_updated ON threads(principal, updated_at);
CREATE TABLE thread_turns (
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    content BYTEA NOT NULL,  -- UTF-8: a turn's text may hold NUL, which PostgreSQL's text cannot
    created_at DOUBLE PRECISION NOT NULL,
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

# SQLite's m008 replaced two single-column indexes; here they were never made.
M008_INDEXES = """
CREATE INDEX jobs_created_id ON jobs(created_at, id);
CREATE INDEX jobs_status_created_id ON jobs(status, created_at, id);
CREATE INDEX jobs_agent_created_id ON jobs(agent, created_at, id);
"""

# One mark per audit log (each front keeps its log in its own home: host and path name it).
M012_AUDIT_MARK = """
CREATE TABLE audit_mark (
    log TEXT PRIMARY KEY,
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
"""

M014_PRINCIPALS = """
ALTER TABLE jobs ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
ALTER TABLE sessions ADD COLUMN principal TEXT NOT NULL DEFAULT 'local';
CREATE INDEX jobs_principal_created_id ON jobs(principal, created_at, id);
"""

# A job is claimable when it is queued and no worker holds it: announced on relay_queue when it becomes so
# (inserted, handed back, its lost worker's claim ended). The claim's columns are part of its state.
M015_CLAIMS = f"""
ALTER TABLE jobs ADD COLUMN worker TEXT;
ALTER TABLE jobs ADD COLUMN lease_until DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN labels TEXT;
ALTER TABLE jobs ADD COLUMN retry TEXT;
CREATE INDEX jobs_active_worker ON jobs(status, worker) WHERE status IN ('queued', 'running');
CREATE INDEX jobs_claimable ON jobs(created_at, id) WHERE status = 'queued' AND worker IS NULL;
CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    start_ticks BIGINT,
    boot_id TEXT,
    agents TEXT,
    labels TEXT NOT NULL DEFAULT '[]',
    slots INTEGER NOT NULL,
    lease_s DOUBLE PRECISION NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    stopped_at DOUBLE PRECISION,
    state TEXT NOT NULL DEFAULT 'running',
    ran INTEGER NOT NULL DEFAULT 0
);
CREATE OR REPLACE FUNCTION relay_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('relay_jobs', NEW.id);
    IF NEW.status = 'queued' AND NEW.worker IS NULL AND (TG_OP = 'INSERT'
            OR OLD.status IS DISTINCT FROM 'queued' OR OLD.worker IS NOT NULL) THEN
        PERFORM pg_notify('relay_queue', NEW.id);
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER jobs_changed ON jobs;
CREATE TRIGGER jobs_changed AFTER UPDATE OF {_STATE_COLUMNS}, worker, epoch ON jobs
    FOR EACH ROW EXECUTE FUNCTION relay_job_changed();
"""

# EXTERNAL: stored uncompressed, so substring() reads only the part of a chunk a page needs.
M016_OUTPUTS = """
CREATE TABLE outputs (
    job_id TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    byte_offset BIGINT NOT NULL,
    size INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (job_id, stream, seq)
);
ALTER TABLE outputs ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE UNIQUE INDEX outputs_offset ON outputs(job_id, stream, byte_offset);
CREATE TRIGGER outputs_added AFTER INSERT ON outputs REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION relay_rows_added();
"""

M017_JOBS_WORKER_INDEX = """
CREATE INDEX jobs_worker_created_id ON jobs(worker, created_at, id);
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("m001_jobs", M001_JOBS),
    ("m002_events", M002_EVENTS),
    ("m003_sessions", M003_SESSIONS),
    ("m004_threads", M004_THREADS),
    ("m008_indexes", M008_INDEXES),
    ("m012_audit_mark", M012_AUDIT_MARK),
    ("m014_principals", M014_PRINCIPALS),
    ("m015_claims", M015_CLAIMS),
    ("m016_outputs", M016_OUTPUTS),
    ("m017_jobs_worker_index", M017_JOBS_WORKER_INDEX),
]


def migrate(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """Apply the migrations not yet recorded, in one transaction under an advisory lock; the names applied now."""
    applied: list[str] = []
    with conn.transaction():
        # Two relays starting at once on a new database: the second waits here, then finds all done.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        done = {str(row[0]) for row in conn.execute("SELECT name FROM migrations")}
        refuse_newer(sorted(done), [name for name, _ in MIGRATIONS], "the PostgreSQL store")
        for name, ddl in MIGRATIONS:
            if name in done:
                continue
            conn.execute(ddl.encode())  # several statements: sent as one simple query
            conn.execute("INSERT INTO migrations (name, applied_at) VALUES (%s, %s)", (name, time.time()))
            applied.append(name)
    return applied
