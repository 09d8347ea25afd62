"""A deterministic synthetic cluster shaped like a production one, shared by the benchmark scripts.

Why synthetic: the figures must be reproducible at 5,000 nodes without a real cluster, and the shape
must exercise every path a real cycle takes: Deployments (through ReplicaSets), StatefulSets with
volumes, DaemonSet pods on every node, PodDisruptionBudgets, three priority levels, pods with local
storage, a tainted GPU pool reachable only with a toleration and a node selector, and a small share of
hot nodes. Pod and node objects are full Kubernetes JSON (spec, status, conditions, container
statuses) so that LIST payloads and their decoding cost are realistic. ``managedFields`` are left out:
they would make payloads bigger and the ``json.loads`` floor higher, which would flatter the sync
figure.

The cluster is kept as light records (``SynthNode``, ``SynthWorkload``, ``SynthPod``); Kubernetes
dicts are rendered one at a time by ``objects()`` so a process that only needs the usage never holds
150,000 pod dicts. Usage is consistent: a node's usage is the sum of its pods' usage plus a fixed
system overhead, so moving a pod moves its load.
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from descheduler.cluster.types import UsageSample, UsageSnapshot
from descheduler.config.load import EffectiveConfig, load_config_document

Obj = dict[str, Any]

MiB = 1024**2
GiB = 1024**3
NOW = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the benchmarks' clock starts here (usage timestamps, creation times before it)."""

LOW_THRESHOLDS = {"cpu": 45, "memory": 55}
HIGH_THRESHOLDS = {"cpu": 75, "memory": 80}
EXCLUDED_NAMESPACES = ("kube-system", "monitoring")
SYSTEM_CPU_M = 500
SYSTEM_MEMORY = 2 * GiB
"""Kubelet, container runtime and OS: counted in the node's usage, belongs to no pod."""

GPU_TAINT_KEY = "nvidia.com/gpu"
POOL_LABEL = "node.example.com/pool"
PRIORITY_CLASSES = (("", 0, 0.60), ("business-critical", 100_000, 0.25), ("batch-low", 100, 0.15))
"""(name, value, share of workloads). None reaches priorityThreshold: all of them may move."""
REPLICA_CHOICES = (1, 2, 3, 3, 4, 5, 6, 8, 10, 12, 16, 20, 30, 50)
CPU_REQUESTS_M = (100, 250, 250, 500, 500, 1000, 1000, 2000)
MEMORY_REQUESTS = (256 * MiB, 512 * MiB, 512 * MiB, 1 * GiB, 1 * GiB, 2 * GiB, 4 * GiB)
APP_PREFIXES = ("api", "web", "worker", "cache", "search", "billing", "auth", "ingest", "render", "feed")
ZONES = ("zone-a", "zone-b", "zone-c")


ADMISSION_TOLERATIONS: tuple[dict[str, Any], ...] = tuple(
    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
)
"""What kube-apiserver's DefaultTolerationSeconds admission adds to every pod."""


@dataclass(frozen=True)
class SynthSpec:
    """The size and shape of a synthetic cluster; the same spec and seed give the same cluster."""

    nodes: int = 500
    pods_per_node: int = 30
    hot_fraction: float = 0.05
    """Share of (general-pool) nodes made hot: CPU 80-92 % of allocatable, a third also memory-hot."""
    gpu_fraction: float = 0.04
    seed: int = 1
    low_fraction: float = 0.0
    """Share of all nodes (general pool, not hot) made low: CPU 15-40 %, memory 20-50 % of allocatable.
    0 leaves every non-hot node on the default distribution (about 15 % of them end up low)."""
    node_cpu_m: int = 32_000
    node_memory: int = 128 * GiB


@dataclass(slots=True)
class SynthNode:
    name: str
    zone: str
    gpu: bool
    cpu_m: int
    memory: int
    hot: bool = False
    low: bool = False


@dataclass(slots=True)
class SynthWorkload:
    """A Deployment (rendered with its ReplicaSet) or a StatefulSet, and the shape of its pods."""

    kind: str
    namespace: str
    name: str
    uid: str
    replicas: int
    cpu_request_m: int
    memory_request: int
    priority_class: str
    priority: int
    local_storage: bool
    pdb: bool
    gpu: bool
    cpu_ratio: float
    """Typical CPU usage as a share of the request (before the node's load shapes it)."""
    memory_ratio: float
    rs_name: str = ""
    rs_uid: str = ""
    created: float = 0.0


@dataclass(slots=True)
class SynthPod:
    namespace: str
    name: str
    uid: str
    node: str
    workload: SynthWorkload | None
    """None for DaemonSet pods."""
    daemonset: str = ""
    cpu_request_m: int = 0
    memory_request: int = 0
    cpu_usage_m: int = 0
    memory_usage: int = 0
    created: float = 0.0
    ip: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class SynthCluster:
    spec: SynthSpec
    nodes: list[SynthNode]
    workloads: list[SynthWorkload]
    pods: list[SynthPod]
    namespaces: list[str]
    daemonset_uids: dict[str, str] = field(default_factory=dict)

    @property
    def hot_nodes(self) -> list[str]:
        return [n.name for n in self.nodes if n.hot]

    def node_usage(self) -> dict[str, dict[str, int]]:
        """Usage per node: its pods' usage plus the system overhead."""
        usage = {n.name: {"cpu": SYSTEM_CPU_M, "memory": SYSTEM_MEMORY} for n in self.nodes}
        for pod in self.pods:
            entry = usage[pod.node]
            entry["cpu"] += pod.cpu_usage_m
            entry["memory"] += pod.memory_usage
        return usage

    def pod_usage(self) -> dict[str, dict[str, int]]:
        return {p.key: {"cpu": p.cpu_usage_m, "memory": p.memory_usage} for p in self.pods}

    def objects(self) -> Iterator[Obj]:
        """Every object as Kubernetes JSON: namespaces, nodes, workloads, PDBs, then pods."""
        for name in self.namespaces:
            yield namespace_object(name)
        for node in self.nodes:
            yield node_object(node)
        for workload in self.workloads:
            yield from workload_objects(workload)
            if workload.pdb:
                yield pdb_object(workload)
        for pod in self.pods:
            yield pod_object(pod, self.daemonset_uids)


class _Ids:
    """Deterministic uids and name suffixes from the spec's seed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def suffix(self, length: int) -> str:
        return "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))


def _weighted_priority(rng: random.Random) -> tuple[str, int]:
    roll = rng.random()
    for name, value, share in PRIORITY_CLASSES:
        if roll < share:
            return name, value
        roll -= share
    return PRIORITY_CLASSES[0][0], PRIORITY_CLASSES[0][1]


def _make_workloads(
    rng: random.Random, ids: _Ids, slots: int, namespaces: list[str], gpu: bool, start: int
) -> list[SynthWorkload]:
    """Workloads whose replicas add up to exactly ``slots``."""
    out: list[SynthWorkload] = []
    remaining = slots
    index = start
    while remaining > 0:
        kind = "StatefulSet" if rng.random() < 0.10 else "Deployment"
        replicas = min(rng.choice(REPLICA_CHOICES), remaining)
        remaining -= replicas
        index += 1
        prefix = "gpu-train" if gpu else rng.choice(APP_PREFIXES)
        namespace = "monitoring" if rng.random() < 0.01 else rng.choice(namespaces)
        priority_class, priority = _weighted_priority(rng)
        workload = SynthWorkload(
            kind=kind,
            namespace=namespace,
            name=f"{prefix}-{index:05d}",
            uid=ids.uid(),
            replicas=replicas,
            cpu_request_m=rng.choice(CPU_REQUESTS_M) * (4 if gpu else 1),
            memory_request=rng.choice(MEMORY_REQUESTS) * (4 if gpu else 1),
            priority_class=priority_class,
            priority=priority,
            local_storage=kind == "Deployment" and rng.random() < 0.10,
            pdb=replicas >= 2 and rng.random() < 0.40,
            gpu=gpu,
            cpu_ratio=rng.uniform(0.3, 1.1),
            memory_ratio=rng.uniform(0.4, 0.95),
            created=NOW - rng.uniform(2, 90) * 86400,
        )
        if kind == "Deployment":
            workload.rs_name = f"{workload.name}-{ids.suffix(10)}"
            workload.rs_uid = ids.uid()
        out.append(workload)
    return out


def _target(rng: random.Random, hot: bool, low: bool = False) -> tuple[float, float]:
    """Target (cpu, memory) utilisation of a node as a fraction of allocatable."""
    if low:
        return rng.uniform(0.15, 0.40), rng.uniform(0.20, 0.50)
    if hot:
        cpu = rng.uniform(0.80, 0.92)
        memory = (
            rng.uniform(0.82, 0.90) if rng.random() < 1 / 3 else min(0.76, max(0.15, rng.gauss(0.5, 0.1)))
        )
        return cpu, memory
    return min(0.72, max(0.15, rng.gauss(0.55, 0.10))), min(0.76, max(0.15, rng.gauss(0.5, 0.10)))


def _shape_usage(rng: random.Random, node: SynthNode, pods: list[SynthPod]) -> None:
    """Set pod usage so the node lands near its target (pods on a hot node are busier than elsewhere)."""
    cpu_target, memory_target = _target(rng, node.hot, node.low)
    base_cpu = {p.uid: 0.0 for p in pods}
    base_memory = {p.uid: 0.0 for p in pods}
    fixed_cpu = SYSTEM_CPU_M
    fixed_memory = SYSTEM_MEMORY
    for pod in pods:
        if pod.workload is None:  # DaemonSet pods: small, fixed
            pod.cpu_usage_m = rng.randint(30, 150)
            pod.memory_usage = rng.randint(40, 200) * MiB
            fixed_cpu += pod.cpu_usage_m
            fixed_memory += pod.memory_usage
        else:
            jitter = rng.uniform(0.8, 1.2)
            base_cpu[pod.uid] = pod.cpu_request_m * pod.workload.cpu_ratio * jitter
            base_memory[pod.uid] = pod.memory_request * pod.workload.memory_ratio * jitter
    total_cpu = sum(base_cpu.values()) or 1.0
    total_memory = sum(base_memory.values()) or 1.0
    cpu_scale = max(0.05, (cpu_target * node.cpu_m - fixed_cpu) / total_cpu)
    memory_scale = max(0.05, (memory_target * node.memory - fixed_memory) / total_memory)
    for pod in pods:
        if pod.workload is not None:
            pod.cpu_usage_m = max(1, round(base_cpu[pod.uid] * cpu_scale))
            pod.memory_usage = max(MiB, round(base_memory[pod.uid] * memory_scale))


def generate(spec: SynthSpec) -> SynthCluster:
    """Build the cluster for ``spec``: exactly ``nodes * pods_per_node`` pods, two DaemonSet pods per node."""
    rng = random.Random(spec.seed)
    ids = _Ids(rng)
    gpu_count = round(spec.nodes * spec.gpu_fraction) if spec.nodes >= 10 else 0
    nodes = [
        SynthNode(
            name=f"node-{i:05d}",
            zone=ZONES[i % len(ZONES)],
            gpu=i >= spec.nodes - gpu_count,
            cpu_m=spec.node_cpu_m,
            memory=spec.node_memory,
        )
        for i in range(spec.nodes)
    ]
    general = [n for n in nodes if not n.gpu]
    hot_count = min(len(general), max(1, round(spec.nodes * spec.hot_fraction)))
    for node in rng.sample(general, hot_count):
        node.hot = True
    if spec.low_fraction > 0:  # drawn only when asked, so the default cluster stays the same
        calm = [n for n in general if not n.hot]
        for node in rng.sample(calm, min(len(calm), round(spec.nodes * spec.low_fraction))):
            node.low = True
    namespaces = [f"team-{i:03d}" for i in range(max(4, spec.nodes // 25))]
    daemonsets = {"kube-system/kube-proxy": ids.uid(), "monitoring/node-exporter": ids.uid()}
    per_node = max(0, spec.pods_per_node - len(daemonsets))
    general_workloads = _make_workloads(rng, ids, per_node * len(general), namespaces, False, 0)
    gpu_workloads = _make_workloads(rng, ids, per_node * gpu_count, namespaces, True, len(general_workloads))
    pods_by_node: dict[str, list[SynthPod]] = {n.name: [] for n in nodes}
    for pool_nodes, workloads in ((general, general_workloads), (nodes[len(general) :], gpu_workloads)):
        slots = [n.name for n in pool_nodes for _ in range(per_node)]
        rng.shuffle(slots)
        members = [(w, ordinal) for w in workloads for ordinal in range(w.replicas)]
        for (workload, ordinal), node_name in zip(members, slots, strict=True):
            if workload.kind == "StatefulSet":
                name = f"{workload.name}-{ordinal}"
            else:
                name = f"{workload.rs_name}-{ids.suffix(5)}"
            pods_by_node[node_name].append(
                SynthPod(
                    namespace=workload.namespace,
                    name=name,
                    uid=ids.uid(),
                    node=node_name,
                    workload=workload,
                    cpu_request_m=workload.cpu_request_m,
                    memory_request=workload.memory_request,
                    created=workload.created + rng.uniform(0, NOW - workload.created - 60),
                )
            )
    for node in nodes:
        for ds in daemonsets:
            namespace, ds_name = ds.split("/")
            pods_by_node[node.name].append(
                SynthPod(
                    namespace=namespace,
                    name=f"{ds_name}-{ids.suffix(5)}",
                    uid=ids.uid(),
                    node=node.name,
                    workload=None,
                    daemonset=ds_name,
                    cpu_request_m=100,
                    memory_request=128 * MiB,
                    created=NOW - 120 * 86400,
                )
            )
    pods: list[SynthPod] = []
    for number, node in enumerate(nodes):
        on_node = pods_by_node[node.name]
        _shape_usage(rng, node, on_node)
        for slot, pod in enumerate(on_node):
            pod.ip = f"10.{number // 256 % 256}.{number % 256}.{slot + 2}"
        pods.extend(on_node)
    return SynthCluster(
        spec=spec,
        nodes=nodes,
        workloads=general_workloads + gpu_workloads,
        pods=pods,
        namespaces=["kube-system", "monitoring", *namespaces],
        daemonset_uids=daemonsets,
    )


# -- usage and configuration ------------------------------------------------------------------------


def usage_snapshot(
    node_usage: dict[str, dict[str, int]], pod_usage: dict[str, dict[str, int]], now: float
) -> UsageSnapshot:
    """The planner's usage input, every sample measured at ``now``."""
    return UsageSnapshot(
        nodes={name: UsageSample(dict(u), now) for name, u in node_usage.items()},
        pods={key: UsageSample(dict(u), now) for key, u in pod_usage.items()},
    )


def config_document(
    *,
    consecutive_abnormalities: int = 1,
    low: dict[str, int] | None = None,
    high: dict[str, int] | None = None,
    migration: Obj | None = None,
) -> Obj:
    """A Koordinator-style configuration: thresholds 45/55 low and 75/80 high, system namespaces excluded."""
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "deschedulingInterval": "60s",
        "profiles": [
            {
                "name": "benchmark",
                "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                "pluginConfig": [
                    {
                        "name": "LowNodeLoad",
                        "args": {
                            "lowThresholds": dict(low or LOW_THRESHOLDS),
                            "highThresholds": dict(high or HIGH_THRESHOLDS),
                            "anomalyCondition": {"consecutiveAbnormalities": consecutive_abnormalities},
                            "evictableNamespaces": {"exclude": list(EXCLUDED_NAMESPACES)},
                            "nodeFit": True,
                        },
                    },
                    {"name": "MigrationController", "args": dict(migration or {})},
                ],
            }
        ],
    }


def effective_config(**kwargs: Any) -> EffectiveConfig:
    return load_config_document(config_document(**kwargs), "<benchmark>")


# -- Kubernetes objects ---------------------------------------------------------------------------------


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu(millicores: int) -> str:
    return f"{millicores // 1000}" if millicores % 1000 == 0 else f"{millicores}m"


def _memory(amount: int) -> str:
    return f"{amount // GiB}Gi" if amount % GiB == 0 else f"{amount // MiB}Mi"


def namespace_object(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def node_object(node: SynthNode) -> Obj:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m6i.8xlarge",
        "topology.kubernetes.io/region": "region-1",
        "topology.kubernetes.io/zone": node.zone,
        POOL_LABEL: "gpu" if node.gpu else "general",
    }
    capacity = {
        "cpu": _cpu(node.cpu_m),
        "memory": _memory(node.memory),
        "pods": "110",
        "ephemeral-storage": "200Gi",
        "hugepages-2Mi": "0",
    }
    conditions = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}", "message": f"kubelet has {reason}"}
        for kind, reason in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    )
    for cond in conditions:
        cond["lastHeartbeatTime"] = _time(NOW - 30)
        cond["lastTransitionTime"] = _time(NOW - 120 * 86400)
    spec: Obj = {
        "podCIDR": f"10.{zlib.crc32(node.name.encode()) % 256}.0.0/24",
        "providerID": f"aws:///{node.zone}/i-{node.name}",
    }
    if node.gpu:
        spec["taints"] = [{"key": GPU_TAINT_KEY, "value": "present", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, node.name)),
            "creationTimestamp": _time(NOW - 120 * 86400),
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"172.16.{zlib.crc32(node.name.encode()) % 256}.10"},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": node.name,
                "systemUUID": node.name,
                "bootID": node.name,
                "kernelVersion": "6.1.0-28-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.32.4",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {
                    "names": [
                        f"registry.example.com/app/{p}@sha256:{i:064x}",
                        f"registry.example.com/app/{p}:v1",
                    ],
                    "sizeBytes": 50_000_000 + i,
                }
                for i, p in enumerate(APP_PREFIXES[:6])
            ],
        },
    }


def _template(workload: SynthWorkload) -> Obj:
    """The pod template of a workload (also the spec its pods are rendered from)."""
    container: Obj = {
        "name": "app",
        "image": f"registry.example.com/app/{workload.name.rsplit('-', 1)[0]}:v1.4.2",
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
        ],
        "resources": {
            "requests": {"cpu": _cpu(workload.cpu_request_m), "memory": _memory(workload.memory_request)},
            "limits": {"cpu": _cpu(workload.cpu_request_m * 2), "memory": _memory(workload.memory_request)},
        },
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "periodSeconds": 10,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    spec: Obj = {
        "containers": [container],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
    }
    if workload.priority_class:
        spec["priorityClassName"] = workload.priority_class
    if workload.local_storage:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    if workload.kind == "StatefulSet":
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    if workload.gpu:
        spec["nodeSelector"] = {POOL_LABEL: "gpu"}
        spec["tolerations"] = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"labels": {"app": workload.name}}, "spec": spec}


def workload_objects(workload: SynthWorkload) -> list[Obj]:
    meta: Obj = {
        "name": workload.name,
        "namespace": workload.namespace,
        "uid": workload.uid,
        "creationTimestamp": _time(workload.created),
        "generation": 1,
        "labels": {"app": workload.name},
    }
    status = {
        "observedGeneration": 1,
        "replicas": workload.replicas,
        "readyReplicas": workload.replicas,
        "availableReplicas": workload.replicas,
    }
    selector = {"matchLabels": {"app": workload.name}}
    if workload.kind == "StatefulSet":
        return [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": meta,
                "spec": {
                    "replicas": workload.replicas,
                    "selector": selector,
                    "serviceName": workload.name,
                    "template": _template(workload),
                    "podManagementPolicy": "OrderedReady",
                },
                "status": status,
            }
        ]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**meta, "annotations": {"deployment.kubernetes.io/revision": "1"}},
        "spec": {
            "replicas": workload.replicas,
            "selector": selector,
            "template": _template(workload),
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
        },
        "status": {**status, "updatedReplicas": workload.replicas},
    }
    hash_label = workload.rs_name.rsplit("-", 1)[1]
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": workload.rs_name,
            "namespace": workload.namespace,
            "uid": workload.rs_uid,
            "creationTimestamp": _time(workload.created),
            "generation": 1,
            "labels": {"app": workload.name, "pod-template-hash": hash_label},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": workload.name,
                    "uid": workload.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": workload.replicas,
            "selector": {"matchLabels": {"app": workload.name, "pod-template-hash": hash_label}},
            "template": _template(workload),
        },
        "status": {**status, "fullyLabeledReplicas": workload.replicas},
    }
    return [deployment, replica_set]


def pdb_object(workload: SynthWorkload) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": workload.name,
            "namespace": workload.namespace,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, workload.uid)),
            "creationTimestamp": _time(workload.created),
            "generation": 1,
        },
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": workload.name}}},
        "status": {
            "observedGeneration": 1,
            "currentHealthy": workload.replicas,
            "desiredHealthy": workload.replicas - 1,
            "disruptionsAllowed": 1,
            "expectedPods": workload.replicas,
        },
    }


def _daemonset_template(name: str) -> Obj:
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": name,
                    "image": f"registry.k8s.io/{name}:v1.32.4",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": True}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [{"name": "host", "hostPath": {"path": "/", "type": ""}}],
            "hostNetwork": True,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
        },
    }


def pod_object(pod: SynthPod, daemonset_uids: dict[str, str] | None = None) -> Obj:
    """A running pod as the API server returns it (status filled in by the kubelet)."""
    workload = pod.workload
    labels: Obj
    if workload is None:
        template = _daemonset_template(pod.daemonset)
        labels = {
            "app": pod.daemonset,
            "controller-revision-hash": "6d4c8b9f7",
            "pod-template-generation": "1",
        }
        uid = (daemonset_uids or {}).get(f"{pod.namespace}/{pod.daemonset}", "")
        owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": pod.daemonset, "uid": uid}
        priority = 2_000_001_000
    else:
        template = _template(workload)
        labels = {"app": workload.name}
        if workload.kind == "StatefulSet":
            labels["statefulset.kubernetes.io/pod-name"] = pod.name
            labels["controller-revision-hash"] = f"{workload.name}-7c9d5f6b8"
            owner = {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": workload.name,
                "uid": workload.uid,
            }
        else:
            labels["pod-template-hash"] = workload.rs_name.rsplit("-", 1)[1]
            owner = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": workload.rs_name,
                "uid": workload.rs_uid,
            }
        priority = workload.priority
    owner_ref: Obj = {**owner, "controller": True, "blockOwnerDeletion": True}
    spec: Obj = dict(template["spec"])
    spec["containers"] = [dict(c) for c in spec["containers"]]
    spec["nodeName"] = pod.node
    spec["priority"] = priority
    spec["enableServiceLinks"] = True
    spec["preemptionPolicy"] = "PreemptLowerPriority"
    spec["tolerations"] = [*spec.get("tolerations", []), *(dict(t) for t in ADMISSION_TOLERATIONS)]
    spec["volumes"] = [
        *spec.get("volumes", []),
        {
            "name": "kube-api-access",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
            },
        },
    ]
    started = _time(pod.created + 5)
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    statuses = [
        {
            "name": c["name"],
            "state": {"running": {"startedAt": started}},
            "lastState": {},
            "ready": True,
            "restartCount": 0,
            "image": c["image"],
            "imageID": f"{c['image'].split(':')[0]}@sha256:{zlib.crc32(c['image'].encode()):064x}"[:200],
            "containerID": f"containerd://{pod.uid.replace('-', '')}{pod.uid.replace('-', '')}",
            "started": True,
        }
        for c in spec["containers"]
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "generateName": pod.name.rsplit("-", 1)[0] + "-",
            "namespace": pod.namespace,
            "uid": pod.uid,
            "creationTimestamp": _time(pod.created),
            "labels": labels,
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [owner_ref],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": "172.16.0.10",
            "hostIPs": [{"ip": "172.16.0.10"}],
            "podIP": pod.ip,
            "podIPs": [{"ip": pod.ip}],
            "startTime": _time(pod.created),
            "containerStatuses": statuses,
            "qosClass": "Burstable",
        },
    }
