"""Lookups that do not scan: id prefixes are a range on the primary key, lists walk an index newest first,
and a job list pages with a cursor that survives ties in creation time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, job_cursor
from relay.store import Store
from tests.reliability.conftest import AdvSettings


def fill(db_path: Path, n: int) -> list[tuple[float, str]]:
    db = sqlite3.connect(db_path)
    # Ten jobs share each creation time, so the order needs the id as tie-break.
    rows = [(f"{i * 7919 % 100_003:016x}", 1_000_000.0 + i // 10) for i in range(n)]
    with db:
        db.executemany(
            "INSERT INTO jobs (id, agent, kind, status, request, created_at) VALUES (?, 'claude', 'cli', 'completed',"
            ' \'{"prompt": "p"}\', ?)',
            rows,
        )
    db.close()
    return sorted(((t, i) for i, t in rows), reverse=True)


def test_a_job_list_pages_by_cursor_through_every_job_once_newest_first(adv_settings: AdvSettings) -> None:
    settings = adv_settings()
    engine = Engine(settings)
    expected = fill(settings.db_path, 1234)
    seen: list[tuple[float, str]] = []
    cursor: str | None = None
    while True:
        page = engine.list(limit=500, cursor=cursor)
        seen += [(r.created_at, r.id) for r in page]
        if len(page) < 500:
            break
        cursor = job_cursor(page[-1])
    assert seen == expected
    with pytest.raises(RelayError) as caught:
        engine.list(cursor="not-a-cursor")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_id_prefix_lookups_and_job_lists_use_indexes_not_scans(adv_settings: AdvSettings) -> None:
    settings = adv_settings()
    engine = Engine(settings)
    fill(settings.db_path, 50)
    db = sqlite3.connect(settings.db_path)
    plans = {
        "prefix": "SELECT * FROM jobs WHERE id >= 'ab' AND id < 'ab\U0010ffff' ORDER BY id LIMIT 5",
        "list": "SELECT * FROM jobs ORDER BY created_at DESC, id DESC LIMIT 500",
        "list_status": "SELECT * FROM jobs WHERE status IN ('completed') ORDER BY created_at DESC, id DESC LIMIT 500",
        "page": "SELECT * FROM jobs WHERE (created_at, id) < (1, 'a') ORDER BY created_at DESC, id DESC LIMIT 500",
    }
    for name, sql in plans.items():
        plan = " ".join(str(row[3]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "USING" in plan and "TEMP B-TREE" not in plan and plan != "SCAN jobs", (name, plan)
    db.execute(
        "INSERT INTO jobs (id, agent, kind, status, request, created_at) VALUES ('fedcba9876543210', 'claude', 'cli',"
        " 'queued', '{}', 1)"
    )
    db.commit()
    assert engine.get("fedcba").id == "fedcba9876543210"
    assert "m008_indexes" in engine.store.applied_migrations()


@pytest.mark.anyio
async def test_the_job_list_tool_pages_with_next_cursor_until_null(adv_settings: AdvSettings) -> None:
    from mcp import Client

    from relay.server.app import build_server

    settings = adv_settings()
    Store(settings.db_path).close()
    expected = fill(settings.db_path, 45)
    seen: list[str] = []
    cursors: list[str | None] = []
    async with Client(build_server(settings)) as client:
        args: dict[str, object] = {"limit": 20}
        while True:
            page = await client.call_tool("job_list", args)
            data = page.structured_content
            assert data is not None and not page.is_error, page
            seen += [j["job_id"] for j in data["jobs"]]
            cursors.append(data["next_cursor"])
            if data["next_cursor"] is None:
                break
            args = {"limit": 20, "cursor": data["next_cursor"]}
    assert seen == [job_id for _, job_id in expected]
    assert len(cursors) == 3 and cursors[-1] is None
