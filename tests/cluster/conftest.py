"""The cluster tier: hosts simulated by network namespaces (tests/cluster/netns.py).

Needs root and `ip`; where they are missing every test of the tier fails under CI=true and is
skipped, saying why, elsewhere. It never passes without running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.netns import Cluster, Host, remove_stale, require


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A cluster with no host yet (`cluster.add_host()`); everything it made is removed at the end, even after a failure."""
    require()
    remove_stale()
    made = Cluster()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def hosts(cluster: Cluster) -> list[Host]:
    """Two hosts, each a namespace linked to the root namespace."""
    return [cluster.add_host(), cluster.add_host()]
