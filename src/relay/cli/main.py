"""`relay serve|run|jobs|show|tail|cancel`: argument parsing and dispatch; heavy imports stay lazy."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from relay import __version__
from relay.cli._engine import reading_engine
from relay.cli._errors import error_line, report
from relay.cli._table import table
from relay.cli.worker_cmd import COMMANDS as WORKER_COMMANDS
from relay.cli.worktree_cmd import COMMANDS as WORKTREE_COMMANDS

# `relay tail -f` checks for new output this often.
TAIL_POLL_S = 0.2


def version_line() -> str:
    """What `relay --version` prints: relay's version, the MCP SDK's it runs on, and Python's."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        sdk = version("mcp")
    except PackageNotFoundError:
        sdk = "not installed"
    return f"relay {__version__} (mcp {sdk}, Python {platform.python_version()})"


class _VersionAction(argparse.Action):
    """`--version`, with the SDK's version looked up only when asked (not on every start)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_line())
        parser.exit()


class _CommandParser(argparse.ArgumentParser):
    """A command's parser; with `takes_agent_option`, its first positional (the agent) may come as `--agent NAME`.

    argparse cannot make a leading positional optional without breaking `relay run codex --model M PROMPT`, so
    `--agent NAME` is moved in front of the other words before parsing (`--agent` stays declared for --help).
    """

    takes_agent_option = False

    # typeshed spells this as three overloads; one signature that takes all of them is enough here.
    def parse_known_args(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        if not self.takes_agent_option:
            return super().parse_known_args(args, namespace)
        named, words = _agent_option(list(sys.argv[1:] if args is None else args))
        if named is None:
            return super().parse_known_args(words, namespace)
        parsed, extra = super().parse_known_args([named, *words], namespace)
        if extra and not extra[0].startswith("-"):  # the agent came both ways: `--agent A B PROMPT`
            if parsed.prompt != named:
                self.error(f"the agent is given twice, as --agent {named} and as {parsed.prompt}: give it once")
            parsed.prompt = extra.pop(0)
        return parsed, extra


def _agent_option(words: list[str]) -> tuple[str | None, list[str]]:
    """The value of `--agent NAME` / `--agent=NAME` (or an abbreviation) before any `--`, and the other words."""
    for i, word in enumerate(words):
        if word == "--":
            break
        head, eq, value = word.partition("=")
        if len(head) > 2 and "--agent".startswith(head):
            if eq:
                return value, words[:i] + words[i + 1 :]
            if i + 1 < len(words):
                return words[i + 1], words[:i] + words[i + 2 :]
    return None, words


# The commands that open the job store, and so take `--store URL`.
STORE_COMMANDS = ("serve", "run", "jobs", "show", "tail", "cancel", "worker", "workers", "dashboard", "doctor")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="relay", description="Delegate work to AI agents as durable jobs (an MCP server).")
    p.add_argument("--version", action=_VersionAction, help="print relay's version and the MCP SDK's, then exit")
    p.add_argument("--debug", action="store_true", help="on an error, print the full traceback too")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_CommandParser)

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    serve.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    serve.add_argument("--token", default=None, help="bearer token required by HTTP clients (env RELAY_TOKEN)")
    serve.add_argument(
        "--toolsets", default=None, help="comma-separated toolsets to expose, e.g. core,zen (env RELAY_TOOLSETS)"
    )
    serve.add_argument("--profile", default=None, help="expose exactly one seed system's tools (env RELAY_PROFILE)")
    serve.add_argument(
        "--no-worker",
        action="store_true",
        help="run no jobs here: only queue them for `relay worker`s (env RELAY_RUN_JOBS=0, [queue] run_jobs)",
    )

    toolsets = sub.add_parser("toolsets", help="list every toolset and profile with its tools and tools/list cost")
    toolsets.add_argument("--json", action="store_true", help="print as JSON")

    run = sub.add_parser("run", help="run one job in the foreground and print its answer")
    run.takes_agent_option = True  # `relay run --agent NAME PROMPT` as well as `relay run NAME PROMPT`
    run.add_argument(
        "agent",
        metavar="AGENT",
        help="the agent CLI that does the work: claude, codex, gemini, copilot or a configured one",
    )
    run.add_argument("prompt", metavar="PROMPT", help="what the agent is asked to do (quote it as one argument)")
    run.add_argument(
        "--agent",
        dest="agent_option",
        metavar="AGENT",
        help="the agent, as an option instead of the first positional: relay run --agent codex PROMPT",
    )
    run.add_argument(
        "--cwd",
        metavar="DIR",
        help="the folder the agent works in: an absolute path inside the allowed roots (default: the current folder)",
    )
    run.add_argument("--model", help="the model the agent uses, by name or alias (default: the agent's own default)")
    run.add_argument(
        "--session-id",
        metavar="ID",
        help="resume this session of the agent (the id `relay show` prints), in the folder it started in",
    )
    run.add_argument(
        "--permission",
        choices=["read-only", "edit", "full"],
        help="what the agent may do: read-only, edit (change files) or full (no approvals, no sandbox); "
        "default: [jobs] default_permission, else read-only",
    )
    run.add_argument("--timeout", type=float, help="wall-clock limit in seconds")
    run.add_argument("--json", action="store_true", help="print the whole result envelope as JSON")
    run.add_argument("--worktree", action="store_true", help="run in a new git worktree on branch relay/<job-id>")
    run.add_argument("--base", "--ref", dest="base", help="with --worktree or --repo: the ref it starts from")
    run.add_argument(
        "--repo", help="a git URL: a worker runs the job in a worktree of it and pushes relay/<job-id> back"
    )
    run.add_argument("--subdir", default="", help="with --repo: the folder of the repository the job runs in")
    run.add_argument("--carry-changes", action="store_true", help="with --worktree: start from uncommitted changes")
    run.add_argument(
        "--labels", help="comma-separated labels the worker that runs it must have (relay worker --labels)"
    )
    run.add_argument(
        "--retry", choices=["on_lost_worker"], help="run it again on another worker if its worker is lost mid-job"
    )

    jobs = sub.add_parser("jobs", help="list recent jobs")
    jobs.add_argument("--status", action="append", help="filter by status (repeatable)")
    jobs.add_argument("--agent", help="only the jobs of this agent (claude, codex, ...)")
    jobs.add_argument("--via", help="only jobs whose via starts with this (core/, powerspawn/spawn_codex, cli/run)")
    jobs.add_argument("--limit", type=int, default=20, help="how many of the newest jobs (default 20)")
    jobs.add_argument("--json", action="store_true", help="print each job's whole envelope as JSON")
    jobs.add_argument("--watch", action="store_true", help="on a terminal, redraw the table every second")

    show = sub.add_parser("show", help="show one job's envelope")
    show.add_argument("job", help="the job's id, or its first characters")
    show.add_argument("--json", action="store_true", help="print the whole result envelope as JSON")

    tail = sub.add_parser("tail", help="print a job's transcript (or raw stream)")
    tail.add_argument("job", help="the job's id, or its first characters")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    tail.add_argument("--raw", action="store_true", help="the agent's raw stdout instead of the transcript")

    cancel = sub.add_parser("cancel", help="cancel a job (kills its process group)")
    cancel.add_argument("job", help="the job's id, or its first characters")

    from relay.cli.ask_cmd import add_parser as add_ask_parser

    add_ask_parser(sub)

    from relay.cli.mcp_cmd import add_parser as add_mcp_parser

    add_mcp_parser(sub)

    from relay.cli.audit_cmd import add_parser as add_audit_parser

    add_audit_parser(sub)

    from relay.cli.worktree_cmd import add_parsers as add_worktree_parsers

    add_worktree_parsers(sub)

    from relay.cli.worker_cmd import add_parsers as add_worker_parsers

    add_worker_parsers(sub)  # relay worker / relay workers

    dashboard = sub.add_parser("dashboard", help="serve the web dashboard (live jobs, costs, threads, tasks)")
    dashboard.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    dashboard.add_argument("--port", type=int, default=8766, help="port (default 8766)")
    dashboard.add_argument(
        "--token", default=None, help="token asked for at login when bound beyond loopback (env RELAY_TOKEN)"
    )
    dashboard.add_argument("--open", action="store_true", help="open it in a browser")

    from relay.cli.clients_cmd import add_parsers as add_client_parsers

    add_client_parsers(sub)  # relay install / relay uninstall CLIENT

    doctor = sub.add_parser("doctor", help="check every agent CLI: installed, version, credentials")
    doctor.add_argument(
        "--json", action="store_true", help="print the reports as one JSON object: agents, clients, store, runtime"
    )
    doctor.add_argument("--smoke", action="store_true", help="also run a one-line live job per installed agent")
    doctor.add_argument("--smoke-timeout", type=float, default=60.0, help="seconds per smoke run (default 60)")
    for name in STORE_COMMANDS:  # the store every relay and worker of a queue shares (`RELAY_STORE` otherwise)
        sub.choices[name].add_argument(
            "--store", metavar="URL", help="the job store: a postgresql:// URL (default: RELAY_STORE, else relay.db)"
        )
    for command in sub.choices.values():  # `relay CMD ... --debug` works too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def _ago(ts: float) -> str:
    delta = max(0.0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{int(delta // size)}{unit} ago"
    return f"{int(delta)}s ago"


def cmd_serve(args: argparse.Namespace) -> int:
    if args.no_worker:
        os.environ["RELAY_RUN_JOBS"] = "0"
    if not args.http and sys.stdin.isatty():
        from relay.cli._serve_banner import stdio_banner

        print(stdio_banner(), file=sys.stderr)
    front = None
    if not args.http:
        from relay.server.stdio_front import start_front

        front = start_front(args.toolsets, args.profile)  # initialize + tools/list answered while the SDK loads
    dashboard = None
    if args.http:
        from relay.cli._store_check import check_store
        from relay.web import for_server as dashboard  # the web dashboard under /ui

        check_store()  # a store it cannot reach or log in to: one coded line, before any "serving" line
    from relay.server.run import serve

    return serve(
        http=args.http,
        host=args.host,
        port=args.port,
        token=args.token,
        toolsets=args.toolsets,
        profile=args.profile,
        front=front,
        dashboard=dashboard,
    )


def cmd_toolsets(args: argparse.Namespace) -> int:
    from relay.cli.toolsets_cmd import toolsets_command

    return toolsets_command(args.json)


def cmd_run(args: argparse.Namespace) -> int:
    import anyio

    from relay.config import load_settings
    from relay.jobs.engine import Engine, JobRequest

    settings = load_settings()
    req = JobRequest(
        agent=args.agent,
        prompt=args.prompt,
        cwd=args.cwd,
        model=args.model,
        session_id=args.session_id,
        permission=args.permission,
        timeout_s=args.timeout,
        workspace="worktree" if args.worktree else None,
        base=args.base,
        carry_changes=args.carry_changes,
        labels=tuple(x.strip() for x in (args.labels or "").split(",") if x.strip()),
        retry=args.retry,
        repo=args.repo,
        subdir=args.subdir,
        via="cli/run",
    )

    async def go() -> dict[str, Any]:
        from relay.cli._status import for_job
        from relay.jobs.grants import chosen_by_the_person

        async with Engine(settings).running() as engine:
            with chosen_by_the_person(req.permission or settings.default_permission):  # typed by the person
                job_id = engine.submit(req)
            status = for_job(engine, job_id, sys.stderr)  # a live line on a terminal, None otherwise
            try:
                async with anyio.create_task_group() as tg:
                    if status is not None:
                        tg.start_soon(status.follow, engine.subscribe(job_id))
                    await engine.wait_one(job_id, float("inf"))
                    tg.cancel_scope.cancel()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await engine.cancel(job_id)
                raise
            finally:
                if status is not None:
                    status.clear()
            return engine.envelope(job_id)

    try:
        env = anyio.run(go)
    except KeyboardInterrupt:
        print("relay: interrupted, job cancelled", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(env, indent=2))
    else:
        print(env["output"])
        if env["truncated"]:
            print(f"\n[output truncated: relay tail {env['job_id']}]", file=sys.stderr)
        if env["error"]:
            err = env["error"]
            print(error_line(err["code"], err["message"], err["hint"] or ""), file=sys.stderr)
        if env.get("workspace"):
            ws = env["workspace"]
            print(
                f"\n[{ws['branch']}: {len(ws.get('files_changed', []))} files, +{ws.get('insertions', 0)} "
                f"-{ws.get('deletions', 0)}; relay diff {env['job_id']} / relay land {env['job_id']}]",
                file=sys.stderr,
            )
    return 0 if env["status"] == "completed" else 1


def cmd_jobs(args: argparse.Namespace) -> int:
    engine = reading_engine()
    if args.watch and not args.json and sys.stdout.isatty():
        from relay.cli._watch import watch

        def render() -> str:
            engine.reconcile()
            return _jobs_table(engine, args)

        return watch(render, sys.stdout)
    if args.json:
        records = engine.list(statuses=args.status or (), agent=args.agent, via=args.via, limit=args.limit)
        print(json.dumps([engine.envelope(r.id) for r in records], indent=2))
        return 0
    print(_jobs_table(engine, args))
    return 0


def _jobs_table(engine: Any, args: argparse.Namespace) -> str:
    from relay.jobs.envelope import job_title
    from relay.jobs.request import via_of

    records = engine.list(statuses=args.status or (), agent=args.agent, via=args.via, limit=args.limit)
    rows = [
        [
            r.id,
            r.agent,
            via_of(r) or "-",
            r.status,
            r.model or "-",
            _ago(r.created_at),
            _branch(r.request),
            job_title(r.request, 50),
        ]
        for r in records
    ]
    headers = ["JOB", "AGENT", "VIA", "STATUS", "MODEL", "CREATED", "BRANCH", "PROMPT"]
    return table(rows, headers) if rows else "no jobs"


def _branch(request: dict[str, Any]) -> str:
    """A worktree job's branch, or "-"."""
    worktree: dict[str, Any] = request.get("worktree") or {}
    return str(worktree.get("branch") or "-")


def cmd_show(args: argparse.Namespace) -> int:
    engine = reading_engine()
    env = engine.envelope(args.job)
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    usage = env["usage"]
    fields = [
        ("job", env["job_id"]),
        ("agent", env["agent"]),
        ("via", env.get("via") or "-"),
        ("status", env["status"]),
        ("model", env["model"] or "-"),
        ("session", env["session_id"] or "-"),
        ("duration", f"{env['duration_ms']} ms" if env["duration_ms"] is not None else "-"),
        ("usage", f"in {usage['input']} / out {usage['output']} / cached {usage['cached']}"),
        ("cost", f"${env['cost_usd']:.6f}" if env["cost_usd"] is not None else "-"),
        ("exit code", str(env["exit_code"]) if env["exit_code"] is not None else "-"),
    ]
    if env["error"]:
        fields.append(("error", f"{env['error']['code']}: {env['error']['message']}"))
        fields.append(("hint", env["error"]["hint"]))
    width = max(len(k) for k, _ in fields)
    for key, value in fields:
        print(f"{key.ljust(width)}  {value}")
    if env["output"]:
        print("\n" + env["output"])
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    engine = reading_engine()
    view = "events" if args.raw else "transcript"
    offset = 0
    # A store that announces changes (PostgreSQL) is read again when one comes (or after a second); SQLite's
    # every TAIL_POLL_S.
    wait: Callable[[int, float], bool] | None = getattr(engine.store, "wait_change", None)
    version: Callable[[], int] = getattr(engine.store, "change_version", lambda: 0)
    while True:
        seen = version()
        page = engine.read_output(args.job, view, offset, 1 << 20)
        if page["text"]:
            sys.stdout.write(page["text"])
            sys.stdout.flush()
            offset += len(page["text"])
        if page["next_offset"] is not None:
            continue
        if not args.follow or page["complete"]:
            return 0
        if wait is not None:
            wait(seen, 1.0)
        else:
            time.sleep(TAIL_POLL_S)
        engine.reconcile()


def cmd_cancel(args: argparse.Namespace) -> int:
    import anyio

    engine = reading_engine()

    async def go() -> dict[str, Any]:
        rec = await engine.cancel(args.job)
        return engine.envelope(rec.id)

    env = anyio.run(go)
    print(f"{env['job_id']}: {env['status']}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from relay.cli.doctor_cmd import doctor_command

    return doctor_command(args)


def cmd_mcp(args: argparse.Namespace) -> int:
    from relay.cli.mcp_cmd import mcp_command

    return mcp_command(args)


def cmd_audit(args: argparse.Namespace) -> int:
    from relay.cli.audit_cmd import audit_command

    return audit_command(args)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from relay.web import run_dashboard

    run_dashboard(host=args.host, port=args.port, token=args.token, open_browser=args.open)
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from relay.cli.clients_cmd import install_command

    return install_command(args, remove=False)


def cmd_uninstall(args: argparse.Namespace) -> int:
    from relay.cli.clients_cmd import install_command

    return install_command(args, remove=True)


def cmd_ask(args: argparse.Namespace) -> int:
    from relay.cli.ask_cmd import ask_command

    return ask_command(args)


COMMANDS = {
    "serve": cmd_serve,
    "toolsets": cmd_toolsets,
    "run": cmd_run,
    "jobs": cmd_jobs,
    "show": cmd_show,
    "tail": cmd_tail,
    "cancel": cmd_cancel,
    "doctor": cmd_doctor,
    "ask": cmd_ask,
    "dashboard": cmd_dashboard,
    "mcp": cmd_mcp,
    "install": cmd_install,
    "uninstall": cmd_uninstall,
    "audit": cmd_audit,
    **WORKTREE_COMMANDS,
    **WORKER_COMMANDS,
}


def main(argv: Sequence[str] | None = None) -> int:
    # On Windows relay starts too: CLI jobs are refused one by one (UNSUPPORTED_PLATFORM, see runtime/choice.py).
    from relay.cli.mcp_cmd import split_command_line

    words, command_line = split_command_line(sys.argv[1:] if argv is None else argv)  # relay mcp add NAME -- CMD ...
    args = _parser().parse_args(words)
    if command_line is not None:
        args.command_line = command_line
    before = os.environ.get("RELAY_STORE")
    try:
        if getattr(args, "store", None) is not None:
            from relay.config import check_store_url

            # Settings read it like RELAY_STORE, here and in every process this command starts.
            os.environ["RELAY_STORE"] = check_store_url(args.store, "--store")
        return COMMANDS[args.command](args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("relay: interrupted", file=sys.stderr)
        return 130
    except (Exception, BaseExceptionGroup) as exc:  # every failure is one line; --debug adds the traceback
        return report(exc, debug=args.debug)
    finally:  # main() called in-process (tests, embedding) leaves the environment as it found it
        if before is None:
            os.environ.pop("RELAY_STORE", None)
        else:
            os.environ["RELAY_STORE"] = before


if __name__ == "__main__":
    sys.exit(main())
