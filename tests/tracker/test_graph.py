"""Ready and blocked work on a 1,000-task graph against a direct computation; cycle detection properties."""

from __future__ import annotations

import itertools
import random
from graphlib import CycleError, TopologicalSorter

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.tracker import Project, TaskChanges, TaskStore
from relay.tracker.graph import Edge, dependency_tree, find_cycles, find_path


def test_ready_and_blocked_lists_are_right_on_a_1000_task_graph(store: TaskStore, project: Project) -> None:
    rng = random.Random(20261123)
    tasks = [store.create(project, f"task {i}", priority=rng.randint(0, 4)) for i in range(1000)]
    status = {t.id: "open" for t in tasks}
    for t in tasks:
        roll = rng.random()
        if roll < 0.25:
            store.close_task(project, t.id)
            status[t.id] = "closed"
        elif roll < 0.35:
            store.update(project, t.id, TaskChanges(status="in_progress"))
            status[t.id] = "in_progress"
    blockers: dict[str, list[str]] = {t.id: [] for t in tasks}
    for _ in range(1500):
        i, j = sorted(rng.sample(range(1000), 2))
        kind = rng.choice(["blocks", "blocks", "blocks", "related", "discovered-from"])
        # j waits for i: edges always point to an older task, so the `blocks` graph stays acyclic
        store.add_dependency(project, tasks[j].id, tasks[i].id, kind)
        if kind == "blocks" and tasks[i].id not in blockers[tasks[j].id]:
            blockers[tasks[j].id].append(tasks[i].id)
    by_id = {t.id: t for t in tasks}

    def order(ids: list[str]) -> list[str]:
        return sorted(ids, key=lambda i: (by_id[i].priority, by_id[i].created_at, i))

    open_blockers = {tid: [b for b in bs if status[b] != "closed"] for tid, bs in blockers.items()}
    expected_ready = order([tid for tid in status if status[tid] == "open" and not open_blockers[tid]])
    expected_blocked = order([tid for tid in status if status[tid] != "closed" and open_blockers[tid]])
    assert len(expected_ready) > 50 and len(expected_blocked) > 50  # the graph exercises both sides

    assert [t.id for t in store.ready(project, limit=1000)] == expected_ready
    assert [t.id for t in store.ready(project, limit=7)] == expected_ready[:7]
    assert [t.id for t in store.ready(project, priority=1, limit=1000)] == [
        i for i in expected_ready if by_id[i].priority == 1
    ]
    blocked = store.blocked(project, limit=1000)
    assert [t.id for t, _ in blocked] == expected_blocked
    assert all(sorted(b.id for b in bs) == sorted(open_blockers[t.id]) for t, bs in blocked)
    assert store.cycles(project) == []


def test_find_path_follows_edges_and_returns_none_without_a_route() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": [], "d": ["a"]}
    assert find_path(graph, "a", "c") == ["a", "b", "c"]
    assert find_path(graph, "c", "a") is None
    assert find_path(graph, "d", "c") == ["d", "a", "b", "c"]


graphs = st.dictionaries(
    st.sampled_from([f"n{i}" for i in range(12)]),
    st.lists(st.sampled_from([f"n{i}" for i in range(12)]), max_size=4, unique=True),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(graphs)
def test_find_cycles_reports_real_cycles_exactly_when_the_graph_has_one(graph: dict[str, list[str]]) -> None:
    cycles = find_cycles(graph)
    try:
        tuple(TopologicalSorter(graph).static_order())
        acyclic = True
    except CycleError:
        acyclic = False
    assert (cycles == []) is acyclic
    for cycle in cycles:
        assert cycle[0] == cycle[-1]
        assert all(b in graph.get(a, []) for a, b in itertools.pairwise(cycle))


def test_a_dense_graphs_tree_expands_each_task_once_and_stays_bounded() -> None:
    layers = [[f"L{i}n{j}" for j in range(4)] for i in range(12)]
    edges = [Edge(a, b, "blocks") for upper, lower in itertools.pairwise(layers) for a in upper for b in lower]
    info = {n: {"id": n} for layer in layers for n in layer}
    tree = dependency_tree("L0n0", info, edges, "blockers", max_depth=10, max_nodes=500)

    def entries(node: dict[str, object]) -> list[dict[str, object]]:
        kids = node.get("blockers", [])
        assert isinstance(kids, list)
        return [k for kid in kids for k in (kid, *entries(kid))]

    found = entries(tree)
    assert len(found) < 200  # 4^11 paths without de-duplication
    expanded = [e["id"] for e in found if "blockers" in e]
    assert len(expanded) == len(set(expanded))  # each task's blockers are listed once
    assert any(e.get("repeated") for e in found)
    assert any(e.get("truncated") for e in found)  # the 12th layer is past max_depth
    assert "blocking" not in tree
