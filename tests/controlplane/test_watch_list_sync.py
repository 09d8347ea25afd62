"""The cache syncs by WatchList on the real kube-apiserver 1.35: its first request for a resource is a
watch with ``sendInitialEvents`` (no LIST), and the ``initial-events-end`` bookmark marks it synced."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from descheduler.kube.cache import ClusterCache
from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.move43a_fixtures import AuditedIdentity

pytestmark = pytest.mark.controlplane


@pytest.mark.parametrize(("mode", "verb"), [("auto", "watch"), ("off", "list")])
def test_the_cache_syncs_nodes_by_the_mode_it_is_given(
    control_plane: ControlPlane,
    namespace: str,
    audited: Callable[[str], AuditedIdentity],
    mode: str,
    verb: str,
) -> None:
    identity = audited(f"watchlist-{mode}")
    control_plane.apply([objects.node(f"{namespace}-node-{i}", namespace) for i in range(3)])
    api = connect(str(identity.kubeconfig), qps=50, burst=50)
    cache = ClusterCache(
        api, node_selector=f"{objects.GROUP_LABEL}={namespace}", resources=["nodes"], watch_list=mode
    )
    try:
        cache.start()
        assert cache.wait_synced(30.0)
        names = sorted(n.name for n in cache.snapshot().nodes)
        stats = cache.stats()["nodes"]
    finally:
        cache.stop()
        api.close()
    assert names == [f"{namespace}-node-{i}" for i in range(3)]
    first = next(r for r in identity.flush() if r.resource == "nodes")
    assert (first.verb, first.code) == (verb, 200)
    assert (first.query.get("sendInitialEvents") == "true") == (mode == "auto")
    assert stats["watch_lists" if mode == "auto" else "lists"] == 1
