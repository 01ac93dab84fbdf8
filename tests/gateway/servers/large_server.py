"""The toy server (toy_server.py) with a `big` tool, for the tests and the benchmark of large results over HTTP and WebSocket.

Usage: large_server.py http|json|websocket PORT. `http`: Streamable HTTP at /mcp answering in SSE events,
`json`: the same answering with JSON bodies, `websocket`: ws_server.py's wire at /mcp.
"""

from __future__ import annotations

import sys

import anyio
from toy_server import server  # pyright: ignore[reportMissingImports, reportUnknownVariableType]


@server.tool(description="A text of `chars` characters.", structured_output=False)  # pyright: ignore[reportUnknownMemberType, reportUntypedFunctionDecorator]
def big(chars: int) -> str:
    return "x" * chars


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "websocket":
        import ws_server  # pyright: ignore[reportMissingImports]

        anyio.run(ws_server.main)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    else:
        server.run("streamable-http", host="127.0.0.1", port=port, json_response=mode == "json")  # pyright: ignore[reportUnknownMemberType]
