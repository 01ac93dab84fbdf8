"""Every package relay imports directly is a pinned direct dependency (none arrives only through another one)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, version

from tests.conftest import REPO


def imported_top_levels() -> set[str]:
    """The top-level names src/relay imports (module level or lazily), minus the standard library and relay."""
    found: set[str] = set()
    for path in (REPO / "src" / "relay").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return {n for n in found if n not in sys.stdlib_module_names and n not in ("relay", "__future__")}


def pinned(extra: str | None = None) -> dict[str, str]:
    """pyproject's runtime dependencies (or one extra's) as {normalized name: pinned version}; a dependency
    without == is not pinned."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    deps = project["optional-dependencies"][extra] if extra else project["dependencies"]
    pins: dict[str, str] = {}
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([0-9][^ ;,]*)", dep)
        assert match, f"{dep!r} is not pinned with =="
        pins[normalize(match[1])] = match[2]
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_package_relay_imports_directly_is_a_pinned_direct_dependency() -> None:
    owners = packages_distributions()
    pins = pinned() | pinned("otel")  # OpenTelemetry is imported only when [telemetry] is configured
    missing = {
        module: owners.get(module)
        for module in sorted(imported_top_levels())
        if not any(normalize(dist) in pins for dist in owners.get(module, []))
    }
    assert missing == {}, f"imported but not a pinned direct dependency in pyproject.toml: {missing}"


def test_the_pins_are_the_versions_the_tests_run_against() -> None:
    pins = pinned() | pinned("otel")
    assert {name: version(name) for name in pins} == pins


def test_the_optional_tracing_packages_are_also_what_the_test_extra_installs() -> None:
    assert pinned("otel").items() <= pinned("test").items()


def test_the_import_scan_sees_the_web_stack_that_once_came_only_through_mcp() -> None:
    assert {"starlette", "uvicorn", "anyio", "pydantic", "mcp_types", "httpx2", "markupsafe"} <= imported_top_levels()
