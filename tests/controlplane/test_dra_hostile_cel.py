"""A hostile CEL selector on the real control plane (issue 37, point 18): ``descheduler run`` keeps its
pace and its probes, and the pods whose claims carry the selector stay (``resource-claim-cel-error``).

The selector is one Kubernetes admits (its estimated cost is far under 1,000,000) and the real scheduler
evaluates in microseconds, but it costs thousands of units in an interpreted evaluation; ten cool
nodes publish 1,280 devices, each with its own ``uuid`` as real drivers do, so no verdict is reused. Before
the cycle budget, one cycle took minutes here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import claims_descheduler, lease_namespace
from tests.controlplane.test_dra_moves import add_device_nodes, running_where, template_deployment
from tests.controlplane.usage import ClusterUsage
from tests.support import service

pytestmark = pytest.mark.controlplane

A = f'device.attributes["{objects.DRIVER}"]'
HEAVY = "[" + ", ".join(str(i) for i in range(85)) + f"].all(x, !has({A}.uuid) || {A}.uuid != string(x))"
CEL_SKIP = "resource-claim-cel-error"
"""The planner's reason code (``planner/reasons.py``)."""


def uuid_devices(node: str) -> list[objects.Obj]:
    return [
        {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"{node}-{i:04d}-5f1c"}}} for i in range(128)
    ]


def test_a_hostile_selector_keeps_its_pods_and_the_loop_its_pace(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: service.UsageBackend,
    tmp_path: Path,
) -> None:
    plane, ns = control_plane, namespace
    hot, cool = f"{ns}-hot", [f"{ns}-c{i}" for i in range(10)]
    gpus = f"{ns}-gpu"
    lease_namespace(plane)
    plane.apply([objects.device_class(gpus)])
    plane.apply([objects.claim_template("heavy", gpus, selectors=[HEAVY])], namespace=ns)
    add_device_nodes(plane, ns, {hot: [objects.device(f"gpu-{i}", index=i) for i in range(2)]})
    plane.add_nodes(ns, cool, unschedulable=True)
    plane.apply(
        [
            objects.resource_slice(f"{node}-gpus", node, uuid_devices(node), group=ns,
                                   node_uid=plane.get_json("node", node)["metadata"]["uid"])
            for node in cool
        ]
    )  # fmt: skip
    plane.apply([template_deployment("busy", ns, "heavy", 2)], namespace=ns)
    running_where(plane, ns, "busy", 2, hot)
    for node in cool:
        plane.kubectl("uncordon", node)

    usage = ClusterUsage(admin_api, ns, dict.fromkeys([hot, *cool], 4), {"busy": 1.8})
    with claims_descheduler(plane, usage, usage_backend, ns, hot, tmp_path) as proc:
        proc.wait_for(lambda: len(proc.events("cycle_summary")) >= 4, timeout=120, what="4 cycles")
        status, _ = proc.get("/healthz")
        skipped = service.metric_samples(proc.get("/metrics")[1], "descheduler_pods_skipped_total")
        proc.terminate()
    durations = [e["duration_seconds"] for e in proc.events("cycle_summary")]
    print(f"\nhostile CEL: cycle durations {durations}")
    assert status == 200
    assert proc.events("eviction") == []
    assert sum(v for labels, v in skipped if labels.get("reason") == CEL_SKIP) > 0
    assert max(durations) < 30
