"""The `relay` command line: the same core as the MCP tools, with tables for people."""
