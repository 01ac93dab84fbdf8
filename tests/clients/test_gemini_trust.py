"""Gemini CLI runs relay's tools only in a folder it trusts: relay doctor says so when it does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from relay.clients.gemini_trust import is_trusted, untrusted_note

RELAY = str(Path(sys.executable).with_name("relay"))


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    project = tmp_path / "src" / "app"
    (home / ".gemini").mkdir(parents=True)
    project.mkdir(parents=True)
    return home, project


def rules(home: Path, text: str) -> None:
    (home / ".gemini" / "trustedFolders.json").write_text(text)


def test_a_folder_with_no_rule_is_untrusted_and_the_note_says_the_three_ways_to_trust_it(
    world: tuple[Path, Path],
) -> None:
    home, project = world
    assert is_trusted(project, {}, home) is False
    note = untrusted_note(project, {}, home)
    assert note is not None
    assert str(home / ".gemini" / "trustedFolders.json") in note
    assert f'"{project}": "TRUST_FOLDER"' in note and "GEMINI_CLI_TRUST_WORKSPACE=true" in note


def test_trust_folder_covers_everything_under_it_and_the_longest_rule_wins(world: tuple[Path, Path]) -> None:
    home, project = world
    src = project.parent
    rules(home, json.dumps({str(src): "TRUST_FOLDER"}))
    assert is_trusted(project, {}, home) and untrusted_note(project, {}, home) is None
    rules(home, json.dumps({str(src): "TRUST_FOLDER", str(project): "DO_NOT_TRUST"}))
    assert not is_trusted(project, {}, home)
    # TRUST_PARENT trusts the rule's parent; comments are allowed, as Gemini allows them
    rules(home, '{\n  // mine\n  "%s": "TRUST_PARENT"\n}\n' % (src / "other"))
    assert is_trusted(project, {}, home)


def test_the_environment_and_a_disabled_folder_trust_decide_before_any_rule(world: tuple[Path, Path]) -> None:
    home, project = world
    assert is_trusted(project, {"GEMINI_CLI_TRUST_WORKSPACE": "true"}, home)
    rules(home, json.dumps({str(project): "TRUST_FOLDER"}))
    assert not is_trusted(project, {"GEMINI_CLI_TRUST_WORKSPACE": "false"}, home)
    (home / ".gemini" / "trustedFolders.json").unlink()
    (home / ".gemini" / "settings.json").write_text('{"security": {"folderTrust": {"enabled": false}}}')
    assert is_trusted(project, {}, home)


def test_relay_doctor_notes_an_untrusted_folder_for_gemini_without_failing(world: tuple[Path, Path]) -> None:
    home, project = world
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEMINI_")} | {"HOME": str(home)}
    run = {"env": env, "cwd": project, "capture_output": True, "text": True, "timeout": 120}
    subprocess.run([RELAY, "install", "gemini"], check=True, **run)  # type: ignore[call-overload]
    out = subprocess.run([RELAY, "doctor", "--json"], **run)  # type: ignore[call-overload]
    (gemini,) = json.loads(out.stdout)["clients"]
    assert (gemini["status"], gemini["problems"], out.returncode) == ("ok", [], 0)
    assert len(gemini["notes"]) == 1 and gemini["notes"][0].startswith(f"Gemini does not trust {project}")
    rules(home, json.dumps({str(project): "TRUST_FOLDER"}))
    out = subprocess.run([RELAY, "doctor", "--json"], **run)  # type: ignore[call-overload]
    assert json.loads(out.stdout)["clients"][0]["notes"] == []
