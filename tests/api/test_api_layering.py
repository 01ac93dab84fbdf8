"""The model-API modules depend on each other in one direction only (no import circle, lazy imports included)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import relay.agents.api as api_pkg

PACKAGE = "relay.agents.api"
FOLDER = Path(api_pkg.__file__).resolve().parent


def _module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def _imports() -> dict[str, set[str]]:
    """Each module of the package → the package's modules it imports, anywhere in its body."""
    modules = {_module_name(p): p for p in FOLDER.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                candidates = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            deps.update(c for c in candidates if c in modules and c != PACKAGE)
        graph[name] = deps - {name}
    return graph


def test_the_scan_sees_the_chat_loop_and_both_providers() -> None:
    graph = _imports()
    assert f"{PACKAGE}._call" in graph[f"{PACKAGE}.anthropic_provider"]
    assert f"{PACKAGE}._call" in graph[f"{PACKAGE}.openai_provider"]
    assert {f"{PACKAGE}.anthropic_provider", f"{PACKAGE}.openai_provider"} <= graph[f"{PACKAGE}._chat"]


def test_no_model_api_module_imports_one_that_imports_it_back() -> None:
    graph = _imports()
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle in {PACKAGE}: {' -> '.join(exc.args[1])}") from None
    assert order.index(f"{PACKAGE}._call") < order.index(f"{PACKAGE}._chat")
