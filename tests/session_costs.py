"""Costs a test would otherwise pay again and again, paid once per test session (tests/conftest.py installs both).

- `tools_built_once`: every `build_server` turns each of relay's tool functions into the SDK's `Tool`
  (`Tool.from_function`: a pydantic model of the arguments and their JSON schema), ≈ 80 ms a build on
  the 2-core machine, and the main tier builds a server hundreds of times. A relay process builds it
  once; the tests now also convert each distinct tool function once per session and give every build
  a copy bound to its own function. The key is all `from_function` reads: the function's code, its
  module's globals, its signature (defaults and annotations, a class by its identity) and the
  arguments, so a tool whose signature depends on the settings (an enum of configured agents) is
  built again for each new signature.
- `python3_without_shim`: the fake agent CLIs (tests/fakes) and many tests' scripts start `python3`
  through PATH. Where that is a version manager's shim (pyenv: a bash script running `pyenv exec`,
  ≈ 75 ms a start, more than the interpreter itself), PATH gets a folder in front holding `python3`
  linked to the interpreter the shim chose, so every start reaches the same interpreter directly.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import subprocess
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.tools import Tool

MEMO_MODULES = ("relay.",)  # only relay's own tool functions; tests' own servers convert theirs as before


def _annotation_key(annotation: Any) -> Any:
    """What of an annotation a tool's schema depends on, hashable; a class (or anything unnamed) by identity."""
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return ("class", id(annotation))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is not None:
        return (_annotation_key(origin), tuple(_annotation_key(a) for a in args), repr(annotation))
    return ("value", repr(annotation), id(annotation) if callable(annotation) else None)


def _key(cls: type[Tool], fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    signature = inspect.signature(fn)
    params = tuple(
        (p.name, p.kind, repr(p.default), _annotation_key(p.annotation)) for p in signature.parameters.values()
    )
    return (
        cls,
        fn.__module__,
        fn.__qualname__,
        getattr(fn, "__code__", None),
        id(getattr(fn, "__globals__", None)),
        fn.__doc__,
        params,
        _annotation_key(signature.return_annotation),
        repr(sorted(kwargs.items())),
    )


def tools_built_once() -> Callable[[], None]:
    """Memoize `Tool.from_function` for relay's tool functions; returns the undo."""
    original = Tool.__dict__["from_function"]
    built: dict[Any, Tool] = {}

    def from_function(cls: type[Tool], fn: Callable[..., Any], **kwargs: Any) -> Tool:
        if not str(getattr(fn, "__module__", "")).startswith(MEMO_MODULES):
            return original.__func__(cls, fn, **kwargs)
        key = _key(cls, fn, kwargs)
        first = built.get(key)
        if first is None:
            first = built[key] = original.__func__(cls, fn, **kwargs)
        # A deep copy: relay replaces the copy's metadata and reads its schemas; the first stays as built.
        return first.model_copy(update={"fn": fn}, deep=True)

    Tool.from_function = classmethod(from_function)  # type: ignore[method-assign,assignment]

    def undo() -> None:
        Tool.from_function = original  # type: ignore[method-assign]

    return undo


def python3_without_shim() -> Callable[[], None]:
    """Put the interpreter a `python3` shim chooses first on PATH (nothing when python3 is no script); the undo."""
    found = shutil.which("python3")
    if found is None or not _is_script(Path(found)):
        return lambda: None
    # The shim chooses by the folder it runs in (a .python-version there); the tests' folders have none.
    with tempfile.TemporaryDirectory() as neutral:
        done = subprocess.run(
            [found, "-c", "import sys; print(sys.executable if sys.prefix == sys.base_prefix else '')"],
            cwd=neutral,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    chosen = Path(done.stdout.strip())  # empty for a virtual environment: a link elsewhere would lose it
    if done.returncode != 0 or not done.stdout.strip() or not chosen.is_file() or _is_script(chosen):
        return lambda: None
    folder = Path(tempfile.mkdtemp(prefix="relay-python3-"))
    folder.chmod(0o755)  # processes of other users (the test PostgreSQL, sandboxed code) look through PATH too
    (folder / "python3").symlink_to(chosen)
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{folder}{os.pathsep}{before}"

    def undo() -> None:
        if os.environ.get("PATH", "").startswith(f"{folder}{os.pathsep}"):
            os.environ["PATH"] = before
        shutil.rmtree(folder, ignore_errors=True)

    return undo


def _is_script(path: Path) -> bool:
    with contextlib.suppress(OSError), path.open("rb") as file:
        return file.read(2) == b"#!"
    return False
