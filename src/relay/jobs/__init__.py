"""The job engine: submit, wait, cancel, limits, durability."""

from relay.jobs.engine import Engine, JobRequest

__all__ = ["Engine", "JobRequest"]
