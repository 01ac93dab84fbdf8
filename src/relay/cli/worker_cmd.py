"""`relay worker`: run the jobs this process claims from the store's queue; `relay workers`: list the workers."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from relay.errors import invalid


def add_parsers(sub: Any) -> None:
    worker = sub.add_parser("worker", help="run queued jobs from the store (no MCP server): one worker of the queue")
    worker.add_argument("--name", help="the worker's name in `relay workers` (default: HOST:PID)")
    worker.add_argument("--agents", help="comma-separated agents it runs (default: every agent)")
    worker.add_argument("--slots", type=int, help="jobs it runs at once (default: jobs.max_concurrent)")
    worker.add_argument("--labels", help="comma-separated labels it has; a job that asks for labels needs them all")
    worker.add_argument("--roots", help="comma-separated folders a job's cwd may be in (default: as relay serve)")
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics on this port (default: none; [telemetry] metrics_port)",
    )
    worker.add_argument("--metrics-host", help="the address /metrics listens on (default 127.0.0.1)")
    workers = sub.add_parser("workers", help="list the queue's workers: heartbeat, slots, running jobs, jobs run")
    workers.add_argument("--all", action="store_true", help="also the stopped and lost ones")
    workers.add_argument("--json", action="store_true", help="print as JSON")


def _names(raw: str | None, what: str) -> tuple[str, ...] | None:
    if raw is None:
        return None
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    if not names:
        raise invalid(f"--{what} is empty", f"pass comma-separated {what}, e.g. --{what} a,b")
    return names


def worker_settings(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from relay.config import load_settings
    from relay.jobs.request import check_claim_needs

    settings = load_settings()
    labels = _names(args.labels, "labels") or ()
    check_claim_needs(labels, None)
    if args.slots is not None and args.slots < 1:
        raise invalid(f"--slots {args.slots} is below 1", "pass how many jobs the worker runs at once, e.g. --slots 4")
    changes: dict[str, Any] = {
        "worker_name": args.name,
        "worker_agents": _names(args.agents, "agents"),
        "worker_labels": labels,
        "worker_slots": args.slots,
    }
    if args.metrics_port is not None:
        changes["metrics_port"] = args.metrics_port
    if args.metrics_host:
        changes["metrics_host"] = args.metrics_host
    roots = _names(args.roots, "roots")
    if roots is not None:
        changes |= {
            "configured_roots": tuple(Path(r).expanduser().resolve() for r in roots),
            "configured_roots_from": "--roots",
        }
    return settings.with_(**changes)


def cmd_worker(args: argparse.Namespace) -> int:
    import anyio

    from relay.jobs.engine import Engine

    settings = worker_settings(args)
    if settings.otlp_endpoint:  # traces of each job's life (docs/scaling.md); the 'otel' extra is loaded only now
        from relay.telemetry import tracing

        tracing.start(settings.otlp_endpoint)
    metrics = metrics_server(settings)
    if metrics is not None:
        print(f"relay worker: serving /metrics on http://{metrics.host}:{metrics.port}/metrics", file=sys.stderr)

    async def run() -> None:
        async with Engine(settings).running() as engine:
            me = engine.worker
            agents = ",".join(me.agents) if me.agents else "every agent"
            print(
                f"relay worker {me.name}: {me.slots} slots, {agents}, labels {','.join(me.labels) or '-'};"
                f" store {_store_shown(settings)} (SIGTERM: finish the jobs it runs, then stop)",
                file=sys.stderr,
                flush=True,
            )
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            held = engine.drain()
            print(f"relay worker {me.name}: stopping; finishing {held} running jobs", file=sys.stderr, flush=True)
            await engine.drained()

    try:
        anyio.run(run)
    finally:
        if metrics is not None:
            metrics.close()
    return 0


def _store_shown(settings: Any) -> str:
    """The store the worker uses, as its banner names it: the PostgreSQL URL without its password, else relay.db."""
    if settings.store_url is None:
        return str(settings.db_path)
    from relay.store.pg.errors import redact

    return redact(str(settings.store_url))


def metrics_server(settings: Any) -> Any:
    """The worker's /metrics (None unless a port is configured): admin tokens and the metrics token may read it
    once any token is configured; beyond loopback one must be."""
    if settings.metrics_port is None:
        return None
    from relay.errors import ErrorCode, RelayError
    from relay.telemetry.endpoint import MetricsServer, Readers

    tokens = settings.tokens
    allowed = [t.token for t in tokens if t.principal.is_admin] + [t for t in (settings.metrics_token,) if t]
    readers = Readers(allowed, [t.token for t in tokens if not t.principal.is_admin])
    host = settings.metrics_host
    if host not in ("127.0.0.1", "localhost", "::1") and not readers.guarded:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"refusing to serve /metrics on {host} without a token",
            "set RELAY_METRICS_TOKEN (or [telemetry] metrics_token_env) for the scraper to send, or --metrics-host 127.0.0.1",
        )
    return MetricsServer(host, settings.metrics_port, readers)


def cmd_workers(args: argparse.Namespace) -> int:
    from relay.config import load_settings
    from relay.store import open_store

    settings = load_settings()
    store = open_store(settings.store_target, home=settings.home)  # RELAY_STORE, else relay.db in the home
    now = time.time()
    rows = [w for w in store.list_workers() if args.all or w.state in ("running", "stopping")]
    if args.json:
        print(
            json.dumps(
                [
                    vars(w)
                    | {
                        "heartbeat_age_s": round(now - w.heartbeat_at, 1),
                        "stale": w.state == "running" and now - w.heartbeat_at > w.lease_s,
                    }
                    for w in rows
                ],
                indent=2,
            )
        )
        return 0
    if not rows:
        print("no workers running (`relay workers --all` lists stopped ones too)")
        return 0
    print(
        f"{'NAME':<24} {'HOST':<20} {'STATE':<9} {'HEARTBEAT':>9} {'SLOTS':>5} {'RUNNING':>7} {'RAN':>6}  AGENTS / LABELS"
    )
    for w in rows:
        agents = ",".join(w.agents) if w.agents else "*"
        age = now - w.heartbeat_at
        stale = "  STALE: no heartbeat for longer than its lease" if w.state == "running" and age > w.lease_s else ""
        print(
            f"{w.name[:24]:<24} {w.host[:20]:<20} {w.state:<9} {age:>8.1f}s {w.slots:>5}"
            f" {w.running:>7} {w.ran:>6}  {agents} / {','.join(w.labels) or '-'}{stale}"
        )
    return 0


COMMANDS = {"worker": cmd_worker, "workers": cmd_workers}
