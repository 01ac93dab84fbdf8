"""best_of over MCP: three agents (the fake CLIs) in three worktrees, each tested, reviewed by a mock model, one landed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.workflows.best_of import candidates_of, parse_ranking
from tests.api.mock_servers import Reply
from tests.workflows.conftest import SettingsFactory, SlowMock, call, request_text, zen_client
from tests.workspaces.conftest import git, one_commit_repo

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(workdir: Path) -> Path:
    one_commit_repo(workdir)
    return workdir


async def test_best_of_three_agents_ranks_tested_candidates_by_the_review_and_one_lands(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, repo: Path
) -> None:
    review = "Candidate 3 is the cleanest.\n" + json.dumps({"ranking": [3, 1, 2], "reasons": {}})
    anthropic_mock.script(Reply(text=review))
    # The test command is the person's (config.toml): a caller's own would be a `full` action, asked about.
    test_command = '[workspaces]\ntest_command = "grep -q 42 answer.txt"\n'
    settings = zen_settings(test_command, RELAY_PROFILE="", RELAY_TOOLSETS="core,gateway,workspaces")
    async with zen_client(settings) as client:
        failed, env = await call(
            client,
            "best_of",
            {
                "prompt": "Write the answer [[fake:write=answer.txt~42\\n]]",
                "agents": ["claude", "codex", "gemini"],
                "cwd": str(repo),
                "test_command": "grep -q 42 answer.txt",
                "review_model": "anthropic:claude-sonnet-4-5",
                "mode": "sync",
            },
            timeout=90,
        )
        assert not failed, env
        found = json.loads(env["output"])
        cands = found["candidates"]
        assert [c["agent"] for c in cands] == ["gemini", "claude", "codex"]  # the review's order, all passing
        assert [c["rank"] for c in cands] == [1, 2, 3]
        assert all(c["test"]["passed"] and c["files_changed"] == ["answer.txt"] for c in cands)
        assert all(c["branch"] == f"relay/{c['job_id']}" for c in cands)
        assert found["best"] == cands[0]["job_id"] and found["review"]["ranking"] == [c["job_id"] for c in cands]
        sent = request_text(anthropic_mock.requests[-1])
        assert all(c["job_id"] in sent for c in cands) and "+42" in sent
        failed, landed = await call(client, "job_land", {"job_id": found["best"]})
        assert not failed, landed
        assert landed["landed"] is True and landed["into"] == "main"
        failed, gone = await call(client, "job_discard", {"job_id": cands[1]["job_id"]})
        assert not failed and gone["discarded"] is True
    assert (repo / "answer.txt").read_text() == "42\n"
    assert git(repo, "rev-parse", "main") == landed["new"]
    # The dashboard shows the run's candidates side by side, ranked, with their tests and the review.
    from starlette.testclient import TestClient

    from relay.web import Access, build_app

    with TestClient(build_app(settings, access=Access()), base_url="http://127.0.0.1:8766") as web:
        page = web.get(f"/jobs/{env['job_id']}", headers={"accept": "text/html"}).text
    rows = [page.index(f'id="cand-{c["job_id"]}"') for c in cands]
    assert rows == sorted(rows) and page.count('<span class="add">passed</span>') == 3
    assert "Candidate 3 is the cleanest." in page


async def test_a_land_conflict_over_mcp_is_an_error_result_naming_the_file(
    zen_settings: SettingsFactory, repo: Path
) -> None:
    settings = zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,workspaces")
    async with zen_client(settings) as client:
        jobs: list[str] = []
        for text in ("A", "B"):
            failed, env = await call(
                client,
                "delegate",
                {
                    "prompt": f"edit [[fake:write=app.txt~{text}]]",
                    "cwd": str(repo),
                    "workspace": "worktree",
                    "mode": "sync",
                },
            )
            assert not failed and env["workspace"]["files_changed"] == ["app.txt"], env
            assert "job_land" in env["next"]
            jobs.append(env["job_id"])
        failed, first = await call(client, "job_land", {"job_id": jobs[0]})
        assert not failed and first["landed"]
        before = git(repo, "rev-parse", "main")
        failed, second = await call(client, "job_land", {"job_id": jobs[1], "strategy": "merge"})
        failed_diff, page = await call(client, "job_result", {"job_id": jobs[1], "view": "diff"})
    assert failed and second["landed"] is False and second["conflicts"] == ["app.txt"]
    assert second["error"]["code"] == "LAND_CONFLICT" and git(repo, "rev-parse", "main") == before
    assert not failed_diff and "+B" in page["text"]


def test_candidates_and_the_reviewers_ranking_are_read_as_a_person_would_mean_them() -> None:
    assert candidates_of(["codex", "claude"], None) == ("codex", "claude")
    assert candidates_of(["codex"], 3) == ("codex", "codex", "codex")
    assert candidates_of(None, 2) == ("claude", "claude")
    with pytest.raises(Exception, match="2 to 8"):
        candidates_of(["codex"], None)
    assert parse_ranking('text {"a": 1}\n{"ranking": ["x"], "reasons": {}}') == {"ranking": ["x"], "reasons": {}}
    assert parse_ranking("no json here") == {}


async def test_best_of_at_full_asks_the_person_once_for_every_agent_before_any_candidate_starts(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, repo: Path, relay_home: Path
) -> None:
    from mcp import Client
    from mcp.client.context import ClientRequestContext
    from mcp.types import ElicitRequestParams, ElicitResult, ErrorData

    from relay.server.app import build_server

    asked: list[str] = []

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        asked.append(params.message)
        return ElicitResult(action="accept" if len(asked) > 1 else "decline", content={"for_session": False})

    anthropic_mock.script(Reply(text=json.dumps({"ranking": [1, 2], "reasons": {}})))
    settings = zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,gateway,workspaces")
    args = {
        "prompt": "Write it [[fake:write=answer.txt~42\\n]]",
        "agents": ["claude", "codex"],
        "cwd": str(repo),
        "review_model": "anthropic:claude-sonnet-4-5",
        "permission": "full",
        "mode": "sync",
    }
    async with Client(build_server(settings), elicitation_callback=person, mode="legacy") as client:
        refused, body = await call(client, "best_of", args)
        _, listed = await call(client, "job_list", {})
        assert refused and body["error"]["code"] == "PERMISSION_NOT_GRANTED" and listed["jobs"] == []
        failed, env = await call(client, "best_of", args, timeout=90)
    assert not failed, env
    assert len(asked) == 2 and "run claude, codex with permission 'full'" in asked[1]
    cands = json.loads(env["output"])["candidates"]
    assert sorted(c["agent"] for c in cands) == ["claude", "codex"] and all(c["status"] == "completed" for c in cands)
    from relay.audit import LOG_FILE, iter_lines, parse_loose

    entries = [e for e in map(parse_loose, iter_lines(relay_home / LOG_FILE)) if e is not None]
    grants = {e["job_id"]: e["data"].get("grant") for e in entries if e["event"] == "queued"}
    assert {grants[c["job_id"]]["permission"] for c in cands} == {"full"}
    assert {grants[c["job_id"]]["by"] for c in cands} == {"confirmation"}
    assert [e["data"]["answer"] for e in entries if e["event"] == "permission.refused"] == ["decline"]
