"""Text that UTF-8 can carry. A JSON string may hold a lone surrogate ("\\ud800"), which Python keeps in a str
but UTF-8 has no code for: SQLite's text, PostgreSQL's, a file written as UTF-8 all refuse it."""

from __future__ import annotations


def is_utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def mend_surrogates(text: str) -> str:
    """`text` with each surrogate pair joined into its character and each lone surrogate made U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
