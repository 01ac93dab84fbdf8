"""Pure graph helpers over `blocks` edges (task -> the tasks it waits for): paths and cycles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Graph = Mapping[str, Sequence[str]]


def find_path(graph: Graph, start: str, goal: str) -> list[str] | None:
    """A path start -> ... -> goal following edges, or None; iterative, so deep graphs cannot overflow."""
    if start == goal:
        return [start]
    parent: dict[str, str] = {}
    seen = {start}
    stack = [start]
    while stack:
        node = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt in seen:
                continue
            parent[nxt] = node
            if nxt == goal:
                path = [goal]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            seen.add(nxt)
            stack.append(nxt)
    return None


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {n for targets in graph.values() for n in targets})
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = graph.get(node, ())
            recurse = False
            while i < len(targets):
                nxt = targets[i]
                i += 1
                if nxt not in index:
                    work.append((node, i))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return out


def find_cycles(graph: Graph) -> list[list[str]]:
    """One concrete cycle per strongly connected component that has one, as [a, b, ..., a]."""
    cycles: list[list[str]] = []
    for component in strongly_connected(graph):
        members = set(component)
        first = component[0]
        if len(component) == 1 and first not in graph.get(first, ()):
            continue
        inside = {n: [t for t in graph.get(n, ()) if t in members] for n in component}
        if first in inside[first]:
            cycles.append([first, first])
            continue
        # Some successor of `first` inside the component leads back to it.
        for nxt in inside[first]:
            path = find_path(inside, nxt, first)
            if path is not None:
                cycles.append([first, *path])
                break
    return cycles
