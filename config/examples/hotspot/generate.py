#!/usr/bin/env python3
"""Write the bundled ``hotspot`` example: a 16-node shop cluster with two hotspots and one false alarm.

Run from the repository root: ``python config/examples/hotspot/generate.py [OUTPUT_DIR]``. The output is fully
deterministic (fixed seed, fixed timestamps), so ``cluster.yaml`` and ``usage.yaml`` only change when
this script does. The story the example tells, cycle by cycle (``simulate --cycles 6``):

- worker-03's CPU and worker-05's memory run above their high thresholds every cycle: with
  ``consecutiveAbnormalities: 3`` both become hotspots in cycle 3, lose two pods each (the
  ``maxMigratingPerNode`` limit), start counting again, and lose more in cycle 6 if still hot;
- worker-09 spikes for two cycles and calms down: never acted on;
- pods that must not move stay, each with its reason: DaemonSets, kube-system, a single-replica
  deployment, a bare debug pod, Job pods, pods with local scratch storage, PDB-protected ones;
- worker-07 is cordoned (never a destination), worker-12 is NotReady (skipped), the GPU nodes are
  tainted (only tolerating pods may land there).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SEED = 20260101
CREATED = "2026-01-01T00:00:00Z"

WORKERS = [f"worker-{i:02d}" for i in range(1, 13)]
GPUS = ["gpu-01", "gpu-02"]
ZONES = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]

# Measured (cpu %, memory %) of each node: its pods' usage is scaled to land there. What makes a
# hotspot is busy pods (a hot shard, a cache that grew), not a scheduling mistake.
TARGET = {
    "worker-01": (18, 22),
    "worker-02": (14, 18),
    "worker-03": (79, 47),
    "worker-04": (47, 41),
    "worker-05": (52, 77),
    "worker-06": (24, 27),
    "worker-07": (41, 36),
    "worker-08": (44, 52),
    "worker-09": (38, 43),
    "worker-10": (21, 25),
    "worker-11": (26, 29),
    "worker-12": (33, 31),
    "gpu-01": (36, 41),
    "gpu-02": (31, 39),
}
SPIKE_CPU = 5400  # millicores worker-09 gains for two cycles
LIGHT = {n for n, (c, _) in TARGET.items() if c < 30 and n.startswith("worker")}


def workload(
    name: str,
    ns: str,
    kind: str,
    replicas: int,
    req: tuple[int, int],
    cpu: tuple[int, int],
    mem: tuple[int, int],
    **extra: bool,
) -> dict[str, Any]:
    """A workload: requests (cpu m, memory Mi) and the range its pods' usage is drawn from."""
    return {
        "name": name,
        "ns": ns,
        "kind": kind,
        "replicas": replicas,
        "req": req,
        "use": (cpu, mem),
        **extra,
    }


WORKLOADS: list[dict[str, Any]] = [
    workload("frontend", "shop", "Deployment", 36, (250, 256), (150, 450), (180, 320)),
    workload("api", "shop", "Deployment", 42, (500, 512), (300, 900), (350, 700)),
    workload("checkout", "shop", "Deployment", 12, (500, 512), (200, 700), (300, 600)),
    workload("cart", "shop", "Deployment", 18, (250, 512), (100, 400), (300, 600)),
    workload("catalog", "shop", "Deployment", 24, (250, 1024), (100, 500), (700, 1300)),
    workload("search", "shop", "Deployment", 20, (1000, 1024), (500, 1500), (600, 1200)),
    workload("recommendations", "shop", "Deployment", 12, (1000, 2048), (400, 1400), (1200, 2400)),
    workload("auth", "identity", "Deployment", 8, (250, 256), (100, 300), (150, 300)),
    workload("notifications", "identity", "Deployment", 6, (100, 128), (50, 200), (80, 160)),
    workload("image-resizer", "media", "Deployment", 14, (500, 512), (300, 1100), (300, 700), scratch=True),
    workload("report-builder", "backoffice", "Deployment", 1, (1000, 2048), (800, 1500), (1500, 2500)),
    workload("admin-console", "backoffice", "Deployment", 2, (100, 256), (50, 150), (150, 250)),
    workload("postgres", "data", "StatefulSet", 3, (2000, 8192), (800, 2500), (6000, 9000), pvc=True),
    workload("redis", "data", "StatefulSet", 6, (500, 4096), (200, 700), (2500, 4500), pvc=True),
    workload("kafka", "data", "StatefulSet", 3, (1000, 4096), (500, 1500), (3000, 5000), pvc=True),
    workload("coredns", "kube-system", "Deployment", 2, (100, 70), (20, 80), (30, 60)),
    workload("ml-inference", "ml", "Deployment", 4, (4000, 16384), (2000, 6000), (8000, 14000), gpu=True),
    workload("nightly-etl", "backoffice", "Job", 3, (1000, 2048), (600, 1200), (1000, 2000)),
]
DAEMONSETS = [
    ("node-exporter", "monitoring", (100, 64), ((30, 80), (30, 60))),
    ("fluent-bit", "logging", (100, 128), ((40, 120), (60, 120))),
    ("kube-proxy", "kube-system", (100, 64), ((20, 60), (30, 50))),
]
PDBS = [
    ("frontend", "shop", 3),
    ("api", "shop", 4),
    ("checkout", "shop", 1),
    ("search", "shop", 2),
    ("postgres", "data", 0),
]


SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet Kubernetes uses for generated names


def suffix(rng: random.Random, length: int = 5) -> str:
    return "".join(rng.choice(SUFFIX_CHARS) for _ in range(length))


def uid(kind: str, namespace: str, name: str) -> str:
    return f"{kind.lower()}-{namespace}-{name}"


def owner(kind: str, namespace: str, name: str) -> dict[str, Any]:
    api = "batch/v1" if kind == "Job" else "apps/v1"
    return {
        "apiVersion": api,
        "kind": kind,
        "name": name,
        "uid": uid(kind, namespace, name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def node_object(name: str, index: int) -> dict[str, Any]:
    gpu = name in GPUS
    cpu, memory = ("32", "128Gi") if gpu else ("16", "64Gi")
    labels = {
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/zone": ZONES[index % 3],
        "node.kubernetes.io/instance-type": "g5.8xlarge" if gpu else "m6i.4xlarge",
    }
    spec: dict[str, Any] = {}
    if gpu:
        labels["accelerator"] = "nvidia"
        spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    if name == "worker-07":
        spec["unschedulable"] = True
        spec["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    ready = "False" if name == "worker-12" else "True"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod_object(
    name: str,
    namespace: str,
    node: str,
    labels: dict[str, str],
    req: tuple[int, int],
    owner_ref: dict[str, Any] | None,
    created: str,
    extra: dict[str, Any],
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid("pod", namespace, name),
        "creationTimestamp": created,
        "labels": labels,
    }
    if owner_ref is not None:
        meta["ownerReferences"] = [owner_ref]
    spec: dict[str, Any] = {
        "nodeName": node,
        "schedulerName": "default-scheduler",
        "containers": [
            {
                "name": "main",
                "image": f"registry.example/{labels.get('app', name)}:1",
                "resources": {"requests": {"cpu": f"{req[0]}m", "memory": f"{req[1]}Mi"}},
            }
        ],
    }
    if extra.get("scratch"):
        spec["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "2Gi"}}]
    if extra.get("pvc"):
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}]
    if extra.get("gpu"):
        spec["nodeSelector"] = {"accelerator": "nvidia"}
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if extra.get("daemon"):
        spec["tolerations"] = [{"operator": "Exists"}]
    if extra.get("critical"):
        spec["priorityClassName"] = "system-node-critical"
        spec["priority"] = 2000001000
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "True"}],
            "startTime": created,
        },
    }


def workload_objects(w: dict[str, Any]) -> list[dict[str, Any]]:
    name, ns, kind, replicas = w["name"], w["ns"], w["kind"], w["replicas"]
    selector = {"matchLabels": {"app": name}}
    if kind == "Job":
        return []  # Job objects are not read by the planner: their pods have no known expected replicas
    meta = {"name": name, "namespace": ns, "uid": uid(kind, ns, name)}
    spec = {"replicas": replicas, "selector": selector, "template": {"metadata": {"labels": {"app": name}}}}
    objects = [{"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}]
    if kind == "Deployment":
        rs_meta = {
            "name": f"{name}-5d8f7c",
            "namespace": ns,
            "uid": uid("ReplicaSet", ns, f"{name}-5d8f7c"),
            "ownerReferences": [owner("Deployment", ns, name)],
        }
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": rs_meta,
                "spec": spec,
                "status": {"replicas": replicas, "readyReplicas": replicas},
            }
        )
    return objects


def main(out: Path = HERE) -> None:
    rng = random.Random(SEED)
    nodes = WORKERS + GPUS
    objects: list[dict[str, Any]] = [node_object(n, i) for i, n in enumerate(nodes)]
    for ns in (
        "shop",
        "identity",
        "media",
        "backoffice",
        "data",
        "ml",
        "monitoring",
        "logging",
        "kube-system",
    ):
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    pods: list[tuple[dict[str, Any], tuple[int, int]]] = []
    schedulable = [n for n in WORKERS if n not in ("worker-07", "worker-12")]
    # Lightly loaded nodes get fewer pods: they are where the hotspots' pods can go.
    weights = {n: (1 if n in LIGHT else 3) for n in schedulable}
    weights["worker-07"] = 2  # cordoned after its pods were placed
    weights["worker-12"] = 2
    placement = sorted(weights)
    minute = 0
    for w in WORKLOADS:
        objects += workload_objects(w)
        for i in range(w["replicas"]):
            minute += 1
            created = f"2026-01-0{1 + minute // 1440}T{(minute // 60) % 24:02d}:{minute % 60:02d}:00Z"
            if w.get("gpu"):
                node = GPUS[i % 2]
            else:
                node = rng.choices(placement, weights=[weights[n] for n in placement])[0]
            if w["kind"] == "Deployment":
                name = f"{w['name']}-5d8f7c-{suffix(rng)}"
                ref: dict[str, Any] | None = owner("ReplicaSet", w["ns"], f"{w['name']}-5d8f7c")
            elif w["kind"] == "StatefulSet":
                name = f"{w['name']}-{i}"
                ref = owner("StatefulSet", w["ns"], w["name"])
            else:
                name = f"{w['name']}-29172{i}-{suffix(rng)}"
                ref = owner("Job", w["ns"], w["name"])
            (cpu_lo, cpu_hi), (mem_lo, mem_hi) = w["use"]
            cpu, mem = rng.randint(cpu_lo, cpu_hi), rng.randint(mem_lo, mem_hi)
            pods.append(
                (pod_object(name, w["ns"], node, {"app": w["name"]}, w["req"], ref, created, w), (cpu, mem))
            )
    scalable = len(pods)
    for ds_name, ns, req, ((cpu_lo, cpu_hi), (mem_lo, mem_hi)) in DAEMONSETS:
        meta = {"name": ds_name, "namespace": ns, "uid": uid("DaemonSet", ns, ds_name)}
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": meta,
                "spec": {"selector": {"matchLabels": {"app": ds_name}}},
            }
        )
        for node in nodes:
            name = f"{ds_name}-{suffix(rng)}"
            extra = {"daemon": True, "critical": ds_name == "kube-proxy"}
            usage = (rng.randint(cpu_lo, cpu_hi), rng.randint(mem_lo, mem_hi))
            pods.append(
                (
                    pod_object(
                        name, ns, node, {"app": ds_name}, req, owner("DaemonSet", ns, ds_name), CREATED, extra
                    ),
                    usage,
                )
            )
    debug = pod_object(
        "debug-shell",
        "shop",
        "worker-03",
        {"app": "debug-shell"},
        (100, 128),
        None,
        "2026-01-02T09:30:00Z",
        {},
    )
    pods.append((debug, (900, 300)))
    objects += [p for p, _ in pods]
    for app, ns, allowed in PDBS:
        # postgres keeps all 3 replicas up (minAvailable 3: no disruption allowed); the others allow a few.
        spec: dict[str, Any] = {"minAvailable": 3} if app == "postgres" else {"maxUnavailable": allowed}
        spec["selector"] = {"matchLabels": {"app": app}}
        objects.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": f"{app}-pdb", "namespace": ns},
                "spec": spec,
                "status": {"disruptionsAllowed": allowed},
            }
        )

    # Scale workload pods (not DaemonSets, not the debug pod) so each node lands on its target.
    fixed_cpu = dict.fromkeys(nodes, 600)  # kubelet, container runtime and the OS
    fixed_mem = dict.fromkeys(nodes, 2048)
    raw_cpu = dict.fromkeys(nodes, 0)
    raw_mem = dict.fromkeys(nodes, 0)
    for i, (obj, (cpu, mem)) in enumerate(pods):
        node = obj["spec"]["nodeName"]
        if i < scalable:
            raw_cpu[node] += cpu
            raw_mem[node] += mem
        else:
            fixed_cpu[node] += cpu
            fixed_mem[node] += mem
    alloc = {n: (32000, 131072) if n in GPUS else (16000, 65536) for n in nodes}
    scale = {
        n: (
            max(0.05, (TARGET[n][0] / 100 * alloc[n][0] - fixed_cpu[n]) / max(1, raw_cpu[n])),
            max(0.05, (TARGET[n][1] / 100 * alloc[n][1] - fixed_mem[n]) / max(1, raw_mem[n])),
        )
        for n in nodes
    }
    for i, (obj, (cpu, mem)) in enumerate(pods[:scalable]):
        cpu_scale, mem_scale = scale[obj["spec"]["nodeName"]]
        pods[i] = (obj, (max(1, int(cpu * cpu_scale)), max(1, int(mem * mem_scale))))

    usage_pods: dict[str, dict[str, str]] = {}
    node_cpu = dict.fromkeys(nodes, 600)
    node_mem = dict.fromkeys(nodes, 2048)
    for obj, (cpu, mem) in pods:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        usage_pods[key] = {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}
        node_cpu[obj["spec"]["nodeName"]] += cpu
        node_mem[obj["spec"]["nodeName"]] += mem
    usage_nodes: dict[str, Any] = {}
    for node in nodes:
        sample = {"cpu": f"{node_cpu[node]}m", "memory": f"{node_mem[node]}Mi"}
        if node == "worker-09":
            # A two-cycle spike (a batch of retries), then back to normal: the anomaly condition ignores it.
            spike = {"cpu": f"{node_cpu[node] + SPIKE_CPU}m", "memory": f"{node_mem[node]}Mi"}
            usage_nodes[node] = [spike, dict(spike), sample]  # two objects: YAML aliases are refused
        elif node == "worker-12":
            usage_nodes[node] = {**sample, "age": "10m"}
        else:
            usage_nodes[node] = sample

    header = "# Generated by config/examples/hotspot/generate.py: edit the script, not this file.\n"
    with (out / "cluster.yaml").open("w", encoding="utf-8") as stream:
        stream.write(header)
        stream.write(yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False))
    with (out / "usage.yaml").open("w", encoding="utf-8") as stream:
        stream.write(header)
        stream.write(yaml.safe_dump({"nodes": usage_nodes, "pods": usage_pods}, sort_keys=False))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
