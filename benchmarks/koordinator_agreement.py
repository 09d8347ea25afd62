"""Decision agreement with Koordinator's own descheduler: one cluster, one usage, both in dry-run (issue 31).

For each of ``--shapes`` randomly generated clusters (seeded: node sizes, hot nodes, workloads and their
placement, PodDisruptionBudgets, thresholds), built afresh on one real control plane (etcd, kube-apiserver,
controller manager, scheduler, kwok), the simulated kubelets' usage is served to a real Prometheus (which we
read) and written into each node's NodeMetric (which koord-descheduler reads), from the same numbers. Both
deschedulers then read the very same configuration document (the ACK guide's ConfigMap with the shape's
thresholds, ``consecutiveAbnormalities: 1`` and ``EvictDirectly``): ours runs one dry-run cycle
(``descheduler once --dry-run``), Koordinator's runs in dry-run mode until its first cycle is logged. Per
shape the script compares the nodes each acts on and the pods each would evict, as (node, workload) counts
(which replica of a workload either picks is arbitrary), and prints the agreement.

Not part of CI: it needs a checkout of Koordinator at ``koordinator.KOORD_COMMIT`` and the control plane
(``python -m tests.controlplane.build``).

    python -m benchmarks.koordinator_agreement --source ~/src/koordinator --shapes 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from benchmarks import koordinator

if TYPE_CHECKING:
    from descheduler.kube.api import KubeApi
    from tests.controlplane.cluster import ControlPlane
    from tests.support.service import SimulatedNodes, UsageBackend

GROUP_LABEL = "descheduler.test/group"
BASE_CORES = 0.3
"""System load of every node outside its pods (the usage model's)."""
FULL = 0.97
"""The most of a node's CPUs a generated shape uses."""
NODE_METRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"


@dataclass(frozen=True)
class Workload:
    app: str
    cores: float
    """CPU each pod uses."""
    placement: tuple[tuple[int, int], ...]
    """(node index, pods there): each part is its own Deployment bound to that node."""
    pdb: bool
    priority: str = ""
    """A PriorityClass of ``PRIORITIES`` (or none): both order a node's pods by priority first."""
    qos: str = "Burstable"
    """Kubernetes QoS class of its pods (``QOS``): both order by it after priority."""


@dataclass(frozen=True)
class Shape:
    seed: int
    nodes: tuple[int, ...]
    """CPUs of each node."""
    workloads: tuple[Workload, ...]
    low: Mapping[str, int]
    high: Mapping[str, int]
    pools: tuple[str, ...] = ()
    """Each node's pool (``pool`` label) when the shape has two node pools, else empty."""
    pool_thresholds: Mapping[str, tuple[Mapping[str, int], Mapping[str, int]]] = field(default_factory=dict)
    """Pool -> (low, high) thresholds."""
    limits: Mapping[str, Any] = field(default_factory=dict)
    """MigrationController limits of this shape (both read them)."""


PRIORITIES = {"agree-low": 100, "agree-high": 100000}
QOS = ("Guaranteed", "Burstable", "BestEffort")
GENEROUS = {
    "maxMigratingPerNode": 100,
    "maxMigratingPerWorkload": 0,
    "maxUnavailablePerWorkload": 0,
    "objectLimiters": {},
}
"""The limits Koordinator's dry run cannot count (it counts PodMigrationJobs, which a dry run never creates)
set so that neither side reaches them: the decisions compare without the dry-run accounting. A per-workload
0 is no limit for us and Koordinator's table for it; either way nothing is counted."""
TOP_LEVEL_LIMITS = ("maxNoOfPodsToEvictPerNode",)
"""Limits of the DeschedulerConfiguration itself (the others are MigrationController's)."""


def random_shape(seed: int) -> Shape:
    """A small cluster with one to three nodes made hot by busy workloads and the rest quiet; from a
    second generator (so the first one's shapes stay as they were): priorities, QoS classes, two node
    pools with their own thresholds in half of the shapes, and MigrationController limits."""
    rng = random.Random(seed)
    nodes = tuple(rng.choice((4, 4, 8)) for _ in range(rng.randint(4, 8)))
    hot = rng.sample(range(len(nodes)), rng.randint(1, min(3, len(nodes) - 2)))
    load = [BASE_CORES] * len(nodes)
    workloads = []
    for i in range(rng.randint(2, 5)):
        busy = i < 2
        cores = round(rng.uniform(0.4, 1.2) if busy else rng.uniform(0.03, 0.3), 2)
        spots = hot if busy else list(range(len(nodes)))
        parts: dict[int, int] = {}
        for _ in range(rng.randint(1, 8)):
            node = rng.choice(spots)
            if load[node] + cores > FULL * nodes[node]:
                continue  # a node's usage never passes its capacity (node-exporter could not show it)
            load[node] += cores
            parts[node] = parts.get(node, 0) + 1
        if parts:
            workloads.append(Workload(f"app{i}", cores, tuple(sorted(parts.items())), rng.random() < 0.5))
    low = {"cpu": rng.choice((20, 25, 30, 35)), "memory": 30}
    high = {"cpu": rng.choice((50, 55, 60, 65, 70)), "memory": 80}
    extra = random.Random(seed * 7919 + 1)
    workloads = [
        Workload(
            w.app,
            w.cores,
            w.placement,
            w.pdb,
            priority=extra.choice(("", "", *PRIORITIES)),
            qos=extra.choice(QOS),
        )
        for w in workloads
    ]
    pools: tuple[str, ...] = ()
    pool_thresholds: dict[str, tuple[Mapping[str, int], Mapping[str, int]]] = {}
    if extra.random() < 0.5:
        pools = tuple("a" if i % 2 == 0 else "b" for i in range(len(nodes)))
        pool_thresholds = {
            "a": (low, high),
            "b": (
                {"cpu": extra.choice((20, 25, 30)), "memory": 30},
                {"cpu": extra.choice((45, 55, 65)), "memory": 80},
            ),
        }
    limits: dict[str, Any] = {}
    for key, choices in (
        ("maxMigratingPerNode", (1, 2, 3)),
        ("maxMigratingPerWorkload", (1, 2, "50%")),
        ("maxNoOfPodsToEvictPerNode", (1, 2, 5)),
    ):
        if extra.random() < 0.5:
            limits[key] = extra.choice(choices)
    return Shape(seed, nodes, tuple(workloads), low, high, pools, pool_thresholds, limits)


# --- comparing decisions ------------------------------------------------------------------------------------


@dataclass
class Decisions:
    """What one descheduler decided in one cycle: nodes it acted on, and would-be evictions by (node, app)."""

    sources: set[str] = field(default_factory=set)
    evictions: Counter[tuple[str, str]] = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)
    """Node -> workload of its first would-be eviction (the choice no limit or dry-run accounting touches)."""

    def add(self, node: str, app: str) -> None:
        self.evictions[(node, app)] += 1
        self.first.setdefault(node, app)


@dataclass(frozen=True)
class Agreement:
    seed: int
    ours: Decisions
    theirs: Decisions

    @property
    def same_sources(self) -> bool:
        return self.ours.sources == self.theirs.sources

    @property
    def same_evictions(self) -> bool:
        return self.ours.evictions == self.theirs.evictions

    @property
    def same_first(self) -> bool:
        """The same workload first on every node both act on (and the same nodes)."""
        return self.same_sources and self.ours.first == self.theirs.first

    def differences(self) -> list[str]:
        out = []
        if not self.same_sources:
            out.append(
                f"sources: ours {sorted(self.ours.sources)}, Koordinator {sorted(self.theirs.sources)}"
            )
        keys = sorted(set(self.ours.evictions) | set(self.theirs.evictions))
        for key in keys:
            a, b = self.ours.evictions[key], self.theirs.evictions[key]
            if a != b:
                out.append(f"{key[1]} on {key[0]}: ours {a}, Koordinator {b}")
        return out


_KLOG = re.compile(
    r'"(?P<msg>try to process nodePool|Evicted pod in dry run mode|Evicting pods from node)"(?P<rest>.*)'
)
_FIELD = re.compile(r'(\w+)="([^"]*)"')


def koordinator_decisions(log: str, app_of: Mapping[str, str]) -> Decisions | None:
    """Koordinator's first complete cycle in its log (``--v=4``): the pods its dry run would have evicted and
    their nodes (as ours, a node counts as acted on only with a would-be eviction: Koordinator also logs
    "Evicting pods from node" for a hotspot whose pods are all non-removable). None until a second cycle
    has started (the first is then complete)."""
    cycles: list[Decisions] = []
    for line in log.splitlines():
        found = _KLOG.search(line)
        if found is None:
            continue
        fields = dict(_FIELD.findall(found.group("rest")))
        if found.group("msg") == "try to process nodePool":
            cycles.append(Decisions())
        elif cycles and found.group("msg") == "Evicted pod in dry run mode":
            pod, node = fields.get("pod", ""), fields.get("node", "")
            cycles[-1].sources.add(node)
            cycles[-1].add(node, app_of.get(pod, pod))
    return cycles[0] if len(cycles) >= 2 else None


def our_decisions(record: Mapping[str, Any], app_of: Mapping[str, str]) -> Decisions:
    """Our cycle record (``once --output json``): nodes with a planned eviction, and the evictions."""
    decided = Decisions()
    for eviction in record.get("evictions", []):
        decided.sources.add(eviction["node"])
        decided.add(eviction["node"], app_of.get(eviction["pod"], eviction["pod"]))
    return decided


# --- one shape on the control plane -------------------------------------------------------------------------


def _resources(qos: str) -> dict[str, Any]:
    """Container resources giving a pod the QoS class ``qos``."""
    amounts = {"cpu": "100m", "memory": "128Mi"}
    if qos == "Guaranteed":
        return {"requests": amounts, "limits": amounts}
    if qos == "Burstable":
        return {"requests": amounts}
    return {}


def _deployment(
    name: str, app: str, ns: str, node: str, replicas: int, priority: str = "", qos: str = "Burstable"
) -> dict[str, Any]:
    labels = {"app": app, "part": name}
    spec: dict[str, Any] = {
        "nodeName": node,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "registry.invalid/app:1", "resources": _resources(qos)}],
    }
    if priority:
        spec["priorityClassName"] = priority
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def priority_classes() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in PRIORITIES.items()
    ]


def build_shape(plane: ControlPlane, shape: Shape, ns: str) -> dict[str, int]:
    """Nodes and workloads of ``shape`` in namespace ``ns``; returns node name -> CPUs."""
    from tests.controlplane import objects

    nodes = {f"{ns}-n{i}": cpus for i, cpus in enumerate(shape.nodes)}
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    node_docs = [objects.node(name, ns, cpu=str(cpus)) for name, cpus in nodes.items()]
    for doc, pool in zip(node_docs, shape.pools, strict=False):
        doc["metadata"]["labels"]["pool"] = pool
    plane.apply(node_docs)
    names = list(nodes)
    docs: list[dict[str, Any]] = []
    for w in shape.workloads:
        for index, count in w.placement:
            docs.append(_deployment(f"{w.app}-{index}", w.app, ns, names[index], count, w.priority, w.qos))
        if w.pdb:
            docs.append(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": w.app, "namespace": ns},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": w.app}}},
                }
            )
    plane.apply(docs, namespace=ns)
    want = sum(count for w in shape.workloads for _, count in w.placement)
    plane.wait_for(f"{want} pods of shape {shape.seed}", lambda: len(plane.running_pods(ns)) == want, 120)
    return nodes


def shape_config(
    shape: Shape, ns: str, kubeconfig: Path, migration: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The one configuration document both deschedulers read (``migration``: MigrationController args set
    for both, e.g. to take the per-workload limits out of a comparison)."""
    lnl: dict[str, Any] = {
        "lowThresholds": dict(shape.low),
        "highThresholds": dict(shape.high),
        "anomalyCondition": {"consecutiveAbnormalities": 1},
        "evictableNamespaces": {"include": [ns]},
    }
    if shape.pools:
        lnl["nodePools"] = [
            {
                "name": pool,
                "nodeSelector": {"matchLabels": {"pool": pool}},
                "lowThresholds": dict(low),
                "highThresholds": dict(high),
                "anomalyCondition": {"consecutiveAbnormalities": 1},
            }
            for pool, (low, high) in sorted(shape.pool_thresholds.items())
        ]
    limits = {k: v for k, v in shape.limits.items() if k not in TOP_LEVEL_LIMITS}
    limits.update(migration or {})
    config = koordinator.koord_config(
        kubeconfig, dry_run=True, interval="2s", low_node_load=lnl, migration=limits
    )
    for key in TOP_LEVEL_LIMITS:
        if key in shape.limits and migration is not GENEROUS:
            config[key] = shape.limits[key]
    config["nodeSelector"] = {"matchLabels": {GROUP_LABEL: ns}}
    return config


def due_nodes(
    current: Mapping[str, Any],
    written: Mapping[str, Any],
    written_at: Mapping[str, float],
    now: float,
    refresh: float,
) -> list[str]:
    """Nodes whose NodeMetric must be written now: usage changed since the last write, never written, or
    last written ``refresh`` seconds ago or more (its ``updateTime`` must stay within the expiry)."""
    return sorted(
        node
        for node, usage in current.items()
        if written.get(node) != usage or now - written_at.get(node, float("-inf")) >= refresh
    )


class NodeMetricFeeder:
    """Each node's NodeMetric status, as koordlet would report it, from the model Prometheus scrapes.

    A node is written as soon as its usage changes (what Prometheus serves changes at once too), and every
    ``refresh`` seconds anyway; with no GET before each PUT (the last written object is kept), so a pass
    over a hundred nodes with one change is one request, not two hundred. A failed write is retried on the
    next pass from a fresh GET; the thread never dies of it."""

    def __init__(self, api: KubeApi, model: SimulatedNodes, refresh: float = 10.0) -> None:
        self.api, self.model, self.refresh = api, model, refresh
        self._objects: dict[str, dict[str, Any]] = {}
        self._written: dict[str, Any] = {}
        self._written_at: dict[str, float] = {}
        self.errors = 0
        self.writes = 0
        self.slowest_pass = 0.0

    def _object(self, node: str) -> dict[str, Any]:
        if node in self._objects:
            return self._objects[node]
        try:
            return dict(self.api.request("GET", f"{NODE_METRICS}/{node}"))
        except Exception:
            body = {**koordinator.node_metric(node, {}), "status": {}}
            return dict(self.api.request("POST", NODE_METRICS, body=body))

    def write(self) -> None:
        started = time.monotonic()
        current = {
            node: (cores, memory, tuple(sorted(pods)))
            for node, (cores, memory, pods) in self.model.usage().items()
        }
        now = datetime.now(UTC)
        for node in due_nodes(current, self._written, self._written_at, started, self.refresh):
            cores, memory, pods = current[node]
            usage = [koordinator.PodUsage(ns, name, c, int(rss)) for ns, name, c, rss in pods]
            try:
                obj = self._object(node)
                obj["status"] = koordinator.node_metric_status(cores, int(memory), usage, now)
                self._objects[node] = dict(self.api.request("PUT", f"{NODE_METRICS}/{node}/status", body=obj))
            except Exception:
                self.errors += 1
                self._objects.pop(node, None)
                continue
            self.writes += 1
            self._written[node], self._written_at[node] = current[node], started
        self.slowest_pass = max(self.slowest_pass, time.monotonic() - started)


def write_node_metrics(api: KubeApi, model: SimulatedNodes) -> None:
    """Every node's NodeMetric status once (a one-off feeder)."""
    NodeMetricFeeder(api, model).write()


@contextlib.contextmanager
def feeding(api: KubeApi, model: SimulatedNodes, interval: float = 0.5) -> Iterator[NodeMetricFeeder]:
    """Keep the NodeMetrics fresh (koordlet reports every 60 s by default; writing each change within
    ``interval`` gives Koordinator the same usage our Prometheus has)."""
    stop = threading.Event()
    feeder = NodeMetricFeeder(api, model)

    def run() -> None:
        while not stop.wait(interval):
            feeder.write()

    feeder.write()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield feeder
    finally:
        stop.set()
        thread.join(5)


def run_koordinator(
    binary: Path, config: Mapping[str, Any], workdir: Path, app_of: Mapping[str, str]
) -> Decisions:
    path = workdir / "koord.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    log_path = workdir / "koord.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(koordinator.command(binary, path), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                decided = koordinator_decisions(log_path.read_text(errors="replace"), app_of)
                if decided is not None:
                    return decided
                if process.poll() is not None:
                    break
                time.sleep(0.5)
        finally:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
    raise RuntimeError(f"koord-descheduler logged no complete cycle; see {log_path}")


def run_ours(
    config: Mapping[str, Any], prometheus_url: str, kubeconfig: Path, workdir: Path, app_of: Mapping[str, str]
) -> Decisions:
    from tests.support.service import descheduler_command, subprocess_env

    doc = json.loads(json.dumps(config))
    doc["metricsProviders"] = [
        {"source": "Prometheus", "prometheus": {"url": prometheus_url, "window": "5s"}}
    ]
    doc["healthzBindAddress"] = doc["metricsBindAddress"] = ""
    path = workdir / "ours.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run(
        descheduler_command(
            "once", "--config", str(path), "--kubeconfig", str(kubeconfig), "--dry-run", "--output", "json"
        ),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    (workdir / "ours.json").write_text(done.stdout)
    (workdir / "ours.log").write_text(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"descheduler once failed ({done.returncode}): {done.stderr[-2000:]}")
    return our_decisions(json.loads(done.stdout), app_of)


def compare_shape(
    plane: ControlPlane,
    api: KubeApi,
    backend: UsageBackend,
    binary: Path,
    shape: Shape,
    workdir: Path,
    migration: Mapping[str, Any] | None = None,
) -> tuple[Agreement, Agreement]:
    """Both deschedulers on one shape twice: with the shape's limits and PDBs (``migration`` added), then
    with the PDBs deleted and ``GENEROUS`` limits (decisions without the dry-run accounting)."""
    from tests.controlplane.usage import ClusterUsage

    ns = f"agree-{shape.seed}"
    nodes = build_shape(plane, shape, ns)
    try:
        usage = ClusterUsage(api, ns, nodes, {w.app: w.cores for w in shape.workloads})
        with usage.following():
            plane.wait_for(
                "the usage model", lambda: len(usage.model.pods()) == len(plane.running_pods(ns)), 60
            )
            backend.install(usage.model, full_window=True, timeout=40)
            app_of = {
                f"{ns}/{p['metadata']['name']}": p["metadata"]["labels"]["app"]
                for p in plane.running_pods(ns)
            }
            results = []
            with feeding(api, usage.model):
                for mode, extra in (("limits", migration), ("generous", GENEROUS)):
                    if mode == "generous":
                        plane.kubectl("delete", "pdb", "--all", "-n", ns, check=False)
                    config = shape_config(shape, ns, plane.kubeconfig, extra)
                    where = workdir / mode
                    where.mkdir(parents=True, exist_ok=True)
                    theirs = run_koordinator(binary, config, where, app_of)
                    ours = run_ours(config, backend.url, plane.kubeconfig, where, app_of)
                    results.append(Agreement(shape.seed, ours, theirs))
        return results[0], results[1]
    finally:
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        plane.kubectl("delete", "nodes", "-l", f"{GROUP_LABEL}={ns}", "--wait=false", check=False)


def report(results: Sequence[Agreement], title: str = "") -> str:
    same_sources = sum(r.same_sources for r in results)
    same_evictions = sum(r.same_evictions for r in results)
    same_first = sum(r.same_first for r in results)
    ours = sum(sum(r.ours.evictions.values()) for r in results)
    theirs = sum(sum(r.theirs.evictions.values()) for r in results)
    lines = [
        f"{title}shapes: {len(results)}; same nodes acted on: {same_sources}; same evictions by (node, "
        f"workload): {same_evictions}; same first eviction per node: {same_first}; would-be evictions: "
        f"ours {ours}, Koordinator {theirs}"
    ]
    for r in results:
        for difference in r.differences():
            lines.append(f"  shape {r.seed}: {difference}")
    return "\n".join(lines)


def _decisions_json(d: Decisions) -> dict[str, Any]:
    return {
        "sources": sorted(d.sources),
        "evictions": [[*k, v] for k, v in sorted(d.evictions.items())],
        "first": dict(sorted(d.first.items())),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.koordinator_agreement", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--source", type=Path, required=True, help="a checkout of Koordinator at KOORD_COMMIT"
    )
    parser.add_argument("--shapes", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the per-shape decisions here")
    parser.add_argument("--keep", type=Path, help="keep each shape's configuration and logs in this folder")
    parser.add_argument(
        "--migration",
        type=json.loads,
        default=None,
        help="MigrationController args for both, as JSON (e.g. '{\"maxMigratingPerWorkload\": 0}')",
    )
    args = parser.parse_args(argv)
    from descheduler.kube.connection import connect
    from tests.controlplane.cluster import ControlPlane
    from tests.support.service import UsageBackend

    built = koordinator.build(args.source)
    results: list[tuple[Shape, Agreement, Agreement]] = []
    with tempfile.TemporaryDirectory(prefix="koord-agreement-") as tmp:
        workdir = args.keep if args.keep is not None else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        plane = ControlPlane.start(workdir / "plane")
        backend = UsageBackend().start(workdir / "prometheus")
        try:
            for crd in koordinator.crd_paths(args.source):
                plane.kubectl("apply", "--server-side", "-f", str(crd))
            plane.wait_for(
                "the NodeMetric CRD", lambda: plane.kubectl("get", "nodemetrics", check=False).returncode == 0
            )
            plane.apply(priority_classes())
            api = connect(str(plane.kubeconfig), qps=200, burst=400)
            for seed in range(args.first_seed, args.first_seed + args.shapes):
                shape = random_shape(seed)
                shape_dir = workdir / f"shape-{seed}"
                shape_dir.mkdir(exist_ok=True)
                limited, generous = compare_shape(
                    plane, api, backend, built.binary, shape, shape_dir, args.migration
                )
                results.append((shape, limited, generous))
                for mode, result in (("limits", limited), ("generous", generous)):
                    print(
                        f"shape {seed} ({mode}): {'agree' if result.same_evictions else 'differ'}: "
                        + "; ".join(result.differences()),
                        flush=True,
                    )
        finally:
            backend.close()
            plane.stop()
    print(report([r[1] for r in results], "with the shapes' limits and PDBs: "))
    print(report([r[2] for r in results], "generous limits, no PDBs: "))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "seed": shape.seed,
                        "shape": {
                            "nodes": shape.nodes,
                            "pools": shape.pools,
                            "limits": dict(shape.limits),
                            "workloads": [w.__dict__ for w in shape.workloads],
                        },
                        **{
                            mode: {"ours": _decisions_json(r.ours), "koordinator": _decisions_json(r.theirs)}
                            for mode, r in (("limits", limited), ("generous", generous))
                        },
                    }
                    for shape, limited, generous in results
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
