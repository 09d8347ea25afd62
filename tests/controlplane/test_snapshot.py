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
