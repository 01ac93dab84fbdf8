"""The dashboard's jobs list and costs page give the same answers on relay.db and on a PostgreSQL store.

The same jobs are written through each store's API (their creation times set afterwards, so the order
and the days are known), then read through the dashboard's queries, its views and its pages.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from starlette.testclient import TestClient

from relay.config import Settings
from relay.store import JobStore, WorkerInfo, open_store
from relay.web import build_app
from relay.web._queries import CostRow
from relay.web.views import PAGE_SIZE, JobFilter, Sources, costs, jobs_page
from tests.conftest import SettingsFactory
from tests.web.conftest import BASE_URL, HTML

BACKENDS = ("sqlite", "postgresql")
ZONE = "America/New_York"  # daylight saving time began on 2026-03-08 at 02:00 local


@dataclass
class Backend:
    name: str
    settings: Settings
    store: JobStore  # another front's store: the writer

    def execute(self, sql: str, params: tuple[Any, ...]) -> None:
        """Change rows behind the store's back (a test's way to set a creation time or a claim)."""
        target = self.settings.store_target
        if self.name == "sqlite":
            with closing(sqlite3.connect(str(target))) as db, db:
                db.execute(sql, params)
        else:
            with psycopg.connect(str(target), autocommit=True) as conn:
                conn.execute(sql.replace("?", "%s").encode(), params)

    def job(
        self,
        job_id: str,
        created_at: float,
        *,
        agent: str = "claude",
        prompt: str = "a job",
        status: str = "completed",
        model: str | None = None,
        cwd: str = "/work/app",
        via: str = "cli/run",
        principal: str = "local",
        result: dict[str, Any] | None = None,
    ) -> None:
        request = {"prompt": prompt, "via": via}
        self.store.insert_job(job_id, agent, "cli", request, model, cwd, principal=principal)
        if status != "queued":
            self.store.finish_job(job_id, status, exit_code=0, result=result, error=None, session_id=None, model=model)
        self.execute("UPDATE jobs SET created_at=? WHERE id=?", (created_at, job_id))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, make_settings: SettingsFactory) -> Iterator[Backend]:
    if request.param == "sqlite":
        settings = make_settings()
    else:
        settings = make_settings(RELAY_STORE=request.getfixturevalue("pg_url"))
    store = open_store(settings.store_target, home=settings.home)
    yield Backend(request.param, settings, store)
    store.close()


@pytest.fixture
def sources(backend: Backend) -> Iterator[Sources]:
    found = Sources(backend.settings)
    # the dashboard reads the store the jobs are in: relay.db, or the PostgreSQL database
    assert type(found.queries()).__name__ == {"sqlite": "JobQueries", "postgresql": "PgJobQueries"}[backend.name]
    yield found
    found.close()


@pytest.fixture
def new_york() -> Iterator[None]:
    """This process in New York's time zone (the dashboard's days are the server's local days)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", ZONE)
        time.tzset()
        yield
    time.tzset()


def ids(sources: Sources, *, page: int = 1, **filters: Any) -> list[str]:
    flt = JobFilter(**filters)
    return [r["id"] for r in jobs_page(sources.engine(), sources.queries(), flt, page)["rows"]]


def test_the_jobs_list_filters_searches_and_pages_alike_on_sqlite_and_postgresql(
    backend: Backend, sources: Sources
) -> None:
    base = time.time() - 3600
    backend.job("j1", base + 1, prompt="fix the parser", model="sonnet", cwd="/src/alpha", result={"cost_usd": 0.5})
    backend.job("j2", base + 2, agent="codex", prompt="100% sure_thing", status="failed", model="gpt-5", via="mcp/x")
    backend.job("j3", base + 3, prompt="Fix THE docs", status="cancelled", principal="alice")
    backend.job("j4", base + 4, prompt="a\\b path", status="queued")
    backend.job("j5", base + 5, prompt="1000 files", principal="alice")  # no match for 100%
    backend.job("j6", base + 6, prompt="surexthing")  # no match for sure_thing
    bulk = [f"b{i:02d}" for i in range(PAGE_SIZE)]
    for i, job_id in enumerate(bulk):
        backend.job(job_id, base - 100 + i, agent="api", prompt=f"bulk {i}")
    backend.execute("UPDATE jobs SET worker=? WHERE id=?", ("w-1", "j3"))
    backend.store.register_worker(WorkerInfo("w-1", "host-a", "host-a.lan", 4242, None, None, None, (), 2, 15.0))

    newest = ["j6", "j5", "j4", "j3", "j2", "j1", *reversed(bulk)]
    assert ids(sources) == newest[:PAGE_SIZE]
    assert ids(sources, page=2) == newest[PAGE_SIZE:]
    assert ids(sources, statuses=("failed",)) == ["j2"]
    assert ids(sources, statuses=("completed", "failed"), agent="claude") == ["j6", "j5", "j1"]
    assert ids(sources, agent="codex") == ["j2"]
    assert ids(sources, text="fix") == ["j3", "j1"]  # the prompt, ignoring case
    assert ids(sources, text="100%") == ["j2"]  # % and _ are matched as themselves
    assert ids(sources, text="sure_thing") == ["j2"]
    assert ids(sources, text="a\\b") == ["j4"]
    assert ids(sources, text="mcp/") == ["j2"]  # where the job came from
    assert ids(sources, text="gpt-5") == ["j2"]  # its model
    assert ids(sources, text="/src/alp") == ["j1"]  # its folder
    assert ids(sources, text="j4") == ["j4"]  # its id
    assert ids(sources, principal="alice") == ["j5", "j3"]
    assert ids(sources, worker="w-1") == ["j3"]
    worker = sources.queries().worker("w-1")
    assert worker is not None and (worker.name, worker.host, worker.pid, worker.state) == (
        "host-a",
        "host-a.lan",
        4242,
        "running",
    )
    assert sources.queries().worker("w-gone") is None

    with TestClient(build_app(backend.settings), base_url=BASE_URL) as client:
        page = client.get("/jobs?q=FIX", headers=HTML)
        assert page.status_code == 200
        body = page.text.split("<tbody>")[1].split("</tbody>")[0]
        assert "job-j3" in body and "job-j1" in body and "job-j2" not in body
        second = client.get("/jobs?page=2", headers=HTML).text
        assert f"job-{bulk[0]}" in second and "job-j6" not in second


def test_costs_are_summed_per_local_day_across_a_daylight_saving_change_alike_on_sqlite_and_postgresql(
    backend: Backend, sources: Sources, new_york: None
) -> None:
    def at(*when: int) -> float:
        return datetime(*when, tzinfo=ZoneInfo(ZONE)).timestamp()  # type: ignore[misc]

    usage = {"input": 10, "output": 5, "cached": 2}
    backend.job("c1", at(2026, 3, 7, 23, 30), model="sonnet", result={"cost_usd": 0.5, "usage": usage})  # 04:30 UTC
    backend.job("c2", at(2026, 3, 8, 0, 30), model="sonnet", result={"cost_usd": 0.25, "usage": usage})
    backend.job("c3", at(2026, 3, 8, 23, 45), model="sonnet", result={"cost_usd": 0.125})  # 03:45 UTC on the 9th
    backend.job("c4", at(2026, 3, 8, 12, 0), status="queued")
    backend.job("c5", at(2026, 3, 9, 0, 30), agent="codex", result={"cost_usd": 1.0, "usage": {"input": 7}})
    backend.job("c6", at(2026, 3, 9, 0, 40), agent="codex", result={"cost_usd": "unknown"})  # not a number: 0
    backend.job("c0", at(2026, 3, 1, 12, 0), model="sonnet", result={"cost_usd": 9.0})  # before `since`

    found = sources.queries().costs(at(2026, 3, 7, 0, 0))
    assert found == [
        CostRow("2026-03-07", "claude", "sonnet", 1, 0.5, 10, 5, 2),
        CostRow("2026-03-08", "claude", None, 1, None, 0, 0, 0),  # a queued job has no cost: unknown, not $0
        CostRow("2026-03-08", "claude", "sonnet", 2, 0.375, 10, 5, 2),
        CostRow("2026-03-09", "codex", None, 2, 1.0, 7, 0, 0),
    ]
    assert sources.queries().costliest(at(2026, 3, 7, 0, 0), 3) == [
        ("c5", "codex", 1.0),
        ("c1", "claude", 0.5),
        ("c2", "claude", 0.25),
    ]


def test_the_costs_page_sums_todays_jobs_alike_on_sqlite_and_postgresql(backend: Backend, sources: Sources) -> None:
    now = time.time()
    usage = {"input": 10, "output": 5, "cached": 0}
    backend.job("t1", now - 5, model="sonnet", result={"cost_usd": 0.0002, "usage": usage})
    backend.job("t2", now - 4, model="sonnet", result={"cost_usd": 0.0003, "usage": usage})
    view = costs(sources.engine(), sources.queries(), backend.settings)
    assert view["series"] == ["claude · sonnet"]
    assert view["totals"][0] | {"cost_usd": round(view["totals"][0]["cost_usd"], 6)} == {
        "key": "claude · sonnet",
        "jobs": 2,
        "cost_usd": 0.0005,
        "input": 20,
        "output": 10,
        "cached": 0,
    }
    today = time.strftime("%Y-%m-%d", time.localtime(now))
    assert view["days"][-1] == today and round(view["by_day"][today]["claude · sonnet"], 6) == 0.0005
    assert [j["id"] for j in view["caps"]["jobs"]] == ["t2", "t1"]
    with TestClient(build_app(backend.settings), base_url=BASE_URL) as client:
        page = client.get("/costs", headers=HTML)
    assert page.status_code == 200 and "$0.0005" in page.text
