"""Two `user` tokens on one real `relay serve --http`, every tool of every toolset and compat profile: nothing
alice creates is visible to bob or changeable by him, and alice still sees it after he tried.

The table (tests/security/two_users_table.py) says how to create something with each tool and how to probe
for it with the other token. Alice's text carries a canary bob never sends: no reply bob gets may hold it, nor
(in a listing) any id of hers. A tool the server lists that the table does not classify fails the first test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.api.mock_servers import MockServer
from tests.conftest import FAKES, RECORDINGS, kill_jobs_under
from tests.reliability.conftest import free_port
from tests.reliability.test_http_guardrails import listening
from tests.security.two_users_table import (
    CHUNKS,
    CODEX_THREAD,
    HOOK,
    JOB,
    LISTED,
    NAMED_SESSION,
    SERVER,
    SESSION,
    TABLE,
    TASK,
    THREAD,
    THROUGH_CALL_TOOL,
    Creates,
    Ctx,
    Lists,
    Probe,
)
from tests.server.test_principals import ALICE, BOB, TOKENS, as_

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))
CALL_TIMEOUT_S = 30
# Alice's own agent sessions: recordings that announce ids no other run has.
ALICE_CLAUDE_SESSION = "a11ce000-0000-4000-8000-00000000c1a0"
ALICE_CODEX_THREAD = "a11ce000-0000-4000-8000-00000000c0de"
AGENTS = ("claude", "codex", "gemini", "copilot")


@dataclass
class Served:
    port: int
    home: Path
    repo: Path
    argv_log: Path


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _recordings(folder: Path) -> Path:
    folder.mkdir()
    claude = (RECORDINGS / "claude_stream_text.ndjson").read_text()
    (folder / "alice_claude.ndjson").write_text(
        claude.replace("b3af0212-3a6d-4156-a35c-cfab742dc56e", ALICE_CLAUDE_SESSION)
    )
    codex = (RECORDINGS / "codex_exec_json_text.ndjson").read_text()
    (folder / "alice_codex.ndjson").write_text(
        codex.replace("01a1fdea-b50b-74e3-a908-2db5de7dba18", ALICE_CODEX_THREAD)
    )
    return folder


def _config(argv_log: Path, recordings: Path) -> str:
    env = f'FAKE_ARGV_LOG = "{argv_log}"\nFAKE_GOLDEN_DIR = "{recordings}"\n'
    agents = "".join(f'[agents.{n}]\ncommand = "{FAKES / n}"\n[agents.{n}.env]\n{env}\n' for n in AGENTS)
    return TOKENS + agents


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One `relay serve --http` with alice and bob (both `user`), every toolset, fake CLIs and a mock model API."""
    root = tmp_path_factory.mktemp("two-users")
    home, repo = root / "relay-home", root / "proj"
    home.mkdir()
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("a project\n")
    _git(repo, "add", "README.md")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    argv_log = root / "argv.jsonl"
    (home / "config.toml").write_text(_config(argv_log, _recordings(root / "recordings")))
    port = free_port()
    with MockServer("anthropic") as anthropic, MockServer("openai") as openai:
        env = {
            **os.environ,
            "RELAY_HOME": str(home),
            "HOME": str(home),
            "RELAY_ANTHROPIC_BASE_URL": anthropic.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdefghij",
            **{f"RELAY_{p}_BASE_URL": openai.base_url for p in ("XAI", "MISTRAL", "GEMINI_API")},
            **{f"{p}_API_KEY": "test-key-0123456789abcdefghij" for p in ("XAI", "MISTRAL", "GEMINI")},
        }
        args = [RELAY, "serve", "--http", "--port", str(port), "--toolsets", ",".join(LISTED)]
        proc = subprocess.Popen(
            args, env=env, cwd=repo, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _until_listening(port, proc)
            yield Served(port, home, repo, argv_log)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            kill_jobs_under(home)


def _until_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + 60
    while not listening(port):
        assert proc.poll() is None, "relay serve exited at start-up"
        assert time.monotonic() < deadline, "relay serve did not listen within 60 s"
        time.sleep(0.05)


@dataclass
class Reply:
    error: bool
    text: str
    data: Any = None


async def invoke(client: Client, address: str, args: dict[str, Any]) -> Reply:
    """Call a tool the server lists (`tool`) or one reached through call_tool (`toolset/tool`)."""
    toolset, _, tool = address.rpartition("/")
    with anyio.fail_after(CALL_TIMEOUT_S):
        if toolset:
            result = await client.call_tool("call_tool", {"server_name": toolset, "tool_name": tool, "arguments": args})
        else:
            result = await client.call_tool(address, args)
    texts = [str(getattr(block, "text", "")) for block in result.content]
    data = result.structured_content
    text = json.dumps(data, ensure_ascii=False) + "\n" + "\n".join(texts)
    return Reply(bool(result.is_error), text, data if data is not None else _json_or_none("\n".join(texts)))


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def found_ids(value: Any, keys: tuple[str, ...]) -> list[str]:
    """Every string value under one of `keys`, anywhere in the reply (JSON inside strings included)."""
    out: list[str] = []
    if isinstance(value, str) and value[:1] in "[{":
        parsed = _json_or_none(value)
        if parsed is not None:
            out += found_ids(parsed, keys)
    elif isinstance(value, dict):
        for key, inner in value.items():  # pyright: ignore[reportUnknownVariableType]
            if key in keys and isinstance(inner, str) and inner:
                out.append(inner)
            else:
                out += found_ids(inner, keys)
    elif isinstance(value, list):
        for inner in value:  # pyright: ignore[reportUnknownVariableType]
            out += found_ids(inner, keys)
    return list(dict.fromkeys(out))


async def live_tools(client: Client) -> set[str]:
    """Every tool address this server reaches: what tools/list shows, and each toolset only call_tool reaches."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        listed = {t.name for t in (await client.list_tools()).tools}
    for toolset in THROUGH_CALL_TOOL:
        reply = await invoke(client, "list_tools", {"server": toolset})
        assert not reply.error, reply.text
        listed |= {f"{toolset}/{t['name']}" for t in reply.data["tools"]}
    return listed


NAMED_KINDS = (SERVER, HOOK, NAMED_SESSION)


def alice_ids(creator: Creates, made: Reply, ctx: Ctx) -> list[tuple[str, str]]:
    """(kind, id) of everything the creator's reply names; a thing alice named herself is hers by that name."""
    ids: list[tuple[str, str]] = []
    for key, kind in creator.id_keys:
        if kind in NAMED_KINDS:
            continue
        ids += [(kind, i) for i in found_ids(made.data, (key,)) or found_ids(made.text, (key,))]
    pattern, kind = creator.id_pattern
    if pattern:
        ids += [(kind, i) for i in re.findall(pattern, made.text)]
    if creator.kind in NAMED_KINDS and not made.error:
        ids.append((creator.kind, ctx.name))
    return list(dict.fromkeys(ids))


def creators() -> list[tuple[str, int]]:
    return [(address, i) for address, roles in TABLE.items() for i, r in enumerate(roles) if isinstance(r, Creates)]


async def test_every_tool_the_server_reaches_is_classified_in_the_two_users_table(served: Served) -> None:
    async with as_(served.port, ALICE) as alice:
        live = await live_tools(alice)
    assert sorted(live - TABLE.keys()) == [], "classify these tools in tests/security/two_users_table.py"
    assert sorted(TABLE.keys() - live) == [], "the table names tools the server no longer has"


@dataclass
class Findings:
    leaks: list[str] = field(default_factory=lambda: [])

    def add(self, what: str, reply: Reply | None = None) -> None:
        self.leaks.append(what + (f" -> {reply.text[:400]!r}" if reply else ""))


def _bob_argv_since(log: Path, offset: int) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [r for r in rows if "BOB-PROBE" in json.dumps(r)]


async def _alice_still_has(alice: Client, kind: str, ident: str, ctx: Ctx, hang: bool, found: Findings) -> None:
    """Alice's own view of what she created, after bob's attempts (so this test fails both ways)."""
    if kind == JOB:
        reply = await invoke(alice, "job_status", {"job_id": ident})
        if not isinstance(reply.data, dict) or not str(reply.data.get("job_id")).startswith(ident):
            found.add(f"alice no longer finds her job {ident}", reply)
        elif hang and reply.data.get("status") not in ("queued", "running"):
            found.add(f"alice's running job {ident} was ended", reply)
        if hang:
            await invoke(alice, "job_cancel", {"job_id": ident})
        return
    checks: dict[str, tuple[str, dict[str, Any], str]] = {
        SESSION: ("session_list", {"limit": 200}, ident),
        THREAD: ("thread_show", {"continuation_id": ident}, ctx.canary),
        TASK: ("get_task", {"task_id": ident}, f"task {ctx.canary}"),
        HOOK: ("codex_list_threads", {"limit": 200}, ident),
        CODEX_THREAD: ("codex_list_threads", {"limit": 200}, ident),
        SERVER: ("list_mcp_servers", {}, ctx.canary),
        NAMED_SESSION: ("codex-mcp/listSessions", {}, ident),
        CHUNKS: ("fetch-chunk", {"cacheKey": ident, "chunkIndex": 2}, ctx.canary),
    }
    tool, args, expected = checks[kind]
    reply = await invoke(alice, tool, args)
    if reply.error or expected not in reply.text:
        found.add(f"alice's {tool}({args}) no longer shows her {kind} {ident} ({expected!r})", reply)
    if (
        kind == TASK
        and reply.data
        and (reply.data.get("status") != "open" or "bob" in json.dumps(reply.data.get("labels")))
    ):
        found.add(f"alice's task {ident} was changed by bob", reply)


async def _alice_job_ids(alice: Client) -> list[str]:
    """Alice's jobs, newest first: what a creator started shows here even when its reply names no job."""
    reply = await invoke(alice, "job_list", {"limit": 200})
    return found_ids(reply.data, ("job_id",))


def _named(ids: list[tuple[str, str]], job_id: str) -> bool:
    """Whether the reply already named this job (whole, or as the prefix powerspawn calls an agent id)."""
    return any(job_id.startswith(i) for _, i in ids)


async def _alice_lists(alice: Client, ctx: Ctx, ids: list[str]) -> bool:
    """Whether some listing of alice's shows what she made (its text, its name or an id)."""
    for address, roles in TABLE.items():
        for role in roles:
            if isinstance(role, Lists):
                reply = await invoke(alice, address, role.args(ctx))
                if any(needle in reply.text for needle in (ctx.canary, ctx.name, *ids)):
                    return True
    return False


@pytest.mark.parametrize(("address", "index"), creators(), ids=[f"{a}#{i}" for a, i in creators()])
async def test_what_alice_creates_bob_neither_sees_nor_changes_and_alice_still_sees(
    served: Served, address: str, index: int
) -> None:
    creator = TABLE[address][index]
    assert isinstance(creator, Creates)
    tag = uuid.uuid4().hex[:12]
    ctx = Ctx(canary=f"ALICECANARY{tag}", repo=str(served.repo), name=f"alice-{tag}")
    found = Findings()
    offset = served.argv_log.stat().st_size if served.argv_log.exists() else 0
    async with as_(served.port, ALICE) as alice, as_(served.port, BOB) as bob:
        before = await _alice_job_ids(alice)
        made = await invoke(alice, address, creator.args(ctx))
        ids = alice_ids(creator, made, ctx)
        ids += [(JOB, i) for i in await _alice_job_ids(alice) if i not in before and not _named(ids, i)]
        secret = [ctx.canary, *(i for _, i in ids if len(i) >= 8)]

        # bob lists everything he can list: none of alice's text or ids
        for lister_address, roles in TABLE.items():
            for role in roles:
                if isinstance(role, Lists):
                    reply = await invoke(bob, lister_address, role.args(ctx))
                    for needle in secret:
                        if needle in reply.text:
                            found.add(f"bob's {lister_address}({role.args(ctx)}) shows alice's {needle!r}", reply)

        # bob probes each of alice's ids (and an 8-character prefix of each): not found, nothing of hers back
        for kind, ident in ids:
            for probe_address, roles in TABLE.items():
                for role in roles:
                    if not isinstance(role, Probe) or role.kind != kind:
                        continue
                    for asked in dict.fromkeys([ident, ident[:8]] if len(ident) > 8 else [ident]):
                        args = role.args(ctx, asked)
                        reply = await invoke(bob, probe_address, args)
                        if ctx.canary in reply.text:
                            found.add(f"bob's {probe_address}({args}) returns alice's text", reply)
                        elif (
                            not reply.error
                            and not role.may_succeed
                            and not (role.missing and role.missing in reply.text)
                        ):
                            found.add(f"bob's {probe_address}({args}) answered for alice's {kind}", reply)

        for row in _bob_argv_since(served.argv_log, offset):
            argv = [str(a) for a in row.get("argv", [])]
            joined = " ".join(argv)
            if ALICE_CLAUDE_SESSION in joined or ALICE_CODEX_THREAD in joined:
                found.add(f"bob's agent ran on alice's session: argv {argv}")
            if argv[:1] != ["exec"] and ("--continue" in argv or "-c" in argv or "latest" in argv):
                found.add(f"bob's agent ran with the CLI's own 'latest' (alice's): argv {argv}")

        for kind, ident in ids:
            await _alice_still_has(alice, kind, ident, ctx, creator.hang, found)
        if not made.error and not await _alice_lists(alice, ctx, [i for _, i in ids]):
            found.add(f"alice's own listings show nothing of what {address} made for her", made)
        if creator.id_keys and not ids and not made.error:
            found.add(f"{address} made nothing alice can name (the table's id keys {creator.id_keys} are wrong)", made)

    assert found.leaks == [], "\n".join(found.leaks)
