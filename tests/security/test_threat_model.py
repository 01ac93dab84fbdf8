"""The threat model keeps itself true: docs/security.md lists every place in src/ that starts a process, and
every row of its tables names a test that exists.

A spawn site is a call that starts a program (subprocess, anyio's process calls, os.exec*/spawn*/fork, the MCP
SDK's stdio client). A new one in src/ that the table does not list fails here, and so does a listed one that
is gone, so the table is read again whenever a door is added or removed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "relay"
DOC = ROOT / "docs" / "security.md"

# module.attribute calls that start a process.
SPAWN_CALLS = {
    ("subprocess", "Popen"),
    ("subprocess", "run"),
    ("subprocess", "call"),
    ("subprocess", "check_call"),
    ("subprocess", "check_output"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
    ("anyio", "run_process"),
    ("anyio", "open_process"),
    ("asyncio", "create_subprocess_exec"),
    ("asyncio", "create_subprocess_shell"),
    ("os", "system"),
    ("os", "popen"),
    ("pty", "spawn"),
    ("webbrowser", "open"),
}
OS_PREFIXES = ("exec", "spawn", "posix_spawn", "fork")
# Names that start a process when called however they were imported.
SPAWN_NAMES = {
    "stdio_client",
    "StdioServerParameters",
    "Popen",
    "run_process",
    "open_process",
    "create_subprocess_exec",
    # The ACP SDK's process starters (relay.agents.acp.driver starts an agent's ACP server with one).
    "spawn_agent_process",
    "spawn_client_process",
    "spawn_stdio_connection",
    "spawn_stdio_transport",
}


def spawn_sites_in(source: str, module: str) -> set[str]:
    """`module:Qualified.function` of every spawn call in `source` (module level: `module:<module>`)."""
    found: set[str] = set()
    scope: list[str] = []

    class Visitor(ast.NodeVisitor):
        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
            scope.append(node.name)
            self.generic_visit(node)
            scope.pop()

        visit_AsyncFunctionDef = visit_FunctionDef
        visit_ClassDef = visit_FunctionDef

        def visit_Call(self, node: ast.Call) -> None:
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                owner, name = func.value.id, func.attr
                if (owner, name) in SPAWN_CALLS or (owner == "os" and name.startswith(OS_PREFIXES)):
                    found.add(f"{module}:{'.'.join(scope) or '<module>'}")
            elif isinstance(func, ast.Name) and func.id in SPAWN_NAMES:
                found.add(f"{module}:{'.'.join(scope) or '<module>'}")
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


def spawn_sites() -> set[str]:
    sites: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        sites |= spawn_sites_in(path.read_text(encoding="utf-8"), module)
    return sites


def table(heading: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first markdown table under `## heading` in docs/security.md."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    rows = [line for line in text[start : end if end > 0 else None].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def named_tests(cell: str) -> list[str]:
    return re.findall(r"`(tests/[\w/]+\.py::\w+)", cell)


def defined(test: str) -> bool:
    path, name = test.split("::")
    file = ROOT / path
    if not file.exists():
        return False
    tree = ast.parse(file.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name for n in ast.walk(tree))


def test_every_spawn_site_in_src_is_a_row_of_the_spawn_table_and_every_row_is_one() -> None:
    listed = {row[0].strip("`") for row in table("Every door to a process")}
    found = spawn_sites()
    assert found, "the scan found no spawn site at all: it is broken"
    assert sorted(found - listed) == [], "spawn sites in src/ that docs/security.md does not list"
    assert sorted(listed - found) == [], "rows of docs/security.md's spawn table that src/ no longer has"


def test_the_scan_finds_a_new_spawn_site_however_it_is_written() -> None:
    source = """
import os, subprocess, anyio
from subprocess import Popen
def a(): subprocess.run(["x"])
class B:
    async def c(self): await anyio.run_process(["x"])
def d(): Popen(["x"])
def e(): os.execvp("x", ["x"])
os.system("x")
"""
    assert spawn_sites_in(source, "m") == {"m:a", "m:B.c", "m:d", "m:e", "m:<module>"}


def test_every_row_of_the_threat_model_names_a_test_that_exists() -> None:
    rows = table("Threat model") + table("Every door to a process")
    assert len(rows) > 10
    for row in rows:
        named = named_tests(row[-1])
        assert named, f"the row {row[0]!r} names no test"
        missing = [t for t in named if not defined(t)]
        assert missing == [], f"the row {row[0]!r} names tests that do not exist"


# The steps of a job's admission, and the one module allowed to run them (grants itself uses permit for
# permit_command, a caller's command: the same decision as a job at `full`).
ADMISSION_STEPS = {"relay.jobs.request": {"check", "resolve", "build"}, "relay.jobs.grants": {"permit"}}
THE_DOOR = {"relay.jobs.door", "relay.jobs.grants"}


def admission_steps_used_in(source: str) -> set[str]:
    """The admission steps a module imports by name or calls as `grants.permit` / `request.build`."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ADMISSION_STEPS:
            used |= {f"{node.module}.{a.name}" for a in node.names if a.name in ADMISSION_STEPS[node.module]}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            for module, names in ADMISSION_STEPS.items():
                if node.value.id == module.rsplit(".", 1)[1] and node.attr in names:
                    used.add(f"{module}.{node.attr}")
    return used


def test_permit_and_the_invocations_build_are_reached_only_through_the_one_door() -> None:
    outside: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        used = admission_steps_used_in(path.read_text(encoding="utf-8"))
        if used and module not in THE_DOOR:
            outside[module] = used
    assert outside == {}, "modules that run a step of a job's admission around relay.jobs.door"
    door = (SRC / "jobs" / "door.py").read_text(encoding="utf-8")
    assert admission_steps_used_in(door) == {f"{m}.{n}" for m, names in ADMISSION_STEPS.items() for n in names}
