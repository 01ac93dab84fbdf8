"""The PostgreSQL store (RELAY_STORE=postgresql://...): the job store's API, its migrations, LISTEN/NOTIFY.

Imported only when a PostgreSQL store is opened (store/open.py), so relay on SQLite never loads psycopg.
"""

from relay.store.pg.listen import PgChanges, Subscription
from relay.store.pg.schema import JOBS_CHANNEL, QUEUE_CHANNEL
from relay.store.pg.store import PgStore

__all__ = ["JOBS_CHANNEL", "QUEUE_CHANNEL", "PgChanges", "PgStore", "Subscription"]
