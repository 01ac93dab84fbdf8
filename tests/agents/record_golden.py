"""Record the golden runs of `tests/agents/recorded.py`: the real pinned CLIs against the e2e mock model server.

Run through `scripts/record-golden` (which checks the CLIs are installed). Each run gets a sealed
world like an e2e test (fresh HOME, git workspace, per-CLI config pointing at a new
MockModelServer on 127.0.0.1); the CLI is started with exactly the invocation relay's adapter
builds, and its stdout, stderr and exit code are written, with the temporary root and the mock's
address replaced by stable marks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from relay.agents import get_adapter
from relay.agents.base import AgentRequest, HostContext, Permission
from relay.agents.models import resolve_model
from relay.config import Settings
from tests.agents.recorded import (
    AGENTS,
    FIRST_PROMPT,
    MOCK_HOST_MARK,
    MOCK_MARK,
    ROOT_MARK,
    SCENARIOS,
    Scenario,
    recorded_dir,
)
from tests.e2e.conftest import CLI_BIN, World
from tests.e2e.mocks import MockModelServer, Reply, WriteFile

# npm package of each CLI (its version is what scripts/install-clis pins).
PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
    "copilot": "@github/copilot",
}
# How the CLIs' install folder reads in the files (relative to the repository).
CLI_MODULES = ".e2e/clis/node_modules"
# Longest one CLI run may take (copilot retries a 5xx for ~20 s before it gives up).
RUN_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Run:
    argv: list[str]
    stdout: str
    stderr: str
    exit_code: int


def package_pin(agent: str) -> str:
    """`name@version` of the installed CLI package, from its package.json."""
    manifest = CLI_BIN.parent / PACKAGES[agent] / "package.json"
    version = json.loads(manifest.read_text(encoding="utf-8"))["version"]
    return f"{PACKAGES[agent]}@{version}"


def _run(
    agent: str, settings: Settings, prompt: str, cwd: Path, job_id: str, permission: Permission, session_id: str | None
) -> Run:
    """Start the CLI with the invocation relay would build, in its own process group; kill the group after."""
    adapter = get_adapter(agent, settings)
    cfg = settings.agents[agent]
    request = AgentRequest(
        prompt=prompt,
        cwd=str(cwd),
        model=resolve_model(agent, cfg.default_model, cfg.aliases),
        session_id=session_id,
        permission=permission,
    )
    host = HostContext(
        command=str(CLI_BIN / agent),
        environ=settings.environ,
        extra_args=cfg.extra_args,
        agent_env=cfg.env,
        is_root=os.geteuid() == 0,
        depth=settings.depth,
        job_id=job_id,
    )
    inv = adapter.build(request, host)
    proc = subprocess.Popen(
        list(inv.argv),
        cwd=inv.cwd,
        env=dict(inv.env),
        stdin=subprocess.PIPE if inv.stdin_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(inv.stdin_text, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise SystemExit(f"record-golden: {agent} did not finish in {RUN_TIMEOUT_S:.0f} s: {inv.argv}") from None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return Run(list(inv.argv), stdout, stderr, proc.returncode)


def _placed(reply: Reply, root: Path) -> Reply:
    if reply.write is None:
        return reply
    return replace(reply, write=WriteFile(reply.write.path.replace(ROOT_MARK, str(root)), reply.write.content))


def record(agent: str, scenario: Scenario) -> dict[str, object]:
    """Play one scenario with one CLI and write its three files; returns the metadata written."""
    root = Path(tempfile.mkdtemp(prefix="relay-golden-")).resolve()
    try:
        home, tmp, work, relay_home = root / "home", root / "tmp", root / "work", root / "relay"
        for path in (home, tmp, work, relay_home):
            path.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=True, stdin=subprocess.DEVNULL, timeout=30)
        with MockModelServer() as mock:
            world = World(root, home, tmp, work, relay_home, mock, CLI_BIN)
            world.write_cli_configs()
            settings = world.settings()
            if scenario.always is not None:
                mock.always(_placed(scenario.always, root))
            mock.script(*(_placed(r, root) for r in scenario.replies))
            session_in = None
            if scenario.resume:
                first = _run(agent, settings, FIRST_PROMPT, work, "golden-first", scenario.permission, None)
                parser = get_adapter(agent, settings).parser()
                for line in first.stdout.splitlines():
                    parser.feed(line)
                session_in = parser.finish(first.exit_code, first.stderr).session_id
                if not session_in:
                    raise SystemExit(f"record-golden: {agent}'s first run gave no session id:\n{first.stderr[-800:]}")
            job_id = f"golden-{scenario.name}"
            run = _run(agent, settings, scenario.prompt, work, job_id, scenario.permission, session_in)
            turns = len(mock.turns())

            def stable(text: str) -> str:
                text = text.replace(mock.url, MOCK_MARK).replace(f"127.0.0.1:{mock.port}", MOCK_HOST_MARK)
                text = text.replace(str(CLI_BIN.parent), CLI_MODULES)
                # Claude also names per-project folders after the path with "/" turned into "-".
                return text.replace(str(root), ROOT_MARK).replace(str(root).replace("/", "-"), f"-{ROOT_MARK}")

        meta: dict[str, object] = {
            "agent": agent,
            "scenario": scenario.name,
            "package": package_pin(agent),
            "job_id": job_id,
            "argv": [stable(a) for a in run.argv],
            "exit_code": run.exit_code,
            "resumed_session_id": session_in,
            "model_turns": turns,
        }
        folder = recorded_dir(agent)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{scenario.name}.stdout").write_text(stable(run.stdout), encoding="utf-8")
        (folder / f"{scenario.name}.stderr").write_text(stable(run.stderr), encoding="utf-8")
        (folder / f"{scenario.name}.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return meta
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="record-golden", description=__doc__)
    parser.add_argument("--agent", action="append", choices=AGENTS, help="only this agent (repeatable)")
    parser.add_argument(
        "--scenario", action="append", choices=[s.name for s in SCENARIOS], help="only this scenario (repeatable)"
    )
    args = parser.parse_args(argv)
    for agent in args.agent or AGENTS:
        for scenario in SCENARIOS:
            if args.scenario and scenario.name not in args.scenario:
                continue
            meta = record(agent, scenario)
            print(f"{agent:8} {scenario.name:22} exit {meta['exit_code']:<4} turns {meta['model_turns']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
