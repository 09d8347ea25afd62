"""Dynamic Resource Allocation on the real control plane: pods that hold devices through ResourceClaims.

The harness first shows DRA works end to end with no driver running: a DeviceClass, ResourceSlices the
test writes for kwok nodes (a fake driver), a ResourceClaimTemplate and a Deployment using it; the
resourceclaim controller makes each pod a claim, kube-scheduler's DynamicResources plugin allocates a
device of the pod's node and kwok runs the pod.

Then ``descheduler run`` (``evictResourceClaimPods: true``, the shipped RBAC) on a hot node whose pods
hold devices: of three cool nodes with CPU room, one has its only device taken by another pod's claim,
one has devices of another driver (outside the DeviceClass), and one has a free matching device. The
descheduler moves one template-claim pod, aiming it at the node with the free device; the real scheduler
puts the replacement there with a fresh allocated claim. The two pods using one claim by name (shared:
evicting one would free no device) are never evicted, and the planner says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import HIGH_CPU, claims_descheduler, lease_namespace
from tests.controlplane.usage import ClusterUsage
from tests.support import service

pytestmark = pytest.mark.controlplane


def add_device_nodes(plane: ControlPlane, group: str, devices: dict[str, list[objects.Obj]]) -> None:
    """kwok nodes for ``group``, each with a ResourceSlice (owned by the node) holding ``devices[node]``."""
    plane.add_nodes(group, list(devices))
    plane.apply(
        [
            objects.resource_slice(
                f"{node}-gpus", node, node_devices, group=group,
                node_uid=plane.get_json("node", node)["metadata"]["uid"],
            )
            for node, node_devices in devices.items()
        ]
    )  # fmt: skip


def claims_of(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in plane.get_json("resourceclaims", "-n", namespace)["items"]}


def test_the_harness_allocates_template_claims_and_runs_the_pods(
    control_plane: ControlPlane, namespace: str
) -> None:
    plane = control_plane
    gpus = f"{namespace}-gpu"
    node = f"{namespace}-a"
    plane.apply([objects.device_class(gpus)])
    add_device_nodes(plane, namespace, {node: [objects.device(f"gpu-{i}", index=i) for i in range(2)]})
    template = objects.claim_template(
        "one-gpu", gpus, selectors=['device.attributes["gpu.example.com"].model == "a100"']
    )
    pod = objects.pod_template("trainer", namespace)
    deployment = objects.deployment("trainer", namespace, replicas=2)
    deployment["spec"]["template"] = objects.with_claims(pod, template_name="one-gpu")
    plane.apply([template, deployment], namespace=namespace)
    running = plane.wait_for(
        "both trainer pods Running",
        lambda: len(p := plane.running_pods(namespace, "app=trainer")) == 2 and p,
        timeout_s=60,
    )
    claims = claims_of(plane, namespace)
    for p in running:
        (status,) = p["status"]["resourceClaimStatuses"]
        claim = claims[status["resourceClaimName"]]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (objects.DRIVER, node)
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        ]
    assert sorted(c["status"]["allocation"]["devices"]["results"][0]["device"] for c in claims.values()) == [
        "gpu-0",
        "gpu-1",
    ]


# --- the descheduler moves a device-holding pod only where a matching device is free ----------------------

CORES = {"busy": 1.0, "shared": 0.7, "filler": 0.3, "sidecar": 0.8}
"""The hot node: 0.3 of system load, two busy pods of 1.0 and two pods sharing one claim of 0.7 each: 3.7
of 4 cores (92.5%). One busy pod moved brings it to 2.7 (67.5%), under the 70% high threshold. The cool
nodes: the one with the free device is the busiest of them (a sidecar without devices: 1.1 cores,
27.5%), the full one next (the filler: 15%), the other driver's the idlest (7.5%): a planner blind to
devices would aim at the idlest."""
A100 = 'device.attributes["gpu.example.com"].model == "a100"'
SHARED_SKIP = "resource-claim-shared"
"""The planner's reason code for a pod whose claim is shared (``planner/reasons.py``)."""


def template_deployment(name: str, group: str, template: str, replicas: int, **pod: Any) -> objects.Obj:
    deployment = objects.deployment(name, group, replicas=replicas, cpu="500m")
    deployment["spec"]["template"] = objects.with_claims(
        objects.pod_template(name, group, cpu="500m", **pod), template_name=template
    )
    return deployment


def running_where(
    plane: ControlPlane, namespace: str, app: str, count: int, node: str
) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = plane.wait_for(
        f"{count} {app} pod(s) Running on {node}",
        lambda: (
            p
            if len(p := plane.running_pods(namespace, f"app={app}")) == count
            and all(x["spec"]["nodeName"] == node for x in p)
            else None
        ),
        timeout_s=30,
    )
    return pods


def test_a_device_pod_moves_only_to_the_node_with_a_free_matching_device(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: service.UsageBackend,
    tmp_path: Path,
) -> None:
    plane, ns = control_plane, namespace
    hot, full, free, other = (f"{ns}-{n}" for n in ("hot", "full", "free", "other"))
    gpus = f"{ns}-gpu"
    lease_namespace(plane)
    plane.apply([objects.device_class(gpus)])
    plane.apply(
        [
            objects.claim_template("one-a100", gpus, selectors=[A100]),
            objects.resource_claim("team-gpu", gpus, selectors=[A100]),
        ],
        namespace=ns,
    )
    # The full node first and alone: the filler's claim takes its only device.
    add_device_nodes(plane, ns, {full: [objects.device("gpu-0")]})
    plane.apply([template_deployment("filler", ns, "one-a100", 1)], namespace=ns)
    running_where(plane, ns, "filler", 1, full)
    # The hot node: the shared claim's pod and both busy pods land there (no other free device is open).
    add_device_nodes(plane, ns, {hot: [objects.device(f"gpu-{i}", index=i) for i in range(4)]})
    plane.add_nodes(ns, [free, other], unschedulable=True)
    plane.apply(
        [
            objects.resource_slice(f"{free}-gpus", free, [objects.device("gpu-0")], group=ns,
                                   node_uid=plane.get_json("node", free)["metadata"]["uid"]),
            objects.resource_slice(f"{other}-gpus", other, [objects.device("gpu-0")], group=ns,
                                   driver="other.example.com",
                                   node_uid=plane.get_json("node", other)["metadata"]["uid"]),
        ]
    )  # fmt: skip
    shared = objects.deployment("shared", ns, replicas=2, cpu="500m")
    shared["spec"]["template"] = objects.with_claims(
        objects.pod_template("shared", ns, cpu="500m"), claim_name="team-gpu"
    )
    plane.apply([shared, template_deployment("busy", ns, "one-a100", 2)], namespace=ns)
    sharing = {p["metadata"]["uid"] for p in running_where(plane, ns, "shared", 2, hot)}
    busy = {p["metadata"]["name"] for p in running_where(plane, ns, "busy", 2, hot)}
    for node in (free, other):
        plane.kubectl("uncordon", node)
    plane.apply([objects.deployment("sidecar", ns, replicas=1, node_name=free)], namespace=ns)
    running_where(plane, ns, "sidecar", 1, free)

    usage = ClusterUsage(admin_api, ns, dict.fromkeys([hot, full, free, other], 4), CORES)
    with claims_descheduler(plane, usage, usage_backend, ns, hot, tmp_path) as proc:
        proc.wait_for(lambda: proc.events("eviction"), timeout=30, what="an eviction")
        replacement = plane.wait_for(
            "the replacement Running",
            lambda: [p for p in plane.running_pods(ns, "app=busy") if p["metadata"]["name"] not in busy],
            timeout_s=30,
        )
        cured_at = len(proc.events("cycle_summary"))
        proc.wait_for(
            lambda: len(proc.events("cycle_summary")) >= cured_at + 3, timeout=15, what="3 more cycles"
        )
        skipped = service.metric_samples(proc.get("/metrics")[1], "descheduler_pods_skipped_total")
        proc.terminate()
    evictions = proc.events("eviction")
    print(f"\ndra moves: evictions {[(e['pod'], e['destination'], e['result']) for e in evictions]}")
    # One busy pod moved, toward the node with the free device; never toward the full or other-driver node.
    assert [e["result"] for e in evictions] == ["evicted"]
    assert {e["pod"].split("/")[1] for e in evictions} <= busy
    assert {e["destination"] for e in evictions} == {free}
    (moved,) = replacement
    assert moved["spec"]["nodeName"] == free
    (status,) = moved["status"]["resourceClaimStatuses"]
    claim = plane.get_json("resourceclaim", status["resourceClaimName"], "-n", ns)
    assert claim["metadata"]["ownerReferences"][0]["uid"] == moved["metadata"]["uid"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (objects.DRIVER, free, "gpu-0")
    assert usage.node_percent(hot) < HIGH_CPU
    # Verified on the server first: the Deployment, its ReplicaSets (the pod's among them: the cached chain is
    # a hint, no GET of its own), its pods (the pod among them), its node and namespace, and the claim (a LIST
    # by name: the shipped role grants no get on claims).
    assert [v["requests"] for v in proc.events("eviction_verified")] == [6]
    # The pods sharing a claim stayed; the planner said why (two of them: not the replicas-1 filter).
    assert {p["metadata"]["uid"] for p in plane.running_pods(ns, "app=shared")} == sharing
    assert sum(v for labels, v in skipped if labels.get("reason") == SHARED_SKIP) > 0
    assert "orbidden" not in proc.stderr(), "a request the shipped RBAC does not allow"
