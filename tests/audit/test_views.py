"""IAC.md and CONTEXT.md: seed 004's views, rendered from the audit log only, written whole or not at all."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest

from relay.audit import CONTEXT_FILE, IAC_FILE, AuditLog, Views, ViewsConfig, open_audit, views_config
from relay.audit.views import ViewState, render_context, render_iac
from relay.jobs.engine import Engine, JobRequest
from tests.conftest import SettingsFactory

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


def job_events(log: AuditLog, job_id: str, prompt: str, **final: object) -> None:
    log.append("queued", job_id, {"agent": "claude", "model": "sonnet", "prompt": prompt, "prompt_chars": len(prompt)})
    log.append("running", job_id, {"pid": 1})
    if final:
        log.append(str(final.pop("status")), job_id, dict(final))


def fixed_ts(home: Path, times: dict[int, float]) -> ViewState:
    """The log folded with chosen timestamps (seq -> ts), so the rendered text can be compared whole."""
    from relay.audit import LOG_FILE, iter_lines, parse_loose
    from relay.audit.log import seal

    lines = []
    for line in iter_lines(home / LOG_FILE):
        entry = parse_loose(line)
        assert entry is not None
        entry.pop("hash")
        entry["ts"] = times.get(int(entry["seq"]), entry["ts"])
        lines.append(seal(entry))
    state = ViewState()
    for line in lines:
        state.fold_line(line)
    return state


def test_iac_shows_seed_004_entries_newest_first(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    job_events(
        log,
        "aaaaaaaa00000001",
        "Review the parser for off-by-one errors in the line splitting code please",
        status="completed",
        cost_usd=0.0123,
        output="Looks fine.",
        output_chars=11,
        tools=["Read", "Grep"],
    )
    job_events(
        log,
        "bbbbbbbb00000002",
        "Run ```the tests```",
        status="failed",
        error={"code": "AGENT_FAILED", "message": "claude exited with 1"},
        output="",
        output_chars=0,
    )
    job_events(log, "cccccccc00000003", "Still working")
    state = fixed_ts(tmp_path, {1: T0, 2: T0 + 1, 3: T0 + 13.5, 4: T0 + 60, 5: T0 + 61, 6: T0 + 63, 7: T0 + 120})
    text = render_iac(list(state.entries.values()))
    expected = "\n".join(
        [
            "# Inter-Agent Communication Log",
            "",
            "> Newest entries first. Limited to last 15 entries. Rendered by relay from its audit log "
            "(`relay audit verify` checks it); edits here are overwritten.",
            "",
            "### 🤖 Still working",
            "- [ ] ⏳ **Running** | `#cccccccc` | claude (sonnet) | 00:02:00 UTC | Tools: None",
            "",
            "<details>",
            "<summary>📥 Input (13 chars)</summary>",
            "",
            "```",
            "Still working",
            "```",
            "",
            "</details>",
            "",
            "<!-- RESULT_cccccccc -->",
            "",
            "---",
            "",
            "### 🤖 Run ```the tests```",
            "- [x] ❌ **Failed**: claude exited with 1 (2.0s) | `#bbbbbbbb` | claude (sonnet) | 00:01:00 UTC | Tools: None",
            "",
            "<details>",
            "<summary>📥 Input (19 chars)</summary>",
            "",
            "````",
            "Run ```the tests```",
            "````",
            "",
            "</details>",
            "",
            "<details>",
            "<summary>📤 Output (0 chars)</summary>",
            "",
            "```",
            "",
            "```",
            "",
            "</details>",
            "",
            "---",
            "",
            "### 🤖 Review the parser for off-by-one errors in the lin...",
            "- [x] ✅ **Done** (12.5s, $0.0123) | `#aaaaaaaa` | claude (sonnet) | 00:00:00 UTC | Tools: Read, Grep",
            "",
            "<details>",
            "<summary>📥 Input (73 chars)</summary>",
            "",
            "```",
            "Review the parser for off-by-one errors in the line splitting code please",
            "```",
            "",
            "</details>",
            "",
            "<details>",
            "<summary>📤 Output (11 chars)</summary>",
            "",
            "```",
            "Looks fine.",
            "```",
            "",
            "</details>",
            "",
            "---",
            "",
        ]
    )
    assert text == expected


def test_context_lists_the_active_agents_only(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    job_events(log, "aaaaaaaa00000001", "done already", status="completed", output="x")
    job_events(log, "bbbbbbbb00000002", "a | piped task")
    log.append("queued", "cccccccc00000003", {"agent": "codex", "model": None, "prompt": "waiting"})
    state = fixed_ts(tmp_path, {4: T0, 6: T0 + 5})
    assert render_context(list(state.entries.values()), T0 + 30) == "\n".join(
        [
            "# Agent Context",
            "",
            "Last Updated: 2026-01-01 00:00:30 UTC",
            "",
            "## Active Agents",
            "",
            "| ID | Agent | Task | Started |",
            "|----|-------|------|---------|",
            "| `bbbbbbbb` | claude (sonnet) | a \\| piped task | 00:00:00 UTC |",
            "| `cccccccc` | codex (default) | waiting | 00:00:05 UTC |",
            "",
            "## Notes",
            "",
            "Queued and running jobs only; see IAC.md for history.",
            "",
        ]
    )
    assert "| - | - | No active agents | - |" in render_context([], T0)


def test_iac_keeps_the_newest_fifteen_and_long_outputs_keep_both_ends(tmp_path: Path) -> None:
    from relay.audit import bounded

    log = AuditLog(tmp_path)
    for n in range(17):
        job_events(log, f"{n:08x}00000000", f"task {n}", status="completed", output=f"answer {n}")
    views = Views(tmp_path, ViewsConfig(tmp_path))
    views.render()
    text = (tmp_path / IAC_FILE).read_text()
    shown = [line for line in text.splitlines() if line.startswith("### 🤖 ")]
    assert shown == [f"### 🤖 task {n}" for n in range(16, 1, -1)]
    long = "a" * 30_000 + "b" * 30_000
    kept = bounded(long)
    assert kept.startswith("a" * 25_000 + "\n\n[... 10000 characters omitted ...]\n\n") and kept.endswith("b" * 25_000)
    assert bounded("short") == "short"


def test_a_crash_mid_render_leaves_the_previous_views_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = AuditLog(tmp_path)
    job_events(log, "aaaaaaaa00000001", "first", status="completed", output="one")
    views = Views(tmp_path, ViewsConfig(tmp_path))
    views.render()
    before = (tmp_path / IAC_FILE).read_text()
    job_events(log, "bbbbbbbb00000002", "second")

    def crash(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        views.render()
    monkeypatch.undo()
    assert (tmp_path / IAC_FILE).read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
    views.render()
    assert "### 🤖 second" in (tmp_path / IAC_FILE).read_text()


def test_views_go_where_config_says(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert views_config(home, environ={}) == ViewsConfig(home, 15)
    (home / "config.toml").write_text(f'[audit]\nviews_dir = "{tmp_path / "project"}"\niac_entries = 50\n')
    assert views_config(home, environ={}) == ViewsConfig(tmp_path / "project", 50)
    (home / "config.toml").write_text('[audit]\nviews_dir = "workspace"\n')
    assert views_config(home, cwd=tmp_path, environ={}) == ViewsConfig(tmp_path, 15)
    assert views_config(home, environ={"RELAY_AUDIT_VIEWS_DIR": str(tmp_path / "mine")}).out_dir == tmp_path / "mine"
    (home / "config.toml").write_text('[audit]\nviews_dir = ""\n')
    assert views_config(home, environ={}).out_dir is None
    other = tmp_path / "other.toml"
    other.write_text("[audit]\niac_entries = 3\n")
    assert views_config(home, environ={"RELAY_CONFIG": str(other)}) == ViewsConfig(home, 3)


@pytest.mark.anyio
async def test_jobs_render_the_views_in_the_background(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="render me", cwd=str(workdir)))
        with anyio.fail_after(60):
            await engine.wait_one(job_id, 60)
        views = engine.store.audit.views
        assert views is not None
        assert await anyio.to_thread.run_sync(views.wait_idle, 60)
    iac = (relay_home / IAC_FILE).read_text()
    assert "### 🤖 render me" in iac
    assert "- [x] ✅ **Done** (" in iac and f"`#{job_id[:8]}` | claude (" in iac
    assert "No active agents" in (relay_home / CONTEXT_FILE).read_text()


def test_open_audit_without_views_renders_nothing(tmp_path: Path) -> None:
    log = open_audit(tmp_path, views=False)
    job_events(log, "aaaaaaaa00000001", "x", status="completed")
    assert not (tmp_path / IAC_FILE).exists()


def test_a_render_due_after_its_home_was_removed_makes_nothing_again(tmp_path: Path) -> None:
    # A relay's home removed while a render was still due (a stopped relay's folder deleted, a test's or a
    # benchmark's temporary home): the render does not make the folder again to leave its views and lock there.
    home = tmp_path / "home"
    log = AuditLog(home)
    job_events(log, "aaaaaaaa00000001", "first", status="completed", output="one")
    views = Views(home, ViewsConfig(home))
    views.schedule()
    shutil.rmtree(home)
    assert views.wait_idle(10)
    views.render()
    assert not home.exists()
