"""What the wire fuzzer sends: JSON-RPC traffic, valid, mutated and hostile, as hypothesis strategies.

Strategies draw nothing but their own data (hypothesis replays them): ids are placeholders,
`STR_ID` in a string and `INT_ID` as a number, that `personalize` replaces with ids unique per run
just before a line is sent, so the checks can say which answers belong to which request. `expectation` reads a line the way a strict JSON-RPC peer would, to know
what relay owes it: exactly one answer for a well-formed request, none for a well-formed
notification, at most one (with the request's id or null) for anything else.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from relay.server.stdio_wire import valid_id

STR_ID = "@id@"
INT_ID = 7_777_777_777
_ids = itertools.count()

# Tools that answer at once and change nothing, and names no toolset has.
TOOLS = ["status", "job_list", "list_tools", "get_tool_schema", "job_status", "session_list", "no_such_tool"]
METHODS = [
    "ping",
    "tools/list",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "completion/complete",
    "logging/setLevel",
    "no/such/method",
    "",
]
NOTIFICATIONS = ["notifications/initialized", "notifications/roots/list_changed", "notifications/no_such_thing"]
HOSTILE_TEXT = ["\x00", "\ud800", "\udfff", "\u2028", "\ufeff", "é" * 3, "\U0001f600", '"', "\\", "\n"]


def fresh_id(prefix: str = "f") -> str:
    return f"{prefix}{next(_ids)}-wire"


def personalize(data: bytes) -> bytes:
    """The line with each id placeholder replaced by an id no other line of the run has."""
    parts = data.split(STR_ID.encode())
    data = b"".join(p + (fresh_id().encode() if i < len(parts) - 1 else b"") for i, p in enumerate(parts))
    parts = data.split(str(INT_ID).encode())
    return b"".join(p + (str(10**12 + next(_ids)).encode() if i < len(parts) - 1 else b"") for i, p in enumerate(parts))


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec=None), max_size=40),
    st.sampled_from(HOSTILE_TEXT),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed request: a method relay knows or not, params of any shape an object can have."""
    request_id: Any = draw(st.sampled_from(["str", "int"]))
    request_id = STR_ID if request_id == "str" else INT_ID
    kind = draw(st.sampled_from(["call", "method"]))
    if kind == "call":
        params: dict[str, Any] = {
            "name": draw(st.sampled_from(TOOLS) | st.text(max_size=20)),
            "arguments": draw(
                st.dictionaries(st.sampled_from(["job_id", "limit", "server_name", "x"]), json_values, max_size=3)
            ),
        }
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    method = draw(st.sampled_from(METHODS))
    extra = draw(
        st.dictionaries(st.sampled_from(["name", "uri", "cursor", "level", "arguments"]), json_values, max_size=2)
    )
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": extra}


@st.composite
def notifications(draw: st.DrawFn) -> dict[str, Any]:
    method = draw(st.sampled_from([*NOTIFICATIONS, "notifications/cancelled"]))
    params: dict[str, Any] = {}
    if method == "notifications/cancelled":  # for ids never sent: nothing in flight is cancelled
        params = {"requestId": STR_ID, "reason": draw(st.text(max_size=20))}
    return {"jsonrpc": "2.0", "method": method, "params": params}


def deep(depth: int) -> bytes:
    head = b'{"jsonrpc":"2.0","id":"' + STR_ID.encode() + b'","method":"ping","params":{"a":'
    return head + b"[" * depth + b"]" * depth + b"}}"


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    """Lines meant to break a reader: nesting, numbers, encodings, ids and params of the wrong kind."""
    rid = json.dumps(STR_ID).encode()
    choice = draw(st.integers(min_value=0, max_value=11))
    if choice == 0:
        return deep(draw(st.sampled_from([100, 254, 255, 256, 999, 1000, 1001, 5000, 100_000])))
    if choice == 1:
        digits = draw(st.sampled_from([20, 4300, 4301, 20_000]))
        number = draw(st.sampled_from([b"9" * digits, b"1e999999", b"-1e-999999", b"-0", b"1" + b"0" * digits + b".5"]))
        return b'{"jsonrpc":"2.0","id":' + rid + b',"method":"ping","params":{"n":' + number + b"}}"
    if choice == 2:
        surrogate = draw(st.sampled_from([b"\\ud800", b"\\udfff", b"\\ud800\\u0041", b"\\udbff\\udfff"]))
        where = draw(st.sampled_from(["id", "param"]))
        if where == "id":
            return b'{"jsonrpc":"2.0","id":"' + STR_ID.encode() + surrogate + b'","method":"ping"}'
        return b'{"jsonrpc":"2.0","id":' + rid + b',"method":"tools/call","params":{"name":"status' + surrogate + b'"}}'
    if choice == 3:
        junk = draw(
            st.sampled_from([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xef\xbb\xbf"])
        )
        return (
            b'{"jsonrpc":"2.0","id":'
            + rid
            + b',"method":"tools/call","params":{"name":"status","arguments":{"x":"a'
            + junk
            + b'"}}}'
        )
    if choice == 4:
        return draw(
            st.sampled_from(
                [
                    b"\x00",
                    b"\x00\x00{}",
                    b'{"jsonrpc":"2.0","id":' + rid + b',"method":"ping\x00"}',
                    b"\xff\xfe\x00garbage",
                ]
            )
        )
    if choice == 5:
        unique = [f"-{INT_ID}".encode(), f"1000000000000{INT_ID}".encode()]  # valid ids: negative, beyond 64 bits
        bad_id = draw(st.sampled_from([b'{"a":1}', b"null", b"1.5", b"true", b"[1]", b"1e3", *unique]))
        return b'{"jsonrpc":"2.0","id":' + bad_id + b',"method":"ping"}'
    if choice == 6:
        params = draw(st.sampled_from([b'"status"', b"[1,2]", b"3", b"true", b"null"]))
        return b'{"jsonrpc":"2.0","id":' + rid + b',"method":"tools/call","params":' + params + b"}"
    if choice == 7:
        jsonrpc = draw(st.sampled_from([b'"1.0"', b"2.0", b'"2.0 "', b"null"]))
        return b'{"jsonrpc":' + jsonrpc + b',"id":' + rid + b',"method":"ping"}'
    if choice == 8:
        return draw(
            st.sampled_from([b"[]", b"[{}]", b"42", b'"ping"', b"null", b"{}", b'{"jsonrpc":"2.0"}', b"}{", b"\r"])
        )
    if choice == 9:
        size = draw(st.sampled_from([1_000, 100_000, 1_000_000]))
        return b'{"jsonrpc":"2.0","id":' + rid + b',"method":"ping","params":{"s":"' + b"x" * size + b'"}}'
    if choice == 10:
        return b'{"jsonrpc":"2.0","id":' + rid + b',"result":{}}'  # a response to nothing relay asked
    return b'{"jsonrpc":"2.0","id":' + rid + b',"method":1}'


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A well-formed request with one byte-level accident: cut, a byte inserted, dropped or replaced."""
    data = json.dumps(draw(requests())).encode()
    at = draw(st.integers(min_value=0, max_value=len(data) - 1))
    how = draw(st.sampled_from(["cut", "insert", "drop", "replace"]))
    byte = bytes([draw(st.integers(min_value=0, max_value=255).filter(lambda b: b != 0x0A))])
    if how == "cut":
        return data[:at]
    if how == "insert":
        return data[:at] + byte + data[at:]
    if how == "drop":
        return data[:at] + data[at + 1 :]
    return data[:at] + byte + data[at + 1 :]


messages = st.one_of(
    requests().map(lambda m: json.dumps(m).encode()),
    notifications().map(lambda m: json.dumps(m).encode()),
    hostile(),
    mutated(),
)
cases = st.lists(messages, min_size=1, max_size=6)


def expectation(data: bytes, loads: Callable[[str], Any] = json.loads) -> tuple[str, Any]:
    """("request", id), ("notification", None), ("blank", None) or ("other", None): what relay owes this line.

    `loads` is the JSON parser of the transport: Python's on stdio, the SDK's (pydantic's, which
    refuses lone surrogates and nesting past ~250) over HTTP.
    """
    if not data.strip():
        return "blank", None
    try:
        obj = loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return "other", None
    if not isinstance(obj, dict) or obj.get("jsonrpc") != "2.0" or not isinstance(obj.get("method"), str):
        return "other", None
    msg: dict[str, Any] = obj  # pyright: ignore[reportUnknownVariableType]
    if "result" in msg or "error" in msg or not (msg.get("params") is None or isinstance(msg["params"], dict)):
        return "other", None
    if "id" not in msg:
        return "notification", None
    if not valid_id(msg["id"]):
        return "other", None
    return "request", msg["id"]
