"""The pure parts of a future Windows runtime: npm `.cmd` shims resolved to `node` without a shell, argv quoting."""

from __future__ import annotations

import random
import subprocess

import pytest

from relay.runtime.windows_cmd import ShimCommand, quote_argv, resolve_cmd_shim, split_cmdline

# What npm (cmd-shim 4 and later) writes for a package bin whose script starts with `#!/usr/bin/env node`.
NPM_SHIM = (
    "@ECHO off\r\n"
    "GOTO start\r\n"
    ":find_dp0\r\n"
    "SET dp0=%~dp0\r\n"
    "EXIT /b\r\n"
    ":start\r\n"
    "SETLOCAL\r\n"
    "CALL :find_dp0\r\n"
    "\r\n"
    'IF EXIST "%dp0%\\node.exe" (\r\n'
    '  SET "_prog=%dp0%\\node.exe"\r\n'
    ") ELSE (\r\n"
    '  SET "_prog=node"\r\n'
    "  SET PATHEXT=%PATHEXT:;.JS;=;%\r\n"
    ")\r\n"
    "\r\n"
    'endLocal & goto #_undefined_# 2>NUL || title %COMSPEC% & "%_prog%"  '
    '"%dp0%\\node_modules\\@anthropic-ai\\claude-code\\cli.js" %*\r\n'
)
# What older npm (cmd-shim before 4) wrote.
OLD_NPM_SHIM = (
    '@IF EXIST "%~dp0\\node.exe" (\r\n'
    '  "%~dp0\\node.exe"  "%~dp0\\node_modules\\@google\\gemini-cli\\dist\\index.js" %*\r\n'
    ") ELSE (\r\n"
    "  @SETLOCAL\r\n"
    "  @SET PATHEXT=%PATHEXT:;.JS;=;%\r\n"
    '  node  "%~dp0\\node_modules\\@google\\gemini-cli\\dist\\index.js" %*\r\n'
    ")\r\n"
)
# A bin with no shebang (a native program shipped in the package): the shim runs it directly.
NATIVE_SHIM = (
    "@ECHO off\r\nGOTO start\r\n:find_dp0\r\nSET dp0=%~dp0\r\nEXIT /b\r\n:start\r\nSETLOCAL\r\nCALL :find_dp0\r\n"
    '"%dp0%\\node_modules\\@openai\\codex\\bin\\codex.exe"   %*\r\n'
)
SHIM_PATH = r"C:\Users\dev\AppData\Roaming\npm\claude.cmd"
NPM_DIR = r"C:\Users\dev\AppData\Roaming\npm"


def test_an_npm_shim_resolves_to_node_on_path_and_the_package_script() -> None:
    resolved = resolve_cmd_shim(NPM_SHIM, SHIM_PATH)
    assert resolved == ShimCommand("node", (NPM_DIR + r"\node_modules\@anthropic-ai\claude-code\cli.js",))
    assert resolved is not None and resolved.argv(["-p", 'say "100%"']) == [
        "node",
        NPM_DIR + r"\node_modules\@anthropic-ai\claude-code\cli.js",
        "-p",
        'say "100%"',
    ]


def test_an_npm_shim_takes_the_node_exe_beside_it_when_there_is_one() -> None:
    beside = NPM_DIR + r"\node.exe"
    resolved = resolve_cmd_shim(NPM_SHIM, SHIM_PATH, exists=lambda path: path == beside)
    assert resolved is not None and resolved.program == beside


def test_an_old_style_npm_shim_resolves_to_its_last_command_line() -> None:
    script = r"D:\tools\npm\node_modules\@google\gemini-cli\dist\index.js"
    assert resolve_cmd_shim(OLD_NPM_SHIM, r"D:\tools\npm\gemini.cmd") == ShimCommand("node", (script,))
    with_node = resolve_cmd_shim(OLD_NPM_SHIM, r"D:\tools\npm\gemini.cmd", exists=lambda _path: True)
    assert with_node == ShimCommand(r"D:\tools\npm\node.exe", (script,))


def test_a_shim_for_a_native_program_resolves_to_that_program() -> None:
    resolved = resolve_cmd_shim(NATIVE_SHIM, r"C:\npm\codex.cmd")
    assert resolved == ShimCommand(r"C:\npm\node_modules\@openai\codex\bin\codex.exe", ())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "@echo off\r\necho hello\r\n",  # runs nothing with the user's arguments
        '@"%SOMEWHERE%\\tool.exe" %*\r\n',  # a variable the parser cannot know: no guess
    ],
)
def test_text_that_is_not_an_npm_shim_resolves_to_nothing(text: str) -> None:
    assert resolve_cmd_shim(text, SHIM_PATH) is None


# Known cases of the Microsoft C runtime's rules (the table in Microsoft's "Parsing C++ command-line
# arguments", read backwards) and what subprocess.list2cmdline gives for them.
KNOWN = [
    (["a b c"], '"a b c"'),
    (['ab"c', "\\", "d"], 'ab\\"c \\ d'),
    (["a\\\\\\b", "de fg", "h"], 'a\\\\\\b "de fg" h'),
    (['a\\"b', "c", "d"], 'a\\\\\\"b c d'),
    (["a\\\\b c", "d", "e"], '"a\\\\b c" d e'),
    (["", "x"], '"" x'),
    (["trailing\\"], "trailing\\"),
    (["trailing space\\"], '"trailing space\\\\"'),
    (["tab\there"], '"tab\there"'),
    (["%PATH%", "a&b|c^d<e>f"], "%PATH% a&b|c^d<e>f"),  # cmd.exe metacharacters: not its business
]


@pytest.mark.parametrize(("argv", "line"), KNOWN)
def test_argv_is_quoted_as_windows_programs_split_it(argv: list[str], line: str) -> None:
    assert (quote_argv(argv), subprocess.list2cmdline(argv)) == (line, line)
    assert split_cmdline(line) == argv


def test_quoting_then_splitting_gives_back_any_argv_and_matches_list2cmdline() -> None:
    rng = random.Random(18)
    alphabet = ' \t"\\ab%^&'
    for _ in range(3000):
        argv = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7))) for _ in range(rng.randint(1, 4))]
        line = quote_argv(argv)
        assert (line, split_cmdline(line)) == (subprocess.list2cmdline(argv), argv), argv
