"""relay: an MCP server through which one AI agent delegates work to others, as durable jobs."""

__version__ = "0.1.0"

__all__ = ["__version__"]
