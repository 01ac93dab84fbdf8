"""The two-users table: for every tool of every toolset and compat profile, what it does with another principal's work.

Each tool, by its address (`tool` when the server lists it, `toolset/tool` when it is reached through
`call_tool`), is one or more of:

- a creator (`Creates`): alice calls it and gets something of a kind (a job, an agent session, a thread,
  a tracker task, a hook session, a codex thread, a downstream server); every id in the reply is hers;
- a probe (`Probe`): bob calls it with the id of something alice created (a read, a wait, a change);
  it must answer as if nothing by that id existed, and alice's thing must be unchanged afterwards;
- a lister (`Lists`): bob calls it with nothing of alice's; the reply must hold none of her text or ids;
- neutral (`Neutral`): it creates nothing and reads nothing one principal owns, for the reason given.

A tool the live server lists and this table does not name fails test_two_users, so a new tool is classified
before it ships.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Kinds of things a principal owns.
JOB = "job"
SESSION = "session"  # an agent CLI's conversation (claude/gemini/copilot session id)
CODEX_THREAD = "codex-thread"  # gobby's codex thread, a codex conversation
THREAD = "thread"  # a relay conversation thread (continuation_id)
TASK = "task"  # a tracker item
HOOK = "hook"  # a gobby hook session
SERVER = "server"  # a downstream MCP server
NAMED_SESSION = "named-session"  # codex-mcp's caller-named conversation (sessionId)
CHUNKS = "chunks"  # gemini-mcp's cached changeMode edits (cacheKey)


@dataclass(frozen=True)
class Ctx:
    """What the arguments are built from: the case's canary (alice's secret text), folders, and a fresh name."""

    canary: str
    repo: str
    name: str


Args = Callable[[Ctx], dict[str, Any]]
ProbeArgs = Callable[[Ctx, str], dict[str, Any]]


@dataclass(frozen=True)
class Creates:
    kind: str
    args: Args
    id_keys: tuple[tuple[str, str], ...] = (("job_id", JOB),)
    """(key, kind) pairs: the reply's string values under `key` are alice's ids of that kind."""
    hang: bool = False
    """The thing stays running (so that a cancel by bob would show)."""
    id_pattern: tuple[str, str] = ("", "")
    """(regex with one group, kind): ids the reply's text names in prose, not under a key."""


@dataclass(frozen=True)
class Probe:
    kind: str
    args: ProbeArgs
    changes: bool = False
    bob_marker: bool = False
    """The call runs an agent as bob: its argv (in the fakes' log) must not carry alice's session."""
    missing: str = ""
    """A seed's own not-found answer, which is not an error result (e.g. powerspawn's `"status": "not_found"`)."""
    may_succeed: bool = False
    """Answering is no leak by itself (bob may get a thing of his own by that name); the reply, the argv and
    alice's thing are still checked."""


@dataclass(frozen=True)
class Lists:
    args: Args


@dataclass(frozen=True)
class Neutral:
    reason: str


Role = Creates | Probe | Lists | Neutral

HANG = "[[fake:hang]]"


def _no_args(_: Ctx) -> dict[str, Any]:
    return {}


def _alice_claude(c: Ctx) -> str:
    """Alice's claude runs replay a recording with a session id of her own (not the fakes' shared one)."""
    return f"{c.canary} [[fake:replay=alice_claude]]"


def _alice_codex(c: Ctx) -> str:
    return f"{c.canary} [[fake:replay=alice_codex]]"


BOB = "BOB-PROBE [[fake:echo]]"


def _edits(c: Ctx) -> str:
    """A prompt the fake gemini echoes back as thirty changeMode edits, each carrying the canary (several chunks)."""
    blocks = [
        f"**FILE: src/m{n:02d}.py:{10 + n}**\n```\nOLD:\n    old_{n} = 1\nNEW:\n"
        + "\n".join(f"    new_{n}_{k} = '{c.canary}{'x' * 60}'" for k in range(40))
        + "\n```\n"
        for n in range(30)
    ]
    return "[[fake:echo]] Here are the edits.\n\n" + "\n".join(blocks)


_STEP = {"step_number": 1, "total_steps": 1, "next_step_required": False}

TABLE: dict[str, tuple[Role, ...]] = {
    # --- core ---------------------------------------------------------------------------------------------------
    "delegate": (
        Creates(JOB, lambda c: {"prompt": f"{c.canary} {HANG}", "cwd": c.repo, "mode": "async"}, hang=True),
        Creates(
            SESSION,
            lambda c: {"prompt": _alice_claude(c), "cwd": c.repo, "mode": "sync"},
            (("session_id", SESSION), ("job_id", JOB)),
        ),
        Creates(JOB, lambda c: {"prompt": c.canary, "cwd": c.repo, "mode": "sync", "workspace": "worktree"}),
        Probe(
            SESSION,
            lambda c, i: {"prompt": BOB, "cwd": c.repo, "session_id": i, "mode": "sync"},
            bob_marker=True,
            may_succeed=True,
        ),
        Probe(
            SESSION,
            lambda c, i: {"prompt": BOB, "cwd": c.repo, "continue_latest": True, "mode": "sync"},
            bob_marker=True,
            may_succeed=True,
        ),
    ),
    "job_status": (Probe(JOB, lambda c, i: {"job_id": i}),),
    "job_result": tuple(
        Probe(JOB, lambda c, i, view=view: {"job_id": i, "view": view})
        for view in ("final", "transcript", "events", "stderr", "diff", "test", "setup")
    ),
    "job_wait": (Probe(JOB, lambda c, i: {"job_ids": [i], "timeout_s": 0.2}),),
    "job_cancel": (Probe(JOB, lambda c, i: {"job_id": i}, changes=True),),
    "job_send": (Probe(JOB, lambda c, i: {"job_id": i, "message": BOB}, changes=True),),
    "job_list": (
        Lists(lambda c: {"limit": 200}),
        Probe(SESSION, lambda c, i: {"session_id": i, "limit": 200}, may_succeed=True),
    ),
    "session_list": (Lists(lambda c: {"limit": 200}),),
    "status": (Lists(_no_args),),
    "ask": (
        Creates(THREAD, lambda c: {"prompt": c.canary, "mode": "sync"}, (("continuation_id", THREAD), ("job_id", JOB))),
        Probe(THREAD, lambda c, i: {"prompt": BOB, "continuation_id": i, "mode": "sync"}),
    ),
    "thread_list": (Lists(lambda c: {"limit": 200}),),
    "thread_show": (Probe(THREAD, lambda c, i: {"continuation_id": i}),),
    "list_models": (Neutral("the models this relay's keys reach: configuration, the same for every principal"),),
    # --- gateway ------------------------------------------------------------------------------------------------
    "list_tools": (Lists(_no_args), Probe(SERVER, lambda c, i: {"server": i})),
    "get_tool_schema": (Probe(SERVER, lambda c, i: {"server_name": i, "tool_name": "echo"}),),
    "call_tool": (Probe(SERVER, lambda c, i: {"server_name": i, "tool_name": "echo", "arguments": {}}),),
    "list_mcp_servers": (Lists(_no_args),),
    "read_mcp_resource": (Probe(SERVER, lambda c, i: {"server_name": i, "resource_uri": "file:///x"}),),
    "add_mcp_server": (
        Creates(
            SERVER,
            lambda c: {"name": c.name, "transport": "http", "url": f"http://127.0.0.1:9/{c.canary}", "enabled": False},
            (("name", SERVER),),
        ),
        Probe(
            SERVER,
            lambda c, i: {"name": i, "transport": "http", "url": "http://127.0.0.1:9/bob", "enabled": False},
            changes=True,
            may_succeed=True,
        ),
    ),
    "remove_mcp_server": (Probe(SERVER, lambda c, i: {"name": i}, changes=True),),
    "import_mcp_server": (
        Neutral("imports into the caller's own registry from a folder or URL; what it adds is add_mcp_server's row"),
    ),
    "recommend_tools": (Lists(lambda c: {"task_description": "alice canary server tools"}),),
    # --- surreal ------------------------------------------------------------------------------------------------
    "call_cc": (
        Creates(
            SESSION, lambda c: {"prompt": _alice_claude(c), "cwd": c.repo}, (("job_id", JOB), ("session_id", SESSION))
        ),
        Probe(
            SESSION,
            lambda c, i: {"prompt": BOB, "cwd": c.repo, "resume_session_id": i},
            bob_marker=True,
            may_succeed=True,
        ),
        Probe(
            SESSION,
            lambda c, i: {"prompt": BOB, "cwd": c.repo, "continue_latest": True},
            bob_marker=True,
            may_succeed=True,
        ),
    ),
    "call_gem": (
        Creates(JOB, lambda c: {"prompt": f"{c.canary} {HANG}", "cwd": c.repo, "fire_and_forget": True}, hang=True),
    ),
    "call_codex": (
        Creates(JOB, lambda c: {"prompt": f"{c.canary} {HANG}", "cwd": c.repo, "fire_and_forget": True}, hang=True),
    ),
    "call_status": (Probe(JOB, lambda c, i: {"job_id": i}),),
    "call_jobs": (Lists(lambda c: {"limit": 200}),),
    "call_cancel": (Probe(JOB, lambda c, i: {"job_id": i}, changes=True),),
    # --- call-cc (reached through call_tool: its call_cc shares surreal's name) ---------------------------------
    "call-cc/call_cc": (
        Creates(
            JOB, lambda c: {"prompt": f"{c.canary} {HANG}", "working_directory": c.repo, "mode": "async"}, hang=True
        ),
        Probe(
            SESSION,
            lambda c, i: {"prompt": BOB, "working_directory": c.repo, "session_id": i},
            bob_marker=True,
            may_succeed=True,
        ),
    ),
    "call-cc/call_cc_status": (Probe(JOB, lambda c, i: {"job_id": i}),),
    "call-cc/call_cc_jobs": (Lists(lambda c: {"limit": 200}),),
    "call-cc/call_cc_sessions": (Lists(lambda c: {"limit": 200}),),
    "call-cc/call_cc_cancel": (Probe(JOB, lambda c, i: {"job_id": i}, changes=True),),
    # --- claude-code-mcp ----------------------------------------------------------------------------------------
    "claude_code": (Creates(JOB, lambda c: {"prompt": c.canary, "workFolder": c.repo}, ()),),
    # --- gemini-mcp ---------------------------------------------------------------------------------------------
    "ask-gemini": (
        Creates(JOB, lambda c: {"prompt": c.canary}, ()),
        Creates(
            CHUNKS,
            lambda c: {"prompt": _edits(c), "changeMode": True},
            (),
            id_pattern=(r'cacheKey="([a-f0-9]{8})"', CHUNKS),
        ),
        # A key ask-gemini has no chunks for (unknown, expired, another's) runs Gemini on the caller's own prompt.
        Probe(
            CHUNKS,
            lambda c, i: {"prompt": BOB, "changeMode": True, "chunkIndex": "2", "chunkCacheKey": i},
            may_succeed=True,
        ),
    ),
    "brainstorm": (Creates(JOB, lambda c: {"prompt": c.canary, "ideaCount": 2}, ()),),
    "fetch-chunk": (
        Probe(JOB, lambda c, i: {"cacheKey": i[:8], "chunkIndex": 1}, missing="Cache miss"),
        Probe(CHUNKS, lambda c, i: {"cacheKey": i, "chunkIndex": 2}, missing="Cache miss"),
    ),
    "ping": (Neutral("echoes its own argument"),),
    "Help": (Neutral("gemini's help text"),),
    "timeout-test": (Neutral("sleeps for the given time and says so"),),
    # --- codex-mcp (reached through call_tool: codex and ping share gobby's and gemini-mcp's names) -------------
    "codex-mcp/codex": (
        Creates(
            NAMED_SESSION,
            lambda c: {"prompt": _alice_codex(c), "sessionId": c.name},
            (("sessionId", NAMED_SESSION), ("threadId", CODEX_THREAD)),
        ),
        Probe(NAMED_SESSION, lambda c, i: {"prompt": BOB, "sessionId": i}, bob_marker=True, may_succeed=True),
        Probe(
            NAMED_SESSION,
            lambda c, i: {"prompt": BOB, "sessionId": i, "resetSession": True},
            changes=True,
            may_succeed=True,
        ),
    ),
    "codex-mcp/review": (
        Creates(JOB, lambda c: {"prompt": c.canary, "title": c.canary, "workingDirectory": c.repo}, ()),
    ),
    "codex-mcp/listSessions": (Lists(_no_args),),
    "codex-mcp/ping": (Neutral("echoes its own argument"),),
    "codex-mcp/help": (Neutral("codex's help text"),),
    "codex-mcp/websearch": (Creates(JOB, lambda c: {"query": c.canary}, ()),),
    # --- powerspawn ---------------------------------------------------------------------------------------------
    "spawn_claude": (Creates(JOB, lambda c: {"prompt": c.canary}, (("agent_id", JOB), ("job_id", JOB))),),
    "spawn_codex": (Creates(JOB, lambda c: {"prompt": c.canary}, (("agent_id", JOB), ("job_id", JOB))),),
    "spawn_copilot": (Creates(JOB, lambda c: {"prompt": c.canary}, (("agent_id", JOB), ("job_id", JOB))),),
    "spawn_grok": (Creates(JOB, lambda c: {"prompt": c.canary}, (("agent_id", JOB), ("job_id", JOB))),),
    "spawn_gemini": (Creates(JOB, lambda c: {"prompt": c.canary}, (("agent_id", JOB), ("job_id", JOB))),),
    "spawn_mistral": (Creates(JOB, lambda c: {"prompt": c.canary}, (("agent_id", JOB), ("job_id", JOB))),),
    "list": (Lists(_no_args),),
    "result": (Probe(JOB, lambda c, i: {"agent_id": i}, missing='"status": "not_found"'),),
    "wait_for_agents": (Lists(lambda c: {"timeout": 1}),),
    # --- tasks --------------------------------------------------------------------------------------------------
    "create_task": (
        Creates(
            TASK,
            lambda c: {"title": f"task {c.canary}", "session_id": c.name, "description": c.canary, "labels": ["a"]},
            (("id", TASK),),
        ),
    ),
    "get_task": (Probe(TASK, lambda c, i: {"task_id": i}),),
    "update_task": (Probe(TASK, lambda c, i: {"task_id": i, "title": BOB, "status": "closed"}, changes=True),),
    "close_task": (Probe(TASK, lambda c, i: {"task_id": i, "reason": "wont_fix"}, changes=True),),
    "delete_task": (Probe(TASK, lambda c, i: {"task_id": i, "cascade": True}, changes=True),),
    "list_tasks": (Lists(lambda c: {"limit": 200}),),
    "add_dependency": (Probe(TASK, lambda c, i: {"task_id": i, "depends_on": i}, changes=True),),
    "remove_dependency": (Probe(TASK, lambda c, i: {"task_id": i, "depends_on": i}, changes=True),),
    "get_dependency_tree": (Probe(TASK, lambda c, i: {"task_id": i}),),
    "check_dependency_cycles": (Lists(_no_args),),
    "list_ready_tasks": (Lists(lambda c: {"limit": 200}),),
    "list_blocked_tasks": (Lists(lambda c: {"limit": 200}),),
    "link_task_to_session": (Probe(TASK, lambda c, i: {"task_id": i, "session_id": BOB}, changes=True),),
    "get_session_tasks": (Probe(TASK, lambda c, i: {"session_id": c.name}, may_succeed=True),),
    "get_task_sessions": (Probe(TASK, lambda c, i: {"task_id": i}),),
    "sync_tasks": (Lists(lambda c: {"direction": "export"}),),
    "get_sync_status": (Lists(_no_args),),
    "expand_task": (Probe(TASK, lambda c, i: {"task_id": i}, changes=True),),
    "validate_task": (Probe(TASK, lambda c, i: {"task_id": i, "changes_summary": BOB}),),
    "add_label": (Probe(TASK, lambda c, i: {"task_id": i, "label": "bob"}, changes=True),),
    "remove_label": (Probe(TASK, lambda c, i: {"task_id": i, "label": "a"}, changes=True),),
    # --- zen ----------------------------------------------------------------------------------------------------
    "chat": (
        Creates(
            THREAD,
            lambda c: {"prompt": c.canary, "working_directory_absolute_path": c.repo},
            (("continuation_id", THREAD),),
        ),
        Probe(THREAD, lambda c, i: {"prompt": BOB, "working_directory_absolute_path": c.repo, "continuation_id": i}),
    ),
    "challenge": (
        Neutral("answers from its own prompt and calls no model: keeps no thread (a continuation_id is ignored)"),
        Probe(THREAD, lambda c, i: {"prompt": BOB, "continuation_id": i}, may_succeed=True),
    ),
    "apilookup": (
        Neutral("returns web-search instructions for its own prompt: keeps no thread (a continuation_id is ignored)"),
        Probe(THREAD, lambda c, i: {"prompt": BOB, "continuation_id": i}, may_succeed=True),
    ),
    "clink": (
        Creates(
            JOB, lambda c: {"prompt": c.canary, "cli_name": "claude"}, (("job_id", JOB), ("continuation_id", THREAD))
        ),
        Probe(THREAD, lambda c, i: {"prompt": BOB, "cli_name": "claude", "continuation_id": i}),
    ),
    "consensus": (
        Probe(THREAD, lambda c, i: {"step": BOB, "findings": BOB, **_STEP, "continuation_id": i, "models": []}),
    ),
    "planner": (
        Creates(
            THREAD, lambda c: {"step": c.canary, **_STEP, "use_assistant_model": False}, (("continuation_id", THREAD),)
        ),
        Probe(THREAD, lambda c, i: {"step": BOB, **_STEP, "continuation_id": i, "use_assistant_model": False}),
    ),
    "codereview": (
        Probe(
            THREAD,
            lambda c, i: {"step": BOB, "findings": BOB, **_STEP, "continuation_id": i, "use_assistant_model": False},
        ),
    ),
    "debug": (
        Creates(
            THREAD,
            lambda c: {"step": c.canary, "findings": c.canary, **_STEP, "use_assistant_model": False},
            (("continuation_id", THREAD),),
        ),
        Probe(
            THREAD,
            lambda c, i: {"step": BOB, "findings": BOB, **_STEP, "continuation_id": i, "use_assistant_model": False},
        ),
    ),
    "thinkdeep": (
        Probe(
            THREAD,
            lambda c, i: {"step": BOB, "findings": BOB, **_STEP, "continuation_id": i, "use_assistant_model": False},
        ),
    ),
    "listmodels": (Neutral("the models this relay's keys reach: configuration, the same for every principal"),),
    "version": (Neutral("relay's version and configuration"),),
    # --- gobby --------------------------------------------------------------------------------------------------
    "call_hook": (
        Creates(
            HOOK,
            lambda c: {
                "hook_type": "SessionStart",
                "params": {"session_id": c.name, "source": "startup"},
                "source": "Codex",
            },
            (("session_id", HOOK),),
        ),
        Creates(
            HOOK,
            lambda c: {
                "hook_type": "UserPromptSubmit",
                "params": {"session_id": c.name, "prompt": c.canary},
                "source": "Codex",
            },
            (("session_id", HOOK),),
        ),
        Probe(
            HOOK,
            lambda c, i: {
                "hook_type": "SessionStart",
                "params": {"session_id": i, "source": "resume"},
                "source": "Codex",
            },
            may_succeed=True,
        ),
        Probe(
            HOOK,
            lambda c, i: {"hook_type": "SessionEnd", "params": {"session_id": i}, "source": "Codex"},
            changes=True,
            may_succeed=True,
        ),
    ),
    "execute_code": (Creates(JOB, lambda c: {"code": f"print({c.canary!r})", "language": "python"}),),
    "process_large_dataset": (Neutral("a pure function of the data it is given; keeps nothing"),),
    "codex": (
        Creates(
            CODEX_THREAD,
            lambda c: {"prompt": _alice_codex(c), "cwd": c.repo},
            (("thread_id", CODEX_THREAD), ("job_id", JOB)),
        ),
        Probe(
            CODEX_THREAD, lambda c, i: {"prompt": BOB, "thread_id": i, "cwd": c.repo}, bob_marker=True, may_succeed=True
        ),
    ),
    "codex_list_threads": (Lists(lambda c: {"limit": 200}),),
    "codex_archive_thread": (
        Probe(CODEX_THREAD, lambda c, i: {"thread_id": i}, changes=True),
        # bob's own SessionStart probe above made him a hook session by that id: archiving his is his; alice's
        # must still be listed (checked after the probes)
        Probe(HOOK, lambda c, i: {"thread_id": i}, changes=True, may_succeed=True),
    ),
    # --- workspaces ---------------------------------------------------------------------------------------------
    "job_land": (
        Probe(JOB, lambda c, i: {"job_id": i}, changes=True),
        # on_conflict="agent" would start a follow-up job on the named job's agent: never on alice's job for bob
        Probe(JOB, lambda c, i: {"job_id": i, "on_conflict": "agent"}, changes=True),
    ),
    "best_of": (
        Creates(JOB, lambda c: {"prompt": c.canary, "agents": ["claude", "claude"], "cwd": c.repo, "mode": "sync"}),
    ),
    "job_discard": (Probe(JOB, lambda c, i: {"job_id": i}, changes=True),),
}

# Toolsets the server lists directly; the rest of BUILTIN is reached through call_tool (their names clash).
LISTED = (
    "core",
    "gateway",
    "surreal",
    "claude-code-mcp",
    "gemini-mcp",
    "powerspawn",
    "tasks",
    "zen",
    "gobby",
    "workspaces",
)
THROUGH_CALL_TOOL = ("call-cc", "codex-mcp")
