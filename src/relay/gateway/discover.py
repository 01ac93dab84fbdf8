"""Finding servers elsewhere: a git repository's manifest, or an MCP registry (the official Registry API).

A repository is cloned shallowly; its package.json (a `bin` -> `npx -y NAME`) or pyproject.toml
(a Python package -> `uvx NAME`) says how to launch it, and its README which env keys it wants.
A registry is asked `GET {url}/v0/servers?search=...`; the best match's npm/PyPI package or
remote endpoint becomes the config, its required environment variables the `missing` keys.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2

from relay.errors import ErrorCode, RelayError, invalid
from relay.gateway.config import NAME_PATTERN, make_config
from relay.gateway.importer import Candidate

DEFAULT_REGISTRY_URL = "https://registry.modelcontextprotocol.io"
# A shallow clone of one repository; a slow network gets this long.
CLONE_TIMEOUT_S = 120.0
REGISTRY_TIMEOUT_S = 20.0
# How many registry matches a query reads.
REGISTRY_LIMIT = 10
# Credential-like env names a README mentions (`GITHUB_TOKEN`, `BRAVE_API_KEY`, ...).
_README_KEY = re.compile(r"\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:API_KEY|KEY|TOKEN|SECRET|PASSWORD|PAT))\b")
# Keys of an `"env": {...}` block in a README's example config.
_README_ENV_BLOCK = re.compile(r'"env"\s*:\s*\{([^{}]*)\}', re.S)
_JSON_KEY = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:')


def _obj(value: object) -> dict[str, Any]:
    """A JSON object as a typed dict (anything else: empty)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return cast(list[Any], value) if isinstance(value, list) else []


def server_name(package: str) -> str:
    """A short server name from a package or registry name (`@scope/server-foo` -> `foo`)."""
    base = package.rstrip("/").split("/")[-1].lower()
    for affix in ("mcp-server-", "server-", "mcp-"):
        if base.startswith(affix) and len(base) > len(affix):
            base = base[len(affix) :]
    for affix in ("-mcp-server", "-server", "-mcp"):
        if base.endswith(affix) and len(base) > len(affix):
            base = base[: -len(affix)]
    base = re.sub(r"[^a-z0-9_.\-]", "-", base).strip("-.") or "server"
    return base if NAME_PATTERN.match(base) else "server"


def _readme_keys(repo: Path) -> list[str]:
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(repo.glob("README*")) if p.is_file()]
    keys: list[str] = []
    for text in texts:
        for block in _README_ENV_BLOCK.findall(text):
            keys.extend(_JSON_KEY.findall(block))
        keys.extend(_README_KEY.findall(text))
    return list(dict.fromkeys(keys))


def launch_from_manifest(repo: Path) -> tuple[str, str, list[str]]:
    """(name, command, args) from the repository's package manifest."""
    package_json = repo / "package.json"
    if package_json.is_file():
        try:
            manifest = _obj(json.loads(package_json.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise invalid(f"package.json cannot be parsed: {exc}", "check the repository") from None
        name = manifest.get("name")
        if isinstance(name, str) and manifest.get("bin"):
            return server_name(name), "npx", ["-y", name]
    pyproject = repo / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = _obj(tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project"))
        except tomllib.TOMLDecodeError as exc:
            raise invalid(f"pyproject.toml cannot be parsed: {exc}", "check the repository") from None
        name = project.get("name")
        if isinstance(name, str):
            script = next(iter(_obj(project.get("scripts"))), None)
            args = [name] if script in (None, name) else ["--from", name, str(script)]
            return server_name(name), "uvx", args
    raise invalid(
        "the repository has no package.json with a bin nor a pyproject.toml with a project name",
        "add the server by hand with add_mcp_server(transport='stdio', command=..., args=[...])",
    )


def _git_url_ok(url: str) -> bool:
    return url.startswith(("https://", "http://", "git@", "ssh://", "file://", "/"))


async def from_git(url: str, scope: str, environ: Mapping[str, str]) -> Candidate:
    """Clone `url` shallowly into a temporary folder and derive the server's launch command."""
    if not _git_url_ok(url):
        raise invalid(f"{url!r} is not a git repository URL", "pass e.g. https://github.com/owner/repo")
    with tempfile.TemporaryDirectory(prefix="relay-import-") as tmp:
        target = Path(tmp) / "repo"
        try:
            with anyio.fail_after(CLONE_TIMEOUT_S):
                done = await anyio.run_process(
                    ["git", "clone", "--depth", "1", "--quiet", "--", url, str(target)],
                    check=False,
                    stdin=subprocess.DEVNULL,
                    env={**{k: v for k, v in environ.items() if k in ("PATH", "HOME")}, "GIT_TERMINAL_PROMPT": "0"},
                )
        except TimeoutError:
            raise RelayError(
                ErrorCode.TIMEOUT, f"cloning {url} took over {CLONE_TIMEOUT_S:g} seconds", "check the URL"
            ) from None
        except FileNotFoundError:
            raise RelayError(ErrorCode.CONFIG_INVALID, "git is not installed", "install git") from None
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip()[-500:]
            raise RelayError(ErrorCode.UPSTREAM_ERROR, f"git clone {url} failed: {tail}", "check the URL and access")
        name, command, args = launch_from_manifest(target)
        keys = _readme_keys(target)
    env = {k: environ.get(k, "") for k in keys}
    config = make_config(
        name=name, transport="stdio", scope=scope, command=command, args=args, env=env, source=f"github:{url}"
    )
    return Candidate(config=config, missing=tuple(k for k in keys if not env[k]), source=f"github:{url}")


def _from_registry_entry(item: dict[str, Any], scope: str, environ: Mapping[str, str]) -> Candidate | None:
    server = _obj(item.get("server", item))
    raw_name = str(server.get("name") or "")
    name = server_name(raw_name)
    description = str(server.get("description") or "")
    source = f"registry:{raw_name}"
    for package in map(_obj, _list(server.get("packages"))):
        kind = package.get("registryType") or package.get("registry_type")
        ident = str(package.get("identifier") or package.get("name") or "")
        version = str(package.get("version") or "")
        if kind == "npm" and ident:
            command, args = "npx", ["-y", f"{ident}@{version}" if version else ident]
        elif kind == "pypi" and ident:
            command, args = "uvx", [f"{ident}=={version}" if version else ident]
        else:
            continue
        env: dict[str, str] = {}
        missing: list[str] = []
        for var in map(_obj, _list(package.get("environmentVariables"))):
            if not var.get("name"):
                continue
            key = str(var["name"])
            value = environ.get(key) or str(var.get("value") or var.get("default") or "")
            if value or var.get("isRequired"):
                env[key] = value
            if not value and var.get("isRequired"):
                missing.append(key)
        config = make_config(
            name=name,
            transport="stdio",
            scope=scope,
            command=command,
            args=args,
            env=env,
            description=description,
            source=source,
        )
        return Candidate(config=config, missing=tuple(missing), source=source)
    for remote in map(_obj, _list(server.get("remotes"))):
        url = str(remote.get("url") or "")
        if not url.startswith(("http://", "https://")):
            continue
        headers: dict[str, str] = {}
        missing = []
        for header in map(_obj, _list(remote.get("headers"))):
            if header.get("name"):
                key = str(header["name"])
                headers[key] = str(header.get("value") or "")
                if not headers[key] and header.get("isRequired"):
                    missing.append(key)
        config = make_config(
            name=name, transport="http", scope=scope, url=url, headers=headers, description=description, source=source
        )
        return Candidate(config=config, missing=tuple(missing), source=source)
    return None


async def from_registry(base_url: str, query: str, scope: str, environ: Mapping[str, str]) -> list[Candidate]:
    """Registry matches for a query, best first, as configs (entries relay cannot launch are left out)."""
    url = base_url.rstrip("/") + "/v0/servers"
    try:
        async with httpx2.AsyncClient(timeout=REGISTRY_TIMEOUT_S) as http:
            response = await http.get(url, params={"search": query, "limit": REGISTRY_LIMIT})
    except httpx2.HTTPError as exc:
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR,
            f"the MCP registry at {base_url} cannot be reached: {type(exc).__name__}",
            "check RELAY_MCP_REGISTRY_URL, or import with github_url / add_mcp_server instead",
        ) from None
    if response.status_code != 200:
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR,
            f"the MCP registry at {base_url} answered HTTP {response.status_code}",
            "check RELAY_MCP_REGISTRY_URL",
        )
    try:
        data: Any = response.json()
    except ValueError:
        raise RelayError(ErrorCode.UPSTREAM_ERROR, f"the MCP registry at {base_url} sent invalid JSON", "") from None
    out: list[Candidate] = []
    for item in map(_obj, _list(_obj(data).get("servers"))):
        found = _from_registry_entry(item, scope, environ)
        if found is not None:
            out.append(found)
    return out
