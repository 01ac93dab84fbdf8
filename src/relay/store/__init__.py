"""The job store: SQLite (store/db.py, the default) or PostgreSQL (store/pg/, for a team); plain dataclasses."""

from relay.store.api import JobStore
from relay.store.claims import WorkerInfo, WorkerRecord
from relay.store.db import JobRecord, SessionRecord, SessionTurn, Store
from relay.store.open import open_store

__all__ = [
    "JobRecord",
    "JobStore",
    "SessionRecord",
    "SessionTurn",
    "Store",
    "WorkerInfo",
    "WorkerRecord",
    "open_store",
]
