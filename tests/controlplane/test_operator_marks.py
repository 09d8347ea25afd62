"""Operator and autoscaler marks on a real control plane, with the shipped RBAC (namespaces: list, watch).

A pause annotation on the namespace holds every eviction while the hot node is confirmed cycle after
cycle; removing it with ``kubectl annotate ...-`` lets the same process evict at once, with no config
change and no restart. A hot node carrying the cluster autoscaler's ``ToBeDeletedByClusterAutoscaler``
taint is skipped: nothing is evicted from it, however long it stays hot.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from descheduler.config.migration import PAUSE_ANNOTATION
from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from descheduler.planner import reasons
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import hot_cluster_serving_usage, install_manifests, loop_config
from tests.support.service import (
    Descheduler,
    Ports,
    UsageBackend,
    metric_samples,
    run_descheduler,
    write_config,
)

pytestmark = pytest.mark.controlplane

CYCLES_HELD = 4
"""Cycles after the first paused skip in which nothing may be evicted (the node is confirmed hot in 2)."""


@pytest.fixture(scope="module")
def shipped_identity(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The descheduler's ServiceAccount with exactly the shipped RBAC."""
    docs = install_manifests(control_plane)
    (account,) = [d["metadata"] for d in docs if d["kind"] == "ServiceAccount"]
    path = tmp_path_factory.mktemp("marks-identity") / "kubeconfig"
    return control_plane.token_kubeconfig(account["namespace"], account["name"], path)


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[KubeApi]:
    client = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    yield client
    client.close()


def skipped(proc: Descheduler, code: str) -> float:
    samples = metric_samples(proc.get("/metrics")[1], "descheduler_pods_skipped_total")
    return sum(value for labels, value in samples if labels.get("reason") == code)


def node_class(proc: Descheduler, node: str) -> str:
    samples = metric_samples(proc.get("/metrics")[1], "descheduler_node_classification")
    return next((labels["class"] for labels, value in samples if labels["node"] == node and value == 1), "")


def cycles(proc: Descheduler) -> int:
    return len(proc.events("cycle_summary"))


def test_a_namespace_pause_holds_evictions_until_it_is_removed_without_a_restart(
    control_plane: ControlPlane,
    shipped_identity: Path,
    api: KubeApi,
    usage_backend: UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, api, namespace, usage_backend) as cluster:
        control_plane.kubectl("annotate", "namespace", namespace, f"{PAUSE_ANNOTATION}=INC-1 hold")
        ports = Ports.free()
        config = write_config(
            tmp_path / "config.yaml", loop_config(usage_backend.url, ports, namespace, dry_run=False)
        )
        with run_descheduler(config, shipped_identity, ports, tmp_path) as proc:
            proc.wait_ready(timeout=30)
            proc.wait_for(lambda: skipped(proc, reasons.PAUSED) > 0, timeout=60, what="a paused skip")
            held_from = cycles(proc)
            proc.wait_for(lambda: cycles(proc) >= held_from + CYCLES_HELD, timeout=30, what="more cycles")
            evicted_while_paused = list(proc.events("eviction"))
            class_while_paused = node_class(proc, cluster.hot)
            control_plane.kubectl("annotate", "namespace", namespace, f"{PAUSE_ANNOTATION}-")
            lifted_at = cycles(proc)
            proc.wait_for(lambda: proc.events("eviction"), timeout=60, what="an eviction once resumed")
            first = proc.events("eviction")[0]
            proc.terminate()
    assert evicted_while_paused == []
    assert class_while_paused == "hotspot"
    assert first["node"] == cluster.hot
    assert first["cycle"] >= lifted_at


def test_a_hot_node_the_cluster_autoscaler_is_deleting_is_left_alone(
    control_plane: ControlPlane,
    shipped_identity: Path,
    api: KubeApi,
    usage_backend: UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, api, namespace, usage_backend) as cluster:
        control_plane.kubectl(
            "taint", "nodes", cluster.hot, "ToBeDeletedByClusterAutoscaler=1764000000:NoSchedule"
        )
        ports = Ports.free()
        config = write_config(
            tmp_path / "config.yaml", loop_config(usage_backend.url, ports, namespace, dry_run=False)
        )
        with run_descheduler(config, shipped_identity, ports, tmp_path) as proc:
            proc.wait_ready(timeout=30)
            proc.wait_for(lambda: cycles(proc) >= 2 + CYCLES_HELD, timeout=60, what="cycles")
            hot_class = node_class(proc, cluster.hot)
            evicted = list(proc.events("eviction"))
            proc.terminate()
    assert hot_class == "skipped"
    assert evicted == []
