"""Jobs by repository URL, end to end: a front that runs no jobs queues one, a worker on the same home claims it,
fetches the repository from a real `git daemon`, runs the agent in a worktree of it and pushes the branch back;
`job_land` on the front fetches that branch into the caller's clone and lands it there."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.jobs.grants import chosen_by_the_person
from relay.server.app import build_server
from relay.store import Store, WorkerInfo
from relay.workspaces import Workspaces
from tests.conftest import SettingsFactory
from tests.git_daemon import GitDaemon, bare_repo, free_port, git_daemon
from tests.workspaces.conftest import git

pytestmark = pytest.mark.anyio

EDIT = "Make app.txt say hello [[fake:write=app.txt~hello\\n;new.txt~from the worker\\n]]"


@pytest.fixture
def served(tmp_path: Path, repo: Path) -> Path:
    base = tmp_path / "served"
    base.mkdir()
    bare_repo(base, "app.git", repo)
    return base


@pytest.fixture
def daemon(served: Path) -> Iterator[GitDaemon]:
    with git_daemon(served) as d:
        yield d


@pytest.fixture
def clone(daemon: GitDaemon, tmp_path: Path) -> Path:
    """The caller's checkout: a clone of the served repository, somewhere the worker never looks."""
    path = tmp_path / "caller-clone"
    git(tmp_path, "clone", "--quiet", daemon.url("app.git"), str(path))
    return path


@asynccontextmanager
async def front_and_worker(settings: Settings) -> AsyncIterator[tuple[Engine, Engine]]:
    """A front that only queues jobs and a worker that claims them, on one RELAY_HOME (one store)."""
    async with (
        Engine(settings.with_(runs_jobs=False)).running() as front,
        Engine(settings).running() as worker,
    ):
        yield front, worker


async def ended(front: Engine, job_id: str) -> dict[str, object]:
    with anyio.fail_after(60):
        rec = await front.wait_one(job_id, 60)
    assert rec.is_final, rec.status
    return front.envelope(job_id)


async def test_a_job_by_url_runs_on_the_worker_pushes_its_branch_and_lands_in_the_callers_clone(
    make_settings: SettingsFactory, daemon: GitDaemon, served: Path, clone: Path
) -> None:
    url = daemon.url("app.git")
    settings = make_settings()
    async with front_and_worker(settings) as (front, worker):
        job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=url, cwd=str(clone)))
        assert not settings.repos_dir.exists()  # the front checked the URL; only the worker fetches it
        env = await ended(front, job_id)
        rec = front.get(job_id)
        assert rec.worker == worker.worker.id and rec.cwd == str(settings.worktrees_dir / job_id)
        landed = await front.land(job_id)
        after = front.envelope(job_id)
    assert env["status"] == "completed"
    ws = env["workspace"]
    assert isinstance(ws, dict)
    branch = f"relay/{job_id}"
    assert (ws["branch"], ws["base"], ws["files_changed"]) == (branch, "main", ["app.txt", "new.txt"])
    assert ws["remote"] == {"url": url, "branch": branch, "head": ws["head"], "pushed": True}
    assert git(served / "app.git", "rev-parse", branch) == ws["head"]  # pushed to the daemon
    assert git(served / "app.git", "show", f"{branch}:app.txt") == "hello"
    assert landed["into"] == "main" and git(clone, "rev-parse", "main") == landed["new"]
    assert (clone / "app.txt").read_text() == "hello\n" and (clone / "new.txt").read_text() == "from the worker\n"
    assert git(clone, "status", "--porcelain") == ""
    assert isinstance(after["workspace"], dict) and after["workspace"]["state"] == "landed"


async def test_a_job_in_a_sub_folder_of_a_ref_runs_there_and_its_diff_is_read_through_the_front(
    make_settings: SettingsFactory, daemon: GitDaemon, repo: Path, clone: Path
) -> None:
    first = git(repo, "rev-parse", "main^")  # the first commit: app.txt only, no src/
    settings = make_settings()
    async with front_and_worker(settings) as (front, _):
        prompt = "edit lib [[fake:write=lib.txt~changed\\n]]"
        job_id = front.submit(
            JobRequest(
                agent="claude", prompt=prompt, repo=daemon.url("app.git"), base="main", subdir="src", cwd=str(clone)
            )
        )
        env = await ended(front, job_id)
        page = front.read_output(job_id, "diff", 0, 10_000)
        missing = front.submit(
            JobRequest(
                agent="claude", prompt=prompt, repo=daemon.url("app.git"), base=first, subdir="src", cwd=str(clone)
            )
        )
        lost = await ended(front, missing)
    assert env["status"] == "completed" and front.get(job_id).cwd.endswith(f"{job_id}/src")
    assert env["files_changed"] == ["src/lib.txt"]
    assert "+changed" in str(page["text"])  # read in the worker's cache (it shares the home): nothing fetched
    assert git(clone, "branch", "--list", f"relay/{job_id}") == ""
    assert lost["status"] == "failed" and lost["error"]["code"] == "INVALID_ARGUMENT"  # type: ignore[index]
    assert "no folder 'src'" in lost["error"]["message"]  # type: ignore[index]


async def test_an_unreachable_repository_fails_the_job_with_upstream_error_and_a_hint(
    make_settings: SettingsFactory, clone: Path
) -> None:
    url = f"git://127.0.0.1:{free_port('127.0.0.1')}/app.git"  # nothing listens there
    async with front_and_worker(make_settings()) as (front, _):
        job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=url, cwd=str(clone)))
        env = await ended(front, job_id)
        with pytest.raises(RelayError) as caught:
            await front.land(job_id)
    error = env["error"]
    assert env["status"] == "failed" and isinstance(error, dict)
    assert error["code"] == "UPSTREAM_ERROR" and url in error["message"] and f"git ls-remote {url}" in error["hint"]
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "before a worker placed its worktree" in str(
        caught.value
    )


async def test_a_refused_push_completes_the_job_and_its_workspace_says_the_push_failed(
    make_settings: SettingsFactory, served: Path, tmp_path: Path
) -> None:
    with git_daemon(served, push=False) as daemon:
        url = daemon.url("app.git")
        clone = tmp_path / "clone"
        git(tmp_path, "clone", "--quiet", url, str(clone))
        async with front_and_worker(make_settings()) as (front, _):
            job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=url, cwd=str(clone)))
            env = await ended(front, job_id)
            with pytest.raises(RelayError) as caught:
                await front.land(job_id)
    ws = env["workspace"]
    assert env["status"] == "completed" and isinstance(ws, dict)
    assert ws["files_changed"] == ["app.txt", "new.txt"] and ws["remote"]["pushed"] is False
    assert ws["remote"]["error"]["code"] == "PUSH_REFUSED" and "receive-pack" in ws["remote"]["error"]["hint"]
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "refused the push" in caught.value.message
    assert git(served / "app.git", "branch", "--list", f"relay/{job_id}") == ""


async def test_a_job_run_again_after_its_first_claim_replaces_what_the_earlier_run_left_and_pushed(
    make_settings: SettingsFactory, daemon: GitDaemon, served: Path, clone: Path
) -> None:
    url = daemon.url("app.git")
    settings = make_settings()
    async with Engine(settings.with_(runs_jobs=False)).running() as front:
        job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=url, cwd=str(clone)))
        # An earlier run on this host: placed, an edit committed and pushed, then its worker was lost.
        spaces = Workspaces(settings)
        earlier = spaces.place(job_id, url)
        Path(earlier.path, "app.txt").write_text("the lost run's edit\n")
        spaces.seal_and_push(earlier, "lost run\n")
        spaces.close()
        store = Store(settings.db_path)
        lost = WorkerInfo("lost/1", "lost", "h", 1, None, None, None, (), 1, 15.0)
        store.register_worker(lost)
        [(_, _, epoch)] = store.claim(lost, free=1, max_total=10, per_agent=lambda _: 10)
        assert store.unclaim(job_id, epoch)  # queued again, as for retry="on_lost_worker"
        store.close()
        async with Engine(settings).running():
            env = await ended(front, job_id)
    assert env["status"] == "completed"
    assert env["workspace"]["remote"]["pushed"] is True  # type: ignore[index]
    assert git(served / "app.git", "show", f"relay/{job_id}:app.txt") == "hello"
    assert "lost run" not in git(served / "app.git", "log", "--format=%s", f"relay/{job_id}")


async def test_a_bad_url_ref_or_subdir_is_refused_at_submit_and_the_callers_folder_need_not_exist(
    make_settings: SettingsFactory, daemon: GitDaemon
) -> None:
    url = daemon.url("app.git")
    async with Engine(make_settings().with_(runs_jobs=False)).running() as front:
        for bad in (
            JobRequest(agent="claude", prompt="x", repo="ext::sh -c touch% /tmp/pwned"),
            JobRequest(agent="claude", prompt="x", repo=url, base="a..b"),
            JobRequest(agent="claude", prompt="x", repo=url, subdir="../up"),
            JobRequest(agent="claude", prompt="x", repo=url, workspace="job:abc"),
            JobRequest(agent="claude", prompt="x", repo=url, cwd="relative/clone"),
            JobRequest(agent="claude", prompt="x", subdir="src"),  # subdir without repo
        ):
            with pytest.raises(RelayError) as caught:
                front.submit(bad)
            assert caught.value.code is ErrorCode.INVALID_ARGUMENT and caught.value.hint, bad
        job_id = front.submit(JobRequest(agent="claude", prompt="x", repo=url, cwd="/nowhere/on/this/front"))
        rec = front.get(job_id)
    assert rec.status == "queued" and rec.request["caller_cwd"] == "/nowhere/on/this/front"
    assert rec.request["worktree"] == {"url": url, "base": None, "subdir": ""}


async def test_delegate_with_repo_over_mcp_runs_the_job_from_the_url_and_job_land_lands_it_in_cwd(
    make_settings: SettingsFactory, daemon: GitDaemon, clone: Path
) -> None:
    args = {"prompt": EDIT, "repo": daemon.url("app.git"), "subdir": "src", "cwd": str(clone), "mode": "sync"}
    # The land's test command is the person's (config.toml): a caller's own would be a `full` action, asked about.
    async with Client(build_server(make_settings('[workspaces]\ntest_command = "test -f new.txt"\n'))) as c:
        with anyio.fail_after(60):
            done = await c.call_tool("delegate", args)
            env = done.structured_content or {}
            land = {"job_id": env.get("job_id"), "test_command": "test -f new.txt"}
            landed = await c.call_tool(
                "call_tool", {"server_name": "workspaces", "tool_name": "job_land", "arguments": land}
            )
    assert not done.is_error and env["status"] == "completed", env
    assert env["workspace"]["remote"]["pushed"] is True and env["files_changed"] == ["src/app.txt", "src/new.txt"]
    assert not landed.is_error, landed.content
    assert (clone / "src" / "new.txt").read_text() == "from the worker\n"


def test_relay_run_with_repo_and_ref_runs_from_the_url_and_relay_land_lands_it_in_the_folder_it_ran_from(
    make_settings: SettingsFactory, daemon: GitDaemon, served: Path, clone: Path
) -> None:
    settings = make_settings()
    relay = [str(Path(sys.executable).with_name("relay"))]
    env = {**os.environ, "RELAY_HOME": str(settings.home)}
    argv = [*relay, "run", "claude", EDIT, "--repo", daemon.url("app.git"), "--ref", "main", "--json"]
    ran = subprocess.run(argv, env=env, cwd=clone, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["workspace"]["remote"]["pushed"] is True and out["workspace"]["base"] == "main"
    landed = subprocess.run(
        [*relay, "land", out["job_id"]], env=env, cwd=clone, capture_output=True, text=True, timeout=120, check=False
    )
    assert landed.returncode == 0, landed.stderr
    assert (clone / "new.txt").read_text() == "from the worker\n" and git(clone, "status", "--porcelain") == ""


async def test_a_relay_worker_process_runs_a_job_by_url_for_a_front_and_the_front_lands_it(
    make_settings: SettingsFactory, daemon: GitDaemon, served: Path, clone: Path, workdir: Path
) -> None:
    settings = make_settings()
    env = {**os.environ, "RELAY_HOME": str(settings.home)}
    argv = [str(Path(sys.executable).with_name("relay")), "worker", "--name", "host-b"]
    worker = subprocess.Popen(argv, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        async with Engine(settings.with_(runs_jobs=False)).running() as front:
            job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=daemon.url("app.git"), cwd=str(clone)))
            env_ = await ended(front, job_id)
            landed = await front.land(job_id)
            ran_by = front.get(job_id).worker or ""
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=30))
    assert worker.returncode == 0, err
    assert ran_by.startswith("host-b/") and env_["status"] == "completed"
    assert git(served / "app.git", "rev-parse", f"relay/{job_id}") == env_["workspace"]["head"]  # type: ignore[index]
    assert git(clone, "rev-parse", "main") == landed["new"] and (clone / "new.txt").read_text() == "from the worker\n"


async def test_landing_is_refused_while_the_job_runs_and_from_a_checkout_that_is_not_on_this_host(
    make_settings: SettingsFactory, daemon: GitDaemon
) -> None:
    url = daemon.url("app.git")
    async with front_and_worker(make_settings()) as (front, _):
        slow = front.submit(JobRequest(agent="claude", prompt="wait [[fake:hang]]", repo=url, cwd="/elsewhere"))
        with anyio.fail_after(30):
            while front.get(slow).status != "running":
                await front.wait_one(slow, 0.2)
        with pytest.raises(RelayError) as running:
            front._workspaces.land(slow, None, "rebase", None)  # pyright: ignore[reportPrivateUsage]
        await front.cancel(slow)
        job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=url, cwd="/elsewhere/clone"))
        env = await ended(front, job_id)
        with pytest.raises(RelayError) as elsewhere:
            await front.land(job_id)
    assert "runs on a worker" in running.value.message and "job_wait" in running.value.hint
    assert env["status"] == "completed"
    assert elsewhere.value.code is ErrorCode.INVALID_ARGUMENT and "'/elsewhere/clone'" in elsewhere.value.message
    assert f"git merge relay/{job_id}" in elsewhere.value.hint


class HeldProxy:
    """A TCP proxy to the git daemon that holds its first connection until `release` (a fetch under way)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.accepted = threading.Event()
        self.released = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(client,), daemon=True).start()

    def _one(self, client: socket.socket) -> None:
        self.accepted.set()
        self.released.wait(60)
        try:
            upstream = socket.create_connection(self.target)
        except OSError:  # released at the test's end, the daemon gone already: the held fetch just ends
            client.close()
            return
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.released.set()
        self.server.close()


@pytest.mark.parametrize("through", ["front", "worker"])
async def test_a_job_cancelled_while_its_repository_is_fetched_stops_the_fetch_and_never_runs_its_agent(
    through: str, make_settings: SettingsFactory, daemon: GitDaemon, clone: Path
) -> None:
    proxy = HeldProxy((daemon.host, daemon.port))  # the fetch hangs until the test ends
    settings = make_settings()
    try:
        async with front_and_worker(settings) as (front, worker):
            url = f"git://127.0.0.1:{proxy.port}/app.git"
            job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=url, cwd=str(clone)))
            assert await anyio.to_thread.run_sync(proxy.accepted.wait, 30)  # the worker is fetching
            cancelled = await (front if through == "front" else worker).cancel(job_id)
            with anyio.fail_after(15):  # far less than the fetch's own timeout (600 s)
                await worker.drained()
            rec = front.get(job_id)
    finally:
        proxy.close()
    assert cancelled.status == "cancelled" and rec.status == "cancelled" and rec.pid is None
    assert rec.error is not None and rec.error["code"] == "CANCELLED"
    assert not (settings.worktrees_dir / job_id).exists()  # nothing placed, no agent ran


async def test_a_fetch_that_ends_just_as_its_job_is_cancelled_places_nothing_and_runs_no_agent(
    make_settings: SettingsFactory, daemon: GitDaemon, clone: Path
) -> None:
    proxy = HeldProxy((daemon.host, daemon.port))
    settings = make_settings()
    try:
        async with front_and_worker(settings) as (front, worker):
            url = f"git://127.0.0.1:{proxy.port}/app.git"
            job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=url, cwd=str(clone)))
            assert await anyio.to_thread.run_sync(proxy.accepted.wait, 30)
            await front.cancel(job_id)
            proxy.released.set()  # the fetch goes on at once, and may end before the worker looks at the store
            with anyio.fail_after(30):
                await worker.drained()
            rec = front.get(job_id)
    finally:
        proxy.close()
    assert rec.status == "cancelled" and rec.pid is None
    assert not (settings.worktrees_dir / job_id).exists()


async def test_discarding_a_job_by_url_removes_the_copy_this_home_has_and_leaves_the_pushed_branch(
    make_settings: SettingsFactory, daemon: GitDaemon, served: Path, clone: Path
) -> None:
    async with front_and_worker(make_settings()) as (front, _):
        job_id = front.submit(JobRequest(agent="claude", prompt=EDIT, repo=daemon.url("app.git"), cwd=str(clone)))
        env = await ended(front, job_id)
        with chosen_by_the_person("full"):  # the test's command is the person's own, as `relay land --test`
            permitted = await front.permit_command("test -f new.txt", what="a test command", cwd=str(clone))
        tested = await front.test_worktree(job_id, "test -f new.txt", permitted)  # in the worker's worktree
        discarded = await front.discard(job_id)
        with pytest.raises(RelayError) as again:
            await front.land(job_id)
    branch = f"relay/{job_id}"
    assert env["status"] == "completed" and tested["passed"] is True and discarded["discarded"] is True
    assert git(clone, "branch", "--list", branch) == "" and not Path(discarded["path"]).exists()
    assert git(served / "app.git", "rev-parse", branch) == env["workspace"]["head"]  # type: ignore[index]
    assert again.value.code is ErrorCode.INVALID_ARGUMENT and "discarded" in again.value.message
