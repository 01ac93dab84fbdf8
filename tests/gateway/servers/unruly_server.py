"""A stdio MCP server that misbehaves on purpose, written without the SDK so it can put any bytes on stdout.

Tools: echo(text); noisy_echo(text) first writes an undecodable line (`\\x00\\xff\\xfe garbage`) and
a line that is not JSON, then the answer; lost_answer() answers with a line that is not JSON-RPC
(its bytes are not UTF-8) but names the request's id; die() exits without answering; pid();
big(chars) answers with a text of that many characters. UNRULY_STATE names a folder: a file
`describe` there replaces echo's description at the next start, and `refuse-start` makes the server
exit at start (with a line on stderr) as long as it exists.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

STATE = Path(os.environ.get("UNRULY_STATE", "."))
OUT = sys.stdout.buffer

if (STATE / "refuse-start").exists():
    sys.stderr.write("unruly: refusing to start\n")
    sys.exit(4)


def tool(name: str, description: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object", "properties": properties or {}}}


ECHO = (STATE / "describe").read_text() if (STATE / "describe").exists() else "Echo the text back."
TOOLS = [
    tool("echo", ECHO, {"text": {"type": "string"}}),
    tool("noisy_echo", "Echo after two lines of noise.", {"text": {"type": "string"}}),
    tool("lost_answer", "Answer with a line that is not JSON-RPC."),
    tool("die", "Exit without answering."),
    tool("pid", "The server's process id."),
    tool("big", "A text of `chars` characters.", {"chars": {"type": "integer"}}),
]


def send(message: dict[str, Any]) -> None:
    OUT.write(json.dumps(message).encode() + b"\n")
    OUT.flush()


def text(request_id: Any, value: str) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": value}]}})


def call(request_id: Any, name: str, args: dict[str, Any]) -> None:
    if name == "echo":
        text(request_id, str(args.get("text", "")))
    elif name == "noisy_echo":
        OUT.write(b"\x00\xff\xfe garbage\n")
        OUT.write(b"this is not json\n")
        OUT.flush()
        text(request_id, str(args.get("text", "")))
    elif name == "lost_answer":
        OUT.write(b'{"jsonrpc": "2.0", "id": ' + json.dumps(request_id).encode() + b', "result": \xff\xfe}\n')
        OUT.flush()
    elif name == "die":
        sys.stderr.write("unruly: dying on purpose\n")
        sys.stderr.flush()
        os._exit(1)
    elif name == "pid":
        text(request_id, str(os.getpid()))
    elif name == "big":
        text(request_id, "x" * int(args.get("chars", 0)))
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


def main() -> None:
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            version = message["params"].get("protocolVersion", "2025-06-18")
            result = {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "unruly", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            params = message.get("params") or {}
            call(request_id, str(params.get("name")), params.get("arguments") or {})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
