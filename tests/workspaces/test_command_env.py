"""A land gate and a setup command run code an agent may have written: they see the allowlisted environment and
what the person set for them (`[workspaces] env`, `pass_env`), never relay's own secrets (bearer tokens, vendor keys,
RELAY_* settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.workspaces import Workspaces
from relay.workspaces.ready import make_ready
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import git

BOB_TOKEN = "bob-bearer-token-0123456789abcdef"
VENDOR_KEY = "sk-ant-vendor-key-0123456789"
STORE_URL = "postgresql://relay:store-password-0123@localhost:5999/relay"
NPM_TOKEN = "npm-token-the-person-passes"
SECRETS = (BOB_TOKEN, VENDOR_KEY, STORE_URL, "store-password-0123")


def configured(make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, **workspaces: str) -> Settings:
    """Settings with a second principal's token in relay's environment, a vendor key, a store URL and NPM_TOKEN
    (in the process's environment too, as relay is started with them)."""
    secrets = {"BOB_TOKEN": BOB_TOKEN, "ANTHROPIC_API_KEY": VENDOR_KEY, "RELAY_STORE": STORE_URL}
    for name, value in (secrets | {"NPM_TOKEN": NPM_TOKEN}).items():
        monkeypatch.setenv(name, value)
    table = "".join(f"{key} = {value}\n" for key, value in workspaces.items())
    config = (
        f'[server.tokens.bob]\ntoken_env = "BOB_TOKEN"\nrole = "user"\n\n'
        f'[workspaces]\npass_env = ["NPM_TOKEN"]\nenv = {{ CI = "1" }}\n{table}'
    )
    return make_settings(config, **secrets, NPM_TOKEN=NPM_TOKEN)


def assert_sees_only_what_it_may(dumped: str) -> None:
    for secret in SECRETS:
        assert secret not in dumped
    assert "RELAY_STORE=" not in dumped and "BOB_TOKEN=" not in dumped and "ANTHROPIC_API_KEY=" not in dumped
    assert f"NPM_TOKEN={NPM_TOKEN}" in dumped.splitlines()  # pass_env
    assert "CI=1" in dumped.splitlines()  # [workspaces] env
    assert any(line.startswith("PATH=") for line in dumped.splitlines())  # the allowlist


def test_a_setup_command_that_prints_its_environment_sees_no_token_key_or_relay_setting(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, repo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "setup-env.txt"
    settings = configured(make_settings, monkeypatch, setup_command=f'"env > {out}"')
    assert settings.tokens and settings.store_url == STORE_URL  # relay itself has them
    spaces = Workspaces(settings)
    try:
        rec = spaces.create("j1", str(repo), base=None, carry_changes=False)
        ready = make_ready(settings, rec, tmp_path / "setup.log")
    finally:
        spaces.close()
    assert ready is not None and ready["setup"] is not None
    assert_sees_only_what_it_may(out.read_text())
    assert f"RELAY_WORKTREE={rec.path}" in out.read_text().splitlines()  # what relay tells a setup stays


def test_a_land_gate_that_prints_its_environment_sees_no_token_key_or_relay_setting(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, repo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "gate-env.txt"
    settings = configured(make_settings, monkeypatch)
    spaces = Workspaces(settings)
    try:
        rec = spaces.create("j1", str(repo), base=None, carry_changes=False)
        (Path(rec.path) / "new.txt").write_text("the agent's change\n")
        landed = spaces.land(
            rec,
            into=None,
            strategy="rebase",
            test_command=f"env > {out}",
            test_log=tmp_path / "land-test.log",
            message="the agent's change",
        )
    finally:
        spaces.close()
    assert landed["landed"] is True and landed["test"]["passed"] is True
    assert git(repo, "show", "main:new.txt") == "the agent's change"
    assert_sees_only_what_it_may(out.read_text())


def test_a_workspaces_env_that_is_not_a_table_of_strings_is_refused(make_settings: SettingsFactory) -> None:
    with pytest.raises(RelayError) as caught:
        make_settings("[workspaces]\nenv = { CI = 1 }\n")
    assert caught.value.code is ErrorCode.CONFIG_INVALID and "workspaces.env" in caught.value.message
