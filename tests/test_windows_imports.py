"""relay imports where POSIX-only modules are missing (Windows): they are imported only where they are used."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from tests.conftest import REPO

POSIX_ONLY = frozenset({"fcntl", "termios", "pty", "resource", "grp", "pwd", "tty"})
# Scripts relay runs as separate processes on POSIX only (never imported by relay itself).
SCRIPTS = frozenset({"sandbox/_limits.py", "runtime/_zygote.py", "runtime/_reaper.py"})


def top_level_posix_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in tree.body:  # module level only: an import inside a function runs only where it is used
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module.split(".")[0]]
        found += [n for n in names if n in POSIX_ONLY]
    return found


def test_the_scan_sees_a_top_level_posix_import(tmp_path: Path) -> None:
    planted = tmp_path / "m.py"
    planted.write_text("import os\nimport fcntl\n\ndef f():\n    import termios\n")
    assert top_level_posix_imports(planted) == ["fcntl"]


def test_no_module_relay_imports_needs_a_posix_only_module_to_import() -> None:
    package = REPO / "src" / "relay"
    offenders = {
        str(p.relative_to(package)): names
        for p in package.rglob("*.py")
        if str(p.relative_to(package)) not in SCRIPTS and (names := top_level_posix_imports(p))
    }
    assert not offenders, f"POSIX-only imports at module level (use relay.osfiles or import inside): {offenders}"


def test_the_lock_and_dup_helpers_work_here(tmp_path: Path) -> None:
    from relay.osfiles import lock, private_dup

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        lock(fd)
        lock(fd, shared=True)
        dup = private_dup(fd)
        assert dup >= 3 and not os.get_inheritable(dup)
        os.close(dup)
    finally:
        os.close(fd)
