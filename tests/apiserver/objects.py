"""Builders for the Kubernetes objects tests put into the server, shaped like what a real cluster stores."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def namespace(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def node(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    taints: list[Obj] | None = None,
) -> Obj:
    spec: Obj = {"podCIDR": "10.244.0.0/24"}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    capacity = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.32.4",
                "kubeProxyVersion": "",
                "osImage": "Debian",
                "kernelVersion": "6.1.0",
                "containerRuntimeVersion": "containerd://1.7.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
            },
        },
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    node: str = "",
    cpu: str = "100m",
    memory: str = "128Mi",
    labels: dict[str, str] | None = None,
    owner: tuple[str, str] | None = ("ReplicaSet", "web-rs"),
    phase: str = "Running",
    ready: bool = True,
    annotations: dict[str, str] | None = None,
) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "labels": labels if labels is not None else {"app": "web"},
    }
    if annotations:
        meta["annotations"] = annotations
    if owner is not None:
        kind, owner_name = owner
        api = "apps/v1" if kind in ("ReplicaSet", "StatefulSet", "DaemonSet", "Deployment") else "v1"
        meta["ownerReferences"] = [
            {
                "apiVersion": api,
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{owner_name}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    spec: Obj = {
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
    }
    if node:
        spec["nodeName"] = node
    status: Obj = {"phase": phase, "qosClass": "Burstable"}
    if phase == "Running":
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        status["podIP"] = "10.244.0.10"
        status["containerStatuses"] = [
            {
                "name": "app",
                "ready": ready,
                "restartCount": 0,
                "image": "registry.example/app:1",
                "imageID": "",
                "started": True,
                "state": {"running": {"startedAt": "2025-01-01T00:00:00Z"}},
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pdb(
    name: str,
    *,
    namespace: str = "default",
    match_labels: dict[str, str] | None = None,
    disruptions_allowed: int = 1,
    current_healthy: int = 3,
    desired_healthy: int = 2,
    expected_pods: int = 3,
) -> Obj:
    """A PDB as the disruption controller leaves it (observedGeneration caught up)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "minAvailable": desired_healthy,
            "selector": {"matchLabels": match_labels or {"app": "web"}},
        },
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": disruptions_allowed,
            "currentHealthy": current_healthy,
            "desiredHealthy": desired_healthy,
            "expectedPods": expected_pods,
        },
    }


def _workload(kind: str, name: str, namespace: str, replicas: int, api_version: str = "apps/v1") -> Obj:
    """The fields every workload kind shares: ``replicas``, a selector on ``app`` and a one-container
    template; each builder below adds what its kind has more."""
    selector: Obj = {"app": name} if kind == "ReplicationController" else {"matchLabels": {"app": name}}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
            },
        },
        "status": {"replicas": replicas, "observedGeneration": 1},
    }


def replicaset(
    name: str, *, namespace: str = "default", replicas: int = 3, deployment: str | None = None
) -> Obj:
    obj = _workload("ReplicaSet", name, namespace, replicas)
    if deployment:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": deployment,
                "uid": f"uid-{deployment}",
                "controller": True,
            }
        ]
    return obj


def deployment(name: str, *, namespace: str = "default", replicas: int = 3) -> Obj:
    return _workload("Deployment", name, namespace, replicas)


def statefulset(name: str, *, namespace: str = "default", replicas: int = 3) -> Obj:
    obj = _workload("StatefulSet", name, namespace, replicas)
    obj["spec"]["serviceName"] = name
    obj["status"]["availableReplicas"] = replicas
    return obj


def replicationcontroller(name: str, *, namespace: str = "default", replicas: int = 2) -> Obj:
    obj = _workload("ReplicationController", name, namespace, replicas, api_version="v1")
    obj["status"] = {"replicas": replicas}
    return obj
