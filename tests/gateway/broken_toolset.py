"""A toolset whose tools cannot be built (its dependency is missing), for the fail-open listing test."""

from __future__ import annotations

from relay.server.toolsets._registry import Deps, ToolRegistry, Toolset


def build(reg: ToolRegistry, deps: Deps) -> None:
    raise ModuleNotFoundError("No module named 'some_optional_dependency'")


TOOLSET = Toolset(name="broken", description="needs a package that is not installed", build=build)
