"""``descheduler snapshot`` writes what a real cluster and Prometheus hold, and ``simulate`` replays it.

A snapshot reads the whole cluster, so these tests run on a control plane of their own (the shared one
holds every other test's objects): the dump's contents can be asserted exactly. Usage comes from the
benchmarks' Prometheus stand-in, which answers the source's instant queries from fixed numbers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from benchmarks.fakeprom import FakePrometheus
from descheduler.cli import main
from descheduler.simulate.inputs import load_cluster
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane, ControlPlaneError
from tests.support.configs import low_node_load_yaml

pytestmark = pytest.mark.controlplane

CONFIG = low_node_load_yaml(
    "{lowThresholds: {cpu: 20}, highThresholds: {cpu: 50}, anomalyCondition: {consecutiveAbnormalities: 1}}"
)
GROUP = "default"
NODE_USAGE = {"node-hot": {"cpu": 6000, "memory": 4 * 2**30}, "node-cool": {"cpu": 500, "memory": 2**30}}


@dataclass
class Incident:
    plane: ControlPlane
    pods: list[str]
    """The web pods (all on node-hot), as ``default/<name>``."""
    replicaset: str
    pod_usage: dict[str, dict[str, int]]


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Incident]:
    """A control plane of its own with node-hot running the four pods of Deployment ``web`` and an idle
    node-cool (cordoned until the pods ran, so they all landed on node-hot)."""
    try:
        plane = ControlPlane.start(tmp_path_factory.mktemp("snapshot-plane"))
    except ControlPlaneError as exc:
        pytest.fail(f"the snapshot tests' control plane could not start: {exc}", pytrace=False)
    try:
        plane.add_nodes(GROUP, ["node-hot"], cpu="8", memory="32Gi")
        plane.add_nodes(GROUP, ["node-cool"], cpu="8", memory="32Gi", unschedulable=True)
        plane.apply([objects.deployment("web", GROUP, replicas=4)], namespace=GROUP)
        running = plane.wait_for("4 web pods Running", lambda: len(p := plane.running_pods(GROUP)) == 4 and p)
        plane.kubectl("uncordon", "node-cool")
        pods = sorted(f"{GROUP}/{p['metadata']['name']}" for p in running)
        (rs,) = plane.get_json("replicasets", "-n", GROUP)["items"]
        usage = {key: {"cpu": 1500, "memory": 2**28} for key in pods}
        yield Incident(plane, pods, rs["metadata"]["name"], usage)
    finally:
        plane.stop()


@pytest.fixture
def prometheus(incident: Incident) -> Iterator[FakePrometheus]:
    prom = FakePrometheus(lambda: NODE_USAGE, lambda: incident.pod_usage).start()
    try:
        yield prom
    finally:
        prom.stop()


def test_a_snapshot_holds_every_object_and_usage_and_simulate_replays_it(
    incident: Incident, prometheus: FakePrometheus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "incident"
    command = ["snapshot", "--kubeconfig", str(incident.plane.kubeconfig), "--output", str(out)]
    code = main([*command, "--prometheus", prometheus.url])
    assert code == 0, capsys.readouterr().err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert sorted(n.name for n in snapshot.nodes) == ["node-cool", "node-hot"]
    assert sorted(p.key for p in snapshot.pods) == incident.pods
    assert sorted((w.kind, w.name) for w in snapshot.workloads) == [
        ("Deployment", "web"),
        ("ReplicaSet", incident.replicaset),
    ]
    usage = json.loads((out / "usage.json").read_text())
    assert usage["nodes"]["node-hot"]["cpu"] == "6000m"
    assert usage["pods"][incident.pods[0]]["memory"] == 2**28
    (tmp_path / "config.yaml").write_text(CONFIG)
    capsys.readouterr()
    replay = [
        "simulate", "--config", str(tmp_path / "config.yaml"), "--cluster", str(out / "cluster.json.gz"),
        "--usage", str(out / "usage.json"), "--output", "json",
    ]  # fmt: skip
    assert main(replay) == 0
    assert '"destination": "node-cool"' in capsys.readouterr().out


def test_a_pod_bound_to_a_node_the_node_list_missed_is_left_out_and_named_and_the_rest_replays(
    incident: Incident, prometheus: FakePrometheus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As if node-gone was deleted between the nodes' LIST and the pods' (its pod is going away with it):
    # the real server takes a pod bound to a node it does not have; no kubelet ever runs it.
    orphan = objects.bare_pod("orphan", GROUP, "node-gone")
    incident.plane.apply([orphan], namespace=GROUP)
    try:
        out = tmp_path / "incident"
        command = ["snapshot", "--kubeconfig", str(incident.plane.kubeconfig), "--output", str(out)]
        assert main([*command, "--prometheus", prometheus.url]) == 0
    finally:
        incident.plane.kubectl("delete", "pod", "orphan", "-n", GROUP, "--wait=false")
    err = capsys.readouterr().err
    assert "left out 1 pod(s) bound to a node that was not in the node list" in err
    assert "default/orphan on node-gone" in err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert sorted(p.key for p in snapshot.pods) == incident.pods
    assert sorted(json.loads((out / "usage.json").read_text())["pods"]) == incident.pods


def test_a_snapshot_of_an_unreachable_cluster_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "current-context": "c",
            }
        )
    )
    code = main(["snapshot", "--kubeconfig", str(kubeconfig), "--output", str(tmp_path / "out")])
    assert code == 1
    assert "error: reading the cluster" in capsys.readouterr().err


def test_dra_objects_are_in_the_dump_and_simulate_reads_them(
    incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node_uid = incident.plane.get_json("node", "node-hot")["metadata"]["uid"]
    cluster_scoped = [
        objects.device_class("gpu"),
        objects.resource_slice(
            "node-hot-gpus", "node-hot", [objects.device("gpu-0")], group=GROUP, node_uid=node_uid
        ),
    ]
    incident.plane.apply(cluster_scoped)
    incident.plane.apply([objects.resource_claim("shared", "gpu")], namespace=GROUP)
    try:
        out = tmp_path / "incident"
        assert main(["snapshot", "--kubeconfig", str(incident.plane.kubeconfig), "--output", str(out)]) == 0
    finally:
        incident.plane.kubectl("delete", "resourceclaim", "shared", "-n", GROUP)
        incident.plane.kubectl("delete", "resourceslice", "node-hot-gpus")
        incident.plane.kubectl("delete", "deviceclass", "gpu")
    err = capsys.readouterr().err
    assert "1 ResourceSlice, 1 ResourceClaim, 1 DeviceClass" in err and "not in the dump" not in err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert [(s.name, [d.name for d in s.devices]) for s in snapshot.resource_slices] == [
        ("node-hot-gpus", ["gpu-0"])
    ]
    assert [c.key for c in snapshot.resource_claims] == ["default/shared"]
    assert [c.name for c in snapshot.device_classes] == ["gpu"]


SNAPSHOT_READER_BUT_SLICES = [
    # Everything the snapshot lists, but ResourceSlices: RBAC grants, it never denies.
    {"apiGroups": ["", "apps", "policy"], "resources": ["*"], "verbs": ["list"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "deviceclasses"], "verbs": ["list"]},
]


def test_an_identity_that_may_not_list_resource_slices_still_gets_a_dump_with_a_notice(
    incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real server's 403 for the one list the identity lacks: the rest is written, and the notice says
    what is missing. (A server without resource.k8s.io/v1 answers 404: tests/integration keeps that case,
    as the control plane serves the API.)"""
    name = "snapshot-without-slices"
    incident.plane.apply(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": GROUP}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": SNAPSHOT_READER_BUT_SLICES,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": GROUP}],
            },
        ]
    )
    identity = incident.plane.token_kubeconfig(GROUP, name, tmp_path / "kubeconfig")
    out = tmp_path / "incident"
    assert main(["snapshot", "--kubeconfig", str(identity), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "notice: not in the dump: ResourceSlice:" in err and "403" in err
    assert "ResourceSlice," not in err.splitlines()[0] and "0 ResourceClaim" in err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert sorted(p.key for p in snapshot.pods) == incident.pods
