"""A job as MCP resources on both eras: `relay://jobs/{id}` (its envelope), `/transcript`, `/log` and `/diff`.

`legacy` opens with initialize and follows a resource with `resources/subscribe`; the default speaks 2026-07-28 and
follows it on a `subscriptions/listen` stream. Either way a client lists the caller's jobs, reads one, and hears
when it changes, without a tool call; over HTTP a `user` token neither lists nor reads nor follows another's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ResourceUpdatedNotification, TextResourceContents

from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.server.test_principals import ALICE, BOB, as_, port  # noqa: F401  (port: the fixture)
from tests.workspaces.conftest import one_commit_repo

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:resources/subscribe is removed"),
    pytest.mark.filterwarnings("ignore:resources/unsubscribe is removed"),
]

# `legacy`: the 2025 handshake; `auto`: the SDK's default, which discovers and speaks 2026-07-28.
ERAS = pytest.mark.parametrize("era", ["legacy", "auto"])
WAIT_S = 30.0


class Inbox:
    """The 2025 era's pushed `notifications/resources/updated`, as URIs in arrival order."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[str](100)

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.send.send_nowait(str(message.params.uri))


@asynccontextmanager
async def following(c: Client, era: str, inbox: Inbox, uri: str) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """Follow `uri` the way the era does; yields a call that waits for the next update's URI."""
    if era == "legacy":
        await c.subscribe_resource(uri)  # pyright: ignore[reportDeprecated]
        yield inbox.receive.receive
    else:
        async with c.listen(resource_subscriptions=[uri]) as sub:
            assert sub.honored.resource_subscriptions == [uri]

            async def following_uri() -> str:
                event = await sub.__anext__()
                return str(getattr(event, "uri", event))

            yield following_uri


async def call(c: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(WAIT_S):
        result = await c.call_tool(tool, args)
    assert result.structured_content is not None and not result.is_error, result
    return result.structured_content


async def cancel(c: Client, job_id: str) -> None:
    """job_cancel: its answer is the cancelled job's envelope, an error result (the job did not complete)."""
    with anyio.fail_after(WAIT_S):
        result = await c.call_tool("job_cancel", {"job_id": job_id})
    assert result.structured_content is not None and result.structured_content["status"] == "cancelled"


async def read(c: Client, uri: str) -> TextResourceContents:
    with anyio.fail_after(WAIT_S):
        result = await c.read_resource(uri)
    (content,) = result.contents
    assert isinstance(content, TextResourceContents)
    return content


async def listed(c: Client) -> list[str]:
    with anyio.fail_after(WAIT_S):
        return [str(r.uri) for r in (await c.list_resources(cache_mode="bypass")).resources]


def parts(job_id: str, *names: str) -> list[str]:
    return [f"relay://jobs/{job_id}" + (f"/{n}" if n else "") for n in names]


@ERAS
async def test_the_callers_jobs_are_listed_newest_first_with_their_envelope_transcript_and_log(
    make_settings: SettingsFactory, workdir: Path, era: Any
) -> None:
    async with Client(build_server(make_settings()), mode=era) as c:
        older = await call(c, "delegate", {"prompt": "one", "cwd": str(workdir), "mode": "sync"})
        newer = await call(c, "delegate", {"prompt": "two", "cwd": str(workdir), "mode": "sync"})
        uris = await listed(c)
        with anyio.fail_after(WAIT_S):
            templates = [str(t.uri_template) for t in (await c.list_resource_templates()).resource_templates]

    assert uris == parts(newer["job_id"], "", "transcript", "log") + parts(older["job_id"], "", "transcript", "log")
    assert templates == parts("{job_id}", "", "transcript", "log", "diff")


@ERAS
async def test_reading_a_job_gives_its_envelope_its_transcript_and_a_worktree_jobs_diff(
    make_settings: SettingsFactory, workdir: Path, era: Any
) -> None:
    repo = one_commit_repo(workdir)
    prompt = "edit [[fake:write=notes.txt~hello from the agent]]"
    async with Client(build_server(make_settings()), mode=era) as c:
        job = await call(c, "delegate", {"prompt": prompt, "cwd": str(repo), "mode": "sync", "workspace": "worktree"})
        job_id = job["job_id"]
        uris = await listed(c)
        envelope, transcript, diff = [await read(c, u) for u in parts(job_id, "", "transcript", "diff")]
        paged = await call(c, "job_result", {"job_id": job_id, "view": "transcript"})

    assert uris == parts(job_id, "", "transcript", "log", "diff")
    assert envelope.mime_type == "application/json"
    assert json.loads(envelope.text)["job_id"] == job_id and json.loads(envelope.text)["status"] == "completed"
    assert transcript.text == paged["text"] and transcript.text
    assert transcript.meta is not None and transcript.meta["relay/complete"] is True
    assert diff.mime_type == "text/x-diff"
    assert "+++ b/notes.txt" in diff.text and "+hello from the agent" in diff.text


@ERAS
async def test_a_read_past_the_cap_ends_with_the_job_result_call_that_pages_the_rest(
    make_settings: SettingsFactory, workdir: Path, era: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("relay.server.resources.READ_LIMIT_CHARS", 10)
    async with Client(build_server(make_settings()), mode=era) as c:
        job_id = (await call(c, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"}))["job_id"]
        transcript = await read(c, f"relay://jobs/{job_id}/transcript")
        whole = await call(c, "job_result", {"job_id": job_id, "view": "transcript"})

    assert transcript.text.startswith(whole["text"][:10])
    assert transcript.text.endswith(f"read on with job_result(job_id='{job_id}', view='transcript', offset=10)]")
    assert transcript.meta is not None
    assert (transcript.meta["relay/next_offset"], transcript.meta["relay/complete"]) == (10, False)


@ERAS
async def test_an_unknown_job_a_part_it_has_not_and_a_foreign_uri_are_all_an_unknown_resource(
    make_settings: SettingsFactory, workdir: Path, era: Any
) -> None:
    async with Client(build_server(make_settings()), mode=era) as c:
        job_id = (await call(c, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"}))["job_id"]
        asked = [
            "relay://jobs/0000000000000000",
            f"relay://jobs/{job_id}/diff",  # it ran in a plain folder: no diff
            f"relay://jobs/{job_id}/secrets",
            f"relay://jobs/{job_id[:6]}",  # a prefix is not a job's URI
            "file:///etc/passwd",
        ]
        own = await read(c, f"relay://jobs/{job_id}")  # the job is there: only the URIs above name nothing
        errors: list[tuple[int, str]] = []
        for uri in asked:
            with pytest.raises(MCPError) as caught:
                await read(c, uri)
            errors.append((caught.value.error.code, caught.value.error.message))

    assert json.loads(own.text)["job_id"] == job_id
    assert errors == [(INVALID_PARAMS, f"Unknown resource: {uri}") for uri in asked]


@ERAS
async def test_a_follower_hears_when_a_job_starts_producing_output_and_when_it_ends(
    make_settings: SettingsFactory, workdir: Path, era: Any
) -> None:
    inbox = Inbox()
    settings = make_settings(RELAY_MAX_CONCURRENT="1")
    async with Client(build_server(settings), mode=era, message_handler=inbox) as c:
        ahead = await call(c, "delegate", {"prompt": "a [[fake:hang]]", "cwd": str(workdir), "mode": "async"})
        job = await call(c, "delegate", {"prompt": "b [[fake:hang]]", "cwd": str(workdir), "mode": "async"})
        job_id = job["job_id"]
        transcript_uri, envelope_uri = f"relay://jobs/{job_id}/transcript", f"relay://jobs/{job_id}"
        async with following(c, era, inbox, transcript_uri) as next_update:
            queued = json.loads((await read(c, envelope_uri)).text)["status"]
            await cancel(c, ahead["job_id"])  # its slot frees: the followed job starts
            with anyio.fail_after(WAIT_S):
                first = await next_update()
            running = json.loads((await read(c, envelope_uri)).text)["status"]
            started = await read(c, transcript_uri)
            await cancel(c, job_id)
            with anyio.fail_after(WAIT_S):
                while (await next_update()) != transcript_uri:
                    pass
            ended = json.loads((await read(c, envelope_uri)).text)["status"]

    assert (queued, first, running, ended) == ("queued", transcript_uri, "running", "cancelled")
    assert started.text  # the output that started it is there to read


async def test_over_http_a_user_token_neither_lists_nor_reads_nor_follows_anothers_job(
    port: int,  # noqa: F811  (the fixture imported above)
    workdir: Path,
) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob:
            hers = (await call(alice, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"}))["job_id"]
            held = await call(alice, "delegate", {"prompt": "hi [[fake:hang]]", "cwd": str(workdir), "mode": "async"})
            his = (await call(bob, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"}))["job_id"]
            alice_lists, bob_lists = await listed(alice), await listed(bob)
            foreign = [*parts(hers, "", "transcript", "log"), *parts(held["job_id"], "", "transcript")]
            unknown = parts("f" * len(hers), "", "transcript")
            refused: list[tuple[int, str]] = []
            for uri in foreign + unknown:
                with pytest.raises(MCPError) as caught:
                    await read(bob, uri)
                refused.append((caught.value.error.code, caught.value.error.message))
            async with bob.listen(resource_subscriptions=[*foreign, *parts(his, "transcript")]) as sub:
                honored = sub.honored.resource_subscriptions
            own = await read(alice, f"relay://jobs/{hers}/transcript")
            await cancel(alice, held["job_id"])

    assert set(alice_lists) == {*parts(hers, "", "transcript", "log"), *parts(held["job_id"], "", "transcript", "log")}
    assert bob_lists == parts(his, "", "transcript", "log")
    assert refused == [(INVALID_PARAMS, f"Unknown resource: {uri}") for uri in foreign + unknown]
    assert honored == parts(his, "transcript")
    assert own.text
