"""Relay's Prometheus metrics, in one registry of their own (not the process-global default one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

# Seconds one store call took, measured around the call (a round trip to PostgreSQL, a statement on SQLite).
STORE_CALL_SECONDS = Histogram(
    "relay_store_call_seconds",
    "Time one store call took, from the caller's side (round trip included).",
    ("backend", "call"),
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)


def store_call(backend: str, call: str, seconds: float) -> None:
    """Record one store call: `backend` is "sqlite" or "postgresql", `call` the store method's name."""
    STORE_CALL_SECONDS.labels(backend, call).observe(seconds)
