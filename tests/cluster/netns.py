"""Hosts simulated by network namespaces: each joined to the root namespace by a veth pair with private addresses.

A `Host` is a namespace `relay-t<pid>-<n>` whose end of the pair has 10.77.X.2/30 and a default
route to the root side, 10.77.X.1/30 (`Host.root_addr`): a process inside reaches anything that
listens on a root-namespace address, and nothing inside is reachable except through that pair.
`Cluster.cut` takes the root side of a host's link down (its packets vanish, as with a pulled
cable; a blackhole route on the root side drops what is sent to it) and `Cluster.restore` brings
it back. `Cluster.close` ends the processes it started inside
and removes every namespace and link it made; namespaces left by a run that was killed are removed
by the next run (their owner's pid is in their name).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

# The private block the hosts' links are taken from: host links are 10.77.N.0/30, N from 1 to 254.
SUBNET = ipaddress.ip_network("10.77.0.0/16")
LINKS = tuple(ipaddress.ip_network(f"10.77.{n}.0/30") for n in range(1, 255))
# A command of the harness (ip, a process inside a namespace) that must end within this.
COMMAND_TIMEOUT_S = 30.0
# The harness's namespaces: relay-t<pid of the test process>-<n>.
_NAME = re.compile(r"^relay-t(\d+)-(\d+)$")
# The n of relay-t<pid>-<n>: unique in this process, whichever Cluster makes the host.
_numbers = itertools.count(1)
# Namespaces and addresses are handed out one run at a time (two test runs on one machine). Namespaces
# belong to the machine, so the lock does too: not under TMPDIR, which each test tier sets for itself.
_LOCK = Path("/run/lock" if os.path.isdir("/run/lock") else "/tmp", "relay-netns.lock")


@dataclass(frozen=True)
class Host:
    """One simulated host: a network namespace and its veth link to the root namespace."""

    name: str  # the namespace (ip netns exec NAME ...)
    root_if: str  # the link's end in the root namespace (what cut and restore act on)
    ns_if: str  # the link's end inside the namespace
    root_addr: str  # the root side's address: what a process inside dials to reach a service
    addr: str  # the host's own address, inside its namespace only


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, check=check, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL
    )


def missing() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "the cluster tier makes network namespaces and needs root"
    if shutil.which("ip") is None:
        return "the cluster tier needs `ip` (apt-get install iproute2)"
    probe = f"relay-t{os.getpid()}-probe"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed here: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def require() -> None:
    """Fail (under CI=true) or skip, loudly, where the cluster tier cannot run; it never passes without running."""
    why = missing()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}; under CI=true the cluster tier must run")
    pytest.skip(f"{why} (under CI=true this fails)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _link_name(pid: int, n: int) -> str:
    return f"rv{pid}-{n}r"  # at most 13 characters: link names stop at 15


def _link_of(host: Host) -> str:
    return str(ipaddress.ip_network(f"{host.root_addr}/30", strict=False))


def _mac(link: str, namespace: str | None = None) -> str:
    where = ["-n", namespace] if namespace else []
    return str(json.loads(ip(*where, "-j", "link", "show", "dev", link).stdout)[0]["address"])


def remove_stale() -> list[str]:
    """Namespaces, root-side links and cut routes of harness runs whose process is gone."""
    removed: list[str] = []
    with _one_run_at_a_time():
        for line in ip("netns", "list", check=False).stdout.splitlines():
            name = line.split(" ", 1)[0]
            found = _NAME.match(name)
            if found and not _alive(int(found[1])):
                ip("netns", "del", name, check=False)
                ip("link", "del", _link_name(int(found[1]), int(found[2])), check=False)
                removed.append(name)
        used = _used_networks()
        for line in ip("route", "show", "type", "blackhole", check=False).stdout.splitlines():
            words = line.split()
            net = words[1] if len(words) > 1 and words[0] == "blackhole" else ""
            if net in {str(link) for link in LINKS} - {str(u) for u in used}:
                ip("route", "del", "blackhole", net, check=False)
                removed.append(f"blackhole {net}")
    return removed


def _used_networks() -> set[ipaddress.IPv4Network]:
    """The /30s of SUBNET that an address of the root namespace is in already."""
    used: set[ipaddress.IPv4Network] = set()
    for line in ip("-o", "-4", "addr", "show", check=False).stdout.splitlines():
        for word in line.split():
            if "/" in word and word[0].isdigit():
                iface = ipaddress.ip_interface(word)
                if iface.ip in SUBNET:
                    used.add(ipaddress.ip_network(f"{iface.ip}/30", strict=False))
    return used


@contextlib.contextmanager
def _one_run_at_a_time() -> Iterator[None]:
    with open(_LOCK, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class Cluster:
    """The hosts of one test; `close` removes everything it made, whatever happened in between."""

    def __init__(self) -> None:
        self.hosts: list[Host] = []
        self._procs: list[subprocess.Popen[str]] = []
        self._pid = os.getpid()

    def add_host(self) -> Host:
        """A new namespace with its veth link up, addressed, and a default route to the root side."""
        n = next(_numbers)
        with _one_run_at_a_time():
            used = _used_networks()
            net = next((net for net in LINKS if net not in used), None)
            if net is None:
                raise AssertionError(f"every link of {SUBNET} is in use: `ip -4 addr` lists them")
            root_addr, addr = (str(a) for a in list(net.hosts())[:2])
            host = Host(f"relay-t{self._pid}-{n}", _link_name(self._pid, n), "eth0", root_addr, addr)
            self.hosts.append(host)  # before anything is made: close() removes a half-made host too
            ip("netns", "add", host.name)
            ip("link", "add", host.root_if, "type", "veth", "peer", "name", host.ns_if, "netns", host.name)
            ip("addr", "add", f"{root_addr}/30", "dev", host.root_if)
            ip("link", "set", host.root_if, "up")
        ip("-n", host.name, "link", "set", "lo", "up")
        ip("-n", host.name, "addr", "add", f"{addr}/30", "dev", host.ns_if)
        ip("-n", host.name, "link", "set", host.ns_if, "up")
        ip("-n", host.name, "route", "add", "default", "via", root_addr)
        # Each side knows the other's hardware address for good: no ARP, so a link brought back up
        # carries packets at once (a failed ARP entry left by the cut would refuse them for seconds),
        # and a TCP connection that lived through the cut goes on, as across a cable plugged back in.
        ip(
            "-n",
            host.name,
            "neigh",
            "replace",
            root_addr,
            "lladdr",
            _mac(host.root_if),
            "dev",
            host.ns_if,
            "nud",
            "permanent",
        )
        ip("neigh", "replace", addr, "lladdr", _mac(host.ns_if, host.name), "dev", host.root_if, "nud", "permanent")
        return host

    def argv(self, host: Host, argv: Sequence[str]) -> list[str]:
        """`argv` as run inside `host`'s namespace."""
        return ["ip", "netns", "exec", host.name, *argv]

    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        timeout: float = COMMAND_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside `host` to its end (bounded by `timeout`); its output captured, its status not checked."""
        return subprocess.run(
            self.argv(host, argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def popen(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
    ) -> subprocess.Popen[str]:
        """Start `argv` inside `host` in a process group of its own; `close` kills that group."""
        proc = subprocess.Popen(
            self.argv(host, argv),
            text=True,
            start_new_session=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
        self._procs.append(proc)
        return proc

    def cut(self, host: Host) -> None:
        """Take `host`'s link down: from now on its packets to the root side, and back, are lost.

        Inside, the link has no carrier (its routes stay: a connect hangs, as on a host whose cable
        was pulled). On the root side, where the link's route goes with it, a blackhole route takes
        its place, so what is sent to the host vanishes instead of leaving by the default route.
        """
        ip("link", "set", host.root_if, "down")
        ip("route", "replace", "blackhole", _link_of(host))

    def restore(self, host: Host) -> None:
        """Bring `host`'s link back up, with its address and route."""
        ip("route", "del", "blackhole", _link_of(host), check=False)
        ip("link", "set", host.root_if, "up")

    def close(self) -> None:
        """End every process started inside, then remove every namespace and link; errors do not stop the rest."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=COMMAND_TIMEOUT_S)
        for host in self.hosts:
            ip("route", "del", "blackhole", _link_of(host), check=False)  # a host left cut
            ip("netns", "del", host.name, check=False)
            ip("link", "del", host.root_if, check=False)  # gone with the namespace, unless that failed half-way
        self.hosts.clear()
        self._procs.clear()

    def leftovers(self) -> list[str]:
        """Namespaces and links of this process still present (empty after `close`)."""
        names = [line.split(" ", 1)[0] for line in ip("netns", "list", check=False).stdout.splitlines()]
        links = ip("-o", "link", "show", check=False).stdout
        ours = [n for n in names if n.startswith(f"relay-t{self._pid}-") and not n.endswith("-probe")]
        return ours + re.findall(rf"\b(rv{self._pid}-\d+r)\b", links)
