"""Agents driven over the Agent Client Protocol: a driver process per job, its inbox, and the adapters."""
