"""Builders for the real API objects the control-plane tests create (plain dicts, sent with kubectl).

Every test gets its own namespace and its own nodes, labelled with ``GROUP_LABEL=<namespace>``; its pods
select those nodes, so tests sharing one control plane never schedule onto each other's nodes.
"""

from __future__ import annotations

from typing import Any

GROUP_LABEL = "descheduler.test/group"

Obj = dict[str, Any]


def node(
    name: str,
    group: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    unschedulable: bool = False,
) -> Obj:
    """A node kwok will run (it manages every node): Ready once kwok has seen it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", GROUP_LABEL: group},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"unschedulable": unschedulable},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
        },
    }


def pod_template(
    app: str, group: str, *, cpu: str = "250m", memory: str = "256Mi", node_name: str | None = None
) -> Obj:
    spec: Obj = {
        "nodeSelector": {GROUP_LABEL: group},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "app",
                "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "metadata": {"labels": {"app": app}},
        "spec": spec,
    }


def deployment(name: str, group: str, *, replicas: int, node_name: str | None = None, **template: Any) -> Obj:
    """A Deployment whose pods run on the group's nodes (or, with ``node_name``, bound to one node)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name, group, node_name=node_name, **template),
        },
    }


def pdb(
    name: str, app: str, *, min_available: int | str | None = None, max_unavailable: int | str | None = None
) -> Obj:
    spec: Obj = {"selector": {"matchLabels": {"app": app}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": spec,
    }


def bare_pod(name: str, group: str, node_name: str, **template: Any) -> Obj:
    """A pod with no controller, bound to ``node_name`` directly (the scheduler is not involved)."""
    body = pod_template(name, group, node_name=node_name, **template)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **body["metadata"]},
        "spec": body["spec"],
    }


def cluster_admin_account(name: str, namespace: str) -> list[Obj]:
    """A ServiceAccount bound to cluster-admin: a benchmark's own identity, so the audit log tells its
    requests apart (what it may do is not the question there; tests/controlplane checks the shipped RBAC)."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"bench-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


# --- Dynamic Resource Allocation (resource.k8s.io/v1) ---------------------------------------------------

DRA_API = "resource.k8s.io/v1"
DRIVER = "gpu.example.com"
"""A fake DRA driver: nothing runs for it; its ResourceSlices are written by the tests, kube-scheduler
allocates from them and kwok runs the pods without preparing anything."""


def device_class(name: str, expression: str = f'device.driver == "{DRIVER}"') -> Obj:
    """A DeviceClass selecting devices with one CEL expression."""
    return {
        "apiVersion": DRA_API,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def device(name: str, *, model: str = "a100", index: int = 0, memory: str = "40Gi") -> Obj:
    """One device of a ResourceSlice: a model and an index attribute and a memory capacity."""
    return {
        "name": name,
        "attributes": {"model": {"string": model}, "index": {"int": index}},
        "capacity": {"memory": {"value": memory}},
    }


def resource_slice(
    name: str, node_name: str, devices: list[Obj], *, group: str, driver: str = DRIVER, node_uid: str = ""
) -> Obj:
    """The slice a node-local driver publishes: one pool named after the node, in one slice. With
    ``node_uid`` the Node owns it, so the garbage collector removes it with the test's nodes."""
    metadata: Obj = {"name": name, "labels": {GROUP_LABEL: group}}
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
        ]
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _device_spec(device_class_name: str, selectors: list[str], count: int) -> Obj:
    exactly: Obj = {"deviceClassName": device_class_name, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"requests": [{"name": "gpu", "exactly": exactly}]}


def claim_template(
    name: str, device_class_name: str, *, selectors: list[str] | None = None, count: int = 1
) -> Obj:
    """A ResourceClaimTemplate: each pod that names it gets a claim of its own (request ``gpu``)."""
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": _device_spec(device_class_name, selectors or [], count)}},
    }


def resource_claim(
    name: str, device_class_name: str, *, selectors: list[str] | None = None, count: int = 1
) -> Obj:
    """A ResourceClaim made by hand: every pod that names it shares its devices."""
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": _device_spec(device_class_name, selectors or [], count)},
    }


def with_claims(template: Obj, *, template_name: str = "", claim_name: str = "") -> Obj:
    """``template`` (a pod template or a Pod) with one claim ``gpu``, from a ResourceClaimTemplate or a
    shared ResourceClaim, used by its container."""
    ref: Obj = {"name": "gpu"}
    if template_name:
        ref["resourceClaimTemplateName"] = template_name
    else:
        ref["resourceClaimName"] = claim_name
    spec = template["spec"]
    spec["resourceClaims"] = [ref]
    for container in spec["containers"]:
        container["resources"]["claims"] = [{"name": "gpu"}]
    return template


FLOWCONTROL = "flowcontrol.apiserver.k8s.io/v1"


def rejecting_flow(name: str, rule: Obj) -> list[Obj]:
    """A priority level with no concurrency that rejects (429 with Retry-After, API Priority and
    Fairness' own answer) and a flow schema, both named ``name``, sending the requests ``rule`` matches
    there before any other schema but the exempt and probe ones."""
    level = {
        "apiVersion": FLOWCONTROL,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema = {
        "apiVersion": FLOWCONTROL,
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 90,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [rule],
        },
    }
    return [level, schema]
