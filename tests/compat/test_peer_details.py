"""The seed systems' small details: what each original does, relay's profile does too.

codex-mcp-server's static callback URI from its environment, PAL's `continuation_offer: null` on its
utilities, claude-code-mcp's refusal of an empty prompt, the continuation offer's wording for one
exchange left, and a model with no price reporting an unknown cost (null), not a free one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.threads import NewTurn, new_thread_id, open_threads
from relay.web.views import Sources, costs
from relay.workflows.steps import offer
from tests.api.mock_servers import Reply
from tests.compat.conftest import ProfileClient, call, data, error_message, logged
from tests.conftest import SettingsFactory
from tests.workflows.conftest import SettingsFactory as ZenSettings
from tests.workflows.conftest import SlowMock, anthropic_mock, openai_mock, zen_client, zen_settings  # noqa: F401  (fixtures)
from tests.workflows.conftest import call as zen_call

pytestmark = pytest.mark.anyio

CALLBACK = "http://localhost:8080/mcp-callback"


@pytest.fixture(autouse=True)
def _in_workdir(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:  # pyright: ignore[reportUnusedFunction]
    monkeypatch.chdir(workdir)


async def test_codex_takes_its_callback_uri_from_codex_mcp_callback_uri_unless_the_call_names_one(
    profile_client: ProfileClient, argv_log: Path
) -> None:
    async with profile_client("codex-mcp", CODEX_MCP_CALLBACK_URI=CALLBACK) as c:
        configured = await call(c, "codex", prompt="What is Fibonacci?")
        named = await call(c, "codex", prompt="And Lucas?", callbackUri="http://localhost:9090/other")
    assert not configured.is_error and not named.is_error
    assert configured.content[0].meta is not None and configured.content[0].meta["callbackUri"] == CALLBACK
    assert data(configured)["callbackUri"] == CALLBACK
    assert data(named)["callbackUri"] == "http://localhost:9090/other"
    # Codex itself runs with the configured URI in its environment, as the original passes it on.
    assert logged(argv_log)[0]["env"]["CODEX_MCP_CALLBACK_URI"] == CALLBACK


@pytest.mark.parametrize("tool", ["listmodels", "version"])
async def test_pals_listmodels_and_version_answer_with_a_null_continuation_offer(
    profile_client: ProfileClient, tool: str
) -> None:
    async with profile_client("zen") as c:
        result = await call(c, tool)
    out = data(result)
    assert not result.is_error and out["status"] == "success"
    assert "continuation_offer" in out and out["continuation_offer"] is None


@pytest.mark.parametrize("prompt", ["", "   \n"])
async def test_an_empty_claude_code_prompt_is_refused_before_anything_runs(
    profile_client: ProfileClient, argv_log: Path, workdir: Path, prompt: str
) -> None:
    async with profile_client("claude-code-mcp") as c:
        result = await call(c, "claude_code", prompt=prompt, workFolder=str(workdir))
    assert error_message(result) == "Missing or invalid required parameter: prompt"
    assert data(result)["error"]["code"] == "INVALID_ARGUMENT"
    assert logged(argv_log) == []  # Claude never ran


@pytest.mark.parametrize("kind", ["conversation", "consensus"])
def test_the_continuation_offer_says_one_more_exchange_in_the_singular(
    make_settings: SettingsFactory, kind: str
) -> None:
    settings = make_settings(RELAY_THREAD_MAX_TURNS="4")
    threads = open_threads(settings)
    try:
        thread = threads.add_turns(new_thread_id(), [NewTurn("user", "hi"), NewTurn("assistant", "hello")], tool="chat")
        found = offer(threads, thread, kind)
    finally:
        threads.close()
    assert found is not None and found["remaining_turns"] == 1
    assert found["note"].endswith(" for 1 more exchange.")


async def test_a_model_with_no_price_costs_null_in_its_answer_and_on_the_costs_page(
    request: pytest.FixtureRequest,
) -> None:
    mock: SlowMock = request.getfixturevalue("openai_mock")
    make: ZenSettings = request.getfixturevalue("zen_settings")  # keys and base URLs of the mock model servers
    mock.script(Reply(text="an answer"))
    settings = make(RELAY_PROFILE="", RELAY_TOOLSETS="core")
    async with zen_client(settings) as client:
        failed, answer = await zen_call(client, "ask", {"prompt": "hi", "model": "xai:grok-unpriced"})
    assert not failed and answer["status"] == "completed" and answer["cost_usd"] is None
    sources = Sources(settings)
    try:
        view = costs(sources.engine(), sources.queries(), settings)
    finally:
        sources.close()
    (row,) = view["totals"]
    assert row["key"] == "xai · xai:grok-unpriced" and row["jobs"] == 1
    assert row["cost_usd"] is None and view["total_usd"] is None  # unknown, not $0
