"""``descheduler snapshot`` against the real kube-apiserver: its typed LIST pages leave ``kind`` and
``apiVersion`` out of the items, which the dump must put back for ``simulate`` to read it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from descheduler.cli import main
from descheduler.simulate.inputs import load_cluster
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane

pytestmark = pytest.mark.controlplane


def test_a_snapshot_of_the_real_api_server_names_every_item_and_loads_as_simulate_reads_it(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [f"{namespace}-n{i}" for i in range(2)]
    control_plane.add_nodes(namespace, nodes)
    control_plane.apply(
        [objects.deployment("web", namespace, replicas=3), objects.pdb("web", "web", min_available=1)],
        namespace=namespace,
    )
    control_plane.wait_for(
        "3 web pods running", lambda: len(control_plane.running_pods(namespace, "app=web")) == 3
    )
    pods = {p["metadata"]["name"] for p in control_plane.running_pods(namespace, "app=web")}
    out = tmp_path / "incident"
    code = main(["snapshot", "--kubeconfig", str(control_plane.kubeconfig), "--output", str(out)])
    assert code == 0, capsys.readouterr().err
    items = json.loads(gzip.decompress((out / "cluster.json.gz").read_bytes()))["items"]
    ours = [i for i in items if i["metadata"].get("namespace") == namespace or i["metadata"]["name"] in nodes]
    assert {(i["kind"], i["apiVersion"]) for i in ours} == {
        ("Node", "v1"),
        ("Pod", "v1"),
        ("PodDisruptionBudget", "policy/v1"),
        ("ReplicaSet", "apps/v1"),
        ("Deployment", "apps/v1"),
    }
    snapshot = load_cluster(out / "cluster.json.gz")
    assert {p.name for p in snapshot.pods if p.namespace == namespace} == pods
    assert {p.node_name for p in snapshot.pods if p.namespace == namespace} <= set(nodes)
    assert [
        (w.kind, w.name) for w in snapshot.workloads if w.namespace == namespace and w.kind == "Deployment"
    ] == [("Deployment", "web")]
    assert [b.name for b in snapshot.pdbs if b.namespace == namespace] == ["web"]


def test_dra_objects_of_the_real_api_server_are_in_the_snapshot_and_simulate_reads_them(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = f"{namespace}-gpu-node"
    gpus = f"{namespace}-gpu"
    control_plane.add_nodes(namespace, [node])
    uid = control_plane.get_json("node", node)["metadata"]["uid"]
    control_plane.apply(
        [
            objects.device_class(gpus),
            objects.resource_slice(
                f"{node}-gpus", node, [objects.device("gpu-0")], group=namespace, node_uid=uid
            ),
        ]
    )
    control_plane.apply([objects.claim_template("one-gpu", gpus)], namespace=namespace)
    deployment = objects.deployment("trainer", namespace, replicas=1)
    deployment["spec"]["template"] = objects.with_claims(
        objects.pod_template("trainer", namespace), template_name="one-gpu"
    )
    control_plane.apply([deployment], namespace=namespace)
    control_plane.wait_for(
        "the trainer Running", lambda: len(control_plane.running_pods(namespace, "app=trainer")) == 1
    )
    out = tmp_path / "incident"
    code = main(["snapshot", "--kubeconfig", str(control_plane.kubeconfig), "--output", str(out)])
    assert code == 0, capsys.readouterr().err
    items = json.loads(gzip.decompress((out / "cluster.json.gz").read_bytes()))["items"]
    ours = {
        (i["kind"], i["apiVersion"], i["metadata"]["name"])
        for i in items
        if i["kind"] in ("ResourceSlice", "DeviceClass")
        or (i["kind"] == "ResourceClaim" and i["metadata"]["namespace"] == namespace)
    }
    (claim_name,) = [n for k, _, n in ours if k == "ResourceClaim"]
    assert {
        ("ResourceSlice", "resource.k8s.io/v1", f"{node}-gpus"),
        ("DeviceClass", "resource.k8s.io/v1", gpus),
        ("ResourceClaim", "resource.k8s.io/v1", claim_name),
    } <= ours
    snapshot = load_cluster(out / "cluster.json.gz")
    (claim,) = [c for c in snapshot.resource_claims if c.namespace == namespace]
    assert claim.allocated and claim.node_name == node
    assert [r.device for r in claim.results] == ["gpu-0"]
    (pod,) = [p for p in snapshot.pods if p.namespace == namespace and p.labels.get("app") == "trainer"]
    assert [r.generated_claim_name for r in pod.resource_claims] == [claim.name]
    assert gpus in {c.name for c in snapshot.device_classes}
