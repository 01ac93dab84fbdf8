"""Reaching a repository by its URL: which URLs relay takes, git limited to the usual transports, failures explained.

Every fetch and push of a remote workspace goes through `run`, so its failures are translated in
one place: the repository cannot be reached (`UPSTREAM_ERROR`), git has no credentials for it
(`AUTH_MISSING`), or it took the connection but refused the push (`PUSH_REFUSED`).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from relay.errors import ErrorCode, RelayError, invalid
from relay.secrets import KEY_SHAPES
from relay.workspaces import _connect, _git

# Fetching a large repository over a slow link; a host that never answers fails after this.
FETCH_TIMEOUT_S = 600.0
# Pushing a job's branch back (its new objects only).
PUSH_TIMEOUT_S = 300.0
# The transports git may use for a workspace's URL (and its submodules): never ext:: or fd::, which run commands.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"
_SCHEMES = ("file://", "git://", "http://", "https://", "ssh://")
_SCP_LIKE = re.compile(r"^[\w.+-]+@[\w.-]+:[^/]")  # git@host:owner/repo.git
_PASSWORD = re.compile(r"(://[^/@:\s']*):[^/@\s']*@")
# The user-info of a URL with a scheme (`https://user:token@host/...`): what is before the host's @.
_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://([^/@]*)@", re.I)
# What git prints when no connection to the repository could be made.
_NO_CONNECTION = (
    "could not resolve",
    "connection refused",
    "unable to connect",
    "unable to access",
    "network is unreachable",
    "no route to host",
    "connection timed out",
    "connection reset",
    "failed to connect",
    "could not read from remote repository",
    "timed out",  # ssh's ConnectTimeout (also during the banner exchange)
    "operation too slow",  # curl's low-speed limit: an http(s) host that stopped answering
    "did not answer",
)
# What git (ssh, curl) prints when the host gave up within the connect timeout.
_SILENT = ("during banner exchange", "operation too slow", "connection timed out", "operation timed out")
# What git prints when the repository wants credentials it was not given (prompts are off).
_NO_CREDENTIALS = (
    "could not read username",
    "could not read password",
    "authentication failed",
    "permission denied (publickey",
    "terminal prompts disabled",
)
# A remote ref named in a fetch's refspec that the repository does not have.
_NO_REF = ("couldn't find remote ref",)

Op = Literal["fetch", "push"]


def shown(url: str) -> str:
    """The URL (or a text holding URLs, such as git's own words) as a message may show it: a password in a
    URL's user-info replaced by ***, and a key-shaped user name (a token given as the user) too."""
    return KEY_SHAPES.sub("***", _PASSWORD.sub(r"\1:***@", url))


def has_secret(url: str) -> bool:
    """Whether `url` carries a credential: a password in its user-info, or a token given as the user name."""
    found = _USERINFO.match(url)
    if found is None:
        return False
    user, _, password = found.group(1).partition(":")
    return bool(password) or bool(KEY_SHAPES.search(user))


def without_secret(url: str) -> str:
    """`url` with its user-info cut to the user name (none when the user name was the token)."""
    found = _USERINFO.match(url)
    if found is None:
        return url
    user = found.group(1).partition(":")[0]
    keep = "" if KEY_SHAPES.search(user) or not user else user + "@"
    return url[: found.start(1)] + keep + url[found.end(0) :]


def check_url(url: str) -> str:
    """`url` if relay can fetch from it; INVALID_ARGUMENT otherwise.

    A URL that carries a password or token is refused: a job's request is stored (the queue, `relay show`,
    the dashboard, the audit log) and read by whichever worker claims it, so a credential in it would be
    written down; each worker reaches the repository with its own git credentials instead.
    """
    if not url or url != url.strip() or url.startswith("-") or any(c in url for c in "\x00\r\n"):
        raise invalid(
            f"repository URL {shown(url)!r} is empty or malformed", "pass the URL you would give to git clone"
        )
    if not (url.startswith(_SCHEMES) or _SCP_LIKE.match(url)):
        raise invalid(
            f"repository URL {shown(url)!r} is not one relay fetches",
            "use a file://, git://, http(s)://, ssh:// or user@host:path URL",
        )
    if has_secret(url):
        raise invalid(
            f"repository URL {shown(url)!r} carries a password or token, which relay would store with the job",
            "put the token in a git credential helper on the workers, not in the URL (git config --global "
            "credential.helper store, then git ls-remote the URL once there), or use an SSH key; "
            f"then pass {without_secret(url)!r}",
        )
    return url


def check_ref(ref: str) -> str:
    """`ref` if it can name a branch, tag or commit (it is looked up later); INVALID_ARGUMENT otherwise."""
    if not ref.strip() or ref.startswith("-") or any(c in ref for c in "\x00\r\n :?*[\\^~") or ".." in ref:
        raise invalid(f"ref {ref!r} is not a ref", "pass a branch, tag or commit, or omit ref for the default branch")
    return ref


def translate(op: Op, url: str, said: str) -> RelayError:
    """The RelayError for a fetch or push of `url` that failed, git having said `said`."""
    lower = said.lower()
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if line.startswith(("fatal:", "error:", "!"))), 0)
    words = shown(" / ".join(lines[first : first + 3])) or "git gave no reason"  # git names the URL it used
    where = shown(url)
    if any(p in lower for p in _NO_CREDENTIALS):
        return RelayError(
            ErrorCode.AUTH_MISSING,
            f"git has no credentials for {where}: {words}",
            "give this host access to the repository: an SSH key, or a token in a git credential helper "
            f"(git config --global credential.helper store, then git ls-remote {where} once)",
        )
    if any(p in lower for p in _NO_REF):
        return invalid(f"{where} has no such ref: {words}", f"git ls-remote {where} lists what it has")
    if op == "push" and not any(p in lower for p in _NO_CONNECTION):
        return RelayError(
            ErrorCode.PUSH_REFUSED,
            f"{where} refused the push: {words}",
            "the job's branch is kept on the worker; allow pushes to relay/* branches there "
            "(a git daemon needs --enable=receive-pack), or delete a branch of that name that holds other commits",
        )
    return RelayError(
        ErrorCode.UPSTREAM_ERROR,
        f"could not {op} {where}: {words}",
        f"check the URL and that this host reaches it (git ls-remote {where})",
    )


def run(
    args: Sequence[str],
    cwd: str | Path,
    *,
    url: str,
    op: Op,
    timeout: float,
    connect_s: float = _connect.CONNECT_TIMEOUT_S,
    stop: Callable[[], bool] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`git args` that talks to `url`, limited to ALLOWED_PROTOCOLS; its failure translated (see `translate`).
    A host that does not answer within `connect_s` fails it then (relay.workspaces._connect).
    `stop`: git is killed once it says so (CANCELLED)."""
    connect_s = min(connect_s, timeout)
    _connect.probe(url, shown(url), op, connect_s, stop)
    try:
        env = {"GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS, **_connect.env_for(url, cwd, connect_s)}
        done = _git.run(args, cwd, env=env, check=False, timeout=timeout, stop=stop)
    except RelayError as err:
        if err.code is not ErrorCode.TIMEOUT:
            raise
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR,
            f"{shown(url)} did not answer a {op} within {timeout:.0f} s",
            f"check that this host reaches it (git ls-remote {shown(url)}), then try again",
        ) from None
    if done.returncode != 0:
        if any(p in done.stderr.lower() for p in _SILENT):
            raise _connect.silent(url, shown(url), op, connect_s)
        raise translate(op, url, done.stderr)
    return done
