"""Workspaces by repository URL: fetched into a worker host's cache, a worktree per job, the branch pushed back.

The repositories are served by a real `git daemon` on 127.0.0.1 (pushes enabled) or reached by file:// URLs.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from relay.errors import ErrorCode, RelayError
from relay.workspaces import Workspaces, _net, remote, seal
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore
from tests.conftest import SettingsFactory
from tests.git_daemon import GitDaemon, bare_repo, git_daemon
from tests.workspaces.conftest import git


@dataclass
class Worker:
    """A worker host's RELAY_HOME: its repository cache, its worktrees, its workspace rows."""

    repos: Path
    worktrees: Path
    store: WorkspaceStore

    def place(
        self,
        job_id: str,
        url: str,
        ref: str | None = None,
        subdir: str = "",
        timeout_s: float = 60,
        again: bool = False,
    ) -> WorkspaceRecord:
        return remote.place(
            self.repos,
            self.worktrees,
            self.store,
            job_id,
            url,
            ref=ref,
            subdir=subdir,
            timeout_s=timeout_s,
            again=again,
        )


@pytest.fixture
def served(tmp_path: Path, repo: Path) -> Path:
    """A folder of bare repositories: app.git, a copy of `repo` (main with two commits, tag v1 on the first)."""
    git(repo, "tag", "v1", "main^")
    base = tmp_path / "served"
    base.mkdir()
    bare_repo(base, "app.git", repo)
    return base


@pytest.fixture
def daemon(served: Path) -> Iterator[GitDaemon]:
    with git_daemon(served) as d:
        yield d


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    home = tmp_path / "worker-home"
    store = WorkspaceStore(home / "relay.db")
    yield Worker(repos=home / "repos", worktrees=home / "worktrees", store=store)
    store.close()


def commit_to(served_repo: Path, tmp_path: Path, name: str, text: str) -> str:
    """A commit on main of a served bare repository, pushed there from a scratch clone; its sha."""
    scratch = tmp_path / f"scratch-{name}"
    git(tmp_path, "clone", "--quiet", str(served_repo), str(scratch))
    (scratch / name).write_text(text)
    git(scratch, "add", ".")
    git(scratch, "commit", "-q", "-m", f"add {name}")
    git(scratch, "push", "-q", "origin", "main")
    return git(scratch, "rev-parse", "HEAD")


def test_a_job_placed_from_a_git_daemon_url_runs_on_its_branch_and_its_sealed_branch_is_pushed_back(
    daemon: GitDaemon, served: Path, worker: Worker, tmp_path: Path
) -> None:
    url = daemon.url("app.git")
    rec = worker.place("job1", url)
    main = git(served / "app.git", "rev-parse", "main")
    assert (rec.branch, rec.base_ref, rec.base_sha, rec.state) == ("relay/job1", "main", main, "active")
    assert Path(rec.path) == worker.worktrees / "job1" and Path(rec.cwd, "src", "lib.txt").read_text() == "lib\n"
    assert git(Path(rec.path), "symbolic-ref", "HEAD") == "refs/heads/relay/job1"
    assert worker.store.get("job1") == rec
    Path(rec.path, "new.txt").write_text("made by the agent\n")
    sealed = seal.seal(worker.store, rec, "the job\n\nrelay job job1\n")
    pushed = remote.push(worker.repos, rec)
    assert pushed == {"url": url, "branch": "relay/job1", "head": sealed["head"], "pushed": True}
    assert git(served / "app.git", "rev-parse", "refs/heads/relay/job1") == sealed["head"]
    assert git(served / "app.git", "show", "relay/job1:new.txt") == "made by the agent"
    assert sealed["files_changed"] == ["new.txt"] and sealed["commits"] == 1


def test_each_job_fetches_again_and_starts_from_what_was_pushed_since_through_the_same_cache(
    daemon: GitDaemon, served: Path, worker: Worker, tmp_path: Path
) -> None:
    first = worker.place("job1", daemon.url("app.git"))
    newer = commit_to(served / "app.git", tmp_path, "later.txt", "later\n")
    second = worker.place("job2", daemon.url("app.git"))
    assert first.base_sha != newer and second.base_sha == newer
    assert Path(second.path, "later.txt").is_file() and not Path(first.path, "later.txt").exists()
    assert first.common_dir == second.common_dir == str(remote.cache_of(worker.repos, daemon.url("app.git")))
    assert sorted(p.name for p in worker.repos.iterdir() if p.is_dir()) == [Path(first.common_dir).name]


def test_jobs_placed_at_once_from_one_url_take_turns_at_the_cache_and_each_gets_its_worktree(
    daemon: GitDaemon, worker: Worker
) -> None:
    url = daemon.url("app.git")
    placed: dict[str, str] = {}
    failed: list[BaseException] = []
    start = threading.Barrier(6)

    def one(job_id: str) -> None:
        start.wait()
        try:
            placed[job_id] = worker.place(job_id, url).path
        except BaseException as exc:  # collected for the assertion below
            failed.append(exc)

    threads = [threading.Thread(target=one, args=(f"job{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failed == [] and sorted(placed) == [f"job{i}" for i in range(6)]
    cache = remote.cache_of(worker.repos, url)
    branches = git(cache, "for-each-ref", "--format=%(refname)", "refs/heads/relay")
    assert branches.splitlines() == [f"refs/heads/relay/job{i}" for i in range(6)]
    assert all(Path(p, "app.txt").is_file() for p in placed.values())


def test_a_tag_a_commit_a_full_branch_ref_and_a_sub_folder_are_placed_as_asked(
    daemon: GitDaemon, served: Path, worker: Worker
) -> None:
    url = daemon.url("app.git")
    first = git(served / "app.git", "rev-parse", "main^")
    tagged = worker.place("t", url, ref="v1")
    by_sha = worker.place("c", url, ref=first[:12])
    full = worker.place("f", url, ref="refs/heads/main", subdir="src")
    assert (tagged.base_ref, tagged.base_sha) == (None, first)
    assert (by_sha.base_ref, by_sha.base_sha) == (None, first)
    assert full.base_ref == "main" and full.cwd == str(worker.worktrees / "f" / "src")
    assert not Path(tagged.path, "src").exists()


def test_a_fetch_that_prunes_never_touches_the_branch_of_a_job_still_running(
    daemon: GitDaemon, served: Path, worker: Worker, tmp_path: Path
) -> None:
    running = worker.place("job1", daemon.url("app.git"))
    Path(running.path, "wip.txt").write_text("wip\n")
    git(Path(running.path), "add", ".")
    git(Path(running.path), "commit", "-q", "-m", "wip")
    head = git(Path(running.path), "rev-parse", "HEAD")
    git(served / "app.git", "tag", "-f", "v1", "main")  # a tag moved upstream
    worker.place("job2", daemon.url("app.git"))
    assert git(Path(running.common_dir), "rev-parse", "refs/heads/relay/job1") == head


def test_a_job_run_again_on_the_same_host_replaces_what_its_earlier_run_left_and_pushed(
    daemon: GitDaemon, served: Path, worker: Worker
) -> None:
    url = daemon.url("app.git")
    first = worker.place("job1", url)
    Path(first.path, "first.txt").write_text("the lost run\n")
    seal.seal(worker.store, first, "the lost run\n")
    remote.push(worker.repos, first)
    with pytest.raises(RelayError) as twice:
        worker.place("job1", url)  # not said to be a second run: refused, the first run's work kept
    assert twice.value.code is ErrorCode.INVALID_ARGUMENT and Path(first.path, "first.txt").is_file()
    second = worker.place("job1", url, again=True)
    assert second.path == first.path and not Path(second.path, "first.txt").exists()
    assert worker.store.get("job1") == second
    Path(second.path, "second.txt").write_text("the run that ended\n")
    sealed = seal.seal(worker.store, second, "the second run\n")
    with pytest.raises(RelayError) as refused:
        remote.push(worker.repos, second)  # without again, the first run's branch upstream is not overwritten
    assert refused.value.code is ErrorCode.PUSH_REFUSED
    assert remote.push(worker.repos, second, again=True)["head"] == sealed["head"]
    assert git(served / "app.git", "rev-parse", "relay/job1") == sealed["head"]
    assert sealed["files_changed"] == ["second.txt"]


def test_an_unreachable_url_is_an_upstream_error_and_leaves_no_cache(worker: Worker) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket closes
    url = f"git://127.0.0.1:{port}/app.git"
    with pytest.raises(RelayError) as caught:
        worker.place("job1", url)
    assert caught.value.code is ErrorCode.UPSTREAM_ERROR and "git ls-remote" in caught.value.hint
    assert "connection refused" in caught.value.message.lower()
    assert not remote.cache_of(worker.repos, url).exists() and worker.store.get("job1") is None


def test_a_repository_the_daemon_does_not_have_is_an_upstream_error(daemon: GitDaemon, worker: Worker) -> None:
    with pytest.raises(RelayError) as caught:
        worker.place("job1", daemon.url("nothing.git"))
    assert caught.value.code is ErrorCode.UPSTREAM_ERROR and "not exported" in caught.value.message


def test_a_host_that_takes_the_connection_and_never_answers_is_an_upstream_error_after_the_timeout(
    worker: Worker,
) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"git://127.0.0.1:{silent.getsockname()[1]}/app.git"
        with pytest.raises(RelayError) as caught:
            worker.place("job1", url, timeout_s=1.0)
    assert caught.value.code is ErrorCode.UPSTREAM_ERROR and "did not answer" in caught.value.message


def test_an_unknown_ref_or_sub_folder_is_refused_and_leaves_no_worktree_or_branch(
    daemon: GitDaemon, worker: Worker
) -> None:
    url = daemon.url("app.git")
    for ref, subdir in (("no-such-branch", ""), ("deadbeef", ""), (None, "no/such/folder")):
        with pytest.raises(RelayError) as caught:
            worker.place("job1", url, ref, subdir)
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT, (ref, subdir)
        assert "ls-remote" in caught.value.hint or "folder" in caught.value.hint
        assert not (worker.worktrees / "job1").exists() and worker.store.get("job1") is None
        assert git(remote.cache_of(worker.repos, url), "for-each-ref", "refs/heads/relay") == ""


def test_a_repository_without_a_commit_is_refused_with_a_hint(daemon: GitDaemon, served: Path, worker: Worker) -> None:
    git(served, "init", "-q", "--bare", "empty.git")
    with pytest.raises(RelayError) as caught:
        worker.place("job1", daemon.url("empty.git"))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "no commit" in caught.value.message
    assert worker.store.get("job1") is None and not (worker.worktrees / "job1").exists()


@pytest.mark.parametrize(
    ("url", "ref", "subdir"),
    [
        ("ext::sh -c touch% /tmp/pwned", None, ""),
        ("--upload-pack=touch /tmp/pwned", None, ""),
        ("/a/plain/path", None, ""),
        ("", None, ""),
        ("file:///x.git", "--output=/tmp/x", ""),
        ("file:///x.git", "main:evil", ""),
        ("file:///x.git", None, "../outside"),
        ("file:///x.git", None, "/etc"),
    ],
)
def test_a_malformed_url_ref_or_sub_folder_is_refused_before_git_runs(
    url: str, ref: str | None, subdir: str, worker: Worker
) -> None:
    with pytest.raises(RelayError) as caught:
        worker.place("job1", url, ref, subdir)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and caught.value.hint
    assert not worker.repos.exists() or not any(worker.repos.iterdir())


def test_a_password_in_the_url_never_appears_in_an_error() -> None:
    err = _net.translate("fetch", "https://me:s3cret@example.invalid/app.git", "fatal: unable to access 'x'")
    assert "s3cret" not in err.message + err.hint and "me:***@example.invalid" in err.message


@pytest.mark.parametrize(
    ("op", "said", "code"),
    [
        ("fetch", "fatal: unable to connect to 10.0.0.1:\nerrno=No route to host", ErrorCode.UPSTREAM_ERROR),
        ("fetch", "fatal: could not read Username for 'https://h': terminal prompts disabled", ErrorCode.AUTH_MISSING),
        ("fetch", "fatal: couldn't find remote ref refs/heads/relay/x", ErrorCode.INVALID_ARGUMENT),
        ("fetch", "fatal: something nobody foresaw", ErrorCode.UPSTREAM_ERROR),
        ("push", " ! [rejected]        relay/x -> relay/x (fetch first)", ErrorCode.PUSH_REFUSED),
        ("push", " ! [remote rejected] relay/x -> relay/x (pre-receive hook declined)", ErrorCode.PUSH_REFUSED),
        ("push", "fatal: unable to connect to h:\nerrno=Connection refused", ErrorCode.UPSTREAM_ERROR),
        ("push", "git@h: Permission denied (publickey).", ErrorCode.AUTH_MISSING),
    ],
)
def test_what_git_says_when_a_fetch_or_push_fails_maps_to_one_code(op: str, said: str, code: ErrorCode) -> None:
    err = _net.translate(op, "git://h/app.git", said)  # type: ignore[arg-type]
    assert err.code is code and err.hint


def test_a_daemon_that_takes_no_pushes_refuses_the_branch_which_stays_on_the_worker(
    served: Path, worker: Worker
) -> None:
    with git_daemon(served, push=False) as read_only:
        rec = worker.place("job1", read_only.url("app.git"))
        Path(rec.path, "new.txt").write_text("x\n")
        seal.seal(worker.store, rec, "the job\n")
        with pytest.raises(RelayError) as caught:
            remote.push(worker.repos, rec)
        quiet = remote.push_quietly(worker.repos, rec)
    assert caught.value.code is ErrorCode.PUSH_REFUSED and "receive-pack" in caught.value.hint
    assert quiet["pushed"] is False and quiet["error"]["code"] == "PUSH_REFUSED"
    assert git(served / "app.git", "for-each-ref", "refs/heads/relay") == ""
    assert git(Path(rec.common_dir), "show", "relay/job1:new.txt") == "x"


def test_a_branch_of_that_name_holding_other_commits_upstream_refuses_the_push(
    daemon: GitDaemon, served: Path, worker: Worker, tmp_path: Path
) -> None:
    rec = worker.place("job1", daemon.url("app.git"))
    other = commit_to(served / "app.git", tmp_path, "other.txt", "other\n")
    git(served / "app.git", "update-ref", "refs/heads/relay/job1", other)
    Path(rec.path, "new.txt").write_text("x\n")
    seal.seal(worker.store, rec, "the job\n")
    with pytest.raises(RelayError) as caught:
        remote.push(worker.repos, rec)
    assert caught.value.code is ErrorCode.PUSH_REFUSED
    assert git(served / "app.git", "rev-parse", "refs/heads/relay/job1") == other


def test_a_worktree_of_a_local_checkout_has_no_url_and_is_not_pushed(
    make_settings: SettingsFactory, repo: Path
) -> None:
    spaces = Workspaces(make_settings())
    try:
        rec = spaces.create("job1", str(repo), base=None, carry_changes=False)
        assert spaces.url_of(rec) is None
        with pytest.raises(RelayError) as caught:
            spaces.push(rec)
    finally:
        spaces.close()
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
