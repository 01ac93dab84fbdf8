"""The mock model server itself: probes, side requests and vendor errors answer as the CLIs expect."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.e2e.mocks import MockModelServer, Reply, schema_instance

pytestmark = pytest.mark.e2e


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_claudes_connectivity_probe_gets_a_200_and_is_not_a_model_turn() -> None:
    with MockModelServer() as mock:
        with urllib.request.urlopen(urllib.request.Request(mock.url + "/", method="HEAD"), timeout=10) as resp:
            assert resp.status == 200
        assert mock.turns() == [] and len(mock.requests) == 1


def test_a_gemini_side_request_gets_json_text_shaped_like_its_schema_without_using_the_script() -> None:
    schema = {
        "type": "object",
        "properties": {
            "complexity_reasoning": {"type": "string"},
            "complexity_score": {"type": "integer", "minimum": 1, "maximum": 100},
        },
    }
    with MockModelServer() as mock:
        mock.script(Reply(text="kept for the turn"))
        status, raw = _post(
            mock.url + "/v1beta/models/gemini-2.5-flash-lite:generateContent",
            {"contents": [], "generationConfig": {"responseJsonSchema": schema}},
        )
        assert status == 200
        text = json.loads(raw)["candidates"][0]["content"]["parts"][0]["text"]
        assert json.loads(text) == {"complexity_reasoning": "mock title", "complexity_score": 50}
        assert list(mock.replies) == [Reply(text="kept for the turn")]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/messages", {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        ("/v1/responses", {"error": {"message": "slow down", "type": "rate_limit_error"}}),
        ("/v1/chat/completions", {"error": {"message": "slow down", "type": "rate_limit_error"}}),
        (
            "/v1beta/models/m:streamGenerateContent?alt=sse",
            {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}},
        ),
    ],
)
def test_an_error_reply_carries_the_vendors_error_json(path: str, expected: dict[str, Any]) -> None:
    with MockModelServer() as mock:
        mock.always(Reply(status=429, error="slow down"))
        status, raw = _post(mock.url + path, {"model": "m"})
    assert status == 429
    body = json.loads(raw)
    for key, value in expected.items():
        assert value.items() <= body[key].items() if isinstance(value, dict) else body[key] == value


def test_schema_instance_fills_nested_objects_enums_and_required_arrays() -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["simple", "complex"]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "inner": {"type": ["object", "null"], "properties": {"ok": {"type": "boolean"}}},
        },
    }
    assert schema_instance(schema) == {"kind": "simple", "tags": ["mock title"], "inner": {"ok": False}}
