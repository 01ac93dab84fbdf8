"""`relay ask MODEL PROMPT [--continuation-id ID] [--json]`: one question to a model API, in the foreground."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from relay.cli._errors import error_line


def add_parser(sub: Any) -> None:
    """Declare `relay ask` on the CLI's subparsers (`sub` is argparse's _SubParsersAction)."""
    p = sub.add_parser("ask", help="ask a model API (sonnet, gpt5, grok, xai:grok-4, ollama:llama3.1...)")
    p.add_argument(
        "model",
        help="provider:model (xai:grok-4, ollama:llama3.1) or an alias (sonnet, gpt5, grok, pro, flash); "
        "the MCP tool list_models lists them",
    )
    p.add_argument("prompt", help="the question or task for the model (quote it as one argument)")
    p.add_argument("--continuation-id", help="continue this conversation thread")
    p.add_argument("--file", action="append", default=[], help="absolute path of a file to show the model (repeatable)")
    p.add_argument("--system", help="system prompt")
    p.add_argument(
        "--thinking",
        choices=["minimal", "low", "medium", "high", "max"],
        help="how deeply the model reasons, for models that support it (default: none asked)",
    )
    p.add_argument("--timeout", type=float, help="wall-clock limit in seconds")
    p.add_argument("--json", action="store_true", help="print the whole result envelope as JSON")


def ask_command(args: argparse.Namespace) -> int:
    """Run one ask as a job, stream its answer to stdout, print the continuation id to stderr."""
    import anyio

    from relay.ask import AskArgs, ask_envelope, submit_ask
    from relay.config import load_settings
    from relay.jobs.engine import Engine
    from relay.jobs.request import submitted_via

    settings = load_settings()
    request = AskArgs(
        prompt=args.prompt,
        model=args.model,
        continuation_id=getattr(args, "continuation_id", None),
        files=tuple(getattr(args, "file", None) or ()),
        system_prompt=getattr(args, "system", None),
        thinking_mode=getattr(args, "thinking", None),
        timeout_s=getattr(args, "timeout", None),
    )
    as_json = bool(getattr(args, "json", False))
    streamed: list[str] = []

    async def go() -> dict[str, Any]:
        from relay.cli._status import for_job

        async with Engine(settings).running() as engine:
            with submitted_via("cli/ask"):
                job_id = await submit_ask(engine, request)
            events = engine.subscribe(job_id)
            # On a terminal, a live line on stderr until the answer starts (then it is erased).
            status = for_job(engine, job_id, sys.stderr)
            try:
                async with anyio.create_task_group() as tg:
                    if status is not None:
                        tg.start_soon(status.redraw_forever)
                    async with events:
                        async for _, event in events:
                            if status is not None:
                                status.line.feed(event)
                            if event.type == "message.delta" and not as_json:
                                if status is not None:
                                    status.clear()
                                streamed.append(str(event.data.get("text", "")))
                                sys.stdout.write(streamed[-1])
                                sys.stdout.flush()
                    await engine.wait_one(job_id, float("inf"))
                    tg.cancel_scope.cancel()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await engine.cancel(job_id)
                raise
            finally:
                if status is not None:
                    status.clear()
            return ask_envelope(engine, job_id)

    try:
        env = anyio.run(go)
    except KeyboardInterrupt:
        print("\nrelay: interrupted, ask cancelled", file=sys.stderr)
        return 130
    if as_json:
        print(json.dumps(env, indent=2))
    else:
        shown = "".join(streamed)
        if shown != env["output"]:  # a slow terminal missed deltas: print the stored answer instead
            print(("\n" if shown else "") + env["output"])
        elif shown and not shown.endswith("\n"):
            print()
        if env["error"]:
            err = env["error"]
            print(error_line(err["code"], err["message"], err["hint"] or ""), file=sys.stderr)
        if env.get("continuation_id"):
            cost = f", ${env['cost_usd']:.6f}" if env.get("cost_usd") is not None else ""
            print(
                f"[{env['model']}{cost}; continue with --continuation-id {env['continuation_id']}]",
                file=sys.stderr,
            )
    return 0 if env["status"] == "completed" else 1
