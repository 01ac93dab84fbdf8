"""The sandbox core: real interpreters under real isolation; secrets, writes outside, timeouts and cancels."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from relay.audit import open_audit
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.sandbox import detect, read_outcome, run_code, submit_execute
from relay.sandbox.isolation import BUBBLEWRAP, BWRAP_ENV, RLIMITS_ONLY, UID_DROP
from relay.store import Store
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio
WAIT_S = 60.0
SECRET = "sk-planted-secret-4f1c9e"
HAS_BWRAP = detect({}).mode == BUBBLEWRAP


def unique_marker(seconds: int) -> str:
    """A `sleep` argument no other run of these tests uses (two test runs side by side must not see each other's)."""
    return f"{seconds}.{secrets.randbelow(10**9):09d}"


def processes_with(marker: str) -> list[int]:
    """Live processes (seen from any pid namespace) whose command line holds `marker`."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = next(
                (line for line in (entry / "status").read_text().splitlines() if line.startswith("State:")), ""
            )
        except OSError:
            continue
        if marker in cmdline and "Z" not in state.split(":", 1)[-1]:
            found.append(int(entry.name))
    return found


async def run(code: str, language: str, out: Path, timeout: float = 30, **env: str) -> dict[str, object]:
    with anyio.fail_after(WAIT_S):
        outcome = await run_code(code, language, timeout, out, environ={**os.environ, **env})
    return outcome.to_dict()


@pytest.mark.parametrize(
    ("language", "code", "expected"),
    [
        ("python", "print(sum(i * i for i in range(1, 1000)))", "332833500"),
        ("bash", "echo $((6 * 7))", "42"),
        ("node", "console.log([1, 2, 3].map(x => x * 2).join(','))", "2,4,6"),
    ],
)
async def test_each_language_runs_and_its_stdout_is_the_result(
    tmp_path: Path, language: str, code: str, expected: str
) -> None:
    if language == "node" and shutil.which("node") is None:
        pytest.fail("node is needed for this test")
    out = await run(code, language, tmp_path / "out")
    assert (out["success"], out["result"], out["language"], out["exit_code"], out["timed_out"]) == (
        True,
        expected,
        language,
        0,
        False,
    )
    assert out["isolation"] in (BUBBLEWRAP, UID_DROP, RLIMITS_ONLY)


async def test_the_code_cannot_read_a_secret_from_relays_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_TEST_SECRET", SECRET)
    code = "import os, json; print(json.dumps(dict(os.environ)))"
    out = await run(code, "python", tmp_path / "out", RELAY_TEST_SECRET=SECRET, OPENAI_API_KEY=SECRET)
    assert out["success"] is True
    assert SECRET not in str(out["result"])
    assert "RELAY_TEST_SECRET" not in str(out["result"]) and "OPENAI_API_KEY" not in str(out["result"])
    # Nor through /proc of its parents.
    peek = (
        "import pathlib; print(pathlib.Path('/proc/1/environ').read_bytes()); print(open('/proc/self/environ').read())"
    )
    out = await run(peek, "python", tmp_path / "peek", RELAY_TEST_SECRET=SECRET)
    assert SECRET not in str(out["result"]) + str(out["stderr"])


async def test_the_code_cannot_write_outside_its_temp_dir(tmp_path: Path) -> None:
    if not HAS_BWRAP and os.geteuid() != 0:
        pytest.fail("this machine has neither bubblewrap nor root for the uid drop: writes cannot be confined")
    target = tmp_path / "outside" / "planted.txt"
    target.parent.mkdir()
    target.parent.chmod(0o755)
    code = (
        "import os, pathlib\n"
        f"target = pathlib.Path({str(target)!r})\n"
        "try:\n    target.write_text('escaped')\n    print('wrote outside')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
        "pathlib.Path('inside.txt').write_text('fine')\n"
        "print('inside ok', os.path.exists('inside.txt'), os.getcwd() == os.environ['HOME'])\n"
    )
    out = await run(code, "python", tmp_path / "out")
    assert out["success"] is True, out
    assert str(out["result"]).splitlines()[0].startswith("refused")
    assert str(out["result"]).splitlines()[1] == "inside ok True True"
    assert not target.exists()


@pytest.mark.skipif(not HAS_BWRAP, reason="only bubblewrap hides relay's home and cuts the network")
async def test_under_bubblewrap_relays_home_is_hidden_and_there_is_no_network(
    tmp_path: Path, make_settings: SettingsFactory, relay_home: Path
) -> None:
    (relay_home / "api_keys.json").write_text('{"openai": "' + SECRET + '"}')
    code = (
        "import pathlib, socket\n"
        f"p = pathlib.Path({str(relay_home / 'api_keys.json')!r})\n"
        "print('keys visible' if p.exists() else 'keys hidden')\n"
        "s = socket.socket(); s.settimeout(2)\n"
        "try:\n    s.connect(('1.1.1.1', 53)); print('network')\n"
        "except OSError:\n    print('no network')\n"
    )
    with anyio.fail_after(WAIT_S):
        outcome = await run_code(code, "python", 10, tmp_path / "out", environ={}, hidden=[relay_home])
    assert (outcome.result, outcome.network, outcome.isolation) == ("keys hidden\nno network", False, BUBBLEWRAP)


async def test_without_bubblewrap_the_result_says_which_isolation_was_in_force(tmp_path: Path) -> None:
    out = await run("print('ok')", "python", tmp_path / "out", **{BWRAP_ENV: "0"})
    assert out["success"] is True
    assert out["isolation"] == (UID_DROP if os.geteuid() == 0 else RLIMITS_ONLY)
    assert out["network"] is True
    assert "no bubblewrap" in str(out["isolation_details"])
    gaps = out["cannot_stop"]
    assert isinstance(gaps, tuple) and any("loopback" in gap for gap in gaps), gaps
    assert "cannot stop: the network, loopback included" in str(out["isolation_details"])


@pytest.mark.skipif(
    os.geteuid() != 0, reason="without bubblewrap only the drop to user nobody (relay running as root) walls code off"
)
async def test_without_bubblewrap_code_cannot_read_relays_database_nor_find_other_runs(tmp_path: Path) -> None:
    parent = Path(tempfile.mkdtemp())  # RELAY_HOME's parent as a user's home usually is: others may pass through
    try:
        parent.chmod(0o755)
        home = parent / "relay"
        store = Store(home / "relay.db", open_audit(home, views=False))  # no view renderer writing meanwhile
        store.insert_job("j1", "claude", "cli", {"prompt": SECRET}, None, "/w")
        store.close()
        code = (
            "import os, pathlib, tempfile\n"
            "seen = []\n"
            f"for name in ('relay.db', 'relay.db-wal'):\n"
            f"    try:\n        seen.append({SECRET!r}.encode() in (pathlib.Path({str(home)!r}) / name).read_bytes())\n"
            "    except OSError:\n        seen.append(None)\n"
            "print('db read' if any(s is not None for s in seen) else 'db refused')\n"
            "try:\n    os.listdir(os.path.dirname(os.getcwd())); print('runs listed')\n"
            "except OSError:\n    print('runs hidden')\n"
            "print(tempfile.gettempdir() == os.getcwd() == os.environ['TMP'])\n"
        )
        out = await run(code, "python", tmp_path / "out", **{BWRAP_ENV: "0"})
        assert out["isolation"] == UID_DROP
        assert (out["result"], out["stderr"]) == ("db refused\nruns hidden\nTrue", "")
    finally:
        shutil.rmtree(parent)


async def test_code_past_its_timeout_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    # The kill is checked only once the code started its children before its timeout; on a loaded machine
    # the interpreter may not get that far in 2 s, so the timeout doubles until it does (each run is checked).
    for timeout in (2, 4, 8, 16):
        marker = unique_marker(4242)
        code = (
            "import subprocess, time\n"
            f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
            f"subprocess.Popen(['sh', '-c', 'sleep {marker}'])\n"
            "print('started', flush=True)\n"
            "time.sleep(600)\n"
        )
        out = await run(code, "python", tmp_path / f"out-{timeout}", timeout=timeout)
        assert (out["success"], out["timed_out"], out["exit_code"]) == (False, True, None)
        assert f"timed out after {timeout} seconds" in str(out["stderr"])
        assert timeout <= float(out["execution_time"]) < timeout + 18  # type: ignore[arg-type]
        assert processes_with(marker) == []
        if out["result"] == "started":
            break
    assert out["result"] == "started"


async def test_a_failing_script_reports_its_exit_code_and_stderr(tmp_path: Path) -> None:
    out = await run("import sys\nprint('partial')\nsys.exit('boom: bad input')", "python", tmp_path / "out")
    assert (out["success"], out["exit_code"], out["result"]) == (False, 1, "partial")
    assert "boom: bad input" in str(out["stderr"])


async def test_bad_input_is_refused_before_anything_runs(tmp_path: Path) -> None:
    for code, language in (("print(1)", "cobol"), ("   ", "python")):
        with pytest.raises(RelayError) as caught:
            await run_code(code, language, 5, tmp_path / "out", environ={})
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT


async def test_a_run_is_a_job_that_job_cancel_stops_with_nothing_left(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings: Settings = make_settings()
    marker = unique_marker(4343)
    code = (
        f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\nprint('up', flush=True)\ntime.sleep(600)\n"
    )
    with anyio.fail_after(WAIT_S):
        async with Engine(settings) as engine:
            job_id = submit_execute(engine, code, "python", timeout=300)
            while not processes_with(marker):
                await anyio.sleep(0.05)
            listed = [r.id for r in engine.list(agent="sandbox")]
            assert job_id in listed
            rec = await engine.cancel(job_id)
            assert rec.status == "cancelled"
            assert processes_with(marker) == []
            assert read_outcome(engine, job_id) is None


# Starts a 2 s run that sleeps in a grandchild; the marker is split so the driver's own argv does not hold it.
DRIVER = """
import anyio, os, sys
from pathlib import Path
from relay.sandbox import run_code
marker = sys.argv[2] + "." + sys.argv[3]
code = f"import subprocess, time\\nsubprocess.Popen(['sleep', '{marker}'])\\ntime.sleep(600)\\n"
anyio.run(lambda: run_code(code, "python", 2, Path(sys.argv[1]), environ=dict(os.environ)))
"""


async def test_a_run_whose_relay_died_is_still_killed_after_its_timeout(tmp_path: Path) -> None:
    marker = unique_marker(5252)
    driver = await anyio.open_process(
        [sys.executable, "-c", DRIVER, str(tmp_path / "out"), *marker.split(".")], start_new_session=True
    )
    try:
        with anyio.fail_after(WAIT_S):
            while not processes_with(marker):
                await anyio.sleep(0.05)
    finally:
        driver.kill()  # relay dies: nobody is left to enforce the 2 s timeout
        await driver.wait()
    assert processes_with(marker)
    with anyio.fail_after(WAIT_S):  # the run's own backstop (timeout + 5 s) ends it
        while processes_with(marker):
            await anyio.sleep(0.1)
