"""The test suite stands on the repository alone: no file under tests/ reaches for the shared folder beside it."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Ways a file points outside the clone at the shared folder: a relative or absolute path, or a
# pathlib join of a "shared" part. Spelled as patterns (and the examples below pieced together)
# so that this file does not match itself.
OUTSIDE = re.compile(r"\.\./shared|/work/share[d]|/\s*[\"']shared[\"']|[\"']shared[\"']\s*/")


def _text_files() -> list[Path]:
    files: list[Path] = []
    for path in sorted(TESTS.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        if b"\0" not in data:
            files.append(path)
    return files


def test_the_scan_sees_the_test_modules_the_fakes_and_the_recordings() -> None:
    names = {p.relative_to(TESTS).as_posix() for p in _text_files()}
    assert {"conftest.py", "test_self_contained.py", "fakes/claude", "agents/golden.py"} <= names
    assert any(n.startswith("agents/golden/claude/recorded/") for n in names)


def test_the_pattern_catches_every_way_of_pointing_at_the_shared_folder() -> None:
    q, word = '"', "shared"
    examples = (
        f"REPO.parent / {q}{word}{q} / {q}golden{q}",
        f"../{word}/golden",
        f"/work/{word}/seeds",
        f"p / '{word}'",
    )
    for text in examples:
        assert OUTSIDE.search(text), text
    assert not OUTSIDE.search("from mcp.shared.exceptions import MCPError")


def test_no_test_file_references_the_shared_folder_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
        for path in _text_files()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == []
