"""A small cluster on the real control plane where one pod makes a node hot when the test says so.

A 4-core node holds one replica of a three-replica Deployment and a DaemonSet's pod; two 8-core nodes
hold the other replicas. The replicas are placed by the real kube-scheduler: the hot node is first the
only schedulable node, then cordoned while the Deployment scales up. Usage follows where the pods run
(``ClusterUsage``), and the test raises the hot replica's CPU use through ``usage.model``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import fresh_namespace
from tests.controlplane.usage import ClusterUsage
from tests.support.service import UsageBackend

AGENT = "agent"
"""The DaemonSet's app label: its pod is never a candidate, whatever it uses."""


@dataclass
class Placed:
    namespace: str
    hot: str
    cool: list[str]
    app: str
    hot_pod: str
    usage: ClusterUsage

    def set_hot_pod_cores(self, cores: float) -> None:
        self.usage.model.set_pod_cores(self.namespace, self.hot_pod, cores)


def _daemon_pod(plane: ControlPlane, namespace: str, node: str) -> None:
    """A DaemonSet and its pod on ``node``, owned as its controller would own it (that controller does
    not run here, so the pod is made by hand)."""
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": AGENT},
        "spec": {
            "selector": {"matchLabels": {"app": AGENT}},
            "template": objects.pod_template(AGENT, namespace, cpu="50m"),
        },
    }
    plane.apply([daemonset], namespace=namespace)
    uid = plane.get_json("daemonset", AGENT, "-n", namespace)["metadata"]["uid"]
    pod = objects.bare_pod(f"{AGENT}-{node}"[:63], namespace, node, cpu="50m")
    pod["metadata"]["labels"] = {"app": AGENT}
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": AGENT, "uid": uid, "controller": True}
    ]
    plane.apply([pod], namespace=namespace)


def place(plane: ControlPlane, api: KubeApi, namespace: str, app: str, *, pod_cores: float = 0.2) -> Placed:
    hot, cool = f"{namespace}-hot", [f"{namespace}-cool-1", f"{namespace}-cool-2"]
    plane.add_nodes(namespace, [hot])
    plane.add_nodes(namespace, cool, cpu="8", unschedulable=True)
    plane.apply([objects.deployment(app, namespace, replicas=1, cpu="100m")], namespace=namespace)
    (first,) = plane.wait_for(
        f"the first {app} pod Running", lambda: plane.running_pods(namespace, f"app={app}"), timeout_s=60
    )
    plane.kubectl("cordon", hot)
    for node in cool:
        plane.kubectl("uncordon", node)
    plane.kubectl("scale", "deployment", app, "-n", namespace, "--replicas=3")
    plane.wait_for(
        f"three {app} pods Running",
        lambda: len(plane.running_pods(namespace, f"app={app}")) == 3,
        timeout_s=60,
    )
    plane.kubectl("uncordon", hot)
    _daemon_pod(plane, namespace, hot)
    plane.wait_for(
        "the DaemonSet's pod Running", lambda: plane.running_pods(namespace, f"app={AGENT}"), timeout_s=60
    )
    cpus = {hot: 4, **dict.fromkeys(cool, 8)}
    usage = ClusterUsage(api, namespace, cpus, {app: pod_cores, AGENT: 0.1})
    return Placed(namespace, hot, cool, app, first["metadata"]["name"], usage)


@contextlib.contextmanager
def placed_serving_usage(
    plane: ControlPlane,
    api: KubeApi,
    namespace: str,
    backend: UsageBackend,
    app: str,
    *,
    hot_pod_cores: float | None = None,
) -> Iterator[Placed]:
    """``place``, its usage followed and served by ``backend``'s Prometheus (a full window scraped), the
    hot replica using ``hot_pod_cores`` from the start when given."""
    placed = place(plane, api, namespace, app)
    with placed.usage.following():
        if hot_pod_cores is not None:
            placed.set_hot_pod_cores(hot_pod_cores)
        backend.install(placed.usage.model, full_window=True, timeout=30)
        yield placed


@contextlib.contextmanager
def module_namespace(plane: ControlPlane, prefix: str) -> Iterator[str]:
    """A fresh namespace for a module's shared setup (the ``namespace`` fixture is per test), deleted
    afterwards with the nodes of its group."""
    ns = fresh_namespace(plane, f"{prefix}-{time.monotonic_ns() % 100000}")
    try:
        yield ns
    finally:
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        plane.kubectl("delete", "nodes", "-l", f"{objects.GROUP_LABEL}={ns}", "--wait=false", check=False)
