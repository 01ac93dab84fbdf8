"""Pure parts of the model-API backend: registry, keys, redaction, translation, threads, history."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

from relay.agents.api import keys as keys_mod
from relay.agents.api._translate import loaded_sdk_exception_classes, translate
from relay.agents.api.openai_provider import effort_for
from relay.agents.api.registry import load_registry
from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.threads import ThreadSettings, Turn, select_history


def settings_for(tmp_path: Path, **env: str) -> Any:
    return load_settings({"RELAY_HOME": str(tmp_path), **env}, cwd=tmp_path)


def test_models_resolve_by_alias_id_bare_name_and_prefix(tmp_path: Path) -> None:
    registry = load_registry(settings_for(tmp_path))
    assert registry.resolve("grok").id == "xai:grok-4"
    assert registry.resolve("GPT5").id == "openai:gpt-5"
    assert registry.resolve("grok-4").id == "xai:grok-4"
    assert registry.resolve("gemini-2.5-pro").provider == "gemini-api"
    assert registry.resolve("ollama:llama3.1").input_price == 0.0
    assert registry.resolve("claude-3-7-sonnet-latest").provider == "anthropic"
    assert registry.resolve("openrouter:meta/llama-4").cost is not None
    with pytest.raises(RelayError) as caught:
        registry.resolve("warp:model")
    assert caught.value.code == ErrorCode.MODEL_NOT_FOUND


def test_base_urls_come_from_env_over_config_over_builtin(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[providers.xai]\nbase_url = "http://config/v1"\n[providers.box]\nbase_url = "http://10.0.0.5:8000/v1"\n'
    )
    registry = load_registry(settings_for(tmp_path, RELAY_XAI_BASE_URL="http://env/v1"))
    assert registry.providers["xai"].base_url == "http://env/v1"
    assert registry.providers["mistral"].base_url == "https://api.mistral.ai/v1"
    assert registry.resolve("box:qwen").provider == "box"
    assert registry.providers["box"].local


def test_api_keys_json_wins_over_env_and_aliases_are_checked_in_order(tmp_path: Path) -> None:
    registry = load_registry(settings_for(tmp_path))
    xai = registry.providers["xai"]
    settings = settings_for(tmp_path, GROK_API_KEY="from-grok-env", X_API_KEY="from-x-env")
    found = keys_mod.find_key(xai, settings)
    assert found is not None and (found.key, found.where) == ("from-grok-env", "GROK_API_KEY")
    (tmp_path / "api_keys.json").write_text(json.dumps({"X_API_KEY": "from-file"}))
    found = keys_mod.find_key(xai, settings)
    assert found is not None and (found.key, found.where) == ("from-file", "api_keys.json:X_API_KEY")
    gemini = registry.providers["gemini-api"]
    found = keys_mod.find_key(gemini, settings_for(tmp_path, GOOGLE_AI_KEY="g"))
    assert found is not None and found.where == "GOOGLE_AI_KEY"


def test_a_missing_key_names_the_variables_to_set(tmp_path: Path) -> None:
    registry = load_registry(settings_for(tmp_path))
    with pytest.raises(RelayError) as caught:
        keys_mod.require_key(registry.providers["gemini-api"], settings_for(tmp_path))
    assert caught.value.code == ErrorCode.AUTH_MISSING
    assert "GEMINI_API_KEY or GOOGLE_API_KEY or GOOGLE_AI_KEY" in caught.value.hint
    assert keys_mod.require_key(registry.providers["ollama"], settings_for(tmp_path)) == keys_mod.LOCAL_PLACEHOLDER_KEY


def test_redaction_removes_keys_their_masked_ends_and_key_shaped_text() -> None:
    key = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"
    masked = f"Incorrect API key provided: {key[:10]}****{key[-4:]}. Also {key}. Other: xai-zzzzzzzzzzzzzzzzzz"
    out = keys_mod.redact(masked, [key])
    assert key not in out and "ABCDEFGH" not in out and "xai-zzzz" not in out


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance of any SDK exception class, without knowing its constructor."""
    request = httpx2.Request("POST", "http://127.0.0.1/v1/x")
    response = httpx2.Response(500, request=request, json={"error": {"message": "boom"}})
    exc = cls.__new__(cls)
    for name, value in {
        "message": "boom",
        "request": request,
        "response": response,
        "body": {"error": {"message": "boom"}},
        "status_code": getattr(cls, "status_code", 500) if isinstance(getattr(cls, "status_code", None), int) else 500,
    }.items():
        with contextlib.suppress(AttributeError):
            setattr(exc, name, value)
    return exc


def test_no_sdk_exception_class_escapes_untranslated(tmp_path: Path) -> None:
    import anthropic
    import openai

    assert anthropic and openai
    registry = load_registry(settings_for(tmp_path))
    classes = loaded_sdk_exception_classes()
    assert len(classes) > 40
    names = {c.__name__ for c in classes}
    assert {"RateLimitError", "APIConnectionError", "ReadTimeout", "RemoteProtocolError"} <= names
    for cls in classes:
        failure = translate(_instance(cls), registry.providers["xai"], "xai:grok-4", ["secret-key-123456"])
        assert failure is not None, f"{cls.__module__}.{cls.__qualname__} escapes untranslated"
        assert failure.error.code != ErrorCode.INTERNAL


def test_a_non_sdk_exception_is_not_mistaken_for_an_upstream_failure(tmp_path: Path) -> None:
    registry = load_registry(settings_for(tmp_path))
    assert translate(KeyError("x"), registry.providers["xai"], "m", []) is None


def test_thinking_mode_maps_to_the_nearest_level_the_provider_accepts() -> None:
    assert effort_for("minimal", ("minimal", "low", "medium", "high")) == "minimal"
    assert effort_for("max", ("minimal", "low", "medium", "high")) == "high"
    assert effort_for("medium", ("low", "high")) == "high"
    assert effort_for("minimal", ("low", "high")) == "low"
    assert effort_for("high", ()) is None


def test_thread_limits_come_from_env_or_config(tmp_path: Path) -> None:
    from relay.threads import thread_settings

    (tmp_path / "config.toml").write_text("[threads]\nttl_hours = 2\nmax_turns = 10\n")
    assert thread_settings(settings_for(tmp_path)) == ThreadSettings(ttl_s=7200, max_turns=10)
    assert thread_settings(settings_for(tmp_path, MAX_CONVERSATION_TURNS="6")).max_turns == 6


def test_history_keeps_the_newest_whole_exchanges_that_fit() -> None:
    turns = [
        Turn(
            i, "user" if i % 2 == 0 else "assistant", f"t{i}" * 10, 0.0, "ask", files=(f"/f{i}",) if i % 2 == 0 else ()
        )
        for i in range(6)
    ]
    history = select_history(turns, budget_tokens=50, estimate=len, exclude_files=["/f4"])
    assert [t.seq for t in history.turns] == [4, 5]
    assert history.omitted_turns == 4
    assert history.files == ("/f2", "/f0")


def test_importing_the_server_and_the_ask_core_does_not_import_the_sdks() -> None:
    code = (
        "import sys, relay.server.app, relay.server.toolsets.core, relay.ask, relay.cli.ask_cmd, relay.agents.api;"
        "bad = [m for m in ('anthropic', 'openai') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
