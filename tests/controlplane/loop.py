"""The closed loop on the real control plane: a hot kwok node, Deployments with PDBs, usage that follows
where the pods really run, ``descheduler run`` as a subprocess, the ReplicaSet controller recreating
evicted pods and kube-scheduler placing them.

``hot_cluster`` builds the cluster: the hot node is created first and alone schedulable, so every pod of
the ``busy`` Deployment lands there (the skew), then the cool nodes are uncordoned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.usage import ClusterUsage
from tests.support import service
from tests.support.sampling import sampling
from tests.support.service import (
    LEASE,
    MANIFESTS,
    NAMESPACE,
    Ports,
    UsageBackend,
    service_config,
    write_config,
)

BUSY_REPLICAS = 6
BUSY_CORES = 0.6
"""Six pods of 0.6 cores plus 0.3 of system load: 3.9 of 4 cores (97.5%) on the hot node."""
HIGH_CPU = 70.0
CONFIRM_CYCLES = 2
"""Cycles over the high threshold before a node is a hotspot. The usage is a 5 s rate and cycles are 1 s
apart, so a node's raw sample still holds an evicted pod for up to 6 s (window plus one scrape): more than
the 2 cycles before the node is judged again. The migration-aware estimate (node usage = other usage + the
pods on the node now) must keep the loop from evicting again from a cured node: before it, this loop on
the real control plane evicted 3 pods where 2 cure the node."""


@dataclass
class HotCluster:
    namespace: str
    hot: str
    cool: list[str]
    usage: ClusterUsage
    initial_pods: dict[str, str]
    """Pod name -> uid of the busy pods before the descheduler started."""

    @property
    def nodes(self) -> list[str]:
        return [self.hot, *self.cool]


def build_hot_cluster(plane: ControlPlane, api: KubeApi, namespace: str) -> HotCluster:
    hot, cool = f"{namespace}-hot", [f"{namespace}-cool-{i}" for i in range(3)]
    plane.add_nodes(namespace, [hot])
    plane.add_nodes(namespace, cool, unschedulable=True)
    plane.apply(
        [
            objects.deployment("busy", namespace, replicas=BUSY_REPLICAS, cpu="250m"),
            objects.pdb("busy", "busy", max_unavailable=1),
        ],
        namespace=namespace,
    )
    pods = plane.wait_for(
        "every busy pod Running on the hot node",
        lambda: (
            p
            if len(p := plane.running_pods(namespace, "app=busy")) == BUSY_REPLICAS
            and all(x["spec"]["nodeName"] == hot for x in p)
            else None
        ),
        timeout_s=60,
    )
    for name in cool:
        plane.kubectl("uncordon", name)
    usage = ClusterUsage(api, namespace, dict.fromkeys([hot, *cool], 4), {"busy": BUSY_CORES})
    return HotCluster(
        namespace, hot, cool, usage, {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    )


def lease_namespace(plane: ControlPlane) -> None:
    """The namespace the tests' Leases live in (the shipped manifests create it; admin tests need it too)."""
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])


@contextlib.contextmanager
def hot_cluster_serving_usage(
    plane: ControlPlane, api: KubeApi, namespace: str, backend: UsageBackend
) -> Iterator[HotCluster]:
    """The hot cluster, its usage following where the pods run and served by ``backend``'s Prometheus
    (a full window scraped before it is yielded), and the Lease namespace in place."""
    lease_namespace(plane)
    cluster = build_hot_cluster(plane, api, namespace)
    with cluster.usage.following():
        backend.install(cluster.usage.model, full_window=True, timeout=30)
        yield cluster


def loop_config(
    prometheus_url: str,
    ports: Ports,
    namespace: str,
    *,
    dry_run: bool,
    lease_name: str = LEASE,
    consecutive_abnormalities: int = CONFIRM_CYCLES,
    interval: str = "1s",
) -> dict[str, Any]:
    """The service configuration of the integration tests, limited to the test's node group."""
    doc = service_config(
        interval=interval,
        consecutive_abnormalities=consecutive_abnormalities,
        prometheus_url=prometheus_url,
        ports=ports,
        dry_run=dry_run,
        node_selector={"matchLabels": {objects.GROUP_LABEL: namespace}},
        lease_name=lease_name,
    )
    args = doc["profiles"][0]["pluginConfig"][0]["args"]
    args["evictableNamespaces"] = {"include": [namespace]}
    return doc


@dataclass
class BudgetWatch:
    """Samples a PDB's status from the server every 100 ms; a violation is fewer healthy pods than desired."""

    api: KubeApi
    namespace: str
    name: str
    samples: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)
    min_healthy: int | None = None

    def check(self) -> None:
        status = self.api.get(
            f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets/{self.name}"
        )["status"]
        self.samples += 1
        healthy, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
        self.min_healthy = healthy if self.min_healthy is None else min(self.min_healthy, healthy)
        if healthy < desired:
            self.violations.append(status)


@contextlib.contextmanager
def watching_budget(api: KubeApi, namespace: str, name: str) -> Iterator[BudgetWatch]:
    watch = BudgetWatch(api, namespace, name)
    with sampling(watch.check, "pdb-watch"):
        yield watch


def fresh_namespace(plane: ControlPlane, name: str) -> str:
    """A namespace with its default ServiceAccount in place (pods need it)."""
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
    plane.wait_for(
        "ServiceAccount default",
        lambda: plane.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    return name


NOT_INSTALLED = {"Deployment", "CronJob", "Job"}
"""The rendered manifests minus what would run a descheduler pod on the shared test nodes."""


def install_manifests(plane: ControlPlane) -> list[dict[str, Any]]:
    """The shipped manifests (kustomize) applied to the real API server, without a descheduler pod."""
    rendered = plane.kubectl("kustomize", str(MANIFESTS)).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") not in NOT_INSTALLED]
    plane.apply(docs)
    return docs


def claims_loop_config(prometheus: str, ports: Ports, namespace: str, path: Path) -> Path:
    """The live (not dry-run) loop's configuration with ``evictResourceClaimPods`` on, written to ``path``:
    what the DRA tests run."""
    doc = loop_config(prometheus, ports, namespace, dry_run=False)
    doc["profiles"][0]["pluginConfig"][1]["args"]["evictResourceClaimPods"] = True
    return write_config(path, doc)


def shipped_identity(plane: ControlPlane, path: Path) -> Path:
    """A kubeconfig at ``path`` of the descheduler's ServiceAccount, with the shipped manifests' RBAC and
    admission policies applied."""
    docs = install_manifests(plane)
    (account,) = [d["metadata"] for d in docs if d["kind"] == "ServiceAccount"]
    return plane.token_kubeconfig(account["namespace"], account["name"], path)


@contextlib.contextmanager
def claims_descheduler(
    plane: ControlPlane, usage: ClusterUsage, backend: UsageBackend, namespace: str, hot: str, folder: Path
) -> Iterator[service.Descheduler]:
    """The claims loop (``claims_loop_config``) running, ready, as the shipped identity while ``backend``
    serves ``usage``, whose ``hot`` node must be over 90% first: the DRA tests' common start."""
    identity = shipped_identity(plane, folder / "kubeconfig")
    with usage.following():
        backend.install(usage.model, full_window=True, timeout=30)
        assert usage.node_percent(hot) > 90
        ports = Ports.free()
        config = claims_loop_config(backend.url, ports, namespace, folder / "config.yaml")
        with service.run_descheduler(config, identity, ports, folder) as proc:
            proc.wait_ready(timeout=30)
            yield proc


@contextlib.contextmanager
def identity_with_components(plane: ControlPlane, components: Sequence[str], folder: Path) -> Iterator[Path]:
    """A kubeconfig of the descheduler's ServiceAccount with the shipped RBAC plus the ClusterRoles of the
    optional ``components`` (removed again afterwards: the shared control plane's other tests check the
    shipped RBAC alone)."""
    identity = shipped_identity(plane, folder / "kubeconfig")
    added = [
        yaml.safe_load((MANIFESTS / "components" / component / name).read_text())
        for component in components
        for name in ("clusterrole.yaml", "clusterrolebinding.yaml")
    ]
    plane.apply(added)
    try:
        yield identity
    finally:
        for doc in reversed(added):
            plane.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found")
