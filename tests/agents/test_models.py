"""The model registry: aliases per agent, the user's aliases first, and the choices offered."""

from __future__ import annotations

from relay.agents.models import model_choices, registry, resolve_model


def test_no_model_resolves_to_none() -> None:
    assert resolve_model("gemini", None, {}) is None
    assert resolve_model("gemini", "  ", {}) is None


def test_a_registry_alias_resolves_to_its_model_id() -> None:
    assert resolve_model("gemini", "pro", {}) == "gemini-2.5-pro"
    assert resolve_model("gemini", "Flash", {}) == "gemini-2.5-flash"
    assert resolve_model("copilot", "sonnet", {}) == "claude-sonnet-4.5"


def test_the_users_aliases_win_over_the_registry() -> None:
    assert resolve_model("gemini", "pro", {"pro": "gemini-3-pro"}) == "gemini-3-pro"


def test_an_unknown_name_or_agent_passes_through_unchanged() -> None:
    assert resolve_model("gemini", "gemini-9-ultra", {}) == "gemini-9-ultra"
    assert resolve_model("aider", "pro", {}) == "pro"


def test_claude_family_names_pass_through_for_the_cli_to_resolve() -> None:
    assert resolve_model("claude", "sonnet", {}) == "sonnet"


def test_choices_list_models_then_aliases_without_duplicates() -> None:
    assert model_choices("gemini") == [
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
        "pro",
        "flash",
        "flash-lite",
        "lite",
    ]
    assert model_choices("claude") == ["sonnet", "opus", "haiku", "h", "s", "o"]
    assert model_choices("nobody") == []


def test_every_builtin_agent_has_an_entry_whose_aliases_point_at_listed_models() -> None:
    reg = registry()
    assert set(reg) >= {"claude", "codex", "gemini", "copilot"}
    for entry in reg.values():
        assert entry.models
        assert set(entry.aliases.values()) <= set(entry.models)
