"""The permission decision point in the engine: a job above its grant starts only with the person's consent."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.audit import LOG_FILE, iter_lines, parse_loose
from relay.errors import ErrorCode, RelayError
from relay.jobs import grants
from relay.jobs.engine import Engine, JobRequest
from relay.jobs.grants import Answer, Ask, asked_by, chosen_by_the_person, grant_for
from relay.jobs.request import submitted_via
from tests.conftest import RECORDINGS, SettingsFactory
from tests.jobs.fakeproc import Spawner

pytestmark = pytest.mark.anyio

TEXT_RUN = (RECORDINGS / "claude_stream_text.ndjson").read_text()


def full(workdir: Path) -> JobRequest:
    return JobRequest(agent="claude", prompt="p", cwd=str(workdir), permission="full")


def audit_events(home: Path) -> list[str]:
    return [e["event"] for e in map(parse_loose, iter_lines(home / LOG_FILE)) if e is not None]


class Confirmer:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.asked: list[Ask] = []

    async def __call__(self, ask: Ask) -> Answer:
        self.asked.append(ask)
        return self.answer


async def test_a_job_above_the_grant_is_refused_before_anything_exists(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    spawner = Spawner()
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        with pytest.raises(RelayError) as sync_refusal:
            engine.submit(full(workdir))
        with pytest.raises(RelayError) as refusal:
            await engine.submit_confirmed(full(workdir))
        listed = engine.list()
    assert sync_refusal.value.code is refusal.value.code is ErrorCode.PERMISSION_NOT_GRANTED
    assert listed == [] and spawner.procs == []
    assert audit_events(relay_home) == ["permission.refused"]  # no `queued`: no job was recorded


async def test_the_confirmers_yes_starts_the_job_and_its_no_refuses_it(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    spawner = Spawner()
    yes, no = Confirmer(Answer("accept")), Confirmer(Answer("decline"))
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        with asked_by("local (test)", no), pytest.raises(RelayError):
            await engine.submit_confirmed(full(workdir))
        with asked_by("local (test)", yes), submitted_via("core/delegate"):
            job_id = await engine.submit_confirmed(full(workdir))
        (proc,) = await spawner.wait_for(1)
        stored = engine.get(job_id).request
    argv = proc.invocation.argv
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    assert [(a.permission, a.grant, a.via, a.principal) for a in yes.asked] == [
        ("full", "edit", "core/delegate", "local (test)")
    ]
    assert stored["grant"] == {
        "permission": "full",
        "grant": "edit",
        "grant_source": "default",
        "by": "confirmation",
        "for_session": False,
        "principal": "local (test)",
    }
    assert audit_events(relay_home) == ["permission.refused", "queued", "running"]


async def test_a_command_the_person_typed_runs_at_its_level_as_their_choice(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    spawner = Spawner()
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        with chosen_by_the_person("full"):
            job_id = engine.submit(full(workdir))
        assert engine.get(job_id).request["grant"]["by"] == "person"


def test_the_grant_is_raised_by_what_the_person_chose_and_by_nothing_else(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    assert grant_for(settings, "core/delegate") == ("edit", "default")
    assert grant_for(settings.with_(default_permission="full"), None) == ("full", "[jobs] default_permission")
    profiled = settings.with_(toolset_grants={"powerspawn": "full"})
    assert grant_for(profiled, "powerspawn/spawn_codex")[0] == "full"
    assert grant_for(profiled, "core/delegate") == ("edit", "default")
    assert grant_for(settings.with_(grant="read-only", grant_source="RELAY_GRANT"), None) == (
        "read-only",
        "RELAY_GRANT",
    )


def test_a_refusal_names_the_grant_the_requested_level_and_how_to_change_it(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    ask = Ask("codex", "/src", "full", "edit", "default", "do it", "core/delegate", None)
    err = grants.GrantExceeded(settings, ask, Answer("unavailable"))
    assert err.code is ErrorCode.PERMISSION_NOT_GRANTED
    assert "'full'" in err.message and "grant 'edit' (default)" in err.message and "codex" in err.message
    assert f'[security] grant = "full" in {settings.home / "config.toml"}' in err.hint
    assert "relay install CLIENT --grant full" in err.hint and "permission 'edit' or lower" in err.hint


async def test_a_confirmed_job_prepared_again_after_a_restart_keeps_what_allowed_it(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    """A queued job's validated request lives in memory; after a restart it is prepared again from the store,
    outside the call that confirmed it: the stored decision holds, the job is not refused then."""
    spawner = Spawner()
    yes = Confirmer(Answer("accept"))
    async with Engine(make_settings(RELAY_MAX_CONCURRENT="1"), spawn=spawner).running() as engine:
        first = engine.submit(JobRequest(agent="claude", prompt="hold the slot", cwd=str(workdir)))
        (holder,) = await spawner.wait_for(1)
        with asked_by(None, yes):
            queued = await engine.submit_confirmed(full(workdir))
        assert engine.get(queued).status == "queued"
        engine._lifecycle.prepared.pop(queued)  # pyright: ignore[reportPrivateUsage]  # as a restart leaves it
        holder.write(TEXT_RUN)
        holder.exit(0)
        await engine.wait_one(first, 5)
        procs = await spawner.wait_for(2)
    argv = procs[1].invocation.argv
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"


async def test_relay_audit_show_names_the_refusals_and_the_confirmed_levels(
    make_settings: SettingsFactory, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from relay.cli.main import main

    async with Engine(make_settings(), spawn=Spawner()).running() as engine:
        with asked_by("local (test)", Confirmer(Answer("decline"))), pytest.raises(RelayError):
            await engine.submit_confirmed(full(workdir))
        with asked_by("local (test)", Confirmer(Answer("accept"))), submitted_via("core/delegate"):
            await engine.submit_confirmed(full(workdir))
    assert main(["audit", "show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "claude at full above grant edit: decline (local (test), -)" in lines[0]
    assert "permission.refused" in lines[0]
    assert lines[1].endswith("[full above grant edit: by confirmation]") and " queued " in lines[1]
