"""The hosts of the cluster tier: namespaces that reach the root side over their own link, which can be cut."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import netns
from tests.cluster.netns import Cluster, Host
from tests.git_daemon import bare_repo, git_daemon

pytestmark = pytest.mark.cluster

# How long a probe inside a namespace waits for a TCP connection before calling the far side unreachable.
CONNECT_TIMEOUT_S = 2.0
# How long a test waits for a process inside a namespace to connect or to answer.
COMMAND_WAIT_S = 15.0
_CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))"


def connects(cluster: Cluster, host: Host, addr: str, port: int) -> bool:
    """Whether a TCP connection from inside `host` to addr:port is made within CONNECT_TIMEOUT_S."""
    probe = cluster.run(host, [sys.executable, "-c", _CONNECT, addr, str(port), str(CONNECT_TIMEOUT_S)])
    return probe.returncode == 0


@pytest.fixture
def served(tmp_path: Path) -> Path:
    """A folder holding app.git, a bare repository whose main has README saying "over the veth"."""
    src = tmp_path / "src"
    src.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    (src / "README").write_text("over the veth\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "first"]):
        subprocess.run(["git", *args], cwd=src, env=env, check=True, capture_output=True)
    base = tmp_path / "served"
    base.mkdir()
    bare_repo(base, "app.git", src)
    return base


def test_each_host_has_its_address_inside_its_namespace_only_and_reaches_the_root_side(
    cluster: Cluster, hosts: list[Host]
) -> None:
    first, second = hosts
    assert len({first.name, second.name}) == 2 and first.root_addr != second.root_addr
    root_addrs = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    for host in hosts:
        inside = cluster.run(host, ["ip", "-o", "-4", "addr", "show"]).stdout
        assert f"{host.addr}/30" in inside and f"{host.addr}/30" not in root_addrs
        assert f"{host.root_addr}/30" in root_addrs and f"{host.root_addr}/30" not in inside
    with socket.socket() as listener:
        listener.bind((first.root_addr, 0))
        listener.listen()
        port = listener.getsockname()[1]
        # the second host reaches a service on the first host's root-side address through its default route
        assert connects(cluster, first, first.root_addr, port) and connects(cluster, second, first.root_addr, port)
        assert not connects(cluster, first, "127.0.0.1", port)  # the root namespace's loopback is not the host's


def test_a_host_clones_from_a_git_daemon_bound_to_the_root_sides_veth_address(
    cluster: Cluster, hosts: list[Host], served: Path, tmp_path: Path
) -> None:
    host = hosts[0]
    with git_daemon(served, host.root_addr) as daemon:
        dest = tmp_path / "clone"
        cloned = cluster.run(host, ["git", "clone", "--quiet", daemon.url("app.git"), str(dest)])
        assert cloned.returncode == 0, cloned.stderr
        assert (dest / "README").read_text() == "over the veth\n"
        assert not connects(cluster, host, host.addr, daemon.port)  # the daemon listens on the root side only


def test_a_cut_link_makes_connections_fail_and_a_restored_link_works_again(
    cluster: Cluster, hosts: list[Host], served: Path
) -> None:
    cut, other = hosts
    with git_daemon(served, cut.root_addr) as daemon:
        url = daemon.url("app.git")
        assert cluster.run(cut, ["git", "ls-remote", url]).returncode == 0
        cluster.cut(cut)
        assert not connects(cluster, cut, cut.root_addr, daemon.port)
        assert connects(cluster, other, cut.root_addr, daemon.port)  # only the cut host lost its link
        cluster.restore(cut)
        listed = cluster.run(cut, ["git", "ls-remote", url])
        assert listed.returncode == 0 and "refs/heads/main" in listed.stdout, listed.stderr


def test_a_connection_open_across_a_cut_delivers_what_was_sent_during_it_once_the_link_is_back(
    cluster: Cluster, hosts: list[Host]
) -> None:
    host = hosts[0]
    echo = "import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30); s.sendall(s.recv(4).upper())"
    with socket.socket() as listener:
        listener.bind((host.root_addr, 0))
        listener.listen()
        listener.settimeout(COMMAND_WAIT_S)
        proc = cluster.popen(host, [sys.executable, "-c", echo, host.root_addr, str(listener.getsockname()[1])])
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(COMMAND_WAIT_S)
            cluster.cut(host)
            conn.sendall(b"ping")  # lost on the cut link, sent again by TCP once it is back
            cluster.restore(host)
            assert conn.recv(4) == b"PING"
        assert proc.wait(timeout=COMMAND_WAIT_S) == 0


def test_closing_the_cluster_ends_its_processes_and_removes_every_namespace_and_link_even_after_a_failure(
    cluster: Cluster,
) -> None:
    own = Cluster()
    started: list[subprocess.Popen[str]] = []
    with pytest.raises(RuntimeError):
        try:
            host = own.add_host()
            own.add_host()
            started.append(own.popen(host, ["sleep", "600"]))
            own.cut(host)  # left cut: its blackhole route goes too
            assert len(own.leftovers()) == 4  # two namespaces, two root-side links
            assert host.root_addr.rsplit(".", 1)[0] in netns.ip("route", "show", "type", "blackhole").stdout
            raise RuntimeError("a test failing half-way")
        finally:
            own.close()
    assert own.leftovers() == [] and started[0].poll() is not None
    assert "10.77." not in netns.ip("route", "show", "type", "blackhole").stdout


def test_namespaces_left_by_a_run_that_was_killed_are_removed_by_the_next(cluster: Cluster) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    name, link = f"relay-t{gone.pid}-1", f"rv{gone.pid}-1r"
    netns.ip("netns", "add", name)
    netns.ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", name)
    free = str(next(net for net in netns.LINKS if net not in netns._used_networks()))  # pyright: ignore[reportPrivateUsage]
    netns.ip("route", "add", "blackhole", free)  # the route of a host that was cut when its run was killed
    try:
        assert {name, f"blackhole {free}"} <= set(netns.remove_stale())
        assert free not in netns.ip("route", "show", "type", "blackhole").stdout
        assert name not in netns.ip("netns", "list").stdout and link not in netns.ip("-o", "link", "show").stdout
    finally:
        netns.ip("netns", "del", name, check=False)
        netns.ip("link", "del", link, check=False)
        netns.ip("route", "del", "blackhole", free, check=False)


def test_where_namespaces_cannot_be_made_the_tier_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="must run"):
        netns.require()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        netns.require()
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda _name: None)
    assert "iproute2" in (netns.missing() or "")
