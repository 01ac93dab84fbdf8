"""`relay diff|land|discard JOB`: read, land or throw away the branch a worktree job left."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from relay.cli._engine import reading_engine
from relay.cli._errors import error_line

# How much of the diff is read per page on its way to the terminal.
DIFF_PAGE_CHARS = 1 << 20


def add_parsers(sub: Any) -> None:
    diff = sub.add_parser("diff", help="print a worktree job's diff against its base")
    diff.add_argument("job", help="the worktree job's id, or its first characters")
    land = sub.add_parser("land", help="land a worktree job's branch (rebase onto the target, test, move it)")
    land.add_argument("job", help="the worktree job's id, or its first characters")
    land.add_argument("--into", help="target branch (default: the branch the job's worktree was made from)")
    land.add_argument(
        "--strategy",
        choices=["rebase", "merge", "squash"],
        default="rebase",
        help="rebase the branch onto the target (default), merge it with a merge commit, or squash it to one commit",
    )
    land.add_argument("--test", dest="test_command", help="shell command that must pass in the worktree first")
    land.add_argument(
        "--resolve",
        action="store_true",
        help="on a conflict, have the job's agent resolve it in its worktree (a follow-up job), then land again",
    )
    land.add_argument("--json", action="store_true", help="print the result as JSON")
    discard = sub.add_parser("discard", help="remove a worktree job's worktree and branch")
    discard.add_argument("job", help="the worktree job's id, or its first characters")


def cmd_diff(args: argparse.Namespace) -> int:
    engine = reading_engine()
    offset = 0
    while True:
        page = engine.read_output(args.job, "diff", offset, DIFF_PAGE_CHARS)
        sys.stdout.write(page["text"])
        offset += len(page["text"])
        if page["next_offset"] is None:
            sys.stdout.flush()
            return 0


def cmd_land(args: argparse.Namespace) -> int:
    import anyio

    from relay.jobs.grants import COMMAND_PERMISSION, chosen_by_the_person
    from relay.jobs.request import submitted_via
    from relay.workflows.resolve import Land, land
    from relay.workspaces import LandError

    engine = reading_engine()
    asked = Land(
        args.job,
        into=args.into,
        strategy=args.strategy,
        test_command=args.test_command,
        on_conflict="agent" if args.resolve else "refuse",
    )

    async def go() -> dict[str, Any]:
        # --test is a command the person typed: it runs unasked; so does --resolve's follow-up, at the job's permission
        with chosen_by_the_person(COMMAND_PERMISSION), submitted_via("cli/land"):
            if not args.resolve:
                return await land(engine, asked)
            async with engine.running():  # the follow-up runs in this process, as `relay run`'s job does
                return await land(engine, asked)

    try:
        landed = anyio.run(go)
    except LandError as err:
        if args.json:
            print(json.dumps({"landed": False, "error": err.to_dict()} | err.details, indent=2))
        test = err.details.get("test")
        if test and not args.json:
            sys.stderr.write(test["output_tail"] if test["output_tail"].endswith("\n") else test["output_tail"] + "\n")
        print(error_line(err.code.value, err.message, err.hint), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(landed, indent=2))
        return 0
    tested = " after the test passed" if landed["test"] else ""
    resolved = f", its conflict resolved by job {landed['resolved_by']}" if landed["resolved_by"] else ""
    print(
        f"{landed['branch']} landed into {landed['into']} ({landed['strategy']}, {landed['commits']} commits): "
        f"{landed['old'][:12]} -> {landed['new'][:12]}{tested}{resolved}"
    )
    return 0


def cmd_discard(args: argparse.Namespace) -> int:
    import anyio

    engine = reading_engine()

    async def go() -> dict[str, Any]:
        return await engine.discard(args.job)

    gone = anyio.run(go)
    print(f"{gone['branch']} and its worktree {gone['path']} removed")
    return 0


COMMANDS = {"diff": cmd_diff, "land": cmd_land, "discard": cmd_discard}
