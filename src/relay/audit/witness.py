"""The log checked against a witness: a record of each entry's seq and hash that relay's own rights cannot rewrite.

A rewrite by relay's own user (a line dropped, the rest re-chained, audit.head and the store's mark
rewritten to match) leaves a chain that checks; the witness (an INSERT-only table, relay/store/pg/witness.py)
still holds each entry's hash as it was written. Each line's hash covers the line before it, so the last
line that matches its witness row vouches for every line before it; lines after the last witnessed one
are vouched for by the local chain alone, and the report says so. Relay writes one row per entry: two
different hashes for one seq mean a row was added by something else.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


def unwitnessed(user: str | None = None) -> str:
    """What the local chain alone can and cannot catch (`relay doctor`, `relay audit verify` without a witness)."""
    who = user or _user()
    return (
        f"the local chain detects edits by anything but a process running as {who}; a rewrite by relay's own user "
        "(the log, audit.head and the store's mark together) is not detectable without a witness: use a PostgreSQL "
        "store with the witness table (relay audit witness-sql)"
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "relay's user"


@dataclass(frozen=True)
class Witness:
    """The witness of one log: where it is (`name`), whether relay's role cannot rewrite it, and its rows
    (seq, hash) in seq order."""

    name: str
    rows: Iterable[tuple[int, str]]
    holds: bool = True
    # What relay's role could do to it, when it does not hold (for the report).
    weakness: str = ""


@dataclass
class WitnessCheck:
    """Walks the log's lines beside the witness's rows (both in seq order) and keeps what differs."""

    witness: Witness
    # (line, message): the first line that differs from the witness, and how many do.
    first_difference: tuple[int, str] | None = None
    differences: int = 0
    forged: list[int] = field(default_factory=lambda: [])
    matched_to: int = 0  # the highest seq whose line matches its witness row
    unwitnessed: list[int] = field(default_factory=lambda: [])  # seqs with no row after the last matched
    _rows: Iterator[tuple[int, str]] | None = None
    _next: tuple[int, str] | None = None
    _last_seq: int = 0
    _max_row: int = 0

    def __post_init__(self) -> None:
        self._rows = iter(self.witness.rows)
        self._advance()

    def _advance(self) -> None:
        assert self._rows is not None
        self._next = next(self._rows, None)
        if self._next is not None:
            self._max_row = max(self._max_row, self._next[0])

    def line(self, number: int, seq: int, line_hash: str) -> None:
        """Line `number` of the log holds seq `seq` and hashes to `line_hash`."""
        if seq <= self._last_seq:
            return  # out of order: the chain names it
        self._last_seq = seq
        while self._next is not None and self._next[0] < seq:
            self._differ(number, f"the witness records seq {self._next[0]}, which the log no longer holds")
            self._advance()
        hashes: set[str] = set()
        while self._next is not None and self._next[0] == seq:
            hashes.add(self._next[1])
            self._advance()
        if not hashes:
            self.unwitnessed.append(seq)
            return
        if line_hash not in hashes:
            self._differ(number, f"line {number} (seq {seq}) is not the entry the witness recorded for seq {seq}")
            return
        if len(hashes) > 1:
            self.forged.append(seq)
            return
        self.matched_to = seq
        self.unwitnessed.clear()  # a matched line vouches for every line before it

    def _differ(self, number: int, message: str) -> None:
        self.differences += 1
        if self.first_difference is None:
            self.first_difference = (number, message)

    def finish(self, lines: int) -> tuple[list[tuple[int, str]], list[str]]:
        """The problems (line, message) and notes, once every line was given."""
        problems: list[tuple[int, str]] = []
        notes: list[str] = []
        while self._next is not None:
            self._advance()
        past = self._max_row - self._last_seq
        if self.first_difference is not None:
            number, message = self.first_difference
            more = f" ({self.differences} differences in all)" if self.differences > 1 else ""
            problems.append(
                (
                    number,
                    f"{message}{more}: the log was rewritten from here (a line changed, removed or added, and the "
                    f"lines after it re-chained); {self.witness.name} holds the entries as they were written",
                )
            )
        if self.forged:
            seqs = ", ".join(str(s) for s in self.forged[:5]) + (" ..." if len(self.forged) > 5 else "")
            problems.append(
                (
                    lines,
                    f"the witness holds more than one entry for seq {seqs}: rows were added to it by something "
                    "other than this log's writer",
                )
            )
        if past > 0:
            problems.append(
                (
                    lines + 1,
                    f"the witness records entries up to seq {self._max_row}, past the log's end (seq "
                    f"{self._last_seq}): {'the last entry was' if past == 1 else f'the last {past} entries were'} "
                    "removed",
                )
            )
        if self.unwitnessed and not problems:
            first, last = self.unwitnessed[0], self.unwitnessed[-1]
            which = f"seq {first}" if first == last else f"seq {first} to {last}"
            notes.append(
                f"{which} at the log's end {'has' if first == last else 'have'} no witness row (written while the "
                "store was away, or relay stopped before writing it): only the local chain vouches for "
                f"{'it' if first == last else 'them'}"
            )
        if not self.witness.holds:
            notes.append(f"the witness does not hold: {self.witness.weakness}")
        return problems, notes
