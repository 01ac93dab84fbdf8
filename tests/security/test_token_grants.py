"""A grant per principal: each named token has its own grant, and a cap no confirmation can raise it past.

Over real Streamable HTTP with named tokens. A `user` token's client is the remote user, not the person who
runs relay, so its yes to a confirmation form cannot lift its jobs above its cap (by default its grant); an
`admin` token, like the local person on stdio, may confirm up to `full`. The fake claude logs its argv, so
a refused job is seen never to start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from tests.conftest import SettingsFactory
from tests.server.test_grants import ERAS, Person, argv_log, audit, call, full, runs, serving_http, settings_with
from tests.server.test_principals import ALICE, ROOT, as_

pytestmark = pytest.mark.anyio
__all__ = ["argv_log"]  # the fixture, shared with tests/server/test_grants.py

CAROL = "carol-token-0123456789abcdef"
DAVE = "dave-token-0123456789abcdef"
TOKENS = f"""
[server.tokens.alice]
token = "{ALICE}"
role = "user"

[server.tokens.carol]
token = "{CAROL}"
role = "user"
cap = "full"

[server.tokens.dave]
token = "{DAVE}"
role = "user"
grant = "read-only"

[server.tokens.root]
token = "{ROOT}"
role = "admin"
"""


@pytest.fixture
async def port(make_settings: SettingsFactory, argv_log: Path, workdir: Path, relay_home: Path) -> AsyncIterator[int]:
    settings_with(make_settings, argv_log, TOKENS)
    async with serving_http(relay_home, workdir) as (chosen, _):
        yield chosen


@ERAS
async def test_a_user_tokens_own_yes_cannot_raise_it_past_its_cap_and_nobody_is_asked(
    port: int, argv_log: Path, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    async with as_(port, ALICE, elicitation_callback=person, mode=era) as alice:
        failed, body = await call(alice, "delegate", full(workdir))
        _, listed = await call(alice, "job_list", {})
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED"
    assert "cap 'edit'" in body["error"]["message"] and "'alice'" in body["error"]["message"]
    assert '[server.tokens.alice] cap = "full"' in body["error"]["hint"]
    assert person.asked == [] and runs(argv_log) == [] and listed["jobs"] == []
    [refused] = audit(relay_home, "permission.refused")
    assert (refused["data"]["answer"], refused["data"]["permission"], refused["data"]["principal"]) == (
        "capped",
        "full",
        "alice (mcp)",
    )


@ERAS
async def test_an_admin_token_and_a_user_token_with_a_full_cap_may_confirm_full(
    port: int, argv_log: Path, workdir: Path, relay_home: Path, era: Any
) -> None:
    for token in (ROOT, CAROL):
        person = Person("accept")
        async with as_(port, token, elicitation_callback=person, mode=era) as client:
            failed, body = await call(client, "delegate", full(workdir))
        assert not failed, body
        assert len(person.asked) == 1 and body["status"] == "completed"
    assert len(runs(argv_log)) == 2
    grants = [(e["data"]["grant"]["by"], e["data"]["grant"]["principal"]) for e in audit(relay_home, "queued")]
    assert grants == [("confirmation", "root (mcp)"), ("confirmation", "carol (mcp)")]


@ERAS
async def test_a_tokens_own_grant_replaces_the_relays_and_is_also_its_cap(
    port: int, argv_log: Path, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    async with as_(port, DAVE, elicitation_callback=person, mode=era) as dave:
        failed, body = await call(dave, "delegate", full(workdir, permission="edit"))
        ok, ran = await call(dave, "delegate", full(workdir, permission="read-only"))
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED"
    assert "cap 'read-only'" in body["error"]["message"] and "[server.tokens.dave] grant" in body["error"]["message"]
    assert not ok and ran["status"] == "completed" and person.asked == []
    assert len(runs(argv_log)) == 1


def test_a_token_grant_above_its_cap_or_not_a_permission_is_a_config_error(relay_home: Path) -> None:
    base = f'[server.tokens.eve]\ntoken = "{ALICE}"\n'
    for extra in ('grant = "full"\ncap = "edit"\n', 'grant = "root"\n', 'cap = "all"\n'):
        (relay_home / "config.toml").write_text(base + extra)
        with pytest.raises(RelayError) as raised:
            load_settings()
        assert raised.value.code == ErrorCode.CONFIG_INVALID, extra
