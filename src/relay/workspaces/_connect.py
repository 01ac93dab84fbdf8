"""How long a fetch or push waits for a repository's host to answer before it fails (the connect timeout).

git has no connect timeout of its own for every transport, so a host that is down or takes the
connection and never answers would hold a job's fetch for its whole timeout (`FETCH_TIMEOUT_S`).
Each transport gets the bound the way it allows:

- ssh: `ssh -o ConnectTimeout=N` (the TCP connect and the server's greeting), through
  GIT_SSH_COMMAND, unless the user set GIT_SSH_COMMAND, GIT_SSH or core.sshCommand (theirs is kept);
- http(s): git's low-speed limit (`http.lowSpeedLimit` 1 byte/s for `http.lowSpeedTime` N s), unless
  the user set one (GIT_HTTP_LOW_SPEED_* or the config);
- git://: a plain TCP connection, so relay asks first: it connects itself, sends the request a git
  client sends and waits up to N s for the first bytes of the answer; then git runs.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from relay.errors import ErrorCode, RelayError
from relay.workspaces import _git

# Seconds a repository's host has to take the connection and answer (`[workspaces] connect_timeout_s`).
CONNECT_TIMEOUT_S = 30.0
GIT_PORT = 9418
# How often the git:// probe looks whether the job was cancelled while it waits.
PROBE_POLL_S = 0.1


def is_ssh(url: str) -> bool:
    return url.startswith("ssh://") or "://" not in url  # user@host:path is ssh too


def env_for(url: str, cwd: str | Path, connect_s: float) -> dict[str, str]:
    """What git's environment gets so that a fetch or push of `url` gives up on a silent host after `connect_s`."""
    seconds = max(1, round(connect_s))
    if is_ssh(url):
        if os.environ.get("GIT_SSH_COMMAND") or os.environ.get("GIT_SSH") or _config(cwd, "core.sshCommand"):
            return {}
        return {"GIT_SSH_COMMAND": f"ssh -o ConnectTimeout={seconds}"}
    if url.startswith(("http://", "https://")):
        if os.environ.get("GIT_HTTP_LOW_SPEED_LIMIT") or _config(cwd, "http.lowSpeedLimit", url):
            return {}
        return {"GIT_HTTP_LOW_SPEED_LIMIT": "1", "GIT_HTTP_LOW_SPEED_TIME": str(seconds)}
    return {}


def _config(cwd: str | Path, name: str, url: str | None = None) -> bool:
    """Whether git's configuration (for `url`, when given) sets `name`."""
    args = ["config", "--get-urlmatch", name, url] if url else ["config", "--get", name]
    return bool(_git.run(args, cwd, check=False).stdout.strip())


def silent(url: str, shown: str, op: str, connect_s: float) -> RelayError:
    return RelayError(
        ErrorCode.UPSTREAM_ERROR,
        f"{shown} did not answer a {op} within {connect_s:g} s (its host took no connection, or never replied)",
        f"check that this host reaches it (git ls-remote {shown}) and that a git server runs there; "
        "[workspaces] connect_timeout_s (RELAY_GIT_CONNECT_TIMEOUT_S) sets how long relay waits",
    )


def probe(url: str, shown: str, op: str, connect_s: float, stop: Callable[[], bool] | None = None) -> None:
    """For a git:// URL: its host takes a connection and answers within `connect_s`, or UPSTREAM_ERROR.

    A host that refuses the connection or a name that does not resolve is left to git, which says so.
    """
    if not url.startswith("git://"):
        return
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or GIT_PORT
    deadline = time.monotonic() + connect_s
    try:
        conn = socket.create_connection((host, port), timeout=connect_s)
    except TimeoutError:
        raise silent(url, shown, op, connect_s) from None
    except OSError:
        return
    with conn:
        line = f"git-upload-pack {parts.path or '/'}\0host={parts.netloc}\0".encode()
        try:
            conn.sendall(f"{len(line) + 4:04x}".encode() + line)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise silent(url, shown, op, connect_s)
                conn.settimeout(min(left, PROBE_POLL_S))
                try:
                    conn.recv(4)  # the first bytes of the answer (or its end: the server hung up, git says why)
                    break
                except TimeoutError:
                    if stop is not None and stop():
                        raise RelayError(ErrorCode.CANCELLED, "the fetch was stopped", "nothing was kept") from None
            conn.sendall(b"0000")  # a client that wants nothing: the server ends cleanly
        except OSError:  # reset or closed: git tries for itself and says what went wrong
            return
