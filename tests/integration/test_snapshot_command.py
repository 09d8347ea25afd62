"""``descheduler snapshot`` writes what the cluster and Prometheus hold, and ``simulate`` replays it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from benchmarks.fakeprom import FakePrometheus
from descheduler.cli import main
from descheduler.simulate.inputs import load_cluster
from tests.apiserver import ApiServer, Fault, objects
from tests.controlplane import objects as dra
from tests.support.configs import low_node_load_yaml

CONFIG = low_node_load_yaml(
    "{lowThresholds: {cpu: 20}, highThresholds: {cpu: 50}, anomalyCondition: {consecutiveAbnormalities: 1}}"
)

NODE_USAGE = {"node-hot": {"cpu": 6000, "memory": 4 * 2**30}, "node-cool": {"cpu": 500, "memory": 2**30}}
POD_USAGE = {f"default/web-{i}": {"cpu": 1500, "memory": 2**28} for i in range(4)}


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    apiserver.create(objects.node("node-hot"))
    apiserver.create(objects.node("node-cool"))
    apiserver.create(objects.deployment("web", replicas=4))
    apiserver.create(objects.replicaset("web-rs", replicas=4, deployment="web"))
    for i in range(4):
        apiserver.create(objects.pod(f"web-{i}", node="node-hot"))
    return apiserver


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    prom = FakePrometheus(lambda: NODE_USAGE, lambda: POD_USAGE).start()
    try:
        yield prom
    finally:
        prom.stop()


def test_a_snapshot_holds_every_object_and_usage_and_simulate_replays_it(
    cluster: ApiServer, prometheus: FakePrometheus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "incident"
    code = main(
        [
            "snapshot",
            "--kubeconfig",
            str(cluster.kubeconfig_path),
            "--output",
            str(out),
            "--prometheus",
            prometheus.url,
        ]
    )
    assert code == 0, capsys.readouterr().err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert sorted(n.name for n in snapshot.nodes) == ["node-cool", "node-hot"]
    assert sorted(p.key for p in snapshot.pods) == sorted(POD_USAGE)
    assert sorted((w.kind, w.name) for w in snapshot.workloads) == [
        ("Deployment", "web"),
        ("ReplicaSet", "web-rs"),
    ]
    usage = json.loads((out / "usage.json").read_text())
    assert usage["nodes"]["node-hot"]["cpu"] == "6000m"
    assert usage["pods"]["default/web-0"]["memory"] == 2**28
    (tmp_path / "config.yaml").write_text(CONFIG)
    capsys.readouterr()
    replay = [
        "simulate",
        "--config",
        str(tmp_path / "config.yaml"),
        "--cluster",
        str(out / "cluster.json.gz"),
        "--usage",
        str(out / "usage.json"),
        "--output",
        "json",
    ]
    assert main(replay) == 0
    assert '"destination": "node-cool"' in capsys.readouterr().out


def test_a_pod_bound_to_a_node_the_node_list_missed_is_left_out_and_named_and_the_rest_replays(
    cluster: ApiServer, prometheus: FakePrometheus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As if node-gone was deleted between the nodes' LIST and the pods' (its pod is going away with it).
    cluster.create(objects.pod("orphan", node="node-gone"))
    out = tmp_path / "incident"
    command = ["snapshot", "--kubeconfig", str(cluster.kubeconfig_path), "--output", str(out)]
    assert main([*command, "--prometheus", prometheus.url]) == 0
    err = capsys.readouterr().err
    assert "left out 1 pod(s) bound to a node that was not in the node list" in err
    assert "default/orphan on node-gone" in err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert sorted(p.key for p in snapshot.pods) == sorted(POD_USAGE)
    assert set(json.loads((out / "usage.json").read_text())["pods"]) == set(POD_USAGE)


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
    cluster: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.create(dra.device_class("gpu"))
    cluster.create(dra.resource_slice("node-hot-gpus", "node-hot", [dra.device("gpu-0")], group="g"))
    cluster.create(
        {**dra.resource_claim("shared", "gpu"), "metadata": {"name": "shared", "namespace": "default"}}
    )
    out = tmp_path / "incident"
    assert main(["snapshot", "--kubeconfig", str(cluster.kubeconfig_path), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 ResourceSlice, 1 ResourceClaim, 1 DeviceClass" in err and "not in the dump" not in err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert [(s.name, [d.name for d in s.devices]) for s in snapshot.resource_slices] == [
        ("node-hot-gpus", ["gpu-0"])
    ]
    assert [c.key for c in snapshot.resource_claims] == ["default/shared"]
    assert [c.name for c in snapshot.device_classes] == ["gpu"]


@pytest.mark.parametrize("status", [404, 403])
def test_a_server_that_will_not_list_dra_objects_still_gets_a_dump_with_a_notice(
    cluster: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    """A cluster before Kubernetes 1.34 serves no resource.k8s.io/v1 (404); an identity without the
    read grant gets 403: the rest is written, and the notice says what is missing."""
    cluster.inject(Fault(group="resource.k8s.io", resource="resourceslices", status=status))
    out = tmp_path / "incident"
    assert main(["snapshot", "--kubeconfig", str(cluster.kubeconfig_path), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "notice: not in the dump: ResourceSlice:" in err
    assert "ResourceSlice," not in err.splitlines()[0] and "0 ResourceClaim" in err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert sorted(p.key for p in snapshot.pods) == sorted(POD_USAGE)
