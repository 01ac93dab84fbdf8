"""tests/session_costs.py's promises: what it pays once per session is what each test would have got anew."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay.server.app import build_server
from tests import session_costs
from tests.conftest import FAKES, SettingsFactory

pytestmark = pytest.mark.anyio


async def cli_names_published(make_settings: SettingsFactory, config: str) -> list[str]:
    async with Client(build_server(make_settings(config, RELAY_PROFILE="zen"))) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    schema: dict[str, Any] = tools["clink"].input_schema
    return list(schema["properties"]["cli_name"]["enum"])


async def test_a_tool_whose_schema_follows_the_settings_publishes_each_servers_own_schema(
    make_settings: SettingsFactory,
) -> None:
    # zen's clink lists the configured agents in its schema: the same function, another signature per settings
    mycli = f'[agents.mycli]\ncommand = "{FAKES / "generic"}"\nargs = ["--jsonl", "{{prompt}}"]\noutput = "jsonl"\n'
    first = await cli_names_published(make_settings, "")
    second = await cli_names_published(make_settings, mycli)
    again = await cli_names_published(make_settings, "")
    assert "mycli" in second and "mycli" not in first
    assert again == first


async def test_each_server_gets_its_own_copy_of_a_tool_bound_to_its_own_function(
    make_settings: SettingsFactory,
) -> None:
    servers = [build_server(make_settings()) for _ in range(2)]
    one, two = (server.catalog.exposed["job_status"].tool for server in servers)
    assert one is not two and one.fn is not two.fn
    assert one.parameters == two.parameters and one.parameters is not two.parameters
    one.parameters["properties"]["changed"] = {"type": "string"}  # a server that changed its copy changes no other
    third = build_server(make_settings()).catalog.exposed["job_status"].tool
    assert "changed" not in third.parameters["properties"]


def write_shim(folder: Path, target: str) -> None:
    """A `python3` like a version manager's: a script that runs the interpreter it chooses."""
    folder.mkdir()
    shim = folder / "python3"
    shim.write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
    shim.chmod(0o755)


def python3_on_path() -> str:
    found = shutil.which("python3")
    assert found is not None
    out = subprocess.run([found, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_python3_shim_on_path_is_bypassed_for_the_interpreter_it_chooses_and_put_back_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = Path(sys.base_prefix) / "bin" / "python3"
    assert base.exists()
    write_shim(tmp_path / "shims", str(base))
    monkeypatch.setenv("PATH", f"{tmp_path / 'shims'}{os.pathsep}{os.environ['PATH']}")
    before = os.environ["PATH"]
    undo = session_costs.python3_without_shim()
    try:
        found = shutil.which("python3")
        assert found is not None and Path(found).is_symlink() and Path(found).resolve() == base.resolve()
        assert python3_on_path() == sys.base_prefix
    finally:
        undo()
    assert os.environ["PATH"] == before
    assert not Path(found).exists()


def test_a_shim_that_chooses_a_virtual_environment_is_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A link to a venv's python elsewhere would be the bare interpreter, without the venv's packages.
    assert sys.prefix != sys.base_prefix, "the tests run in a virtual environment (.venv)"
    write_shim(tmp_path / "shims", sys.executable)
    monkeypatch.setenv("PATH", f"{tmp_path / 'shims'}{os.pathsep}{os.environ['PATH']}")
    before = os.environ["PATH"]
    undo = session_costs.python3_without_shim()
    undo()
    assert os.environ["PATH"] == before
    assert python3_on_path() == sys.prefix
