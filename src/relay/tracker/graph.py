"""Pure graph helpers over `blocks` edges (task -> the tasks it waits for): paths and cycles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Edge:
    task_id: str  # the dependent task
    depends_on: str
    dep_type: str


def dependency_tree(
    root: str,
    info: Mapping[str, Mapping[str, Any]],
    edges: Sequence[Edge],
    direction: str,
    max_depth: int = 10,
    max_nodes: int = 500,
) -> dict[str, Any]:
    """Nested `blockers` (what root waits for) and/or `blocking` (what waits for root).

    `info` maps a task id to the fields shown for it. A task already expanded elsewhere in the
    tree is shown again with `repeated: true` and no children, so a dense graph stays small; a
    loop back to an ancestor (possible through `related` links) is marked `cycle: true`; past
    `max_depth` levels or `max_nodes` entries, `truncated: true`.
    """
    forward: dict[str, list[Edge]] = {}
    backward: dict[str, list[Edge]] = {}
    for edge in edges:
        forward.setdefault(edge.task_id, []).append(edge)
        backward.setdefault(edge.depends_on, []).append(edge)
    budget = [max_nodes]

    def grow(node: str, key: str, path: frozenset[str], expanded: set[str], depth: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for edge in (forward if key == "blockers" else backward).get(node, []):
            other = edge.depends_on if key == "blockers" else edge.task_id
            item: dict[str, Any] = {**info[other], "dep_type": edge.dep_type}
            budget[0] -= 1
            if other in path:
                item["cycle"] = True
            elif other in expanded:
                item["repeated"] = True
            elif depth >= max_depth or budget[0] <= 0:
                item["truncated"] = True
            else:
                expanded.add(other)
                item[key] = grow(other, key, path | {other}, expanded, depth + 1)
            out.append(item)
        return out

    tree: dict[str, Any] = dict(info[root])
    for key in ("blockers", "blocking"):
        if direction in (key, "both"):
            tree[key] = grow(root, key, frozenset({root}), set(), 1)
    return tree
