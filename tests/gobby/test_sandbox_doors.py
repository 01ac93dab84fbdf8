"""The sandbox has no door: no host Unix socket in reach, and the home hidden even when the temp folder or the
interpreter lives in it. Real interpreters under the real sandbox, each language it supports."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from relay.sandbox import detect, run_code, runner
from relay.sandbox.isolation import BUBBLEWRAP, BWRAP_ENV, NOBODY_UID

pytestmark = pytest.mark.anyio
WAIT_S = 60.0
SECRET = "sk-home-secret-7d2a91"
HAS_BWRAP = detect({}).mode == BUBBLEWRAP
needs_bwrap = pytest.mark.skipif(
    not HAS_BWRAP, reason="only bubblewrap closes the doors (without it, see the cannot_stop test below)"
)

# What each language reports for a path that is not there.
MISSING = {"python": "FileNotFoundError", "node": "ENOENT", "bash": "absent"}
# Each language tries every path and prints what it found, one JSON object of path -> outcome.
CONNECT = {
    "python": (
        "import json, socket\nfound = {}\nfor p in PATHS:\n    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n        s.connect(p); found[p] = 'connected'\n"
        "    except OSError as e:\n        found[p] = type(e).__name__\n    s.close()\nprint(json.dumps(found))\n"
    ),
    "node": (
        "const net = require('net');\nconst found = {};\nlet left = PATHS.length;\n"
        "const done = () => { if (--left === 0) console.log(JSON.stringify(found)); };\n"
        "for (const p of PATHS) {\n  const s = net.connect(p);\n"
        "  s.on('connect', () => { found[p] = 'connected'; s.destroy(); done(); });\n"
        "  s.on('error', (e) => { found[p] = e.code; done(); });\n}\n"
    ),
    # The shell itself, and any program it starts (python3 here), see the same filesystem.
    "bash": """printf '{'; sep=''
for p in PATHS; do
  if [ ! -e "$p" ]; then r=absent
  elif python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$p" 2>/dev/null; then
    r=connected
  else r=refused; fi
  printf '%s"%s": "%s"' "$sep" "$p" "$r"; sep=', '
done
echo '}'
""",
}
# Read the secret, list the home; print both (the error's name when refused).
PEEK = {
    "python": (
        "import json, os\ntry:\n    open(SECRET_PATH).read(); read = 'read'\n"
        "except OSError as e:\n    read = type(e).__name__\n"
        "try:\n    names = sorted(os.listdir(HOME))\nexcept OSError as e:\n    names = type(e).__name__\n"
        "print(json.dumps([read, names]))\n"
    ),
    "node": (
        "const fs = require('fs');\nlet read, names;\n"
        "try { fs.readFileSync(SECRET_PATH); read = 'read'; } catch (e) { read = e.code; }\n"
        "try { names = fs.readdirSync(HOME).sort(); } catch (e) { names = e.code; }\n"
        "console.log(JSON.stringify([read, names]));\n"
    ),
    "bash": r"""if [ -e "$SECRET_PATH" ]; then read=read; else read=absent; fi
if listed=$(ls -A "$HOME_DIR" 2>/dev/null); then
  names=$(echo "$listed" | python3 -c 'import json, sys; print(json.dumps(sorted(sys.stdin.read().split())))')
else names='"unlistable"'; fi
echo "[\"$read\", $names]"
""",
}
UNLISTABLE = {"python": "PermissionError", "node": "EACCES", "bash": "unlistable"}
# A root relay's code runs as nobody: the folders on the way to its own are passable, not listable. Otherwise
# (the code runs as relay's user, their owner) it lists them and finds only that way.
AS_NOBODY = os.geteuid() == 0


def listing(language: str, names: list[str]) -> str | list[str]:
    """What listing a folder of the way to the run's own folder shows: nothing, or only `names`."""
    return UNLISTABLE[language] if AS_NOBODY else sorted(names)


LANGUAGES = ["python", "node", "bash"]


def with_paths(language: str, paths: list[str]) -> str:
    if language == "bash":
        return CONNECT["bash"].replace("PATHS", " ".join(f"'{p}'" for p in paths))
    return CONNECT[language].replace("PATHS", json.dumps(paths))


def peek_code(language: str, home: Path) -> str:
    secret = str(home / "secret.txt")
    if language == "bash":
        return f"SECRET_PATH='{secret}'\nHOME_DIR='{home}'\n" + PEEK["bash"]
    return PEEK[language].replace("SECRET_PATH", json.dumps(secret)).replace("HOME", json.dumps(str(home)))


async def run(code: str, language: str, out: Path, hidden: list[Path] | None = None) -> runner.Outcome:
    if language == "node" and shutil.which("node") is None:
        pytest.fail("node is needed for this test")
    with anyio.fail_after(WAIT_S):
        return await run_code(code, language, 20, out, environ=dict(os.environ), hidden=hidden or [])


def listen(path: Path) -> socket.socket:
    """A Unix socket listening at `path` that anyone may connect to (so only being out of sight stops a client)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    path.chmod(0o777)
    return server


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp (which the sandbox always blanks), where a home or a TMPDIR may well be: /var/tmp."""
    folder = Path(tempfile.mkdtemp(prefix="relay-door-", dir="/var/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def host_sockets(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Listening sockets where a host keeps them: /run (as a desktop's D-Bus or docker's), /dev/shm, /tmp, the home,
    and the folder relay's TMPDIR names (outside /tmp here, as it often is)."""
    name = f"relay-door-{secrets.token_hex(4)}.sock"
    tmpdir = outside_tmp / "tmpdir"
    tmpdir.mkdir(mode=0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))  # what relay's TMPDIR would make it
    public = Path(tempfile.mkdtemp(prefix="relay-door-", dir="/tmp"))
    public.chmod(0o755)
    home = outside_tmp / "home"
    home.mkdir(mode=0o755)
    monkeypatch.setenv("HOME", str(home))
    places = [public / name, tmpdir / name, home / name]
    places += [Path(d) / name for d in ("/run", "/dev/shm") if os.access(d, os.W_OK)]
    servers = [listen(p) for p in places]
    try:
        yield [str(p) for p in places]
    finally:
        for server in servers:
            server.close()
        for p in places:
            p.unlink(missing_ok=True)
        shutil.rmtree(public, ignore_errors=True)


@needs_bwrap
@pytest.mark.parametrize("language", LANGUAGES)
async def test_no_host_unix_socket_can_be_connected_to_from_sandboxed_code(
    tmp_path: Path, host_sockets: list[str], language: str
) -> None:
    assert any(p.startswith("/run/") for p in host_sockets) or os.geteuid() != 0
    for path in host_sockets:  # the host itself can connect: the sockets are live
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
    out = await run(with_paths(language, host_sockets), language, tmp_path / "out", hidden=[Path.home()])
    assert (out.success, out.stderr) == (True, ""), out
    assert json.loads(out.result) == dict.fromkeys(host_sockets, MISSING[language])


@pytest.fixture
def home_with_tmpdir(outside_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME=<folder>/home with a secret in it, and relay's TMPDIR inside that home (<folder>/home/tmp)."""
    home = outside_tmp / "home"
    (home / "tmp").mkdir(parents=True)
    (home / "secret.txt").write_text(SECRET)
    for path in (home, home / "tmp", home / "secret.txt"):
        path.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(home / "tmp"))
    return home


@needs_bwrap
@pytest.mark.parametrize("language", LANGUAGES)
async def test_the_home_is_hidden_when_relays_temp_folder_lives_in_it(
    tmp_path: Path, home_with_tmpdir: Path, language: str
) -> None:
    home = home_with_tmpdir
    out = await run(peek_code(language, home), language, tmp_path / "out", hidden=[home])
    assert (out.success, out.stderr) == (True, ""), out
    assert json.loads(out.result) == [MISSING[language], listing(language, ["tmp"])]


@needs_bwrap
async def test_the_home_is_hidden_even_when_the_caller_names_no_hidden_folder(
    tmp_path: Path, home_with_tmpdir: Path
) -> None:
    out = await run(peek_code("python", home_with_tmpdir), "python", tmp_path / "out", hidden=[])
    assert json.loads(out.result) == ["FileNotFoundError", listing("python", ["tmp"])], out


def link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@pytest.fixture
def interpreters_in_home(home_with_tmpdir: Path) -> dict[str, list[str]]:
    """node as nvm installs it (~/.nvm/versions/node/vX/bin/node) and a python virtualenv made with --copies."""
    home = home_with_tmpdir
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed for this test")
    installed = home / ".nvm" / "versions" / "node" / "v99.0.0" / "bin" / "node"
    link_or_copy(Path(node).resolve(), installed)
    other = home / ".nvm" / "versions" / "node" / "v1.0.0"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text(SECRET)
    base = Path(shutil.which("python3", path=runner.SAFE_PATH) or sys.executable).resolve()
    venv = home / "venv"
    link_or_copy(base, venv / "bin" / "python3")
    (venv / "pyvenv.cfg").write_text(f"home = {base.parent}\ninclude-system-site-packages = false\n")
    for path in home.rglob("*"):
        path.chmod(0o755)
    return {"node": [str(installed)], "python": [str(venv / "bin" / "python3"), "-I"]}


@needs_bwrap
@pytest.mark.parametrize("language", ["python", "node"])
async def test_an_interpreter_living_in_the_home_runs_and_the_home_stays_hidden(
    tmp_path: Path,
    home_with_tmpdir: Path,
    interpreters_in_home: dict[str, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    language: str,
) -> None:
    home = home_with_tmpdir
    monkeypatch.setattr(runner, "interpreter", lambda lang: list(interpreters_in_home[lang]))  # type: ignore[misc]
    where = "process.execPath" if language == "node" else "__import__('sys').executable"
    show = f"console.log({where})" if language == "node" else f"print({where})"
    out = await run(peek_code(language, home) + show + "\n", language, tmp_path / "out", hidden=[home])
    assert (out.success, out.stderr) == (True, ""), out
    peeked, executable = out.result.splitlines()
    visible = ".nvm" if language == "node" else "venv"
    assert json.loads(peeked) == [MISSING[language], listing(language, [visible, "tmp"])]
    assert Path(executable).resolve() == Path(interpreters_in_home[language][0]).resolve()
    if language == "node":  # only that version's folder: not nvm's others, not the rest of ~/.nvm
        nodes = home / ".nvm" / "versions" / "node"
        look = (
            f"const fs = require('fs');\nlet names;\ntry {{ names = fs.readdirSync({json.dumps(str(nodes))}).sort(); }}"
            " catch (e) { names = e.code; }\n"
            f"console.log(JSON.stringify([names, fs.existsSync({json.dumps(str(nodes / 'v1.0.0' / 'secret.txt'))})]))\n"
        )
        out = await run(look, "node", tmp_path / "out2", hidden=[home])
        assert json.loads(out.result) == [listing("node", ["v99.0.0"]), False], out


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the drop to nobody is for a relay that runs as root")
async def test_under_bubblewrap_a_root_relays_code_runs_as_nobody_and_cannot_read_roots_files(tmp_path: Path) -> None:
    code = (
        "import os\ntry:\n    open('/etc/shadow').read(); shadow = 'read'\n"
        "except OSError as e:\n    shadow = type(e).__name__\nprint(os.getuid(), os.getgid(), shadow)\n"
    )
    out = await run(code, "python", tmp_path / "out")
    assert (out.success, out.result) == (True, f"{NOBODY_UID} {NOBODY_UID} PermissionError"), out


async def test_without_bubblewrap_the_result_says_host_sockets_and_homes_stay_in_reach(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT_S):
        out = await run_code("print('ok')", "python", 10, tmp_path / "out", environ={**os.environ, BWRAP_ENV: "0"})
    assert out.success is True
    assert any("Unix sockets" in gap for gap in out.cannot_stop), out.cannot_stop
    assert "Unix sockets" in out.isolation_details
