"""Zen/PAL workflows (seed 002) through an MCP client, against mock model servers and fake CLIs."""
