"""Dynamic Resource Allocation on the real control plane: pods that hold devices through ResourceClaims.

The harness first shows DRA works end to end with no driver running: a DeviceClass, ResourceSlices the
test writes for kwok nodes (a fake driver), a ResourceClaimTemplate and a Deployment using it; the
resourceclaim controller makes each pod a claim, kube-scheduler's DynamicResources plugin allocates a
device of the pod's node and kwok runs the pod.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane

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
