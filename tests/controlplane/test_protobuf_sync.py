"""A cache that reads pods and nodes in protobuf holds what a JSON cache holds, on the real API server.

Two caches follow the real control plane, one with ``encoding="protobuf"`` and one in JSON (both synced
by LIST, then both by WatchList). The objects went through the real server's defaulting, admission and
status updates. After the sync and after watch events (a pod created, one labelled, one deleted, a node
labelled) their snapshots and digests must be equal, the protobuf cache must have read protobuf (pages or
initial events, then watch events) and must not have fallen back to JSON. Then a node gets Koordinator's
raw-allocatable annotation, which the fast path leaves to ``parse.py``: the protobuf cache must relist
nodes in JSON and still agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from descheduler.cluster.parse import RAW_ALLOCATABLE_ANNOTATION
from descheduler.cluster.types import ClusterSnapshot
from descheduler.kube.api import KubeApi
from descheduler.kube.cache import ClusterCache
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_fast_decoder import in_namespace, place_shaped

pytestmark = pytest.mark.controlplane


@pytest.fixture(params=["off", "on"], ids=["list", "watchlist"])
def caches(admin_api: KubeApi, request: pytest.FixtureRequest) -> Iterator[tuple[ClusterCache, ClusterCache]]:
    options: dict[str, Any] = {"watch_timeout": 3, "backoff_initial": 0.2, "backoff_max": 1.0}
    proto = ClusterCache(admin_api, encoding="protobuf", watch_list=request.param, page_size=4, **options)
    plain = ClusterCache(admin_api, watch_list=request.param, page_size=4, **options)
    proto.start()
    plain.start()
    try:
        yield proto, plain
    finally:
        proto.stop()
        plain.stop()


def digests(cache: ClusterCache) -> dict[str, tuple[int, str]]:
    return {
        name: (d["count"], d["digest"]) for name, d in cache.digest().items() if name in ("nodes", "pods")
    }


def test_a_protobuf_cache_holds_what_a_json_cache_holds(
    control_plane: ControlPlane, namespace: str, caches: tuple[ClusterCache, ClusterCache], admin_api: KubeApi
) -> None:
    proto, plain = caches
    nodes = place_shaped(control_plane, namespace, 4)
    assert proto.wait_synced(60) and plain.wait_synced(60)

    def agreed(pods: int, check: Any = None) -> ClusterSnapshot | None:
        ours, theirs = in_namespace(proto.snapshot(), namespace), in_namespace(plain.snapshot(), namespace)
        running = [p for p in ours.pods if p.phase == "Running" and not p.terminating]
        same = ours == theirs and digests(proto) == digests(plain)
        ok = same and len(running) == pods == len(ours.pods) and (check is None or check(ours))
        return ours if ok else None

    control_plane.wait_for("both caches to see the 8 pods Running alike", lambda: agreed(8))
    stats = proto.stats()
    for resource in ("nodes", "pods"):
        assert stats[resource]["protobuf_pages"] + stats[resource]["protobuf_events"] > 0, stats[resource]
        assert stats[resource]["proto_pages_as_json"] == stats[resource]["proto_relists"] == 0, stats[
            resource
        ]
        assert stats[resource]["fallbacks"] == 0, stats[resource]
    assert not proto.object_errors and not plain.object_errors

    events_before = stats["pods"]["protobuf_events"]
    control_plane.apply([objects.bare_pod("late", namespace, nodes[0])], namespace=namespace)
    control_plane.kubectl("label", "pod", "bare", "-n", namespace, "changed=yes")
    control_plane.kubectl("scale", "deployment", "plain", "--replicas=2", "-n", namespace)
    control_plane.kubectl("label", "node", nodes[0], "decoded=protobuf")

    def followed(snapshot: ClusterSnapshot) -> bool:
        bare = next((p for p in snapshot.pods if p.name == "bare"), None)
        late = next((p for p in snapshot.pods if p.name == "late"), None)
        node = next(n for n in snapshot.nodes if n.name == nodes[0])
        return (
            bare is not None
            and bare.labels.get("changed") == "yes"
            and late is not None
            and (node.labels.get("decoded") == "protobuf")
        )

    control_plane.wait_for("both caches to follow the watch alike", lambda: agreed(7, followed), timeout_s=90)
    stats = proto.stats()
    assert stats["pods"]["protobuf_events"] > events_before
    assert stats["pods"]["proto_relists"] == stats["nodes"]["proto_relists"] == 0

    # A node the fast path leaves to parse.py: its watch event ends the protobuf watch; nodes relist in JSON.
    control_plane.kubectl("annotate", "node", nodes[1], f'{RAW_ALLOCATABLE_ANNOTATION}={{"cpu": "12"}}')

    def raw_allocatable(snapshot: ClusterSnapshot) -> bool:
        node = next(n for n in snapshot.nodes if n.name == nodes[1])
        return node.raw_allocatable is not None

    control_plane.wait_for("both caches to read the annotation alike", lambda: agreed(7, raw_allocatable))
    assert proto.stats()["nodes"]["proto_relists"] >= 1
