"""Which isolation a sandboxed run gets on this machine, and the command line that applies it.

bubblewrap (`bwrap`) when it is installed and works here. The sandbox then sees only what it needs,
read-only: the system's own folders (/usr, /etc, the /bin and /lib links), the interpreter's install
folder when it lives elsewhere (node under nvm: that version's folder, never the home around it),
and the run's own folder, the one writable place. Everything else is absent or empty: the homes,
/tmp, /var, /run (so no host Unix socket is in reach: no D-Bus, no docker socket), relay's temp folder
and home. It has no network (abstract sockets go with it) and its own pid namespace. When relay runs
as root, the code runs as user `nobody` inside it.

Without bubblewrap: resource limits, a scrubbed environment, and (when relay runs as root) a drop
to the `nobody` user; what that cannot stop is listed in `cannot_stop`.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# RELAY_SANDBOX_BWRAP=0 turns bubblewrap off (e.g. to compare); any other value, or none, uses it when it works.
BWRAP_ENV = "RELAY_SANDBOX_BWRAP"
# How long the one-time probe of bubblewrap may take.
PROBE_TIMEOUT_S = 10.0
# The unprivileged user code runs as when relay is root.
NOBODY_UID = 65534
# Where setpriv (util-linux) is looked for: it drops a root relay's code to `nobody` inside bubblewrap.
SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"

BUBBLEWRAP = "bubblewrap"
UID_DROP = "rlimits+nobody"
RLIMITS_ONLY = "rlimits"

# The system's folders the sandbox sees, read-only: programs, libraries, /etc. Nothing of /var, /run, /srv,
# /mnt, /media, /opt or the homes (an interpreter installed there gets its own folder bound, see bwrap_argv).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/nix/store", "/gnu/store")
# Folders that exist in the sandbox but hold only what the run writes there (its own, in memory), and their modes.
EMPTY_DIRS = {"/tmp": "1777", "/var/tmp": "1777", "/run": "0755"}
# Folders never shown, whatever lives in them, in addition to the caller's (relay's home) and the user's home.
HOMES = ("/home", "/root")


@dataclass(frozen=True)
class Isolation:
    """What a run is isolated with: `mode` is bubblewrap, rlimits+nobody or rlimits.

    `drop_uid` is the user the code runs as when relay is root: under bubblewrap `setpriv` switches to it
    inside the sandbox (bubblewrap itself runs as root, so it can bind folders only root may enter);
    without bubblewrap the launcher switches before exec.
    """

    mode: str
    bwrap: str | None = None
    drop_uid: int | None = None
    setpriv: str | None = None

    @property
    def network(self) -> bool:
        """Whether the code can reach the network."""
        return self.bwrap is None

    def describe(self) -> str:
        if self.bwrap:
            who = ", runs as user nobody" if self.drop_uid is not None else ""
            text = (
                "bubblewrap: sees only the system folders, the interpreter and its own temp dir (the only writable "
                "place); homes, /tmp, /var and /run empty, so no host Unix socket is in reach; no network, own pid "
                "namespace" + who
            )
            return text + ("; cannot stop: " + "; ".join(self.cannot_stop) if self.cannot_stop else "")
        if self.drop_uid is not None:
            return (
                "no bubblewrap: resource limits, scrubbed environment, a private temp folder, runs as user nobody "
                "(relay's home is private to relay's user); cannot stop: " + "; ".join(self.cannot_stop)
            )
        return (
            "no bubblewrap: resource limits, a scrubbed environment and a private temp folder only (install "
            "bubblewrap for more); cannot stop: " + "; ".join(self.cannot_stop)
        )

    @property
    def cannot_stop(self) -> tuple[str, ...]:
        """What code in this sandbox can still do that a stronger one would stop."""
        if self.bwrap:
            if _is_root() and self.drop_uid is None:
                return (
                    "reading the system folders' files that only root may read (/etc/shadow, host keys): relay runs "
                    "as root and setpriv (util-linux) is missing or could not drop to nobody here, so the code "
                    "runs as root, without capabilities",
                )
            return ()
        gaps = (
            "the network, loopback included (services on 127.0.0.1, relay's own HTTP port among them)",
            "reading files every user may read",
            "writing the machine's shared temp folders (/tmp, /dev/shm)",
        )
        if self.drop_uid is None:
            return (
                "reading and writing all that relay's user can, RELAY_HOME and the home included",
                "connecting to every Unix socket relay's user may use (the desktop's D-Bus, a docker socket)",
                *gaps,
            )
        return (*gaps, "connecting to the Unix sockets every user may use (the system D-Bus, for one)")


def _is_root() -> bool:
    return getattr(os, "geteuid", lambda: -1)() == 0  # no user ids where there is no geteuid (Windows)


def _namespace_flags(user_namespace: bool) -> list[str]:
    """Every namespace of its own. When `setpriv` drops a root relay's code to `nobody`, no user namespace: in
    one, `nobody` is not mapped, and the code, still root, would keep its capabilities over root's files."""
    if user_namespace:
        return ["--unshare-all", "--die-with-parent", "--new-session"]
    own = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return [*own, "--die-with-parent", "--new-session"]


def _drop_flags(iso: Isolation) -> tuple[list[str], list[str]]:
    """bubblewrap's capability flags, and the command prefix that becomes `nobody` inside (none when not root)."""
    if iso.setpriv is None or iso.drop_uid is None:
        return (["--cap-drop", "ALL"] if _is_root() else []), []
    # Until setpriv drops them all: to switch users, and to enter the run's folder (it is nobody's, mode 0700).
    kept = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")
    caps = ["--cap-drop", "ALL", *(flag for cap in kept for flag in ("--cap-add", cap))]
    uid = str(iso.drop_uid)
    prefix = [iso.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return caps, [*prefix, "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--"]


def _system_view() -> list[str]:
    """The read-only system folders (links kept as links: /bin -> usr/bin), a fresh /dev and /proc, empty temp
    folders and /run (with /var/run pointing at it)."""
    argv: list[str] = []
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            argv += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for folder, mode in EMPTY_DIRS.items():
        argv += ["--perms", mode, "--tmpfs", folder]
    return [*argv, "--symlink", "../run", "/var/run"]


def _way_to(path: Path, blanked: Sequence[Path]) -> list[str]:
    """The folders bubblewrap makes on the way to a bind at `path` (those the view does not have yet), made
    passable but not listable (0711): code can reach the interpreter and its own folder, not read the names
    around them. The view has "/", the empty folders, the system's own (real ones) and the blanked ones."""
    have = [Path(folder) for folder in EMPTY_DIRS] + list(blanked)
    argv: list[str] = []
    for folder in reversed(path.parents):
        if folder == Path("/") or folder in have:
            continue
        shown = _under(folder, _system_roots()) and not any(folder.is_relative_to(b) for b in blanked)
        if not shown:
            argv += ["--perms", "0711", "--dir", str(folder)]
    return argv


def _under(path: Path, folders: Iterable[Path]) -> bool:
    return any(path.is_relative_to(folder) for folder in folders)


def _system_roots() -> list[Path]:
    return [Path(folder).resolve() for folder in SYSTEM_DIRS if os.path.isdir(folder)]


def _account_home() -> str | None:
    """The home the system's user database gives relay's user (whatever HOME says)."""
    try:
        import pwd  # Unix only

        return pwd.getpwuid(os.geteuid()).pw_dir
    except (ImportError, KeyError, AttributeError):
        return None


def private_folders(environ: Mapping[str, str], hidden: Sequence[Path]) -> list[Path]:
    """Every folder the sandbox must not show (resolved): the caller's, the homes (/home, /root, $HOME, the
    user's own) and the real temp folder (the runs' parent, and whatever else lives there)."""
    found: list[Path] = [Path(p) for p in HOMES]
    found += [Path(p) for p in (environ.get("HOME"), _account_home()) if p]
    found += [*hidden, Path(tempfile.gettempdir())]
    out: list[Path] = []
    for folder in found:
        resolved = folder.resolve()
        if resolved != Path("/") and resolved not in out:
            out.append(resolved)
    return out


def interpreter_mounts(interpreter: Path, private: Sequence[Path], workdir: Path) -> list[Path]:
    """What to bind, read-only, for the interpreter at `interpreter` (resolved): nothing when it is a system
    program; else its install folder (the parent of its `bin`, e.g. ~/.nvm/versions/node/vX); only the file
    itself when that folder would show a private folder, the run's own or the root."""
    if _under(interpreter, _system_roots()):
        return []
    parent = interpreter.parent
    prefix = parent.parent if parent.name == "bin" else parent
    exposes = [*private, workdir, Path("/")]
    if any(folder.is_relative_to(prefix) for folder in exposes):
        return [interpreter]
    return [prefix]


def bwrap_argv(
    iso: Isolation,
    workdir: Path,
    env: Mapping[str, str],
    private: Sequence[Path],
    command: Sequence[str],
) -> list[str]:
    """`command` (its first word an interpreter, resolved) in bubblewrap, or unchanged without it.

    The order holds the guarantee: the system view, then the private folders blanked where the system view
    would show them, then the interpreter's folder, then the run's own folder. Each later bind adds one
    folder and creates only the empty folders that lead to it; nothing later re-shows a private folder.
    """
    if iso.bwrap is None:
        return list(command)
    caps, drop = _drop_flags(iso)
    argv = [iso.bwrap, *_namespace_flags(iso.setpriv is None), *caps, *_system_view()]
    roots = _system_roots()
    blanked = [folder for folder in private if _under(folder, roots) and folder.is_dir()]
    for folder in blanked:
        argv += ["--perms", "0711", "--tmpfs", str(folder)]
    for path in interpreter_mounts(Path(command[0]), private, workdir):
        argv += [*_way_to(path, blanked), "--ro-bind", str(path), str(path)]
    argv += [*_way_to(workdir, blanked), "--bind", str(workdir), str(workdir)]
    argv += ["--chdir", str(workdir), "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *drop, *command]


@functools.cache
def _bwrap_works(iso: Isolation) -> bool:
    """Whether this very layout starts here (a kernel without user namespaces, or a container, may refuse it)."""
    if iso.bwrap is None:
        return False
    caps, drop = _drop_flags(iso)
    true = shutil.which("true", path=SYSTEM_PATH) or "true"
    probe = [iso.bwrap, *_namespace_flags(iso.setpriv is None), *caps, *_system_view(), "--", *drop, true]
    try:
        done = subprocess.run(
            probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False, cwd="/"
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def detect(environ: Mapping[str, str]) -> Isolation:
    """The strongest isolation available here (probing bubblewrap once per process)."""
    wanted = environ.get(BWRAP_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    path = shutil.which("bwrap") if wanted else None
    if path:
        setpriv = shutil.which("setpriv", path=SYSTEM_PATH) if _is_root() else None
        if setpriv:
            dropped = Isolation(BUBBLEWRAP, bwrap=path, drop_uid=NOBODY_UID, setpriv=setpriv)
            if _bwrap_works(dropped):
                return dropped
        plain = Isolation(BUBBLEWRAP, bwrap=path)
        if _bwrap_works(plain):
            return plain
    if _is_root():
        return Isolation(UID_DROP, drop_uid=NOBODY_UID)
    return Isolation(RLIMITS_ONLY)
