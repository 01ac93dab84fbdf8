"""`relay audit verify`: walk the hash chain and name every line that was edited, removed, reordered or cut."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.audit.log import GENESIS, LOG_FILE, iter_lines, parse_loose, read_head, sha256, unseal
from relay.audit.witness import Witness, WitnessCheck
from relay.osfiles import lock


@dataclass(frozen=True)
class Problem:
    """One break in the chain: the line (1-based) where it shows, and what happened there."""

    line: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "message": self.message}


@dataclass
class Report:
    """What `verify` found: the number of lines, the breaks (none: the log is intact), and notes."""

    path: str
    lines: int = 0
    problems: list[Problem] = field(default_factory=lambda: [])
    notes: list[str] = field(default_factory=lambda: [])
    # The witness the log was checked against (None: none), and the highest seq it vouches for.
    witness: str | None = None
    witness_holds: bool = False
    witnessed_to: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "lines": self.lines,
            "problems": [p.to_dict() for p in self.problems],
            "notes": self.notes,
            "witness": (
                {"name": self.witness, "holds": self.witness_holds, "witnessed_to": self.witnessed_to}
                if self.witness is not None
                else None
            ),
        }


def verify(home: Path, mark: tuple[int, str] | None = None, jobs: int = 0, witness: Witness | None = None) -> Report:
    """Check every line's own hash, its seq and its link to the line before, then the end against audit.head.

    `mark` is the (seq, hash) of the last entry relay's store says it wrote, and `jobs` how many jobs
    the store holds: a log removed together with audit.head is then still found missing. `witness`
    holds each entry's hash as it was written (relay/audit/witness.py): a log rewritten together with
    audit.head and the mark is then still found rewritten, from its first changed line.
    Holds a shared lock on the log meanwhile, so a line being appended is not mistaken for a cut one.
    """
    path = home / LOG_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            # Read the head first: writers create the log before they write the head and never remove it,
            # so a head that counts lines while the log is still missing afterwards means it was removed.
            head = read_head(home)
            if path.exists():
                continue  # a writer created the log meanwhile: verify it under the lock
            return _verify(str(path), iter(()), head, mark, jobs, witness)
        try:
            lock(fd, shared=True)
            return _verify(str(path), iter_lines(path), read_head(home), mark, jobs, witness)
        finally:
            os.close(fd)


def _verify(
    path: str,
    lines: Iterator[bytes],
    head: tuple[int, str] | None,
    mark: tuple[int, str] | None,
    jobs: int,
    witness: Witness | None,
) -> Report:
    report = Report(path)
    check = WitnessCheck(witness) if witness is not None else None
    flagged: set[int] = set()

    def problem(line: int, message: str) -> None:
        flagged.add(line)
        report.problems.append(Problem(line, message))

    prev_hash = GENESIS
    expected = 1
    last_seq = 0  # the highest seq so far: a line moved back does not rewind the count
    number = 0
    for number, line in enumerate(lines, start=1):
        entry = unseal(line)
        if entry is None:
            loose = parse_loose(line)
            if loose is None:
                problem(number, f"line {number} is not a whole audit entry (edited or cut short)")
            else:
                problem(number, f"line {number} was edited: its content does not match its own hash")
            seq = loose.get("seq") if loose else None
            last_seq = max(last_seq, seq if isinstance(seq, int) else expected)
        else:
            seq = entry.get("seq")
            if not isinstance(seq, int):
                problem(number, f"line {number} has no sequence number")
                seq = expected
            elif seq > expected:
                missing = seq - expected
                what = f"seq {expected}" if missing == 1 else f"seq {expected} to {seq - 1}"
                problem(number, f"line {number} has seq {seq} where {expected} was expected: {what} removed or moved")
            elif seq < expected:
                problem(number, f"line {number} has seq {seq} after seq {expected - 1}: lines reordered or repeated")
            elif entry.get("prev") != prev_hash and (number - 1) not in flagged:
                before = f"line {number - 1}" if number > 1 else "the start of the log"
                problem(
                    number,
                    f"line {number} does not follow {before} (its prev hash differs): "
                    f"{before} was changed, or lines between them were removed",
                )
            last_seq = max(last_seq, seq)
        prev_hash = sha256(line)
        if check is not None:
            check.line(number, seq if isinstance(seq, int) else expected, prev_hash)
        expected = last_seq + 1
    report.lines = number
    if mark is not None and (head is None or mark[0] > head[0]):
        if head is None and number:
            report.notes.append("audit.head is missing: the log's end is checked against relay's store instead")
        head = mark  # the store saw more entries written than the head records: the head was removed or rewound
    if head is None and number == 0 and jobs:
        problem(1, f"the log is missing but relay's store holds {jobs} job(s), each with entries: the log was removed")
    _check_head(head, report, number, last_seq, prev_hash, problem)
    if check is not None and witness is not None:
        found, notes = check.finish(number)
        for line, message in found:
            problem(line, message)
        report.notes += notes
        report.witness, report.witness_holds, report.witnessed_to = witness.name, witness.holds, check.matched_to
    return report


def _check_head(
    head: tuple[int, str] | None, report: Report, lines: int, last_seq: int, last_hash: str, problem: Any
) -> None:
    if head is None:
        if lines:
            report.notes.append("audit.head is missing: lines removed from the end cannot be detected")
        return
    seq, line_hash = head
    if lines == 0 and seq > 0:
        problem(1, f"the log is empty or missing but audit.head records {seq} lines: the log was removed")
    elif seq > last_seq:
        gone = seq - last_seq
        problem(
            lines + 1,
            f"the log ends at seq {last_seq} but audit.head records seq {seq}: "
            f"the last {gone} line{'s' if gone > 1 else ''} (from line {lines + 1}) were removed",
        )
    elif seq == last_seq and line_hash != last_hash and lines not in {p.line for p in report.problems}:
        problem(lines, f"line {lines} (the last) does not match audit.head: it was changed or replaced")
    elif seq < last_seq:
        report.notes.append(
            f"audit.head records seq {seq}, the log goes on to {last_seq} (a writer stopped between its append "
            "and the head update)"
        )
