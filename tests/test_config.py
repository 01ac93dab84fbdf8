"""config.toml's and the environment's numbers: one reader, so a bad value stops relay with where it was read."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import DEFAULT_MAX_CONCURRENT, Settings, load_settings
from relay.errors import ErrorCode, RelayError


def settings_with(tmp_path: Path, toml: str, **env: str) -> Settings:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(toml, encoding="utf-8")
    return load_settings({"RELAY_HOME": str(home), **env}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("toml", "env", "where"),
    [
        ('[jobs]\nmax_concurrent = "many"\n', {}, "config.toml [jobs] max_concurrent"),
        ("[jobs]\nmax_concurrent = 0\n", {}, "config.toml [jobs] max_concurrent"),
        ("[jobs]\nmax_concurrent = 2.5\n", {}, "config.toml [jobs] max_concurrent"),
        ("[jobs]\nmax_concurrent_per_agent = -1\n", {}, "config.toml [jobs] max_concurrent_per_agent"),
        ("[jobs]\nmax_depth = true\n", {}, "config.toml [jobs] max_depth"),
        ("[jobs]\noutput_limit_chars = 0.5\n", {}, "config.toml [jobs] output_limit_chars"),
        ('[jobs]\ntimeout_s = "soon"\n', {}, "config.toml [jobs] timeout_s"),
        ('[jobs]\nmax_cost_usd = "lots"\n', {}, "config.toml [jobs] max_cost_usd"),
        ("[queue]\nlease_s = -5\n", {}, "config.toml [queue] lease_s"),
        ('[workspaces]\nkeep_days = "forever"\n', {}, "config.toml [workspaces] keep_days"),
        ('[security]\napproval_wait_s = "nan"\n', {}, "config.toml [security] approval_wait_s"),
        ('[agents.claude]\ntimeout_s = "long"\n', {}, "config.toml [agents.claude] timeout_s"),
        ("[agents.claude]\nmax_concurrent = 1.5\n", {}, "config.toml [agents.claude] max_concurrent"),
        ("", {"RELAY_MAX_CONCURRENT": "many"}, "RELAY_MAX_CONCURRENT"),
        ("", {"RELAY_MAX_CONCURRENT_PER_AGENT": "0"}, "RELAY_MAX_CONCURRENT_PER_AGENT"),
        ("", {"RELAY_JOB_TIMEOUT_S": "inf"}, "RELAY_JOB_TIMEOUT_S"),
    ],
)
def test_a_bad_number_is_config_invalid_naming_where_it_was_read(
    tmp_path: Path, toml: str, env: dict[str, str], where: str
) -> None:
    with pytest.raises(RelayError) as caught:
        settings_with(tmp_path, toml, **env)
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert caught.value.message.startswith(where), caught.value.message
    assert caught.value.hint.startswith("set it to ")


def test_good_numbers_are_read_from_either_place_and_the_environment_wins(tmp_path: Path) -> None:
    toml = "[jobs]\nmax_concurrent = 3\nmax_concurrent_per_agent = 2.0\ntimeout_s = 90\n[agents.claude]\nmax_concurrent = 1\n"
    settings = settings_with(tmp_path, toml)
    assert (settings.max_concurrent, settings.max_concurrent_per_agent, settings.job_timeout_s) == (3, 2, 90.0)
    assert settings.agents["claude"].max_concurrent == 1
    assert settings_with(tmp_path, toml, RELAY_MAX_CONCURRENT=" 5 ").max_concurrent == 5
    assert settings_with(tmp_path, "").max_concurrent == DEFAULT_MAX_CONCURRENT
    assert settings_with(tmp_path, "[jobs]\nmax_concurrent = 3\n", RELAY_MAX_CONCURRENT="").max_concurrent == 3
