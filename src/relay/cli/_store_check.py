"""A front's store, tried once before it says it serves: what is wrong with it is one coded line, and an exit."""

from __future__ import annotations


def check_store() -> None:
    """Open the configured PostgreSQL store (connect, log in, check its migrations) and close it again; a RelayError
    (`STORE_UNAVAILABLE`, `CONFIG_INVALID`, a store migrated by a newer relay ...) goes to `relay`'s one-line report
    before any "serving" line, instead of a traceback from the server's start-up after it. SQLite: nothing to try."""
    from relay.config import load_settings
    from relay.store.open import is_pg_url, open_store

    settings = load_settings()
    if not is_pg_url(settings.store_target):
        return
    open_store(settings.store_target, home=settings.home).close()
