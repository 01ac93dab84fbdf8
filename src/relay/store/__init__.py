"""SQLite store: jobs, job events, agent sessions. Returns plain dataclasses."""

from relay.store.claims import WorkerInfo, WorkerRecord
from relay.store.db import JobRecord, SessionRecord, SessionTurn, Store

__all__ = ["JobRecord", "SessionRecord", "SessionTurn", "Store", "WorkerInfo", "WorkerRecord"]
