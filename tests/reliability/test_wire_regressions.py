"""Lines on the wire that used to end relay or go unanswered, each against a real `relay serve` (stdio and HTTP).

Over stdio every case runs twice: behind the start-up front (the default) and with the full
server's transport alone (RELAY_STDIO_FRONT=0); each reader parses every line itself.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.errors import ErrorCode, RelayError
from relay.server.app import build_server
from relay.server.stdio import serve_stdio
from relay.server.stdio_front import Front, Snapshot
from tests.conftest import SettingsFactory
from tests.reliability.wire import HttpRelay, StdioRelay, line

PARSE, INVALID, PARAMS = -32700, -32600, -32602

DEEP = b'{"jsonrpc":"2.0","id":"deep","method":"ping","params":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
BAD_UTF8_CALL = (
    b'{"jsonrpc":"2.0","id":"bytes","method":"tools/call","params":{"name":"status","arguments":{"x":"a\xff\xfeb"}}}'
)
STRING_PARAMS = b'{"jsonrpc":"2.0","id":"str-params","method":"tools/call","params":"status"}'
UNKNOWN_PROMPT = b'{"jsonrpc":"2.0","id":"prompt","method":"prompts/get","params":{"name":"no-such-prompt"}}'
OBJECT_ID = b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}'
NULL_ID = b'{"jsonrpc":"2.0","id":null,"method":"ping"}'
CUT_SHORT = b'{"jsonrpc":"2.0","id":"cut","method":"ping"'


@pytest.fixture(scope="module", params=["front", "no-front"])
def stdio(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioRelay]:
    home = tmp_path_factory.mktemp("home")
    env = {"RELAY_STDIO_FRONT": "0"} if request.param == "no-front" else {}
    relay = StdioRelay(home, home, **env)
    yield relay
    status = relay.close()
    assert status == 0, relay.stderr.decode(errors="replace")
    assert relay.answers.garbage == []  # stdout carried only JSON-RPC


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpRelay]:
    home = tmp_path_factory.mktemp("home")
    relay = HttpRelay(home, home)
    yield relay
    relay.close()


def still_serving(relay: StdioRelay, tag: str) -> None:
    relay.send(line({"jsonrpc": "2.0", "id": f"after-{tag}", "method": "ping"}))
    assert relay.answers.wait(f"after-{tag}")["result"] == {}
    assert relay.alive()


def error_of(answer: dict[str, Any]) -> tuple[Any, int]:
    return answer["id"], answer["error"]["code"]


def test_a_request_nested_100000_arrays_deep_gets_a_parse_error_with_its_id_and_relay_keeps_serving(
    stdio: StdioRelay,
) -> None:
    stdio.send(DEEP + b"\n")
    assert error_of(stdio.answers.wait("deep")) == ("deep", PARSE)
    still_serving(stdio, "deep")


def test_a_request_id_with_a_lone_surrogate_is_answered_with_that_id_escaped(stdio: StdioRelay) -> None:
    stdio.send(b'{"jsonrpc":"2.0","id":"s\\ud800","method":"ping"}\n')
    stdio.send(b'{"jsonrpc":"1.0","id":"t\\udc00","method":"ping"}\n')  # invalid too: the error carries the id
    assert stdio.answers.wait("s\ud800")["result"] == {}
    assert error_of(stdio.answers.wait("t\udc00")) == ("t\udc00", INVALID)
    still_serving(stdio, "surrogate")


def test_invalid_utf8_inside_a_tools_call_string_gets_invalid_params_with_the_request_id(stdio: StdioRelay) -> None:
    stdio.send(BAD_UTF8_CALL + b"\n")
    answer = stdio.answers.wait("bytes")
    assert error_of(answer) == ("bytes", PARAMS)
    assert "byte 97" in answer["error"]["data"]  # where the bad bytes start
    still_serving(stdio, "bytes")


def test_tools_call_whose_params_is_a_string_gets_invalid_params(stdio: StdioRelay) -> None:
    stdio.send(STRING_PARAMS + b"\n")
    assert error_of(stdio.answers.wait("str-params")) == ("str-params", PARAMS)


def test_prompts_get_for_an_unknown_name_gets_invalid_params_not_code_0(stdio: StdioRelay) -> None:
    stdio.send(UNKNOWN_PROMPT + b"\n")
    answer = stdio.answers.wait("prompt")
    assert error_of(answer) == ("prompt", PARAMS)
    assert "no-such-prompt" in answer["error"]["message"]


def test_a_line_cut_short_gets_a_parse_error_that_still_carries_its_id(stdio: StdioRelay) -> None:
    stdio.send(CUT_SHORT + b"\n")
    assert error_of(stdio.answers.wait("cut")) == ("cut", PARSE)


def test_an_object_or_null_id_gets_invalid_request(stdio: StdioRelay) -> None:
    before = stdio.answers.count(None)
    stdio.send(OBJECT_ID + b"\n" + NULL_ID + b"\n")
    still_serving(stdio, "ids")
    nulls = stdio.answers.by_id["null"][before:]
    assert [error_of(a) for a in nulls] == [(None, INVALID), (None, INVALID)]


@pytest.mark.parametrize(
    ("body", "reply_id", "code"),
    [
        (NULL_ID, None, INVALID),
        (OBJECT_ID, None, INVALID),
        (STRING_PARAMS, "str-params", PARAMS),
        (DEEP, "deep", PARSE),
        (CUT_SHORT, "cut", PARSE),
        (BAD_UTF8_CALL, "bytes", PARAMS),
        (UNKNOWN_PROMPT, "prompt", PARAMS),
    ],
    ids=["null-id", "object-id", "string-params", "deep", "cut-short", "bad-utf8", "unknown-prompt"],
)
def test_over_http_each_bad_request_gets_its_standard_error_with_its_id(
    http: HttpRelay, body: bytes, reply_id: Any, code: int
) -> None:
    status, answers = http.post(body)
    assert len(answers) == 1, (status, answers)
    assert error_of(answers[0]) == (reply_id, code)
    assert status in (200, 400)
    assert http.post(line({"jsonrpc": "2.0", "id": "after", "method": "ping"}))[1][0]["result"] == {}
    assert http.alive()


def test_over_http_a_body_over_the_size_limit_gets_413_with_a_json_rpc_error_carrying_its_id(http: HttpRelay) -> None:
    body = b'{"jsonrpc":"2.0","id":"huge","method":"ping","params":{"s":"' + b"x" * 10_000_000 + b'"}}'
    status, answers = http.post(body)
    assert status == 413 and [error_of(a) for a in answers] == [("huge", INVALID)]
    assert http.post(line({"jsonrpc": "2.0", "id": "after-huge", "method": "ping"}))[1][0]["result"] == {}


@pytest.mark.parametrize("front", ["1", "0"], ids=["front", "no-front"])
def test_a_last_request_without_a_newline_before_eof_is_answered_and_relay_exits_0(tmp_path: Path, front: str) -> None:
    relay = StdioRelay(tmp_path, tmp_path, RELAY_STDIO_FRONT=front)
    relay.send(b'{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"status","arguments":{}}}')
    assert relay.close() == 0
    assert "result" in relay.answers.wait("last")  # read off the pipe by the client's thread, after the exit
    assert relay.answers.count("last") == 1 and relay.answers.garbage == []


class _Broken(io.RawIOBase):
    """A client stream whose read fails: what no input can do any more, standing for any bug in the reader."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise OSError(5, "Input/output error")


def test_if_the_stdio_front_reader_dies_it_says_why_and_relay_ends_with_an_error_not_a_clean_exit(
    tmp_path: Path, make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    front = Front(io.BufferedReader(_Broken()), io.BytesIO(), Snapshot(tmp_path / "s.json", "k"))
    front.read_client()
    assert front.failure is not None and "Input/output error" in front.failure
    assert "the stdio reader stopped" in capsys.readouterr().err
    with pytest.raises(RelayError) as caught:
        anyio.run(serve_stdio, build_server(make_settings()), front)
    assert caught.value.code is ErrorCode.INTERNAL
    assert "Input/output error" in caught.value.message
