"""The house rules, checked: no import circles in src/relay, dependencies point down, no module too big to read."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

SRC = REPO / "src"
PACKAGE = SRC / "relay"
# A module longer than this is too big to read in one sitting (STYLE.md: aim under ~600 lines).
MAX_MODULE_LINES = 650

# Floors, top to bottom; a module may import from its own floor or any floor below, never above.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("relay.cli", "relay.web"),
    ("relay.server",),
    ("relay.workflows", "relay.gateway", "relay.tracker", "relay.hooks", "relay.sandbox", "relay.doctor"),
    ("relay.ask", "relay.threads", "relay.jobs"),
    # Worktrees per job sit under the job engine, which makes and seals them.
    ("relay.agents", "relay.workspaces"),
    # relay.audit sits with the store, which records every job state change in it.
    (
        "relay.runtime",
        "relay.store",
        "relay.audit",
        "relay.osfiles",
        "relay.text",
        "relay.config",
        "relay.config_tables",
        "relay.errors",
        "relay.events",
        "relay.secrets",
        "relay.principal",
        "relay.telemetry",
    ),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every relay module `name` imports, at module level or inside functions (a lazy import is still a dependency)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("relay"):
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    edges = {name: imports_of(name, path, known) for name, path in mods.items()}
    # A package's __init__ importing its own submodules (re-exports) is not a circle.
    return {n: {d for d in deps if not d.startswith(n + ".")} for n, deps in edges.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def floor_of(name: str) -> int | None:
    for index, floor in enumerate(FLOORS):
        if any(name == top or name.startswith(top + ".") for top in floor):
            return index
    return None


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_there_is_no_import_circle_in_src_relay() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_dependencies_point_down_the_floors() -> None:
    upward: list[str] = []
    for name, deps in graph().items():
        mine = floor_of(name)
        if mine is None:
            continue
        for dep in deps:
            theirs = floor_of(dep)
            if theirs is not None and theirs < mine:
                upward.append(f"{name} -> {dep}")
    assert not upward, "imports that point up: " + ", ".join(sorted(upward))


def test_no_module_in_src_is_too_long_to_read() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
