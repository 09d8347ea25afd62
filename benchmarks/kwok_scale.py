"""A scale run on the real control plane: kwok nodes, pods placed up front, ``descheduler run`` against it
(issue 15, part 5).

    python -m benchmarks.kwok_scale --nodes 1000 --pods 30000

Starts etcd, kube-apiserver (with an audit log of the descheduler's own requests), the controller manager,
kube-scheduler and kwok on 127.0.0.1 (``tests/controlplane``); creates the kwok nodes and the workloads
(Deployment -> ReplicaSet -> pods, with ``spec.nodeName`` already set so kube-scheduler is not the
bottleneck, PodDisruptionBudgets on part of them) by concurrent POSTs; serves every node's and pod's usage
to a real Prometheus (Debian's) from a lean exporter in this process; then runs ``descheduler run
--dry-run`` as its own process, authenticated as its own ServiceAccount, for a few steady cycles.

Every figure is taken outside the descheduler: the sync time from its own log's timestamps (start to the
last initial LIST), memory and CPU from ``/proc``, its API requests from the API server's audit log (by
user; ``apiserver_request_total`` has no user or user-agent label), Prometheus' work from the answers
to its queries (it asks with ``stats=all``; a proxy in this process reads the stats on the way back),
the control plane's memory from ``/proc``.

Not part of CI (it needs the control-plane binaries and minutes of machine time).

While the objects are created, a ValidatingAdmissionPolicy lets only the loader's ServiceAccount create
ReplicaSets and pods in the benchmark's namespaces: otherwise the Deployment and ReplicaSet controllers
would race the loader and create (and then delete) pods of their own. The policy is deleted before the
descheduler starts; from then on the cluster is an ordinary one whose controllers find nothing to do.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import os
import random
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from benchmarks.audit import AuditEvent, parse_audit
from benchmarks.common import summary_line

if TYPE_CHECKING:
    from tests.controlplane.cluster import ControlPlane

Obj = dict[str, Any]

BENCH_NAMESPACE = "kwok-scale"
"""The descheduler's ServiceAccount, Lease and migration records, and the loader's ServiceAccount."""
DESCHEDULER_SA = "load-aware-descheduler"
LOADER_SA = "kwok-scale-loader"
BENCH_LABEL = "kwok-scale.bench/team"
"""On every namespace of the benchmark's workloads (the admission policy selects them by it)."""
NODE_CPUS = 32
NODE_MEMORY_GIB = 128
NODE_PODS = 110
BASE_CORES = 0.5
BASE_MEMORY_GIB = 2.0
"""System load of every node outside its pods."""
GIB = 2**30
MIB = 2**20
LOW = {"cpu": 45, "memory": 55}
HIGH = {"cpu": 75, "memory": 80}
"""The thresholds of the synthetic cluster of ``synth.py`` (percent of allocatable)."""
REPLICA_CHOICES = (1, 2, 3, 5, 8, 10, 20, 50)
REPLICA_WEIGHTS = (10, 15, 20, 20, 10, 10, 10, 5)
PDB_SHARE = 0.4
"""Share of the workloads with two or more replicas that have a PodDisruptionBudget (maxUnavailable 1)."""


# --- the cluster, as plain data (pure) -------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str
    cpu_m: int
    """CPU request of each pod, millicores."""
    memory_mi: int
    pdb: bool
    nodes: tuple[str, ...]
    """Where each replica runs (one entry per pod, in pod order)."""

    @property
    def replicas(self) -> int:
        return len(self.nodes)

    def pod_names(self) -> list[str]:
        return [pod_name(self.name, i) for i in range(self.replicas)]


@dataclass(frozen=True)
class ClusterPlan:
    nodes: tuple[str, ...]
    hot: frozenset[str]
    workloads: tuple[Workload, ...]
    pod_cores: Mapping[tuple[str, str], float]
    """(namespace, pod) -> cores it uses."""
    pod_rss: Mapping[tuple[str, str], float]
    """(namespace, pod) -> bytes of RSS."""

    @property
    def pods(self) -> int:
        return sum(w.replicas for w in self.workloads)

    @property
    def namespaces(self) -> list[str]:
        return sorted({w.namespace for w in self.workloads})

    def node_cores(self) -> dict[str, float]:
        """Each node's CPU use: its base load plus its pods'."""
        out = dict.fromkeys(self.nodes, BASE_CORES)
        for w in self.workloads:
            for name, node in zip(w.pod_names(), w.nodes, strict=True):
                out[node] += self.pod_cores[(w.namespace, name)]
        return out

    def node_memory(self) -> dict[str, float]:
        out = dict.fromkeys(self.nodes, BASE_MEMORY_GIB * GIB)
        for w in self.workloads:
            for name, node in zip(w.pod_names(), w.nodes, strict=True):
                out[node] += self.pod_rss[(w.namespace, name)]
        return out


def pod_name(workload: str, index: int) -> str:
    """``<workload>-<rs hash>-<suffix>``, as the ReplicaSet controller names pods."""
    return f"{workload}-{replicaset_hash(workload)}-{index:05x}"


_SAFE = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet Kubernetes uses for generated names (no vowels, no look-alike digits)."""


def replicaset_hash(workload: str) -> str:
    """A stable ``pod-template-hash``-like value of 8 characters (the controller ignores its value)."""
    number = zlib.crc32(workload.encode())
    out = ""
    for _ in range(8):
        number, digit = divmod(number, len(_SAFE))
        out += _SAFE[digit]
    return out


def node_name(index: int) -> str:
    return f"kwok-node-{index:05d}"


def plan_cluster(nodes: int, pods: int, *, hot_fraction: float = 0.01, seed: int = 1) -> ClusterPlan:
    """``nodes`` kwok nodes and ``pods`` pods in Deployments of 1 to 50 replicas spread over ``nodes/25``
    namespaces, every node holding the same number of pods (give or take one). The first
    ``hot_fraction`` of the nodes (at least one) are CPU-hot (85-92 %, over the 75 % threshold), the others
    at 35-65 % CPU; memory 35-65 % everywhere. A pod's usage is its node's share by its requests, so the
    node's usage is exactly its pods' plus the base load."""
    if nodes < 1 or pods < nodes:
        raise ValueError(f"need at least one node and one pod per node, got {nodes} nodes, {pods} pods")
    rng = random.Random(seed)
    names = tuple(node_name(i) for i in range(nodes))
    n_hot = max(1, round(nodes * hot_fraction))
    hot = frozenset(names[:n_hot])
    # Slots: every node `pods // nodes` times, the first `pods % nodes` once more; shuffled so a workload's
    # replicas land on different nodes.
    slots = [n for n in names for _ in range(pods // nodes)] + list(names[: pods % nodes])
    rng.shuffle(slots)
    namespaces = [f"team-{i:03d}" for i in range(max(1, nodes // 25))]
    workloads: list[Workload] = []
    taken = 0
    index = 0
    while taken < len(slots):
        replicas = min(rng.choices(REPLICA_CHOICES, REPLICA_WEIGHTS)[0], len(slots) - taken)
        name = f"app-{index:05d}"
        workloads.append(
            Workload(
                namespace=namespaces[index % len(namespaces)],
                name=name,
                cpu_m=rng.choice((100, 200, 250, 500, 750, 1000)),
                memory_mi=rng.choice((256, 512, 1024, 2048)),
                pdb=replicas >= 2 and rng.random() < PDB_SHARE,
                nodes=tuple(slots[taken : taken + replicas]),
            )
        )
        taken += replicas
        index += 1
    target_cpu = {
        n: NODE_CPUS * (rng.uniform(0.85, 0.92) if n in hot else rng.uniform(0.35, 0.65)) for n in names
    }
    target_mem = {n: NODE_MEMORY_GIB * GIB * rng.uniform(0.35, 0.65) for n in names}
    on_node: dict[str, list[tuple[Workload, str]]] = {n: [] for n in names}
    for w in workloads:
        for pod, node in zip(w.pod_names(), w.nodes, strict=True):
            on_node[node].append((w, pod))
    pod_cores: dict[tuple[str, str], float] = {}
    pod_rss: dict[tuple[str, str], float] = {}
    for node, members in on_node.items():
        cpu_weight = sum(w.cpu_m for w, _ in members) or 1
        mem_weight = sum(w.memory_mi for w, _ in members) or 1
        for w, pod in members:
            pod_cores[(w.namespace, pod)] = (target_cpu[node] - BASE_CORES) * w.cpu_m / cpu_weight
            pod_rss[(w.namespace, pod)] = (
                (target_mem[node] - BASE_MEMORY_GIB * GIB) * w.memory_mi / mem_weight
            )
    return ClusterPlan(names, hot, tuple(workloads), pod_cores, pod_rss)


# --- API objects (pure) ------------------------------------------------------------------------------------


def node_object(name: str) -> Obj:
    """A kwok node (kwok manages every node): Ready once kwok has seen it."""
    capacity = {"cpu": str(NODE_CPUS), "memory": f"{NODE_MEMORY_GIB}Gi", "pods": str(NODE_PODS)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", "kubernetes.io/os": "linux"},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def pod_template(w: Workload, *, template_hash: str | None = None) -> Obj:
    labels = {"app": w.name}
    if template_hash is not None:
        labels["pod-template-hash"] = template_hash
    return {
        "metadata": {"labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "resources": {"requests": {"cpu": f"{w.cpu_m}m", "memory": f"{w.memory_mi}Mi"}},
                }
            ],
        },
    }


def deployment_object(w: Workload) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": w.name, "namespace": w.namespace, "labels": {"app": w.name}},
        "spec": {
            "replicas": w.replicas,
            "selector": {"matchLabels": {"app": w.name}},
            "template": pod_template(w),
        },
    }


def _owner(kind: str, api_version: str, name: str, uid: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def replicaset_object(w: Workload, deployment_uid: str) -> Obj:
    """The Deployment's ReplicaSet, as the Deployment controller would make it: the same template plus
    a ``pod-template-hash`` label (the controller compares templates ignoring that label)."""
    template_hash = replicaset_hash(w.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{w.name}-{template_hash}",
            "namespace": w.namespace,
            "labels": {"app": w.name, "pod-template-hash": template_hash},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": [_owner("Deployment", "apps/v1", w.name, deployment_uid)],
        },
        "spec": {
            "replicas": w.replicas,
            "selector": {"matchLabels": {"app": w.name, "pod-template-hash": template_hash}},
            "template": pod_template(w, template_hash=template_hash),
        },
    }


def pod_objects(w: Workload, replicaset_uid: str) -> list[Obj]:
    """The ReplicaSet's pods, each bound to its node already (``spec.nodeName``: no scheduling)."""
    template_hash = replicaset_hash(w.name)
    out = []
    for name, node in zip(w.pod_names(), w.nodes, strict=True):
        body = pod_template(w, template_hash=template_hash)
        body["spec"]["nodeName"] = node
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": w.namespace,
                    "labels": body["metadata"]["labels"],
                    "ownerReferences": [
                        _owner("ReplicaSet", "apps/v1", f"{w.name}-{template_hash}", replicaset_uid)
                    ],
                },
                "spec": body["spec"],
            }
        )
    return out


def pdb_object(w: Workload) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": w.name, "namespace": w.namespace},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": w.name}}},
    }


def loader_only_policy(loader: str) -> list[Obj]:
    """Only ``loader`` may create ReplicaSets and pods in the benchmark's namespaces (while loading)."""
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "kwok-scale-loader-only"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {"matchExpressions": [{"key": BENCH_LABEL, "operator": "Exists"}]},
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        },
                        {
                            "apiGroups": ["apps"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["replicasets"],
                        },
                    ],
                },
                "validations": [
                    {
                        "expression": f"request.userInfo.username == {json.dumps(loader)}",
                        "message": "the benchmark's loader creates these objects while the cluster is built",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "kwok-scale-loader-only"},
            "spec": {"policyName": "kwok-scale-loader-only", "validationActions": ["Deny"]},
        },
    ]


# --- usage: a lean exporter (pure rendering) --------------------------------------------------------------


class LeanExporter:
    """node-exporter and cAdvisor series for every node and pod, rendered fast enough for 150,000 pods.

    One series per node for CPU (``mode="user"``, one ``cpu``), MemTotal and MemAvailable, and one
    container per pod for CPU and RSS: what the default queries read, without the per-CPU and per-mode
    fan-out of a real node-exporter or cAdvisor's pod-level aggregates. Counters grow at exactly the
    planned rate from ``start``, so ``rate()`` returns the planned cores. Usage is static (dry-run: no pod
    moves). The static lines are rendered once; a scrape formats only the counter values.
    """

    def __init__(self, plan: ClusterPlan, start: float) -> None:
        self.start = start
        node_cores = plan.node_cores()
        node_memory = plan.node_memory()
        self._node_cpu = [
            (
                f'node_cpu_seconds_total{{instance="{n}:9100",job="node-exporter",cpu="0",mode="user"}} ',
                node_cores[n],
            )
            for n in plan.nodes
        ]
        static = ["# TYPE node_memory_MemTotal_bytes gauge"]
        static += [
            f'node_memory_MemTotal_bytes{{instance="{n}:9100",job="node-exporter"}} {NODE_MEMORY_GIB * GIB}'
            for n in plan.nodes
        ]
        static.append("# TYPE node_memory_MemAvailable_bytes gauge")
        static += [
            f'node_memory_MemAvailable_bytes{{instance="{n}:9100",job="node-exporter"}} '
            f"{max(0.0, NODE_MEMORY_GIB * GIB - node_memory[n]):.0f}"
            for n in plan.nodes
        ]
        static.append("# TYPE container_memory_rss gauge")
        self._pod_cpu: list[tuple[str, float]] = []
        for w in plan.workloads:
            for pod, node in zip(w.pod_names(), w.nodes, strict=True):
                labels = (
                    f'namespace="{w.namespace}",pod="{pod}",container="app",node="{node}",'
                    f'instance="{node}:10250",job="kubelet"'
                )
                static.append(f"container_memory_rss{{{labels}}} {plan.pod_rss[(w.namespace, pod)]:.0f}")
                self._pod_cpu.append(
                    (f"container_cpu_usage_seconds_total{{{labels}}} ", plan.pod_cores[(w.namespace, pod)])
                )
        self._static = ("\n".join(static) + "\n").encode()

    def render(self, now: float) -> bytes:
        elapsed = max(0.0, now - self.start)
        parts = ["# TYPE node_cpu_seconds_total counter\n"]
        parts += [f"{prefix}{rate * elapsed:.4f}\n" for prefix, rate in self._node_cpu]
        parts.append("# TYPE container_cpu_usage_seconds_total counter\n")
        parts += [f"{prefix}{rate * elapsed:.4f}\n" for prefix, rate in self._pod_cpu]
        return "".join(parts).encode() + self._static

    @property
    def series(self) -> int:
        return 3 * len(self._node_cpu) + 2 * len(self._pod_cpu)


# --- figures from logs, the audit log and Prometheus' answers (pure) ---------------------------------------


def _stamp(record: Mapping[str, Any]) -> float:
    return datetime.fromisoformat(str(record["timestamp"])).timestamp()


WANTED_EVENTS = ("starting", "listed", "cycle_summary")
"""The log records the figures are read from (the per-node and per-pod audit records are skipped unread)."""


def log_records(text: str, events: Sequence[str] = WANTED_EVENTS) -> list[dict[str, Any]]:
    """The JSON records of the descheduler's log whose ``event`` is one of ``events`` (others skipped)."""
    markers = tuple(f'"event": "{e}"' for e in events)
    out = []
    for line in text.splitlines():
        if not line.startswith("{") or not any(m in line for m in markers):
            continue
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "timestamp" in record and record.get("event") in events:
                out.append(record)
    return out


class LogTail:
    """Reads a growing log file from where it stopped, keeping only the wanted records (the audit log of a
    large cluster is megabytes a cycle; re-reading it every poll would compete with the descheduler)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""
        self.records: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        self.offset += len(chunk)
        text = self.partial + chunk.decode(errors="replace")
        complete, _, self.partial = text.rpartition("\n")
        self.records += log_records(complete)
        return self.records


@dataclass(frozen=True)
class SyncFigures:
    started: float
    """Unix time of the ``starting`` record."""
    synced: float
    """Unix time of the last initial ``listed`` record (one per watched resource)."""
    objects: dict[str, int]
    pages: dict[str, int]

    @property
    def seconds(self) -> float:
        return self.synced - self.started


def sync_figures(records: Sequence[Mapping[str, Any]], resources: int) -> SyncFigures | None:
    """From ``starting`` to the first ``listed`` of the last of ``resources`` resources; None before."""
    started = next((_stamp(r) for r in records if r.get("event") == "starting"), None)
    if started is None:
        return None
    first: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r.get("event") == "listed" and r.get("resource") not in first:
            first[str(r["resource"])] = r
    if len(first) < resources:
        return None
    return SyncFigures(
        started=started,
        synced=max(_stamp(r) for r in first.values()),
        objects={k: int(v.get("objects", 0)) for k, v in first.items()},
        pages={k: int(v.get("pages", 0)) for k, v in first.items()},
    )


def cycle_ends(records: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(end time, wall duration) of every ``cycle_summary`` record, in order."""
    return sorted(
        (_stamp(r), float(r.get("duration_seconds", 0.0)))
        for r in records
        if r.get("event") == "cycle_summary"
    )


def cpu_between(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds spent between two times, from (time, cumulative CPU) samples: the last sample at or
    before each time (the samples are taken often; the error is one sampling interval)."""

    def at(t: float) -> float:
        before = [cpu for when, cpu in samples if when <= t]
        if not before:
            raise ValueError(f"no CPU sample at or before {t}")
        return before[-1]

    return at(end) - at(start)


@dataclass(frozen=True)
class QueryStat:
    at: float
    kind: str
    """``node`` or ``pod`` (the pod queries read cAdvisor series)."""
    samples: int
    """``totalQueryableSamples`` of Prometheus' own stats."""
    eval_seconds: float
    bytes: int


def query_stat(at: float, query: str, body: bytes) -> QueryStat:
    """What one answer of Prometheus says it cost (``stats=all``); zeros if it carries no stats."""
    samples, eval_s = 0, 0.0
    with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
        stats = json.loads(body)["data"].get("stats") or {}
        samples = int((stats.get("samples") or {}).get("totalQueryableSamples", 0))
        eval_s = float((stats.get("timings") or {}).get("evalTotalTime", 0.0))
    kind = "pod" if "container_" in query else "node"
    return QueryStat(at, kind, samples, eval_s, len(body))


def request_mix(events: Iterable[AuditEvent]) -> Counter[str]:
    """``verb resource`` counts (``create pods/eviction (dry run)`` apart from real evictions)."""
    return Counter(f"{e.verb} {e.resource}" + (" (dry run)" if e.dry_run else "") for e in events)


def proc_cpu_rss(pid: int) -> tuple[float, float, float]:
    """CPU seconds (user + system), RSS and peak RSS (MiB) of a live process, from /proc."""
    rss = hwm = float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), rss, hwm


# --- the shell: HTTP to the API server, Prometheus, the descheduler ---------------------------------------


class Client:
    """A small keep-alive HTTPS client per thread, with a bearer token: fast concurrent POSTs."""

    def __init__(self, server: str, ca: Path, token: str) -> None:
        parsed = urllib.parse.urlsplit(server)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 443
        self.context = ssl.create_default_context(cafile=str(ca))
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "kwok-scale-loader",
        }
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=60)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(8):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=self.headers)
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                time.sleep(0.2 * 2**attempt)
                continue
            if response.status == 429 or response.status >= 500:
                time.sleep(min(5.0, 0.2 * 2**attempt))
                continue
            return response.status, (json.loads(raw) if raw else {})
        raise RuntimeError(f"{method} {path}: no answer after 8 attempts")

    def create(self, path: str, body: Obj) -> Obj:
        """POST; an object that already exists (a retried POST that had gone through) is read back."""
        status, answer = self.request("POST", path, body)
        if status == 409:
            status, answer = self.request("GET", f"{path}/{body['metadata']['name']}")
        if status not in (200, 201):
            raise RuntimeError(
                f"POST {path} {body['metadata']['name']}: HTTP {status}: {answer.get('message')}"
            )
        return answer


MIN_AVAILABLE_GIB = 3.0
"""The run stops (and says so) when the machine has less memory available than this: it is shared."""


class OutOfMemory(RuntimeError):
    """The machine ran short of memory: the run stops before the kernel's OOM killer picks a victim."""


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("inf")


def check_memory(where: str) -> None:
    """Raise :class:`OutOfMemory` when less than ``MIN_AVAILABLE_GIB`` (``--min-available-gib``) is left."""
    free = available_gib()
    if free < MIN_AVAILABLE_GIB:
        raise OutOfMemory(f"{where}: only {free:.1f} GiB of memory available (limit {MIN_AVAILABLE_GIB} GiB)")


def wait_until(what: str, check: Callable[[], Any], timeout: float, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check_memory(f"waiting for {what}")
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def count_items(client: Client, path: str, query: Mapping[str, str], *, limit: int = 500) -> int:
    """Objects a paged LIST returns (pages of ``limit``)."""
    total, token = 0, ""
    while True:
        q = {**query, "limit": str(limit), **({"continue": token} if token else {})}
        status, body = client.request("GET", f"{path}?{urllib.parse.urlencode(q)}")
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}")
        total += len(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue") or ""
        if not token:
            return total


def first_page(client: Client, path: str, query: Mapping[str, str]) -> list[Obj]:
    status, body = client.request("GET", f"{path}?{urllib.parse.urlencode({**query, 'limit': '50'})}")
    if status != 200:
        raise RuntimeError(f"GET {path}: HTTP {status}")
    return list(body.get("items") or [])


@dataclass
class Loaded:
    nodes_seconds: float = 0.0
    nodes_ready_seconds: float = 0.0
    objects_seconds: float = 0.0
    pods_running_seconds: float = 0.0
    requests: int = 0
    workloads: int = 0
    pdbs: int = 0


def load_cluster(
    client: Client,
    plane: ControlPlane,
    plan: ClusterPlan,
    workers: int,
    timeout: float,
    *,
    pods_running: bool = True,
) -> Loaded:
    """Nodes, namespaces, then per workload Deployment -> ReplicaSet -> pods (+ PDB), ``workers`` at once.

    ``pods_running=False`` stops kwok once the nodes are Ready: the pods stay Pending on their nodes, and
    kwok's status PATCHes (most of an hour at 150,000 pods) neither run nor compete with what is measured.
    """
    out = Loaded(workloads=len(plan.workloads), pdbs=sum(w.pdb for w in plan.workloads))
    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda n: client.create("/api/v1/nodes", node_object(n)), plan.nodes))
    out.nodes_seconds = time.monotonic() - started

    wait_until("every kwok node Ready", lambda: _all_ready(client, len(plan.nodes)), timeout, interval=2.0)
    out.nodes_ready_seconds = time.monotonic() - started
    if not pods_running:
        plane.kill("kwok")
    for ns in plan.namespaces:
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {BENCH_LABEL: ns}}},
        )
    wait_until(
        "a default ServiceAccount in every namespace",
        lambda: (
            count_items(
                client,
                "/api/v1/serviceaccounts",
                {"fieldSelector": "metadata.name=default", "labelSelector": ""},
            )
            >= len(plan.namespaces)
        ),
        120,
    )

    def one(w: Workload) -> int:
        check_memory("creating the workloads")
        base = f"/apis/apps/v1/namespaces/{w.namespace}"
        dep = client.create(f"{base}/deployments", deployment_object(w))
        rs = client.create(f"{base}/replicasets", replicaset_object(w, dep["metadata"]["uid"]))
        for pod in pod_objects(w, rs["metadata"]["uid"]):
            client.create(f"/api/v1/namespaces/{w.namespace}/pods", pod)
        if w.pdb:
            client.create(f"/apis/policy/v1/namespaces/{w.namespace}/poddisruptionbudgets", pdb_object(w))
        return 2 + w.replicas + int(w.pdb)

    started = time.monotonic()
    done = 0
    with ThreadPoolExecutor(workers) as pool:
        for n in pool.map(one, plan.workloads):
            out.requests += n
            done += 1
            if done % max(1, len(plan.workloads) // 20) == 0:
                print(
                    f"  {done}/{len(plan.workloads)} workloads, {time.monotonic() - started:.0f}s", flush=True
                )
    out.objects_seconds = time.monotonic() - started
    if not pods_running:
        return out
    wait_until(
        "every pod Running",
        lambda: not first_page(client, "/api/v1/pods", {"fieldSelector": "status.phase!=Running"}),
        timeout,
        interval=2.0,
    )
    out.pods_running_seconds = time.monotonic() - started
    return out


def _all_ready(client: Client, expected: int) -> bool:
    """Every kwok node has a Ready=True condition (paged LIST of the nodes)."""
    ready, token = 0, ""
    while True:
        q = {"labelSelector": "type=kwok", "limit": "500", **({"continue": token} if token else {})}
        status, body = client.request("GET", f"/api/v1/nodes?{urllib.parse.urlencode(q)}")
        if status != 200:
            return False
        for n in body.get("items") or []:
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            ):
                ready += 1
        token = (body.get("metadata") or {}).get("continue") or ""
        if not token:
            return ready >= expected


def exporter_handler(exporter: LeanExporter, scrapes: list[float]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            started = time.perf_counter()
            body = exporter.render(time.time())
            scrapes.append(time.perf_counter() - started)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def proxy_handler(upstream: str, stats: list[QueryStat]) -> type[BaseHTTPRequestHandler]:
    """Forwards every request to Prometheus and notes what each query's answer says it cost."""

    class Handler(BaseHTTPRequestHandler):
        def _forward(self, data: bytes | None) -> None:
            request = urllib.request.Request(upstream + self.path, data=data, method=self.command)
            if self.headers.get("Content-Type"):
                request.add_header("Content-Type", self.headers["Content-Type"])
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status, body, ctype = (
                        response.status,
                        response.read(),
                        response.headers.get("Content-Type"),
                    )
            except urllib.error.HTTPError as exc:
                status, body, ctype = exc.code, exc.read(), exc.headers.get("Content-Type")
            if "/api/v1/query" in self.path:
                params = urllib.parse.parse_qs(
                    (data or b"").decode() + "&" + urllib.parse.urlsplit(self.path).query
                )
                stats.append(query_stat(time.time(), (params.get("query") or [""])[0], body))
            self.send_response(status)
            self.send_header("Content-Type", ctype or "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._forward(self.rfile.read(length))

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@dataclass
class Process:
    """A child in its own process group, stopped by group (SIGTERM, then SIGKILL) whatever happens."""

    name: str
    popen: subprocess.Popen[bytes]

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=timeout)


def start_prometheus(
    workdir: Path, target: str, scrape_s: float, stack: contextlib.ExitStack
) -> tuple[str, Process]:
    """Debian's Prometheus on 127.0.0.1, scraping ``target`` (``honor_labels``), as the controlplane tests
    start it but with a scrape interval fit for 100,000s of series."""
    from tests.support.prometheus import free_port, require_binary

    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {
                    "scrape_interval": f"{scrape_s:g}s",
                    "scrape_timeout": f"{scrape_s:g}s",
                    "evaluation_interval": "1m",
                },
                "scrape_configs": [
                    {"job_name": "simulated", "honor_labels": True, "static_configs": [{"targets": [target]}]}
                ],
            }
        )
    )
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    stack.callback(log.close)
    popen = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            "--storage.tsdb.retention.time=2h",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    process = Process("prometheus", popen)
    stack.callback(process.stop)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if popen.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{(workdir / 'prometheus.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_until("prometheus ready", up, 60, interval=0.3)
    return url, process


def prom_value(url: str, promql: str) -> float:
    query = urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=30) as response:
            result = json.loads(response.read())["data"]["result"]
    except (OSError, ValueError, KeyError):
        return -1.0
    return float(result[0]["value"][1]) if result else 0.0


def descheduler_config(prometheus_url: str, ports: tuple[int, int], args: argparse.Namespace) -> Obj:
    """LowNodeLoad at the synthetic cluster's thresholds, hotspots confirmed at once (the most expensive
    cycle: every hot node planned every cycle), leader election at its defaults, usage from Prometheus."""
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "dryRun": True,
        "deschedulingInterval": f"{args.interval:g}s",
        "leaderElection": {
            "leaderElect": True,
            "resourceName": "load-aware-descheduler",
            "resourceNamespace": BENCH_NAMESPACE,
        },
        "healthzBindAddress": f"127.0.0.1:{ports[0]}",
        "metricsBindAddress": f"127.0.0.1:{ports[1]}",
        "metricsProviders": [
            {
                "source": "Prometheus",
                "prometheus": {
                    "url": prometheus_url,
                    "window": args.window,
                    "timeout": "30s",
                    "nodeLabel": "instance",
                    "nodeRelabel": {"regex": "(.*):[0-9]+", "replacement": "$1"},
                },
            }
        ],
        "profiles": [
            {
                "name": "load-aware",
                "plugins": {
                    "balance": {"enabled": [{"name": "LowNodeLoad"}]},
                    "evict": {"enabled": [{"name": "MigrationController"}]},
                    "filter": {"enabled": [{"name": "MigrationController"}]},
                },
                "pluginConfig": [
                    {
                        "name": "LowNodeLoad",
                        "args": {
                            "lowThresholds": LOW,
                            "highThresholds": HIGH,
                            "anomalyCondition": {"consecutiveAbnormalities": 1},
                            "evictableNamespaces": {"exclude": ["kube-system", BENCH_NAMESPACE]},
                        },
                    },
                    {"name": "MigrationController", "args": {}},
                ],
            }
        ],
    }


def setup_accounts(plane: ControlPlane, workdir: Path) -> dict[str, Path]:
    from tests.controlplane.objects import cluster_admin_account

    docs: list[Obj] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BENCH_NAMESPACE}}]
    for sa in (DESCHEDULER_SA, LOADER_SA):
        docs += cluster_admin_account(sa, BENCH_NAMESPACE)
    plane.apply(docs)
    return {
        sa: plane.token_kubeconfig(BENCH_NAMESPACE, sa, workdir / f"{sa}.kubeconfig", hours=6)
        for sa in (DESCHEDULER_SA, LOADER_SA)
    }


def decode_floor(kubeconfig: Path) -> dict[str, Any]:
    """``json.loads`` of the very LIST pages the descheduler's cache asks for, GC off (cycle_cost's floor),
    in a fresh process, against this API server."""
    code = (
        "import gc, json, sys; gc.disable(); from benchmarks.cycle_cost import _child_floor; "
        "print(json.dumps(_child_floor(sys.argv[1], 500, 2)))"
    )
    from tests.support.service import REPO, subprocess_env

    proc = subprocess.run(
        [sys.executable, "-c", code, str(kubeconfig)],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"floor child failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --- the run ---------------------------------------------------------------------------------------------


@dataclass
class Figures:
    values: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        self.lines.append(text)
        print(text, flush=True)


def run(args: argparse.Namespace, workdir: Path) -> Figures:
    from tests.controlplane import build
    from tests.controlplane.cluster import ControlPlane, free_port
    from tests.support.service import REPO, descheduler_command, serve_http, subprocess_env

    out = Figures()
    plan = plan_cluster(args.nodes, args.pods, hot_fraction=args.hot_fraction, seed=args.seed)
    load = os.getloadavg()
    out.say(
        f"kwok_scale: {args.nodes} nodes, {plan.pods} pods in {len(plan.workloads)} Deployments "
        f"({sum(w.pdb for w in plan.workloads)} with a PDB) over {len(plan.namespaces)} namespaces, "
        f"{len(plan.hot)} hot nodes; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
        f"{os.cpu_count()} CPUs, {datetime.now().astimezone().isoformat(timespec='seconds')}"
    )
    binaries = build.ensure_all()
    user = f"system:serviceaccount:{BENCH_NAMESPACE}:{DESCHEDULER_SA}"
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [{"level": "Metadata", "users": [user]}, {"level": "None"}],
    }
    with contextlib.ExitStack() as stack:
        started = time.monotonic()
        plane = ControlPlane.start(workdir / "controlplane", binaries, audit_policy=policy)
        stack.callback(plane.stop)
        out.say(f"control plane up in {time.monotonic() - started:.1f}s")
        kubeconfigs = setup_accounts(plane, workdir)
        token = json.loads(kubeconfigs[LOADER_SA].read_text())["users"][0]["user"]["token"]
        client = Client(plane.server, plane.pki.ca_crt, token)
        plane.apply(loader_only_policy(f"system:serviceaccount:{BENCH_NAMESPACE}:{LOADER_SA}"))
        probe = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "kwok-scale-probe", "labels": {BENCH_LABEL: "probe"}},
        }
        client.create("/api/v1/namespaces", probe)

        def policy_active() -> bool:  # the admin (as the controllers) is refused a dry-run pod create
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "probe", "namespace": "kwok-scale-probe"},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            }
            proc = plane.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod), check=False)
            return proc.returncode != 0 and "loader" in proc.stderr

        wait_until("the loader-only admission policy in force", policy_active, 60, interval=0.5)

        # Usage first, so Prometheus has a full window when the pods are up.
        scrapes: list[float] = []
        exporter = LeanExporter(plan, time.time() - 3600)
        target = stack.enter_context(serve_http(exporter_handler(exporter, scrapes)))
        prom_url, prom = start_prometheus(workdir / "prometheus", target, args.scrape, stack)
        query_stats: list[QueryStat] = []
        proxy = "http://" + stack.enter_context(serve_http(proxy_handler(prom_url, query_stats)))

        loaded = load_cluster(client, plane, plan, args.workers, args.load_timeout)
        rate = plan.pods / loaded.objects_seconds
        out.say(
            f"nodes: {len(plan.nodes)} created in {loaded.nodes_seconds:.1f}s, "
            f"Ready after {loaded.nodes_ready_seconds:.1f}s"
        )
        out.say(
            f"objects: {loaded.requests} POSTs ({plan.pods} pods, "
            f"{loaded.workloads} Deployments and ReplicaSets, "
            f"{loaded.pdbs} PDBs) in {loaded.objects_seconds:.1f}s with {args.workers} workers: "
            f"{rate:.0f} pods/s, {loaded.requests / loaded.objects_seconds:.0f} objects/s; "
            f"every pod Running after {loaded.pods_running_seconds:.1f}s"
        )
        out.values.update(
            pods_per_s=f"{rate:.0f}", objects_per_s=f"{loaded.requests / loaded.objects_seconds:.0f}"
        )
        for doc in reversed(loader_only_policy("")):
            kind = doc["kind"].lower() + "s"
            plane.kubectl(
                "delete", f"{kind}.admissionregistration.k8s.io", doc["metadata"]["name"], check=False
            )
        plane.kubectl("delete", "namespace", "kwok-scale-probe", "--wait=false", check=False)

        wait_until(
            "Prometheus rate() for every node and pod",
            lambda: (
                prom_value(prom_url, f"count(rate(node_cpu_seconds_total[{args.window}]))") == len(plan.nodes)
                and prom_value(prom_url, f"count(rate(container_cpu_usage_seconds_total[{args.window}]))")
                == plan.pods
            ),
            300,
            interval=2.0,
        )
        out.say(
            f"exporter: {exporter.series} series, a scrape rendered in "
            f"{statistics.median(scrapes) * 1000:.0f} ms "
            f"(median of {len(scrapes)})"
        )
        # Let the controllers settle on the new objects (status of ReplicaSets, Deployments, PDBs).
        wait_until(
            "every PDB with a status",
            lambda: (
                not [
                    p
                    for p in first_page(client, "/apis/policy/v1/poddisruptionbudgets", {})
                    if (p.get("status") or {}).get("observedGeneration") is None
                ]
                and count_items(client, "/apis/policy/v1/poddisruptionbudgets", {}) == loaded.pdbs
            ),
            args.load_timeout,
            interval=3.0,
        )

        floor = decode_floor(plane.kubeconfig)
        out.say(
            f"floor: {floor['pages']} LIST pages, {floor['bytes'] / MIB:.0f} MiB, json.loads with the GC off "
            f"{floor['decode_cpu']:.2f}s CPU (fetch and decode {floor['fetch_decode_wall']:.1f}s wall)"
        )

        # The descheduler.
        ports = (free_port(), free_port())
        config = workdir / "descheduler.yaml"
        config.write_text(yaml.safe_dump(descheduler_config(proxy, ports, args)))
        log_path = workdir / "descheduler.log"
        log = log_path.open("wb")
        stack.callback(log.close)
        argv = descheduler_command(
            "run",
            "--config",
            str(config),
            "--kubeconfig",
            str(kubeconfigs[DESCHEDULER_SA]),
            "--dry-run",
            "--log-format",
            "json",
        )
        t0 = time.time()
        popen = subprocess.Popen(
            argv,
            cwd=REPO,
            env=subprocess_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        desched = Process("descheduler", popen)
        stack.callback(desched.stop)
        samples: list[tuple[float, float]] = []
        rss: list[tuple[float, float]] = []
        hwm = 0.0
        sync: SyncFigures | None = None
        sync_cpu = float("nan")
        deadline = time.monotonic() + args.timeout
        want = args.warmup + args.cycles
        cycles: list[tuple[float, float]] = []
        tail = LogTail(log_path)
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if popen.poll() is not None:
                raise RuntimeError(
                    f"descheduler exited with {popen.returncode}:\n{log_path.read_text()[-3000:]}"
                )
            cpu, now_rss, hwm = proc_cpu_rss(popen.pid)
            now = time.time()
            try:
                check_memory("running the descheduler")
            except OutOfMemory:  # say how far it got before everything is stopped
                listed = {r["resource"]: r["objects"] for r in tail.records if r.get("event") == "listed"}
                out.say(
                    f"stopped {now - t0:.0f}s after exec: descheduler CPU {cpu:.1f}s, RSS {now_rss:.0f} MiB, "
                    f"peak {hwm:.0f} MiB; listed so far {listed}; {len(cycle_ends(tail.records))} cycles; "
                    f"the rest (RSS MiB): "
                    + ", ".join(
                        f"{c.name} {proc_cpu_rss(c.process.pid)[1]:.0f}"
                        for c in plane.components
                        if c.process and c.process.poll() is None
                    )
                )
                raise
            samples.append((now, cpu))
            rss.append((now, now_rss))
            records = tail.poll()
            if sync is None:
                sync = sync_figures(records, resources=7)
                if sync is not None:
                    sync_cpu = cpu
                    out.say(
                        f"descheduler synced {sync.seconds:.1f}s after start ({now - t0:.1f}s after exec), "
                        f"{cpu:.1f}s CPU, RSS {now_rss:.0f} MiB, peak {hwm:.0f} MiB"
                    )
            cycles = cycle_ends(records)
            if len(cycles) >= want:
                break
        else:
            raise TimeoutError(f"{len(cycles)} of {want} cycles within {args.timeout:.0f}s")
        time.sleep(1.0)
        cpu, end_rss, hwm = proc_cpu_rss(popen.pid)
        samples.append((time.time(), cpu))
        control_rss = {
            c.name: proc_cpu_rss(c.process.pid)
            for c in plane.components
            if c.process and c.process.poll() is None
        }
        control_rss["prometheus"] = proc_cpu_rss(prom.popen.pid)
        desched.stop()
        records = tail.poll()
        assert sync is not None
        # Steady cycles: after the warm-up ones; each spans from the previous cycle's end to its own end.
        steady = cycles[args.warmup - 1 : want]
        per_cycle_cpu = [cpu_between(samples, a[0], b[0]) for a, b in itertools.pairwise(steady)]
        first_cpu = cpu_between(samples, sync.synced, cycles[0][0]) if cycles else float("nan")
        # The cycle alone: from its start (end minus its logged duration) to its end.
        in_cycle_cpu = [cpu_between(samples, end - wall, end) for end, wall in steady[1:]]
        start_steady, end_steady = steady[0][0], steady[-1][0]
        steady_rss = [r for t, r in rss if start_steady <= t <= end_steady]
        summaries = [r for r in records if r.get("event") == "cycle_summary"]
        last = summaries[want - 1] if len(summaries) >= want else summaries[-1]
        out.say(
            f"cycles: first {cycles[0][1]:.2f}s wall, {first_cpu:.2f}s CPU (from sync end); steady (cycles "
            f"{args.warmup + 1}-{want}, {args.interval:g}s apart): wall "
            f"{statistics.median(d for _, d in steady[1:]):.2f}s, "
            f"CPU per cycle median {statistics.median(per_cycle_cpu):.2f}s (min {min(per_cycle_cpu):.2f}, "
            f"max {max(per_cycle_cpu):.2f}; the process's whole CPU between cycle ends: the cycle with its "
            "usage "
            f"fetch, plus watches and lease renewals); inside the cycles alone median "
            f"{statistics.median(in_cycle_cpu):.2f}s; last cycle: nodes {last.get('nodes')}, "
            f"evictions {last.get('evictions')}"
        )
        out.say(
            f"descheduler memory: peak {hwm:.0f} MiB, steady {statistics.median(steady_rss):.0f} MiB "
            f"(median over the steady cycles), at the end {end_rss:.0f} MiB"
        )
        sync_only_cpu = cpu_between(samples, max(sync.started, samples[0][0]), sync.synced)
        sync_vs_floor = sync_only_cpu / floor["decode_cpu"] if floor["decode_cpu"] else float("nan")
        out.say(
            f"sync: {sync.seconds:.1f}s wall from 'starting' to the last initial LIST, "
            f"{sync_only_cpu:.1f}s CPU "
            f"({sync_cpu:.1f}s since exec, imports included) = {sync_vs_floor:.2f}x the json.loads floor; "
            f"objects {sync.objects}, pages {sync.pages}"
        )

        # The API server's view (audit log, this ServiceAccount's requests only).
        time.sleep(1.0)
        assert plane.audit_log is not None
        events = [e for e in parse_audit(plane.audit_log.read_text().splitlines()) if e.user == user]
        agents = Counter(e.user_agent for e in events)
        in_sync = [e for e in events if e.received <= sync.synced]
        in_steady = [e for e in events if start_steady < e.received <= end_steady]
        n_steady = max(1, len(steady) - 1)
        lists = [e for e in in_sync if e.verb == "list"]
        out.say(
            f"API server (audit, user {user}, agents {dict(agents)}): during the sync "
            f"{len(in_sync)} requests "
            f"{dict(request_mix(in_sync))}; LIST pages took the server "
            f"{sum(e.completed - e.received for e in lists):.1f}s in all "
            f"(slowest {max((e.completed - e.received for e in lists), default=0):.2f}s)"
        )
        mix = request_mix(in_steady)
        out.say(
            f"API requests per steady cycle: {len(in_steady) / n_steady:.1f} "
            + ", ".join(f"{k} {v / n_steady:.2f}" for k, v in mix.most_common())
        )
        codes = Counter(e.code for e in events)
        out.say(f"response codes over the run: {dict(codes)}")

        # Prometheus' work per cycle (its own stats on each answer).
        steady_q = [q for q in query_stats if start_steady < q.at <= end_steady]
        kinds = Counter(q.kind for q in steady_q)
        out.say(
            f"Prometheus per steady cycle: {len(steady_q) / n_steady:.1f} queries "
            f"({kinds['node'] / n_steady:.1f} node, "
            f"{kinds['pod'] / n_steady:.1f} pod), "
            f"{sum(q.samples for q in steady_q) / n_steady:,.0f} samples touched, "
            f"{sum(q.eval_seconds for q in steady_q) / n_steady:.3f}s evaluation, "
            f"{sum(q.bytes for q in steady_q) / n_steady / 1024:.0f} KiB of answers"
        )
        by_kind = {k: sum(q.samples for q in steady_q if q.kind == k) / n_steady for k in ("node", "pod")}
        out.say(
            f"  samples per steady cycle by kind: node queries {by_kind['node']:,.0f}, "
            f"pod {by_kind['pod']:,.0f}"
        )
        first_q = [q for q in query_stats if q.at <= cycles[0][0]]
        out.say(
            f"Prometheus in the first cycle: {len(first_q)} queries, "
            f"{sum(q.samples for q in first_q):,} samples"
        )

        out.say(
            "memory of the rest (RSS / peak MiB): "
            + ", ".join(f"{name} {v[1]:.0f}/{v[2]:.0f}" for name, v in control_rss.items())
        )
        pods_now = count_items(client, "/api/v1/pods", {"labelSelector": "app"})
        out.say(f"pods at the end: {pods_now} (planned {plan.pods})")
        steady_queries = len(steady_q) / n_steady
        out.values.update(
            sync=f"{sync.seconds:.1f}s",
            sync_cpu=f"{sync_only_cpu:.1f}s",
            floor=f"{floor['decode_cpu']:.2f}s",
            sync_vs_floor=f"{sync_vs_floor:.2f}x",
            peak_rss=f"{hwm:.0f}MiB",
            steady_rss=f"{statistics.median(steady_rss):.0f}MiB",
            cycle_cpu=f"{statistics.median(per_cycle_cpu):.2f}s",
            in_cycle_cpu=f"{statistics.median(in_cycle_cpu):.2f}s",
            requests_per_cycle=f"{len(in_steady) / n_steady:.1f}",
            queries_per_cycle=f"{steady_queries:.1f}",
            samples_per_cycle=f"{sum(q.samples for q in steady_q) / n_steady:.0f}",
            apiserver_rss=f"{control_rss['kube-apiserver'][1]:.0f}MiB",
            etcd_rss=f"{control_rss['etcd'][1]:.0f}MiB",
        )
        if pods_now != plan.pods:
            out.say(
                f"WARNING: {pods_now} pods at the end, {plan.pods} created: a controller changed the cluster"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    global MIN_AVAILABLE_GIB
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30000)
    parser.add_argument("--hot-fraction", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=32, help="concurrent POSTs while loading")
    parser.add_argument("--interval", type=float, default=20.0, help="the descheduler's cycle interval, s")
    parser.add_argument("--window", default="1m", help="the usage window (rate() range)")
    parser.add_argument("--scrape", type=float, default=10.0, help="Prometheus scrape interval, s")
    parser.add_argument("--warmup", type=int, default=2, help="cycles before the steady ones")
    parser.add_argument("--cycles", type=int, default=6, help="steady cycles measured")
    parser.add_argument("--load-timeout", type=float, default=1800.0, help="seconds for each loading wait")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds the descheduler gets in all")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, audit log)")
    parser.add_argument(
        "--min-available-gib",
        type=float,
        default=MIN_AVAILABLE_GIB,
        help="stop the run when the machine has less memory available (GiB; it is shared)",
    )
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.cycles < 2:
        parser.error("--warmup must be at least 1 and --cycles at least 2")
    MIN_AVAILABLE_GIB = args.min_available_gib
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kwok-scale-"))
    # SIGTERM unwinds like Ctrl-C, so every process is stopped by the ExitStack.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        figures = run(args, workdir)
    finally:
        if not args.keep and args.workdir is None:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work folder kept: {workdir}")
    print()
    print(summary_line({f"{k}_{args.nodes}": v for k, v in figures.values.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
