"""JSON-RPC lines on stdio: which ones are messages, and the standard error reply for every one that is not.

Standard library only, so the start-up front can use it before the MCP SDK is imported.
A line that is not a JSON-RPC 2.0 message still gets an answer (-32700, -32600, or -32602 for a
request whose params are not an object or not UTF-8), with its id whenever it can be read, because a
client waiting on a request id that never comes back waits forever. The Streamable HTTP endpoint
checks each POSTed body with the same rules (http_wire).
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
# How far into a line that cannot be parsed the search for its "id" goes (tokens), so a 10 MB line of
# brackets costs a bounded time.
ID_SEARCH_TOKENS = 100_000
# `encode_pieces` writes a string longer than this in pieces of this many characters.
PIECE_CHARS = 1 << 16
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null')


def error_reply(code: int, message: str, request_id: Any = None, data: str | None = None) -> dict[str, Any]:
    """A JSON-RPC error response (id null when the request's id could not be read)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def valid_id(value: Any) -> bool:
    """JSON-RPC ids MCP accepts: a string or an integer (not a boolean, not null, not a float)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def encode(message: dict[str, Any]) -> bytes:
    """One message as one line on the wire (a lone surrogate, e.g. in an echoed id, travels as its \\u escape)."""
    try:
        return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":"), ensure_ascii=True).encode("ascii") + b"\n"


def encode_pieces(message: dict[str, Any]) -> Iterator[bytes]:
    """`encode`, for a message carrying long strings: the line in pieces, each long string escaped and
    encoded a piece at a time, so megabytes of text are never held again as one JSON text and its bytes.

    The message is walked before the first piece is handed back: a value JSON cannot carry raises then.
    """
    parts: list[tuple[bool, str]] = []  # (is a long string kept as itself, JSON text)
    _flatten(message, parts)
    return _pieces(parts)


def _flatten(value: Any, out: list[tuple[bool, str]]) -> None:
    if isinstance(value, str) and len(value) > PIECE_CHARS:
        out.append((True, value))
    elif isinstance(value, dict):
        items: dict[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
        out.append((False, "{"))
        for n, (key, item) in enumerate(items.items()):
            out.append((False, ("," if n else "") + json.dumps(str(key), ensure_ascii=False) + ":"))
            _flatten(item, out)
        out.append((False, "}"))
    elif isinstance(value, list | tuple):
        seq: list[Any] | tuple[Any, ...] = value  # pyright: ignore[reportUnknownVariableType]
        out.append((False, "["))
        for n, item in enumerate(seq):
            if n:
                out.append((False, ","))
            _flatten(item, out)
        out.append((False, "]"))
    else:
        out.append((False, json.dumps(value, ensure_ascii=False, allow_nan=False)))


def _pieces(parts: list[tuple[bool, str]]) -> Iterator[bytes]:
    # A lone surrogate (which UTF-8 cannot carry) becomes its \u escape: backslashreplace writes just that.
    small: list[str] = []
    for long, text in parts:
        if not long:
            small.append(text)
            continue
        yield ("".join(small) + '"').encode("utf-8", "backslashreplace")
        small = ['"']
        for start in range(0, len(text), PIECE_CHARS):
            yield json.dumps(text[start : start + PIECE_CHARS], ensure_ascii=False)[1:-1].encode(
                "utf-8", "backslashreplace"
            )
    yield ("".join(small) + "\n").encode("utf-8", "backslashreplace")


def recover_id(line: bytes) -> Any:
    """The top-level "id" of a line that did not parse (cut short, too deep...), when it can still be read; else None.

    A scan of the line's tokens that tracks the nesting depth without recursing, so no depth or
    length ends it; only a string or integer id found at depth 1 counts.
    """
    depth = 0
    key_next = False  # the previous token at depth 1 was an object key "id" (awaiting ":" and the value)
    expect_key = False
    for count, match in enumerate(_TOKEN.finditer(line)):
        if count >= ID_SEARCH_TOKENS:
            return None
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
            expect_key = token == b"{" and depth == 1
            key_next = False
        elif token in (b"}", b"]"):
            depth -= 1
        elif depth != 1 or token == b":":
            continue
        elif token == b",":
            expect_key, key_next = True, False
        elif expect_key:
            expect_key = False
            key_next = token == b'"id"'
        elif key_next:
            try:
                value = json.loads(token)
            except ValueError:
                return None
            return value if valid_id(value) else None
    return None


def _invalid(obj: dict[str, Any], why: str) -> dict[str, Any]:
    request_id = obj.get("id")
    return error_reply(INVALID_REQUEST, "Invalid Request", request_id if valid_id(request_id) else None, why)


def check_message(obj: Any) -> str | None:
    """Why `obj` (parsed JSON) is not a single JSON-RPC 2.0 message MCP accepts, or None when it is one."""
    if isinstance(obj, list):
        return "batches are not supported: send one JSON-RPC message per line"
    if not isinstance(obj, dict):
        return "a JSON-RPC message must be a JSON object"
    msg: dict[str, Any] = obj  # pyright: ignore[reportUnknownVariableType]
    if msg.get("jsonrpc") != "2.0":
        return 'the "jsonrpc" member must be exactly "2.0"'
    if "method" in msg:
        if not isinstance(msg["method"], str):
            return 'the "method" member must be a string'
        if "id" in msg and not valid_id(msg["id"]):
            return 'a request "id" must be a string or an integer (not null, a number with a fraction, an object or an array)'
        if "result" in msg or "error" in msg:
            return "a message cannot be both a request and a response"
        return None
    if "result" in msg or "error" in msg:
        if not valid_id(msg.get("id")) and not ("error" in msg and msg.get("id") is None):
            return 'a response "id" must be a string or an integer'
        if "result" in msg and "error" in msg:
            return 'a response carries "result" or "error", not both'
        if "result" in msg and not isinstance(msg["result"], dict):
            return 'the "result" member must be an object'
        if "error" in msg and not _error_object(msg["error"]):
            return 'the "error" member must be an object with an integer "code" and a string "message"'
        return None
    return 'a JSON-RPC message needs a "method" (request or notification) or a "result"/"error" (response)'


def _error_object(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    err: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    code = err.get("code")
    return isinstance(code, int) and not isinstance(code, bool) and isinstance(err.get("message"), str)


def _params_error(msg: dict[str, Any]) -> str | None:
    """Why a request's params are not usable (a string, an array...), or None."""
    if msg.get("params") is not None and not isinstance(msg["params"], dict):
        return 'the "params" member must be an object'
    return None


def parse_line(
    line: bytes, loads: Callable[[str], Any] = json.loads
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(message, None) for a JSON-RPC message, (None, error reply) for anything else, (None, None) for a blank line.

    Never raises: a line too deep or too big to parse is a parse error like any other. Invalid UTF-8
    inside a line that is still JSON once decoded with replacement characters: a request gets
    -32602 with its own id (naming where the bad bytes are); anything else passes on, decoded so.
    """
    if not line.strip():
        return None, None
    bad_bytes: UnicodeDecodeError | None = None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_bytes = exc
        text = line.decode("utf-8", errors="replace")
    try:
        obj = loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:
        why = str(exc)[:200] or type(exc).__name__
        if bad_bytes is not None:
            why = f"not JSON, and not valid UTF-8 from byte {bad_bytes.start} on"
        return None, error_reply(PARSE_ERROR, "Parse error", recover_id(line), why)
    why = check_message(obj)
    if why is not None:
        if isinstance(obj, dict):
            return None, _invalid(obj, why)  # pyright: ignore[reportUnknownArgumentType]
        return None, error_reply(INVALID_REQUEST, "Invalid Request", None, why)
    msg: dict[str, Any] = obj
    params_why = _params_error(msg)
    if "method" in msg and "id" in msg:  # a request: its id is known, so the error can carry it
        if bad_bytes is not None:
            where = f"the message is not valid UTF-8 from byte {bad_bytes.start} on: send text as UTF-8"
            return None, error_reply(INVALID_PARAMS, "Invalid params", msg["id"], where)
        if params_why is not None:
            return None, error_reply(INVALID_PARAMS, "Invalid params", msg["id"], params_why)
    elif params_why is not None:
        return None, _invalid(msg, params_why)
    return msg, None


# A client that gives up on a call sends `notifications/cancelled` with a free-text reason; Claude
# Code's on its tool timeout reads "McpError: MCP error -32001: Request timed out".
TIMEOUT_REASON = re.compile(r"time[sd]?[ -]?out|-32001", re.IGNORECASE)
# Reasons kept for calls that may still be running; older ones are forgotten first.
MAX_CANCEL_REASONS = 1024


class CancelReasons:
    """Why the client cancelled each request (by request id), for the tool that is being cancelled to read."""

    def __init__(self) -> None:
        self._reasons: OrderedDict[str, str] = OrderedDict()

    def record(self, message: dict[str, Any]) -> None:
        """Remember the reason of a `notifications/cancelled` message (anything else is ignored)."""
        params = message.get("params")
        if message.get("method") != "notifications/cancelled" or not isinstance(params, dict):
            return
        fields: dict[str, Any] = params  # pyright: ignore[reportUnknownVariableType]
        request_id, reason = fields.get("requestId"), fields.get("reason")
        if valid_id(request_id) and isinstance(reason, str):
            self._reasons[str(request_id)] = reason
            while len(self._reasons) > MAX_CANCEL_REASONS:
                self._reasons.popitem(last=False)

    def pop(self, request_id: str) -> str | None:
        return self._reasons.pop(request_id, None)

    def timed_out(self, request_id: str) -> bool:
        """Did the client cancel this request because its own tool timeout ran out?"""
        reason = self.pop(request_id)
        return reason is not None and TIMEOUT_REASON.search(reason) is not None


CANCEL_REASONS = CancelReasons()
