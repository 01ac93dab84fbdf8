"""relay as the official MCP Registry finds it: `server.json` against the registry's published schema.

The schema is a pinned copy of https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json
(github.com/modelcontextprotocol/static, commit a9ba437d9fbbe92076a24b20d56449ac7c7786ac), so nothing here
reaches the network. The registry proves that a PyPI package is this server by finding
`mcp-name: <server name>` in the package's description, which is the README.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator, FormatChecker

from tests.conftest import REPO

SCHEMA = Path(__file__).resolve().parent / "server.schema.json"
SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
SCHEMA_SHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"


def server_json() -> dict[str, Any]:
    return json.loads((REPO / "server.json").read_text(encoding="utf-8"))


def project() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def readme_declares(content: str, server_name: str) -> bool:
    """The registry's own check (internal/validators/registries/mcpname.go): `mcp-name: NAME`, and the name
    ends there: a longer name that merely starts with it does not count."""
    prefix = "mcp-name: "
    offset = 0
    while (at := content.find(prefix, offset)) >= 0:
        start = at + len(prefix)
        end = start + len(server_name)
        if content.startswith(server_name, start) and (
            end == len(content) or not (content[end].isascii() and (content[end].isalnum() or content[end] in "._-/"))
        ):
            return True
        offset = start
    return False


def test_server_json_names_the_registrys_published_schema_and_validates_against_its_pinned_copy() -> None:
    doc = server_json()
    assert doc["$schema"] == SCHEMA_URL
    # The copy is the published file, byte for byte.
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256
    assert json.loads(SCHEMA.read_text(encoding="utf-8"))["$id"] == SCHEMA_URL
    validator = Draft7Validator(json.loads(SCHEMA.read_text(encoding="utf-8")), format_checker=FormatChecker())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    assert errors == []


def test_the_schema_refuses_what_the_registry_refuses() -> None:
    """The validation can fail: no description, a name without its namespace, a package at `latest`."""
    validator = Draft7Validator(json.loads(SCHEMA.read_text(encoding="utf-8")), format_checker=FormatChecker())
    doc = server_json()
    assert not validator.is_valid({k: v for k, v in doc.items() if k != "description"})
    assert not validator.is_valid(doc | {"name": "relay"})
    assert not validator.is_valid(doc | {"packages": [doc["packages"][0] | {"version": "latest"}]})


def test_server_json_points_at_the_distribution_pyproject_builds_at_its_version() -> None:
    doc, proj = server_json(), project()
    (package,) = doc["packages"]
    assert (package["registryType"], package["registryBaseUrl"]) == ("pypi", "https://pypi.org")
    assert package["identifier"] == proj["name"]
    assert doc["version"] == package["version"] == proj["version"]
    # `uvx NAME` runs the command named NAME: the distribution has one, and it is relay's.
    assert package["runtimeHint"] == "uvx"
    assert proj["scripts"][proj["name"]] == proj["scripts"]["relay"] == "relay.cli.main:main"
    assert package["transport"] == {"type": "stdio"}
    assert [a["value"] for a in package["packageArguments"]] == ["serve"]


def test_the_readme_carries_the_marker_the_registry_checks_for_this_server_name() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    name = server_json()["name"]
    assert readme_declares(readme, name)
    # The check is the registry's: a longer name does not stand for this one.
    assert not readme_declares(f"<!-- mcp-name: {name}-evil -->", name)
    assert readme_declares(f"<!-- mcp-name: {name} -->", name)
    # pyproject ships that README as the package's description, which is what the registry reads on PyPI.
    assert project()["readme"] == "README.md"
