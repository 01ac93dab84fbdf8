"""The job engine's rooms: each imports only the rooms below it, and none grows past ~400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import relay.jobs

JOBS = Path(relay.jobs.__file__).parent
# Top to bottom: a module may import only modules after it in this list.
LAYERS = [
    "engine",
    "inserts",
    "door",
    "tending",
    "paging",
    "recovery",
    "lifecycle",
    "settle",
    "publish",
    "approvals",
    "steer",
    "finish",
    "admission",
    "waiting",
    "workspace",
    "request",
    "sessions",
    "grants",
    "gitprobe",
    "depth",
    "state",
    "envelope",
    "mirror",
    "fence",
    "output",
    "bounds",
    "known",
]
MAX_LINES = 400


def jobs_imports(module: str) -> set[str]:
    tree = ast.parse((JOBS / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("relay.jobs."):
            found.add(node.module.removeprefix("relay.jobs."))
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("relay.jobs.") for a in node.names if a.name.startswith("relay.jobs.")}
    return found


def test_every_module_of_the_engine_has_a_place_in_the_layers() -> None:
    modules = {p.stem for p in JOBS.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS)


def test_each_room_imports_only_rooms_below_it() -> None:
    upward = {
        module: sorted(dep for dep in jobs_imports(module) if LAYERS.index(dep) <= LAYERS.index(module))
        for module in LAYERS
    }
    assert upward == {module: [] for module in LAYERS}


def test_no_room_is_over_the_size_limit() -> None:
    sizes = {module: len((JOBS / f"{module}.py").read_text(encoding="utf-8").splitlines()) for module in LAYERS}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}
