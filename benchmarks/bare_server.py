"""The thinnest MCP server: one tool over stdio. The cold-start baseline relay is compared with."""

from mcp.server import MCPServer

server = MCPServer("bare")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    server.run("stdio")
