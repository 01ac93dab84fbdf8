"""The MCP surface: thin tools over the core job engine."""
