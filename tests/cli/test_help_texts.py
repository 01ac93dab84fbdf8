"""Every option and positional of every `relay` command says what it does; `relay run` takes `--agent NAME` too."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.cli.main import _parser  # pyright: ignore[reportPrivateUsage]
from tests.conftest import SettingsFactory

RELAY = str(Path(sys.executable).with_name("relay"))


def _commands(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser and every subcommand's parser under it, nested ones too, each with its command line."""
    yield path, parser
    seen: set[int] = set()
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
        if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]
            choices: dict[str, argparse.ArgumentParser] = action.choices  # pyright: ignore[reportUnknownMemberType]
            for name, child in choices.items():
                if id(child) not in seen:  # an alias names the same parser
                    seen.add(id(child))
                    yield from _commands(child, f"{path} {name}")


def _silent(action: argparse.Action) -> bool:
    """An argument `--help` would show with no word on what it does (a hidden one is a choice, not an omission)."""
    if isinstance(action, argparse._HelpAction):  # pyright: ignore[reportPrivateUsage]
        return False
    if action.help == argparse.SUPPRESS:
        return False
    if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]
        return False  # its commands are checked one by one below
    return not (action.help or "").strip()


def _name(action: argparse.Action) -> str:
    return "/".join(action.option_strings) or str(action.metavar or action.dest)


def test_every_option_and_positional_of_every_command_has_a_help_text() -> None:
    silent: list[str] = []
    for path, parser in _commands(_parser(), "relay"):
        for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
            if _silent(action):
                silent.append(f"{path} {_name(action)}")
            if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]
                for command in action._choices_actions:  # pyright: ignore[reportPrivateUsage]
                    if not (command.help or "").strip():
                        silent.append(f"{path} {command.dest} (the command itself)")
    assert silent == []


def test_every_commands_help_renders() -> None:
    """A help text with a stray `%` breaks `--help` of its command only when someone asks for it."""
    for path, parser in _commands(_parser(), "relay"):
        assert parser.format_help(), path


def test_relay_run_help_says_what_cwd_model_session_and_permission_do() -> None:
    run = dict(_commands(_parser(), "relay"))["relay run"]
    helps = {opt: action.help for action in run._actions for opt in action.option_strings}  # pyright: ignore[reportPrivateUsage]
    for option in ("--cwd", "--model", "--session-id", "--permission", "--agent"):
        assert (helps.get(option) or "").strip(), option


@pytest.mark.parametrize(
    "words",
    [
        ["--agent", "codex", "fix the test"],
        ["--agent=codex", "fix the test"],
        ["fix the test", "--agent", "codex"],
        ["--agent", "codex", "--model", "gpt-5", "fix the test"],
        ["--model", "gpt-5", "--agent", "codex", "--", "fix the test"],
        ["--agent", "codex", "codex", "fix the test"],  # both ways, the same agent
    ],
)
def test_relay_run_takes_the_agent_as_an_option_as_it_does_as_a_positional(words: list[str]) -> None:
    named = _parser().parse_args(["run", *words])
    positional = _parser().parse_args(["run", "codex", "fix the test", *(["--model", "gpt-5"] * ("gpt-5" in words))])
    assert (named.agent, named.prompt, named.model) == (positional.agent, positional.prompt, positional.model)


def test_the_positional_form_still_takes_options_between_the_agent_and_the_prompt() -> None:
    args = _parser().parse_args(["run", "codex", "--model", "gpt-5", "fix the test", "--cwd", "/w"])
    assert (args.agent, args.prompt, args.model, args.cwd) == ("codex", "fix the test", "gpt-5", "/w")


def test_two_different_agents_for_one_run_are_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["run", "--agent", "codex", "claude", "fix the test"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--agent codex" in err and "claude" in err


def test_run_without_any_agent_says_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["run"])
    assert "agent" in capsys.readouterr().err


def test_relay_run_with_agent_option_runs_the_job(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path
) -> None:
    make_settings()
    out = subprocess.run(
        [RELAY, "run", "--agent", "claude", "say hi"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert (out.returncode, out.stdout) == (0, "hi from mock\n"), out.stderr
