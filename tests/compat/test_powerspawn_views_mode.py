"""Profile `powerspawn`: IAC.md and CONTEXT.md in the project folder hold prompts, so they are relay's user's alone,
and on a relay serving `user` tokens they hold no token's prompts."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from relay.audit import CONTEXT_FILE, IAC_FILE, AuditLog, queued_data
from relay.server.toolsets._registry import Deps
from relay.server.toolsets.powerspawn import on_start, workspace
from tests.compat.conftest import ProfileClient, call, data
from tests.conftest import SettingsFactory

TOKENS = """
[server.tokens.alice]
token = "alice-token-0123456789abcdef"
role = "user"

[server.tokens.root]
token = "root-token-0123456789abcdef"
role = "admin"
"""
# How long the views' worker thread may take to render (half a second after a change, on a busy machine).
RENDER_WAIT_S = 30


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most systems run with (022): a file created without a mode of its own is world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.anyio
async def test_iac_and_context_in_the_workspace_are_readable_by_relays_user_only(
    profile_client: ProfileClient, workdir: Path, usual_umask: None
) -> None:
    (workdir / IAC_FILE).write_text("an older relay's view\n")
    os.chmod(workdir / IAC_FILE, 0o644)
    async with profile_client(toolsets="core,powerspawn") as c:
        agent = data(await call(c, "spawn_codex", prompt="a private prompt [[fake:echo]]"))["agent_id"]
        await call(c, "wait_for_agents", timeout=60)
        with anyio.fail_after(RENDER_WAIT_S):
            while agent not in (workdir / IAC_FILE).read_text():
                await anyio.sleep(0.05)
    assert "a private prompt" in (workdir / IAC_FILE).read_text()
    assert (mode(workdir / IAC_FILE), mode(workdir / CONTEXT_FILE)) == (0o600, 0o600)


def start_views(settings: Any, home: Path) -> tuple[AuditLog, Path]:
    """powerspawn's start (its views in the workspace) on an audit log of `home`; the log and the workspace."""
    log = AuditLog(home)
    engine = SimpleNamespace(store=SimpleNamespace(audit=log, list_jobs=lambda **_: []))
    on_start(engine, Deps(settings, lambda: engine, 0.0))  # pyright: ignore[reportArgumentType]
    for who in ("alice", "local", "root"):
        job = queued_data("codex", "cli", {"prompt": f"the prompt of {who}"}, None, "/w") | {"principal": who}
        assert log.record("queued", f"job-{who}", job)
    assert log.views is not None
    log.views.render()
    assert log.views.wait_idle(RENDER_WAIT_S)
    return log, Path(workspace(settings))


def test_on_a_relay_serving_user_tokens_the_workspace_views_hold_only_the_local_persons_jobs(
    make_settings: SettingsFactory, relay_home: Path, tmp_path: Path
) -> None:
    for tokens, home, shown in ((TOKENS, relay_home, ["local"]), ("", tmp_path / "home", ["alice", "local", "root"])):
        _, where = start_views(make_settings(tokens, RELAY_HOME=str(home)), home)
        for name in (IAC_FILE, CONTEXT_FILE):
            text = (where / name).read_text()
            assert [who for who in ("alice", "local", "root") if f"the prompt of {who}" in text] == shown, name
