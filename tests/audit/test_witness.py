"""The audit witness: a rewrite of the log by relay's own rights (log, audit.head and the store's mark) is still found.

A real PostgreSQL with two roles: the database's owner makes the witness table (`relay audit witness-sql`)
and relay connects as a second role that may only INSERT and SELECT it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from relay.audit import HEAD_FILE, LOG_FILE, AuditLog, Witness, iter_lines, verify
from relay.audit.log import seal, sha256, unseal
from relay.cli.main import main
from relay.config import load_settings
from relay.doctor import audit_report
from relay.store import open_store
from relay.store.pg.store import audit_log_name
from relay.store.pg.witness import TABLE, status_at

ROLE = "relay_app"
ENTRIES = 7
REFUSED = 4  # the seq of the entry the attack drops


def as_role(url: str, role: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


@pytest.fixture
def relay_url(pg_url: str) -> Iterator[str]:
    """A database owned by `postgres`, and relay's own role in it: it may make its tables, nothing more."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}")
        conn.execute(f"CREATE ROLE {ROLE} LOGIN")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {ROLE}")
    yield as_role(pg_url, ROLE)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {ROLE}")  # a role belongs to the cluster: what it owns here goes first
        conn.execute(f"DROP ROLE {ROLE}")


def make_witness(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """What the operator does: print the SQL with `relay audit witness-sql` and run it as the database's owner."""
    capsys.readouterr()
    assert main(["audit", "witness-sql", "--role", ROLE]) == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(capsys.readouterr().out.encode())


def write_entries(url: str, home: Path) -> None:
    store = open_store(url, home=home)
    try:
        for n in range(1, ENTRIES + 1):
            event = "permission.refused" if n == REFUSED else ("queued" if n % 2 else "completed")
            assert store.audit.record(event, f"job{n:04d}", {"n": n})
    finally:
        store.close()  # writes the witness rows still pending


def drop_and_rechain(home: Path, url: str) -> None:
    """The attack, as relay's user and relay's role: drop the refusal, re-chain the rest, rewrite the head and mark."""
    entries = [unseal(line) for line in iter_lines(home / LOG_FILE)]
    kept = [e for e in entries if e is not None and e["seq"] != REFUSED]
    lines: list[bytes] = []
    prev = "0" * 64
    for seq, entry in enumerate(kept, start=1):
        body = {k: v for k, v in entry.items() if k != "hash"} | {"seq": seq, "prev": prev}
        lines.append(seal(body))
        prev = sha256(lines[-1])
    (home / LOG_FILE).write_bytes(b"".join(line + b"\n" for line in lines))
    (home / HEAD_FILE).write_text(json.dumps({"seq": len(lines), "hash": prev}) + "\n")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE audit_mark SET seq=%s, hash=%s WHERE log=%s", (len(lines), prev, audit_log_name(home)))


def test_a_log_rewritten_with_its_head_and_mark_by_relays_own_role_is_found_against_the_witness(
    pg_url: str, relay_url: str, relay_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_witness(pg_url, capsys)
    write_entries(relay_url, relay_home)
    assert main(["audit", "verify", "--store", relay_url]) == 0
    out = capsys.readouterr().out
    assert f"audit log intact: {ENTRIES} lines" in out
    assert f"checked against {TABLE}" in out and f"up to seq {ENTRIES}" in out

    drop_and_rechain(relay_home, relay_url)
    with psycopg.connect(relay_url, autocommit=True) as conn:
        for attempt in (
            f"UPDATE {TABLE} SET hash='x'",
            f"DELETE FROM {TABLE}",
            f"TRUNCATE {TABLE}",
            f"DROP TABLE {TABLE}",
            f"INSERT INTO {TABLE} (log, seq, hash, at) VALUES ('x', 1, 'x', 0)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(attempt.encode())
    assert verify(relay_home).ok  # the chain, head and mark alone: the rewrite passes

    assert main(["audit", "verify", "--store", relay_url]) == 1
    out = capsys.readouterr().out
    assert "audit log BROKEN" in out
    assert f"line {REFUSED}: line {REFUSED} (seq {REFUSED}) is not the entry the witness recorded" in out
    assert main(["audit", "verify", "--json", "--store", relay_url]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [p["line"] for p in report["problems"]] == [REFUSED, ENTRIES]  # the first change, and the cut end
    assert report["witness"] == {"name": report["witness"]["name"], "holds": True, "witnessed_to": REFUSED - 1}


def test_a_row_added_to_the_witness_by_relays_role_to_match_a_forged_line_is_found(
    pg_url: str, relay_url: str, relay_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_witness(pg_url, capsys)
    write_entries(relay_url, relay_home)
    lines = list(iter_lines(relay_home / LOG_FILE))
    forged = unseal(lines[-1])
    assert forged is not None
    forged = {k: v for k, v in forged.items() if k != "hash"} | {"event": "completed"}
    lines[-1] = seal(forged)
    (relay_home / LOG_FILE).write_bytes(b"".join(line + b"\n" for line in lines))
    (relay_home / HEAD_FILE).write_text(json.dumps({"seq": ENTRIES, "hash": sha256(lines[-1])}) + "\n")
    with psycopg.connect(relay_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {TABLE} (log, seq, hash) VALUES (%s, %s, %s)".encode(),
            (audit_log_name(relay_home), ENTRIES, sha256(lines[-1])),
        )
    assert main(["audit", "verify", "--json", "--store", relay_url]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [p["line"] for p in report["problems"]] == [ENTRIES]
    assert "more than one entry for seq 7" in report["problems"][0]["message"]


def test_entries_written_after_the_last_witness_row_are_named_as_vouched_for_by_the_chain_alone(
    pg_url: str, relay_url: str, relay_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_witness(pg_url, capsys)
    write_entries(relay_url, relay_home)
    AuditLog(relay_home).append("queued", "later", {})  # a process without the store: no witness row
    assert main(["audit", "verify", "--store", relay_url]) == 0
    out = capsys.readouterr().out
    assert f"note: seq {ENTRIES + 1} at the log's end has no witness row" in out
    assert f"up to seq {ENTRIES}" in out


@pytest.mark.parametrize(
    ("grant", "power"),
    [
        ("GRANT UPDATE ON {table} TO {role}", "UPDATE it"),
        ("GRANT DELETE ON {table} TO {role}", "DELETE from it"),
        ("ALTER TABLE {table} OWNER TO {role}", "owns it"),
        ("ALTER ROLE {role} CREATEROLE", "may create roles"),
    ],
)
def test_a_witness_relays_role_could_rewrite_is_reported_as_not_holding(
    pg_url: str,
    relay_url: str,
    relay_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    grant: str,
    power: str,
) -> None:
    make_witness(pg_url, capsys)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(grant.format(table=TABLE, role=ROLE).encode())
    status = status_at(relay_url)
    assert status.present and not status.holds
    assert any(p.startswith(power) for p in status.powers)
    monkeypatch.setenv("RELAY_STORE", relay_url)
    line, ok = audit_report(load_settings())
    assert not ok and "does NOT hold" in line and power in line
    write_entries(relay_url, relay_home)
    assert main(["audit", "verify", "--store", relay_url]) == 0
    out = capsys.readouterr().out
    assert "note: the witness does not hold" in out
    assert "witness: " in out and "does NOT hold" in out


def test_without_a_witness_doctor_says_what_a_local_rewrite_can_and_cannot_be_caught(
    relay_url: str, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    line, ok = audit_report(load_settings())  # SQLite: relay.db is relay's user's
    assert ok
    assert line.startswith("audit: the local chain detects edits by anything but a process running as ")
    assert "not detectable without a witness" in line
    monkeypatch.setenv("RELAY_STORE", relay_url)  # PostgreSQL without the witness table
    line, ok = audit_report(load_settings())
    assert ok
    assert f"no witness table {TABLE}" in line and "not detectable" in line


def test_witness_rows_are_checked_in_order_against_the_lines_of_the_log(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    for n in range(3):
        log.append("queued", f"j{n}", {})
    hashes = [sha256(line) for line in iter_lines(tmp_path / LOG_FILE)]
    rows = [(1, hashes[0]), (2, hashes[1]), (3, hashes[2])]
    report = verify(tmp_path, witness=Witness("w", rows))
    assert (report.ok, report.witnessed_to, report.notes) == (True, 3, [])
    report = verify(tmp_path, witness=Witness("w", [*rows, (4, "f" * 64)]))
    assert [p.line for p in report.problems] == [4] and "up to seq 4" in report.problems[0].message
