"""The fast decoder yields exactly what ``parse.py`` yields, or leaves the object to ``parse.py``.

Every object here goes both ways: encoded as the API server sends it (a one-item LIST page, a watch
event), decoded by ``fastparse`` into slim structs and converted; and decoded by ``json.loads`` and
parsed by ``parse.py``. The fast path may decline (the cache then runs ``parse.py`` on the object), but
whatever it returns must equal ``parse.py``'s value, and it must never return a value for an object
``parse.py`` rejects. The realistic objects must not be declined, or the fast path would be dead code.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from descheduler.cluster.fastparse import FAST_KINDS, exact_item
from descheduler.cluster.parse import RESTARTED_AT, ObjectError, parse_node, parse_pod, parse_workload
from descheduler.kube.cache import RESOURCES, Backoff, Interner, _Reflector
from tests.unit.mutation import edit_places

Obj = dict[str, Any]
PARSERS: dict[str, Callable[[Obj], Any]] = {
    "Pod": parse_pod,
    "Node": parse_node,
    "ReplicaSet": parse_workload,
    "Deployment": parse_workload,
    "StatefulSet": parse_workload,
    "ReplicationController": parse_workload,
}
DECLINED = object()


class Rejected:
    """``parse.py`` refused the object (with this message)."""

    def __init__(self, message: str) -> None:
        self.message = message


def exact(kind: str, obj: Any) -> Any:
    """``parse.py`` on the object as ``json.loads`` gives it, with the kind a LIST item gets."""
    decoded = exact_item(json.loads(json.dumps(obj)), kind)
    try:
        return PARSERS[kind](decoded)
    except (ObjectError, ValueError, TypeError, AttributeError) as exc:
        return Rejected(str(exc))


def fast_from_page(kind: str, obj: Any) -> Any:
    fast = FAST_KINDS[kind]
    body = json.dumps({"kind": f"{kind}List", "metadata": {"resourceVersion": "7"}, "items": [obj]}).encode()
    decoded = fast.decode_page(body)
    if decoded is None:
        return DECLINED
    items, token, version = decoded
    assert (len(items), token, version) == (1, "", "7")
    value = fast.try_convert(items[0], Interner())
    return DECLINED if value is None else value


def fast_from_event(kind: str, obj: Any) -> Any:
    fast = FAST_KINDS[kind]
    decoded = fast.decode_event(json.dumps({"type": "MODIFIED", "object": obj}).encode())
    if decoded is None:
        return DECLINED
    assert decoded[0] == "MODIFIED"
    value = fast.try_convert(decoded[1], Interner())
    return DECLINED if value is None else value


def agree(kind: str, obj: Any) -> bool:
    """Both paths agree on ``obj``; True when the fast path produced the value itself."""
    expected = exact(kind, obj)
    handled = False
    for fast in (fast_from_page(kind, obj), fast_from_event(kind, obj)):
        if fast is DECLINED:
            continue
        handled = True
        assert not isinstance(expected, Rejected), (
            f"fast path accepted what parse.py rejects: {expected.message}"
        )
        assert fast == expected
    return handled


# -- realistic objects: what a real API server sends -------------------------------------------------------

MANAGED_FIELDS = [
    {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
    }
]


def real_pod() -> Obj:
    """A pod as kube-apiserver 1.33 returns it: sidecar, RuntimeClass overhead, resize-aware statuses."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7c9d5f6b8-x2x9z",
            "generateName": "web-7c9d5f6b8-",
            "namespace": "shop",
            "uid": "0b7e5c7a-1111-4c1a-9d7a-000000000001",
            "resourceVersion": "123456",
            "creationTimestamp": "2026-01-01T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7c9d5f6b8"},
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-01-01T09:59:00Z",
                "controller.kubernetes.io/pod-deletion-cost": "10",
                "scheduling.koordinator.sh/eviction-cost": "5",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7c9d5f6b8",
                    "uid": "0b7e5c7a-2222-4c1a-9d7a-000000000002",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": copy.deepcopy(MANAGED_FIELDS),
        },
        "spec": {
            "nodeName": "worker-1",
            "priority": 100000,
            "priorityClassName": "business-critical",
            "schedulerName": "default-scheduler",
            "runtimeClassName": "kata",
            "overhead": {"cpu": "250m", "memory": "120Mi"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "topology.kubernetes.io/zone",
                                        "operator": "In",
                                        "values": ["a", "b"],
                                    }
                                ],
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "NotIn", "values": ["worker-9"]}
                                ],
                            }
                        ]
                    },
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 1,
                            "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]},
                        }
                    ],
                },
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": "web"}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                },
            },
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {"key": "dedicated", "operator": "Equal", "value": "shop", "effect": "NoSchedule"},
                {"operator": "Exists"},
            ],
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web"}},
                {
                    "name": "kube-api-access",
                    "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                },
            ],
            "initContainers": [
                {
                    "name": "migrate",
                    "image": "m:1",
                    "resources": {"requests": {"cpu": "2", "memory": "256Mi"}},
                },
                {
                    "name": "istio-proxy",
                    "image": "proxy:1",
                    "restartPolicy": "Always",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "2", "memory": "1Gi"},
                    },
                },
            ],
            "containers": [
                {
                    "name": "app",
                    "image": "web:1",
                    "env": [{"name": "A", "value": "b"}],
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                },
                {"name": "log", "image": "log:1", "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}},
                {"name": "idle", "image": "idle:1", "resources": {}},
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None},
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": True,
                    "allocatedResources": {"cpu": "500m", "memory": "1Gi"},
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                },
                {"name": "log", "ready": True, "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}},
            ],
            "initContainerStatuses": [
                {"name": "migrate", "ready": False, "state": {"terminated": {"exitCode": 0}}},
                {
                    "name": "istio-proxy",
                    "ready": True,
                    "allocatedResources": {"cpu": "100m", "memory": "128Mi"},
                },
            ],
        },
    }


def resized_pod() -> Obj:
    """An in-place resize under way: the kubelet allocated more than the spec asks now."""
    pod = real_pod()
    pod["metadata"]["name"] = "web-7c9d5f6b8-resized"
    pod["status"]["containerStatuses"][0]["allocatedResources"] = {"cpu": "2", "memory": "1Gi"}
    return pod


def infeasible_resize_pod() -> Obj:
    pod = resized_pod()
    pod["status"]["conditions"].append({"type": "PodResizePending", "status": "True", "reason": "Infeasible"})
    return pod


def pod_level_pod() -> Obj:
    pod = real_pod()
    pod["spec"]["resources"] = {"requests": {"cpu": "3"}, "limits": {"memory": "4Gi", "hugepages-2Mi": "2Mi"}}
    return pod


def plain_pod() -> Obj:
    """The smallest pod a LIST returns (no status yet, no requests): Pending, BestEffort by the server."""
    return {
        "metadata": {
            "name": "bare",
            "namespace": "default",
            "creationTimestamp": "2026-01-01T00:00:00.123456Z",
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def placement_pod() -> Obj:
    """A pod with host ports (one in a sidecar), pod affinity and anti-affinity, and topology spread."""
    pod = plain_pod()
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    pod["spec"] = {
        "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]}],
        "initContainers": [
            {"name": "s", "restartPolicy": "Always", "ports": [{"containerPort": 9, "hostPort": 9}]}
        ],
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{**term, "namespaces": ["a"]}]
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}},
            {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
        ],
    }
    return pod


def terminating_static_pod() -> Obj:
    return {
        "metadata": {
            "name": "etcd-master",
            "namespace": "kube-system",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"kubernetes.io/config.mirror": "abc", "kubernetes.io/config.source": "file"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "master", "uid": "n-uid", "controller": True}
            ],
        },
        "spec": {"nodeName": "master", "priority": 2000001000, "containers": [{"name": "etcd"}]},
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "False"}],
        },
    }


def finished_pod() -> Obj:
    pod = plain_pod()
    pod["spec"]["nodeName"] = "n1"
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    pod["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/var"}}, {"name": "e", "ephemeral": {}}]
    pod["status"] = {"phase": "Succeeded", "qosClass": "BestEffort"}
    return pod


def device_pod() -> Obj:
    """A pod holding devices through DRA: a claim from a template (generated name in the status) and a
    shared claim by name."""
    pod = plain_pod()
    pod["spec"]["nodeName"] = "gpu-1"
    pod["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
        {"name": "shared", "resourceClaimName": "team-gpu"},
    ]
    pod["status"] = {
        "phase": "Running",
        "qosClass": "BestEffort",
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "web-0-gpu-x7k2"}],
    }
    return pod


def real_node() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "worker-1",
            "uid": "node-uid",
            "labels": {"kubernetes.io/hostname": "worker-1", "topology.kubernetes.io/zone": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": copy.deepcopy(MANAGED_FIELDS),
        },
        "spec": {
            "podCIDR": "10.0.0.0/24",
            "unschedulable": True,
            "taints": [
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "effect": "NoSchedule",
                    "timeAdded": "2026-01-01T00:00:00Z",
                },
                {"key": "dedicated", "value": "shop", "effect": "NoExecute"},
            ],
        },
        "status": {
            "capacity": {"cpu": "32", "memory": "131072Mi", "pods": "110"},
            "allocatable": {
                "cpu": "31850m",
                "memory": "128000Mi",
                "pods": "110",
                "ephemeral-storage": "190898Mi",
                "hugepages-2Mi": "0",
                "nvidia.com/gpu": 4,
            },
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
            "images": [{"names": ["a@sha256:1"], "sizeBytes": 1}],
        },
    }


def raw_allocatable_node() -> Obj:
    node = real_node()
    node["metadata"]["annotations"]["node.koordinator.sh/raw-allocatable"] = '{"cpu": "40"}'
    return node


def replica_set() -> Obj:
    return {
        "metadata": {
            "name": "web-7c9d5f6b8",
            "namespace": "shop",
            "uid": "rs-uid",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": "d-uid",
                    "controller": True,
                }
            ],
            "managedFields": copy.deepcopy(MANAGED_FIELDS),
        },
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": real_pod()},
        "status": {"replicas": 3},
    }


def deployment() -> Obj:
    """A single-replica Deployment mid-life, with every field a surge-first restart reads."""
    return {
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "d-uid",
            "generation": 4,
            "resourceVersion": "9071",
            "managedFields": copy.deepcopy(MANAGED_FIELDS),
        },
        "spec": {
            "replicas": 1,
            "paused": False,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "0%"}},
            "template": real_pod(),
        },
        "status": {
            "observedGeneration": 4,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "conditions": [{"type": "Available", "status": "True"}],
        },
    }


REALISTIC: list[tuple[str, str, Callable[[], Obj], bool]] = [
    ("a running pod with a sidecar, overhead and affinity", "Pod", real_pod, True),
    ("a pod being resized in place", "Pod", resized_pod, True),
    ("a pod whose resize is infeasible", "Pod", infeasible_resize_pod, True),
    ("a pod with pod-level resources", "Pod", pod_level_pod, True),
    ("a pending pod with nothing but a container", "Pod", plain_pod, True),
    ("a pod with host ports, pod (anti-)affinity and topology spread", "Pod", placement_pod, True),
    ("a terminating static mirror pod", "Pod", terminating_static_pod, True),
    ("a finished pod with host paths, ephemeral volumes and claims", "Pod", finished_pod, True),
    ("a pod with claims from a template and by name", "Pod", device_pod, True),
    ("a cordoned, tainted node", "Node", real_node, True),
    ("a node with Koordinator's raw-allocatable (left to parse.py)", "Node", raw_allocatable_node, False),
    ("a ReplicaSet owned by a Deployment", "ReplicaSet", replica_set, True),
    ("a single-replica Deployment that surges", "Deployment", deployment, True),
]


@pytest.mark.parametrize(("case", "kind", "build", "fast"), REALISTIC, ids=[r[0] for r in REALISTIC])
def test_realistic_objects_decode_to_the_same_values_by_the_fast_path(
    case: str, kind: str, build: Callable[[], Obj], fast: bool
) -> None:
    assert agree(kind, build()) is fast


def drop(path: tuple[Any, ...]) -> Callable[[Obj], None]:
    def edit(obj: Obj) -> None:
        parent = obj
        for part in path[:-1]:
            parent = parent[part]
        del parent[path[-1]]

    return edit


def put(path: tuple[Any, ...], value: Any) -> Callable[[Obj], None]:
    def edit(obj: Obj) -> None:
        parent = obj
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = value

    return edit


FIRST_NODE_EXPRESSION = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
FIRST_NODE_EXPRESSION += ("nodeSelectorTerms", 0, "matchExpressions", 0)
"""The path of the real pod's first required node-affinity expression."""

ODD: list[tuple[str, str, Callable[[], Obj], Callable[[Obj], None]]] = [
    ("a label value that is a number", "Pod", real_pod, put(("metadata", "labels", "n"), 5)),
    ("a null uid", "Pod", real_pod, put(("metadata", "uid"), None)),
    ("a nameless claim", "Pod", device_pod, put(("spec", "resourceClaims", 0, "name"), "")),
    ("a claim status without name", "Pod", device_pod, drop(("status", "resourceClaimStatuses", 0, "name"))),
    (
        "a null generated claim",
        "Pod",
        device_pod,
        put(("status", "resourceClaimStatuses", 0, "resourceClaimName"), None),
    ),
    (
        "a numeric template",
        "Pod",
        device_pod,
        put(("spec", "resourceClaims", 0, "resourceClaimTemplateName"), 5),
    ),
    ("claims as an object", "Pod", device_pod, put(("spec", "resourceClaims"), {})),
    (
        "a status for no claim",
        "Pod",
        plain_pod,
        put(("status",), {"qosClass": "BestEffort", "resourceClaimStatuses": [{"name": ""}]}),
    ),
    ("no name", "Pod", real_pod, drop(("metadata", "name"))),
    ("an empty name", "Pod", real_pod, put(("metadata", "name"), "")),
    ("a numeric namespace", "Pod", real_pod, put(("metadata", "namespace"), 7)),
    ("a bad creation time", "Pod", real_pod, put(("metadata", "creationTimestamp"), "yesterday")),
    (
        "a bad cpu request",
        "Pod",
        real_pod,
        put(("spec", "containers", 0, "resources", "requests", "cpu"), "lots"),
    ),
    (
        "a boolean memory limit",
        "Pod",
        real_pod,
        put(("spec", "containers", 0, "resources", "limits", "memory"), True),
    ),
    (
        "a numeric request",
        "Pod",
        real_pod,
        put(("spec", "containers", 0, "resources", "requests", "cpu"), 1.5),
    ),
    ("a priority that is a string", "Pod", real_pod, put(("spec", "priority"), "100")),
    ("a priority that is a boolean", "Pod", real_pod, put(("spec", "priority"), True)),
    ("a toleration with a null key", "Pod", real_pod, put(("spec", "tolerations", 1, "key"), None)),
    ("a toleration that is a string", "Pod", real_pod, put(("spec", "tolerations", 1), "x")),
    ("an unknown affinity operator", "Pod", real_pod, put((*FIRST_NODE_EXPRESSION, "operator"), "Near")),
    ("affinity values that are numbers", "Pod", real_pod, put((*FIRST_NODE_EXPRESSION, "values"), [1, 2])),
    ("a volume that is a string", "Pod", real_pod, put(("spec", "volumes", 0), "scratch")),
    (
        "a null hostPath still counts as local storage",
        "Pod",
        real_pod,
        put(("spec", "volumes", 0), {"hostPath": None}),
    ),
    ("containers that are a map", "Pod", real_pod, put(("spec", "containers"), {"app": {}})),
    ("conditions that are a map", "Pod", real_pod, put(("status", "conditions"), {"Ready": "True"})),
    ("no qosClass (derived by parse.py)", "Pod", real_pod, drop(("status", "qosClass"))),
    ("a null status", "Pod", real_pod, put(("status",), None)),
    ("a null spec", "Pod", real_pod, put(("spec",), None)),
    ("spec that is a list", "Pod", real_pod, put(("spec",), [])),
    ("an owner reference that is a string", "Pod", real_pod, put(("metadata", "ownerReferences"), ["rs"])),
    ("an owner with a null kind", "Pod", real_pod, put(("metadata", "ownerReferences", 0, "kind"), None)),
    (
        "a controller flag that is a string",
        "Pod",
        real_pod,
        put(("metadata", "ownerReferences", 0, "controller"), "yes"),
    ),
    (
        "a status with a resize read as a string",
        "Pod",
        resized_pod,
        put(("status", "containerStatuses", 0, "allocatedResources"), "2"),
    ),
    ("a node whose taint has no key", "Node", real_node, drop(("spec", "taints", 1, "key"))),
    ("a node whose taint value is null", "Node", real_node, put(("spec", "taints", 1, "value"), None)),
    (
        "a node with two Ready conditions (the last counts)",
        "Node",
        real_node,
        put(
            ("status", "conditions"),
            [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}],
        ),
    ),
    ("a node with a bad allocatable", "Node", real_node, put(("status", "allocatable", "cpu"), "x")),
    ("a node with unschedulable null", "Node", real_node, put(("spec", "unschedulable"), None)),
    ("a ReplicaSet with negative replicas", "ReplicaSet", replica_set, put(("spec", "replicas"), -1)),
    ("a ReplicaSet with boolean replicas", "ReplicaSet", replica_set, put(("spec", "replicas"), True)),
    ("a ReplicaSet with null replicas", "ReplicaSet", replica_set, put(("spec", "replicas"), None)),
    ("a ReplicaSet without replicas", "ReplicaSet", replica_set, drop(("spec", "replicas"))),
    ("a ReplicaSet with a null kind", "ReplicaSet", replica_set, put(("kind",), None)),
    (
        "a paused node, with a why",
        "Node",
        real_node,
        put(("metadata", "annotations"), {"load-aware-descheduler.io/paused": " INC-1 "}),
    ),
    (
        "a node paused false",
        "Node",
        real_node,
        put(("metadata", "annotations"), {"load-aware-descheduler.io/paused": "False"}),
    ),
    (
        "a paused ReplicaSet",
        "ReplicaSet",
        replica_set,
        put(("metadata", "annotations"), {"load-aware-descheduler.io/paused": "true"}),
    ),
    (
        "a pod opted out by Karpenter",
        "Pod",
        real_pod,
        put(("metadata", "annotations"), {"karpenter.sh/do-not-disrupt": "true", "other": "x"}),
    ),
    ("a ReplicaSet that says it is a Deployment", "ReplicaSet", replica_set, put(("kind",), "Deployment")),
    ("a Recreate Deployment", "Deployment", deployment, put(("spec", "strategy"), {"type": "Recreate"})),
    ("a Deployment without a strategy", "Deployment", deployment, drop(("spec", "strategy"))),
    ("a Deployment without a status", "Deployment", deployment, drop(("status",))),
    ("a Deployment whose status is a string", "Deployment", deployment, put(("status",), "up")),
    ("a Deployment whose strategy is a list", "Deployment", deployment, put(("spec", "strategy"), [])),
    (
        "a Deployment with maxSurge '1' (not a percent)",
        "Deployment",
        deployment,
        put(("spec", "strategy", "rollingUpdate", "maxSurge"), "1"),
    ),
    (
        "a Deployment with a negative maxUnavailable",
        "Deployment",
        deployment,
        put(("spec", "strategy", "rollingUpdate", "maxUnavailable"), -1),
    ),
    ("a Deployment paused as a string", "Deployment", deployment, put(("spec", "paused"), "true")),
    ("a Deployment with a float generation", "Deployment", deployment, put(("metadata", "generation"), 4.0)),
    (
        "a Deployment with null updatedReplicas",
        "Deployment",
        deployment,
        put(("status", "updatedReplicas"), None),
    ),
    (
        "a Deployment with an unknown strategy",
        "Deployment",
        deployment,
        put(("spec", "strategy", "type"), "X"),
    ),
    (
        "a Deployment whose rollout stalled",
        "Deployment",
        deployment,
        put(
            ("status", "conditions"),
            [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}],
        ),
    ),
    ("a Deployment with its own deadline", "Deployment", deployment, put(("spec", "minReadySeconds"), 30)),
    (
        "a Deployment with a negative deadline",
        "Deployment",
        deployment,
        put(("spec", "progressDeadlineSeconds"), -1),
    ),
    (
        "a Deployment restarted by kubectl",
        "Deployment",
        deployment,
        put(("spec", "template", "metadata", "annotations"), {RESTARTED_AT: "2026-01-01T13:00:00+01:00"}),
    ),
    (
        "a Deployment whose restartedAt is no time",
        "Deployment",
        deployment,
        put(("spec", "template", "metadata", "annotations"), {RESTARTED_AT: "yesterday"}),
    ),
]


@pytest.mark.parametrize(("case", "kind", "build", "edit"), ODD, ids=[o[0] for o in ODD])
def test_odd_objects_get_the_value_or_the_error_parse_py_gives(
    case: str, kind: str, build: Callable[[], Obj], edit: Callable[[Obj], None]
) -> None:
    obj = build()
    edit(obj)
    agree(kind, obj)


# -- generated objects: random edits of the realistic ones -----------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(
        [
            "",
            "x",
            "250m",
            "1Gi",
            "2",
            "1.5",
            "1e3",
            "-1",
            "Always",
            "Ready",
            "True",
            "False",
            "In",
            "Exists",
            "Equal",
            "NoSchedule",
            "Running",
            "Pending",
            "Succeeded",
            "Burstable",
            "PodResizePending",
            "Infeasible",
            "2026-01-01T00:00:00Z",
            "api",
            "file",
            "kubernetes.io/config.mirror",
            "gpu",
        ]
    ),
)
KEYS = st.sampled_from(
    [
        "cpu",
        "memory",
        "requests",
        "limits",
        "type",
        "status",
        "reason",
        "key",
        "operator",
        "values",
        "value",
        "effect",
        "name",
        "kind",
        "controller",
        "uid",
        "hostPath",
        "emptyDir",
        "persistentVolumeClaim",
        "restartPolicy",
        "resources",
        "allocatedResources",
        "matchExpressions",
        "matchFields",
        "strategy",
        "rollingUpdate",
        "maxSurge",
        "maxUnavailable",
        "paused",
        "generation",
        "observedGeneration",
        "updatedReplicas",
        "resourceClaims",
        "resourceClaimName",
        "resourceClaimTemplateName",
        "resourceClaimStatuses",
        "x",
    ]
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


BASES = [(kind, build) for _, kind, build, _ in REALISTIC]


@st.composite
def edited_objects(draw: st.DrawFn) -> tuple[str, Obj]:
    kind, build = draw(st.sampled_from(BASES))
    obj = copy.deepcopy(build())
    for parent, key in edit_places(draw, obj):
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent[key], dict):
            parent[key][draw(KEYS)] = draw(JSON)
        else:
            parent[key] = draw(JSON)
    return kind, obj


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited_objects())
def test_randomly_edited_objects_never_get_a_value_parse_py_would_not_give(case: tuple[str, Obj]) -> None:
    kind, obj = case
    agree(kind, copy.deepcopy(obj))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(edited_objects(), min_size=2, max_size=8))
def test_objects_decoded_one_after_another_with_one_interner_get_their_own_values(
    cases: list[tuple[str, Obj]],
) -> None:
    """The cache converts every object with one interner, which shares what equal objects have in common
    (requests computed once per distinct resource text, toleration tuples): no object may get another's."""
    sharer = Interner()
    for kind, obj in cases:
        expected = exact(kind, obj)
        fast = FAST_KINDS[kind]
        decoded = fast.decode_page(json.dumps({"items": [obj]}).encode())
        if decoded is None:
            continue
        try:
            value = fast.convert(decoded[0][0], sharer)
        except Exception:
            continue
        assert value == expected


def test_pods_of_one_workload_share_their_requests_and_tolerations() -> None:
    sharer = Interner()
    first, second = (FAST_KINDS["Pod"].convert(fast_struct("Pod", real_pod()), sharer) for _ in range(2))
    assert first.requests is second.requests and first.tolerations is second.tolerations
    resized = FAST_KINDS["Pod"].convert(fast_struct("Pod", resized_pod()), sharer)
    assert resized.requests != first.requests


def fast_struct(kind: str, obj: Obj) -> Any:
    decoded = FAST_KINDS[kind].decode_page(json.dumps({"items": [obj]}).encode())
    assert decoded is not None
    return decoded[0][0]


# -- the cache: pages and events with good and bad objects, both ways -------------------------------------


def reflector(kind: str, fast: bool) -> _Reflector:
    spec = next(s for s in RESOURCES if s.kind == kind)
    return _Reflector(
        None,  # type: ignore[arg-type]  # never asked: the tests hand it pages and events
        spec,
        label_selector=None,
        field_selector=None,
        page_size=500,
        watch_timeout=10,
        read_grace=5,
        backoff=Backoff(0.5, 30, 5),
        stop=threading.Event(),
        interner=Interner(),
        wall_clock=time.time,
        fast=fast,
    )


def page_of(kind: str, items: list[Any]) -> bytes:
    return json.dumps({"kind": f"{kind}List", "metadata": {"resourceVersion": "9"}, "items": items}).encode()


def stored(r: _Reflector, body: bytes) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    items: dict[str, Any] = {}
    errors: dict[str, str] = {}
    bad: dict[str, str] = {}
    decoded = r.fast.decode_page(body) if r.fast is not None else None
    if decoded is not None:
        r._store_fast(decoded[0], body, items, errors, bad)
    else:
        r._store_page(body, items, errors, bad)
    return items, errors, bad


def bad_request_pod() -> Obj:
    pod = real_pod()
    pod["metadata"]["name"] = "bad-request"
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    return pod


def nameless_pod() -> Obj:
    pod = plain_pod()
    del pod["metadata"]["name"]
    return pod


def odd_label_pod() -> Obj:
    pod = plain_pod()
    pod["metadata"]["name"] = "odd-label"
    pod["metadata"]["labels"] = {"n": 5}
    return pod


@pytest.mark.parametrize(
    ("case", "items", "fallbacks"),
    [
        (
            "a bad quantity and no name: those two objects go to parse.py",
            [bad_request_pod(), nameless_pod()],
            1,
        ),
        (
            "a label that is a number: the whole page goes to parse.py",
            [bad_request_pod(), odd_label_pod()],
            0,
        ),
        (
            "an item that is no object: the whole page goes to parse.py",
            [bad_request_pod(), "not an object"],
            0,
        ),
    ],
    ids=["per-object", "typed-decode-fails", "not-an-object"],
)
def test_a_page_with_bad_pods_gives_the_same_cache_and_errors_either_way(
    case: str, items: list[Any], fallbacks: int
) -> None:
    body = page_of("Pod", [real_pod(), *items, plain_pod()])
    fast, slow = reflector("Pod", True), reflector("Pod", False)
    fast_result, slow_result = stored(fast, body), stored(slow, body)
    assert fast_result == slow_result
    cached, errors, bad_nodes = fast_result
    assert {"default/bare", "shop/web-7c9d5f6b8-x2x9z"} <= set(cached)
    assert errors["shop/bad-request"].startswith(
        "Pod shop/bad-request: spec.containers[0].resources.requests.cpu"
    )
    assert bad_nodes == {"shop/bad-request": "worker-1"}
    assert fast.stats["fallbacks"] == fallbacks


def test_a_page_of_good_pods_never_leaves_the_fast_path() -> None:
    r = reflector("Pod", True)
    items, errors, _ = stored(r, page_of("Pod", [real_pod(), resized_pod(), terminating_static_pod()]))
    assert len(items) == 3 and not errors and r.stats["fallbacks"] == 0


@pytest.mark.parametrize(
    ("event_type", "obj"),
    [
        ("ADDED", real_pod()),
        ("MODIFIED", resized_pod()),
        ("DELETED", real_pod()),
        ("MODIFIED", {**real_pod(), "spec": {"containers": [{"resources": {"requests": {"cpu": "x"}}}]}}),
        ("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "99"}}),
        ("ERROR", {"kind": "Status", "code": 500, "message": "boom", "reason": "InternalError"}),
    ],
    ids=["added", "modified", "deleted", "bad-quantity", "bookmark", "error"],
)
def test_watch_events_change_the_cache_the_same_way_either_way(event_type: str, obj: Obj) -> None:
    start = page_of("Pod", [real_pod(), plain_pod()])
    results = []
    for fast in (True, False):
        r = reflector("Pod", fast)
        r.items, r.errors, r.bad_pod_nodes = stored(r, start)
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {}).setdefault("resourceVersion", "42")
        line = json.dumps({"type": event_type, "object": obj}).encode()
        try:
            if not r._apply_fast(line):
                r._apply(json.loads(line))
            outcome = "applied"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        results.append((outcome, r.items, r.errors, r.bad_pod_nodes, r.resource_version, r.stats["events"]))
    assert results[0] == results[1]
