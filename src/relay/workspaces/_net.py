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
from relay.workspaces import _git

# Fetching a large repository over a slow link; a host that never answers fails after this.
FETCH_TIMEOUT_S = 600.0
# Pushing a job's branch back (its new objects only).
PUSH_TIMEOUT_S = 300.0
# The transports git may use for a workspace's URL (and its submodules): never ext:: or fd::, which run commands.
ALLOWED_PROTOCOLS = "file:git:http:https:ssh"
_SCHEMES = ("file://", "git://", "http://", "https://", "ssh://")
_SCP_LIKE = re.compile(r"^[\w.+-]+@[\w.-]+:[^/]")  # git@host:owner/repo.git
_PASSWORD = re.compile(r"(://[^/@:]*):[^/@]*@")
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
)
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
    """The URL as it may appear in a message: a password in it replaced by ***."""
    return _PASSWORD.sub(r"\1:***@", url)


def check_url(url: str) -> str:
    """`url` if relay can fetch from it; INVALID_ARGUMENT otherwise."""
    if not url or url != url.strip() or url.startswith("-") or any(c in url for c in "\x00\r\n"):
        raise invalid(
            f"repository URL {shown(url)!r} is empty or malformed", "pass the URL you would give to git clone"
        )
    if not (url.startswith(_SCHEMES) or _SCP_LIKE.match(url)):
        raise invalid(
            f"repository URL {shown(url)!r} is not one relay fetches",
            "use a file://, git://, http(s)://, ssh:// or user@host:path URL",
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
    words = " / ".join(lines[first : first + 3]) or "git gave no reason"
    where = shown(url)
    if any(p in lower for p in _NO_CREDENTIALS):
        return RelayError(
            ErrorCode.AUTH_MISSING,
            f"git has no credentials for {where}: {words}",
            "give this host access to the repository (an SSH key, a git credential helper, or a token in the URL)",
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
    stop: Callable[[], bool] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`git args` that talks to `url`, limited to ALLOWED_PROTOCOLS; its failure translated (see `translate`).
    `stop`: git is killed once it says so (CANCELLED)."""
    try:
        env = {"GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS}
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
        raise translate(op, url, done.stderr)
    return done
