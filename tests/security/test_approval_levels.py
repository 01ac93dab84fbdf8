"""What an ACP agent's permission request needs: an edit is `edit` only inside the job's folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from relay.jobs.approvals import request_from, within_grant
from relay.store import JobRecord
from tests.server.test_job_send import RUNNING


def _job(cwd: Path, permission: str = "edit") -> JobRecord:
    request = {"protocol": "acp", "cwd": str(cwd), "permission": permission}
    return JobRecord(**{**RUNNING, "cwd": str(cwd), "request_json": json.dumps(request)})


def _asks(kind: str, *paths: str) -> dict[str, Any]:
    call = {"title": f"{kind} a file", "kind": kind, "locations": [{"path": p} for p in paths]}
    return {"id": 1, "toolCall": call, "options": [{"kind": "allow_once", "optionId": "allow"}]}


def test_an_edit_outside_the_jobs_folder_needs_full_and_is_not_allowed_by_an_edit_jobs_grant(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = str(Path.home() / ".bashrc")
    for paths in ((outside,), (str(work / "a.txt"), outside), ("../escape.txt",)):
        request = request_from(_job(work), _asks("edit", *paths))
        assert request is not None and request.level == "full", paths
        assert not within_grant(request)


def test_an_edit_through_a_symlink_in_the_folder_that_leads_out_needs_full(tmp_path: Path) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, work / "link")
    request = request_from(_job(work), _asks("delete", str(work / "link" / "x.txt")))
    assert request is not None and request.level == "full" and not within_grant(request)


def test_an_edit_inside_the_jobs_folder_stays_within_an_edit_jobs_grant(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    for paths in ((str(work / "src" / "a.py"),), ("src/b.py",), ()):
        request = request_from(_job(work), _asks("edit", *paths))
        assert request is not None and request.level == "edit" and within_grant(request), paths


def test_a_read_outside_the_jobs_folder_needs_full_so_a_read_only_job_cannot_read_relays_database_unasked(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    relay_db = str(tmp_path / "home" / "relay.db")
    request = request_from(_job(work, "read-only"), _asks("read", relay_db))
    assert request is not None and request.level == "full" and not within_grant(request)
    inside = request_from(_job(work, "read-only"), _asks("read", str(work / "README.md")))
    assert inside is not None and inside.level == "read-only" and within_grant(inside)


def test_an_accept_allows_once_only_so_an_agent_offering_only_allow_always_is_not_allowed_for_good(
    tmp_path: Path,
) -> None:
    always = _asks("execute") | {"options": [{"kind": "allow_always", "optionId": "always"}]}
    request = request_from(_job(tmp_path), always)
    assert request is not None and request.allow is None  # the person's accept, "allow this once", cannot be given
