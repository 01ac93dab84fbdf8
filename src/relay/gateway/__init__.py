"""The gateway: downstream MCP servers reached with the official SDK client, shared, pinned, fail-open."""

from relay.gateway.config import MASK, TRANSPORTS, ServerConfig, make_config, project_of
from relay.gateway.manager import Gateway, Limits, ServerTools
from relay.gateway.registry import ServerRegistry

__all__ = [
    "MASK",
    "TRANSPORTS",
    "Gateway",
    "Limits",
    "ServerConfig",
    "ServerRegistry",
    "ServerTools",
    "make_config",
    "project_of",
]
