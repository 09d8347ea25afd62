"""Our pod requests are the real kube-scheduler's: each pod fits a node whose allocatable cpu is exactly
the requests we compute, and stays Pending (Insufficient cpu) on a node with one millicore less.

The pods are real objects sent through the real API server (defaulting and admission included: limits
become requests, a RuntimeClass adds ``spec.overhead``), so both sides see the same pod.
"""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.cluster.parse import parse_pod
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane

pytestmark = pytest.mark.controlplane

RUNTIME_CLASS = "fidelity-overhead"


def container(name: str, cpu: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": f"registry.invalid/{name}:1"}
    if cpu is not None:
        out["resources"] = {"requests": {"cpu": cpu}}
    out.update(extra)
    return out


def sidecar(name: str, cpu: str) -> dict[str, Any]:
    return container(name, cpu, restartPolicy="Always")


CASES: list[tuple[str, dict[str, Any]]] = [
    ("apps", {"containers": [container("a", "700m"), container("b", "300m")]}),
    ("init-floor", {"containers": [container("a", "500m")], "initContainers": [container("i", "1200m")]}),
    ("sidecar", {"containers": [container("a", "1500m")], "initContainers": [sidecar("proxy", "500m")]}),
    (
        "init-after-sidecar",
        {"containers": [container("a", "200m")], "initContainers": [sidecar("s", "1"), container("i", "2")]},
    ),
    (
        "init-before-sidecar",
        {"containers": [container("a", "200m")], "initContainers": [container("i", "2"), sidecar("s", "1")]},
    ),
    (
        "limits-only",
        {"containers": [container("a", resources={"limits": {"cpu": "900m", "memory": "64Mi"}})]},
    ),
    ("overhead", {"containers": [container("a", "1")], "runtimeClassName": RUNTIME_CLASS}),
    (
        "pod-level",
        {"containers": [container("a", "500m")], "resources": {"requests": {"cpu": "2"}}},
    ),
]


def pod(name: str, node: str, group: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "fidelity"}},
        "spec": {
            "nodeSelector": {objects.GROUP_LABEL: group, "kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            **spec,
        },
    }


def cpu_of(obj: dict[str, Any]) -> int:
    return parse_pod({**obj, "metadata": {**obj["metadata"], "namespace": "x"}}).requests["cpu"]


def test_every_pod_fits_exactly_our_requests_and_not_one_millicore_less(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.apply(
        [
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": RUNTIME_CLASS},
                "handler": "runc",
                "overhead": {"podFixed": {"cpu": "250m"}},
            }
        ]
    )
    ours: dict[str, int] = {}
    for case, spec in CASES:
        local = pod(case, "-", namespace, spec)
        if "runtimeClassName" in spec:  # the RuntimeClass admission plugin adds this on the server
            local["spec"] = {**local["spec"], "overhead": {"cpu": "250m"}}
        ours[case] = cpu_of(local)
    assert ours == {
        "apps": 1000,
        "init-floor": 1200,
        "sidecar": 2000,
        "init-after-sidecar": 3000,
        "init-before-sidecar": 2000,
        "limits-only": 900,
        "overhead": 1250,
        "pod-level": 2000,
    }
    fit = {case: f"{namespace[:30]}-{i}-fit" for i, (case, _) in enumerate(CASES)}
    short = {case: f"{namespace[:30]}-{i}-short" for i, (case, _) in enumerate(CASES)}
    nodes = [objects.node(fit[case], namespace, cpu=f"{ours[case]}m") for case, _ in CASES]
    nodes += [objects.node(short[case], namespace, cpu=f"{ours[case] - 1}m") for case, _ in CASES]
    control_plane.apply(nodes)

    def ready() -> bool:
        items = control_plane.get_json("nodes", "-l", f"{objects.GROUP_LABEL}={namespace}")["items"]
        up = [
            i
            for i in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in i["status"].get("conditions", []))
        ]
        return len(up) == len(nodes)

    control_plane.wait_for("the nodes Ready", ready, timeout_s=60)
    for case, spec in CASES:
        control_plane.apply(
            [
                pod(f"{case}-fit", fit[case], namespace, spec),
                pod(f"{case}-short", short[case], namespace, spec),
            ],
            namespace=namespace,
        )

    def settled() -> dict[str, str] | None:
        outcome: dict[str, str] = {}
        for item in control_plane.get_json("pods", "-n", namespace)["items"]:
            name = item["metadata"]["name"]
            if item["spec"].get("nodeName"):
                outcome[name] = "scheduled"
                continue
            for cond in item.get("status", {}).get("conditions", []):
                if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    outcome[name] = "pending: " + ("Insufficient cpu" in cond.get("message", "")) * "cpu"
        return outcome if len(outcome) == 2 * len(CASES) else None

    outcome = control_plane.wait_for("every pod scheduled or refused", settled, timeout_s=90)
    expected = {}
    for case, _ in CASES:
        expected[f"{case}-fit"] = "scheduled"
        expected[f"{case}-short"] = "pending: cpu"
    assert outcome == expected
    # the objects as the server stored them (defaulted, admitted) give the same numbers
    for item in control_plane.get_json("pods", "-n", namespace)["items"]:
        case = item["metadata"]["name"].rsplit("-", 1)[0]
        assert parse_pod(item).requests["cpu"] == ours[case], item["metadata"]["name"]
