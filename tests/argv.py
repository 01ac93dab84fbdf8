"""Reading an agent CLI's argv as relay passes it: `--opt=value` (or `-o value`), and `resume -- ID` for codex."""

from __future__ import annotations

from collections.abc import Sequence


def opt(argv: Sequence[str], *names: str) -> str:
    """The value of the first of `names` in argv: `--name=value`, or `name value`; KeyError when none is there."""
    for i, arg in enumerate(argv):
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1 :]
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
    raise KeyError(f"none of {names} in {list(argv)}")


def resumed(argv: Sequence[str]) -> str:
    """The session codex resumes: the id after `resume --` (or after `resume`)."""
    after = [a for a in argv[list(argv).index("resume") + 1 :] if a != "--"]
    return after[0]
