"""Pure parts of a future Windows job runtime: npm `.cmd` shims resolved to their real command, argv quoting.

Not used to run anything yet (relay runs no CLI job on Windows: see `_unsupported.py`); tested here so
the Windows runtime, when it comes, starts from checked pieces.

- An agent installed with npm (claude, codex, gemini) is a `.cmd` batch file on Windows. Running it
  means running cmd.exe, whose own parsing of `%`, `^`, `&`, `|` and quotes mangles a prompt passed as an
  argument. `resolve_cmd_shim` reads the shim's text instead and returns the command it would run
  (`node.exe` or `node`, the script, its fixed arguments), so relay can start that without a shell.
- Windows passes a process one command-line string, which the program splits back into argv (the
  Microsoft C runtime's rules). `quote_argv` joins an argv by those rules (what subprocess.list2cmdline
  does) and `split_cmdline` splits by them, so a round trip gives the argv back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PureWindowsPath

# The cmd-shim line that runs the target: everything up to `%*` (the user's arguments).
_RUN_LINE = re.compile(r"^(?P<cmd>.*?)\s*%\*\s*$")
# npm's current shims: `... || title %COMSPEC% & "%_prog%"  "%dp0%\...\cli.js" %*`; older ones start at `@`.
_AFTER_TITLE = re.compile(r"title\s+%COMSPEC%\s*&\s*(?P<cmd>.*)$", re.IGNORECASE)
_TOKEN = re.compile(r'"([^"]*)"|(\S+)')
_DP0 = re.compile(r"%~dp0%?|%dp0%", re.IGNORECASE)
# The shim's test for a node.exe beside it (then that one runs, else node from PATH).
_NODE_BESIDE = re.compile(r'IF\s+EXIST\s+"(%~dp0|%dp0%)\\node\.exe"', re.IGNORECASE)
# `SET "_prog=node"` (the program when no node.exe sits beside the shim).
_PROG_DEFAULT = re.compile(r'SET\s+"_prog=(?P<prog>[^"%]+)"', re.IGNORECASE)


@dataclass(frozen=True)
class ShimCommand:
    """What a `.cmd` shim runs: `program` (a path, or a name to find on PATH) then `args`, then the user's arguments."""

    program: str
    args: tuple[str, ...]

    def argv(self, user_args: Sequence[str] = ()) -> list[str]:
        return [self.program, *self.args, *user_args]


def _nothing_exists(_path: str) -> bool:
    return False


def _expand(token: str, shim_dir: PureWindowsPath) -> str:
    """`%dp0%` / `%~dp0` → the shim's folder (with its trailing backslash), the path normalised."""
    if not _DP0.search(token):
        return token
    expanded = _DP0.sub(lambda _m: str(shim_dir).rstrip("\\") + "\\", token)
    return str(PureWindowsPath(expanded.replace("\\\\", "\\")))


def resolve_cmd_shim(text: str, shim_path: str, exists: Callable[[str], bool] | None = None) -> ShimCommand | None:
    """The command npm's `.cmd` shim at `shim_path` (a Windows path) runs, from its text; None if it is not one.

    `exists(path)` answers the shim's own `IF EXIST "%dp0%\\node.exe"` test (default: no node.exe beside
    it, so the program is the name the shim falls back to, usually `node`, to be found on PATH).
    """
    shim_dir = PureWindowsPath(shim_path).parent
    has: Callable[[str], bool] = exists or _nothing_exists
    lines = [line.strip() for line in text.replace("\r\n", "\n").split("\n")]
    run = next((m.group("cmd") for line in reversed(lines) if (m := _RUN_LINE.match(line))), None)
    if run is None:
        return None
    after = _AFTER_TITLE.search(run)
    if after is not None:
        run = after.group("cmd")
    tokens = [m.group(1) if m.group(1) is not None else m.group(2) for m in _TOKEN.finditer(run.lstrip("@"))]
    if not tokens:
        return None
    beside = _expand("%dp0%\\node.exe", shim_dir)
    if tokens[0].lower() == "%_prog%":
        fallback = next((m.group("prog") for line in lines if (m := _PROG_DEFAULT.search(line))), "node")
        program = beside if has(beside) else fallback
    elif _NODE_BESIDE.search(text) and has(beside):
        program = beside  # an old shim's first branch: `IF EXIST "%~dp0\node.exe" ( "%~dp0\node.exe" ... )`
    else:
        program = _expand(tokens[0], shim_dir)
    if "%" in program:
        return None  # another variable this parser does not know: do not guess
    args = tuple(_expand(token, shim_dir) for token in tokens[1:])
    if any("%" in arg for arg in args):
        return None
    return ShimCommand(program, args)


def quote_arg(arg: str) -> str:
    """One argument quoted for the Microsoft C runtime's splitting (subprocess.list2cmdline's rules)."""
    if arg and not any(c in arg for c in ' \t"'):
        return arg
    # Backslashes are literal except before a quote: there each one is doubled and the quote escaped.
    out: list[str] = []
    backslashes = 0
    for c in arg:
        if c == "\\":
            backslashes += 1
        elif c == '"':
            out.append("\\" * (backslashes * 2 + 1) + '"')
            backslashes = 0
        else:
            out.append("\\" * backslashes + c)
            backslashes = 0
    needs_quotes = not arg or " " in arg or "\t" in arg
    if needs_quotes:
        out.append("\\" * (backslashes * 2))
        return '"' + "".join(out) + '"'
    out.append("\\" * backslashes)
    return "".join(out)


def quote_argv(argv: Sequence[str]) -> str:
    """The command line that a Windows program splits back into `argv`."""
    return " ".join(quote_arg(arg) for arg in argv)


def split_cmdline(line: str) -> list[str]:
    """Split a command line as the Microsoft C runtime does for a program's arguments (after argv[0])."""
    args: list[str] = []
    current: list[str] = []
    in_arg = in_quotes = False
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            j = i
            while j < n and line[j] == "\\":
                j += 1
            count = j - i
            if j < n and line[j] == '"':
                current.append("\\" * (count // 2))
                if count % 2:
                    current.append('"')
                    i = j + 1
                else:
                    i = j
            else:
                current.append("\\" * count)
                i = j
            in_arg = True
            continue
        if c == '"':
            if in_quotes and i + 1 < n and line[i + 1] == '"':
                current.append('"')  # "" inside quotes is a literal quote
                i += 2
                continue
            in_quotes = not in_quotes
            in_arg = True
        elif c in " \t" and not in_quotes:
            if in_arg:
                args.append("".join(current))
                current, in_arg = [], False
        else:
            current.append(c)
            in_arg = True
        i += 1
    if in_arg:
        args.append("".join(current))
    return args
