"""Multi-step and multi-model workflows (Zen's tools): chat, challenge, apilookup, clink, consensus,
planner, codereview, debug, thinkdeep. The core knows nothing of MCP; server/toolsets/zen.py maps
the seed's tool contract onto these functions."""
