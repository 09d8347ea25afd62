"""What the real kube-apiserver sends decodes to the same cluster by the fast decoder as by ``parse.py``.

Two watch caches follow one namespace of the real control plane: one decodes LIST pages and watch events
with msgspec (``fastparse``, as the product runs), the other with ``json.loads`` and ``parse.py`` alone.
The objects went through the real API server's defaulting and admission (``managedFields``, limits turned
into requests, a RuntimeClass's overhead, the scheduler's and kwok's status updates), so both decoders see
exactly what a cluster sends; after the LIST and after changes through the watch, the snapshots must be
equal, and the fast decoder must not have had to leave any of these objects to ``parse.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from descheduler.cluster.fastparse import FAST_KINDS
from descheduler.cluster.types import ClusterSnapshot
from descheduler.kube.api import KubeApi
from descheduler.kube.cache import ClusterCache, Interner
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane

pytestmark = pytest.mark.controlplane

RUNTIME_CLASS = "fast-decoder-overhead"


def place_shaped(plane: ControlPlane, namespace: str, plain: int, *more: dict[str, Any]) -> list[str]:
    """Two nodes (the second tainted), a RuntimeClass with overhead, 3 pods of every shape the parsers read
    (``shaped_template``) on the first, ``plain`` plain pods and a bare pod on the second, and ``more``."""
    plane.apply(
        [
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": RUNTIME_CLASS},
                "handler": "runc",
                "overhead": {"podFixed": {"cpu": "250m", "memory": "16Mi"}},
            }
        ]
    )
    nodes = [f"{namespace}-n{i}" for i in range(2)]
    plane.add_nodes(namespace, nodes, cpu="16")
    plane.kubectl("taint", "node", nodes[1], "dedicated=x:NoSchedule")
    deployment = objects.deployment("shaped", namespace, replicas=3)
    deployment["spec"]["template"] = shaped_template(namespace, nodes[0])
    plane.apply(
        [
            deployment,
            objects.deployment("plain", namespace, replicas=plain),
            objects.bare_pod("bare", namespace, nodes[1]),
            *more,
        ],
        namespace=namespace,
    )
    return nodes


def shaped_template(group: str, node: str) -> dict[str, Any]:
    """A pod template with most of what ``parse.py`` reads: a sidecar and an init container, limits only
    on one container, a RuntimeClass, tolerations, required node affinity, local storage."""
    template = objects.pod_template("shaped", group, node_name=node)
    spec = template["spec"]
    spec["runtimeClassName"] = RUNTIME_CLASS
    spec["containers"].append(
        {
            "name": "limits-only",
            "image": "registry.invalid/log:1",
            "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}},
        }
    )
    spec["initContainers"] = [
        {"name": "migrate", "image": "registry.invalid/m:1", "resources": {"requests": {"cpu": "1"}}},
        {
            "name": "proxy",
            "image": "registry.invalid/proxy:1",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}},
        },
    ]
    spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": objects.GROUP_LABEL, "operator": "In", "values": [group]}]}
                ]
            }
        }
    }
    spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return template


def in_namespace(snapshot: ClusterSnapshot, namespace: str) -> ClusterSnapshot:
    return ClusterSnapshot(
        nodes=tuple(n for n in snapshot.nodes if n.labels.get(objects.GROUP_LABEL) == namespace),
        pods=tuple(p for p in snapshot.pods if p.namespace == namespace),
        pdbs=tuple(p for p in snapshot.pdbs if p.namespace == namespace),
        workloads=tuple(w for w in snapshot.workloads if w.namespace == namespace),
    )


@pytest.fixture
def caches(admin_api: KubeApi) -> Iterator[tuple[ClusterCache, ClusterCache]]:
    fast = ClusterCache(admin_api, watch_timeout=3, backoff_initial=0.2, backoff_max=1.0)
    exact = ClusterCache(admin_api, watch_timeout=3, backoff_initial=0.2, backoff_max=1.0, fast_decode=False)
    fast.start()
    exact.start()
    try:
        yield fast, exact
    finally:
        fast.stop()
        exact.stop()


def test_the_real_api_servers_objects_decode_the_same_by_the_fast_decoder_as_by_parse_py(
    control_plane: ControlPlane, namespace: str, caches: tuple[ClusterCache, ClusterCache], admin_api: KubeApi
) -> None:
    fast, exact = caches
    nodes = place_shaped(control_plane, namespace, 2, objects.pdb("shaped", "shaped", max_unavailable=1))
    assert fast.wait_synced(60) and exact.wait_synced(60)

    def agreed(pods: int) -> ClusterSnapshot | None:
        ours = in_namespace(fast.snapshot(), namespace)
        theirs = in_namespace(exact.snapshot(), namespace)
        running = [p for p in ours.pods if p.phase == "Running" and not p.terminating]
        return ours if ours == theirs and len(running) == pods == len(ours.pods) else None

    snapshot = control_plane.wait_for("both caches to see the 6 pods Running alike", lambda: agreed(6))
    shaped = [p for p in snapshot.pods if p.labels.get("app") == "shaped"]
    assert len(shaped) == 3
    # requests as the scheduler counts them: max(app 250m + limits-only 200m (its limit, defaulted) +
    # proxy 100m (a sidecar), migrate 1 alone (before the sidecar starts)) = 1, plus the RuntimeClass's 250m
    assert {p.requests["cpu"] for p in shaped} == {1250}
    assert all(p.has_local_storage and p.required_node_terms and p.tolerations for p in shaped)
    assert {n.name: n.unschedulable or bool(n.taints) for n in snapshot.nodes} == {
        nodes[0]: False,
        nodes[1]: True,
    }
    assert {w.kind for w in snapshot.workloads} == {"Deployment", "ReplicaSet"}
    assert not fast.object_errors and not exact.object_errors

    control_plane.kubectl("scale", "deployment", "shaped", "--replicas=1", "-n", namespace)
    control_plane.kubectl("delete", "pod", "bare", "-n", namespace, "--wait=false")
    control_plane.kubectl("label", "node", nodes[0], "decoded=watch")

    def relabelled() -> ClusterSnapshot | None:
        # The node's label and the pods' changes arrive on separate watches, in either order.
        snapshot = agreed(3)
        labelled = snapshot is not None and snapshot.nodes[0].labels.get("decoded") == "watch"
        return snapshot if labelled else None

    followed = control_plane.wait_for("both caches to follow the watch alike", relabelled, timeout_s=90)
    assert [n.labels.get("decoded") for n in followed.nodes] == ["watch", None]
    assert fast.stats()["pods"]["events"] > 0
    # None of these objects was left to parse.py: the fast decoder itself produced every value above.
    sharer = Interner()
    for path, query in (
        (f"/api/v1/namespaces/{namespace}/pods", {}),
        (f"/apis/apps/v1/namespaces/{namespace}/replicasets", {}),
        (f"/apis/apps/v1/namespaces/{namespace}/deployments", {}),
        ("/api/v1/nodes", {"labelSelector": f"{objects.GROUP_LABEL}={namespace}"}),
    ):
        body = admin_api.request_bytes("GET", path, query=query)
        kind = json.loads(body)["kind"].removesuffix("List")
        decoded = FAST_KINDS[kind].decode_page(body)
        assert decoded is not None and decoded[0], f"{path}: the typed decode failed or found nothing"
        for item in decoded[0]:
            FAST_KINDS[kind].convert(item, sharer)  # raises if it declines
