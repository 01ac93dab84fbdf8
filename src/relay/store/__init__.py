"""The job store: SQLite (store/db.py, the default) or PostgreSQL (store/pg/, for a team); plain dataclasses."""

from relay.store.api import JobStore
from relay.store.claims import WorkerInfo, WorkerRecord
from relay.store.db import JobRecord, SessionRecord, SessionTurn, Store
from relay.store.open import open_store
from relay.store.records import NewJob

__all__ = [
    "JobRecord",
    "JobStore",
    "NewJob",
    "SessionRecord",
    "SessionTurn",
    "Store",
    "WorkerInfo",
    "WorkerRecord",
    "open_store",
]
