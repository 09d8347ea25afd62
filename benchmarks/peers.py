"""Side by side with the Kubernetes descheduler on one real control plane (issue 16).

Starts etcd, kube-apiserver (with an audit log of the deschedulers' own requests), the controller manager,
kube-scheduler and kwok; serves simulated kubelet usage that follows where the pods really run to a real
Prometheus; then, for each descheduler in turn, builds the same skewed cluster afresh (10 % of the nodes
hot by usage, every pod in a Deployment with a PodDisruptionBudget), runs the descheduler as a process
until no node is hot plus a settling period, and prints one table row per descheduler.

Not part of CI: it needs the control-plane binaries and ``sigs.k8s.io/descheduler`` built from their Go
modules (``python -m tests.controlplane.build --peers``), Prometheus, and ``unshare`` (the Kubernetes
descheduler builds its Prometheus client only from in-cluster files, see ``peer_command``).

    python -m benchmarks.peers --nodes 100 --pods-per-node 10

Every figure is measured the same way for every descheduler, outside it: evictions and API requests from
the API server's audit log (each descheduler authenticates as its own ServiceAccount), usage from the
simulated kubelets, budgets from the PDBs' status, memory and CPU from ``/proc``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from benchmarks.audit import AuditEvent, parse_audit

if TYPE_CHECKING:
    from descheduler.kube.api import KubeApi
    from tests.controlplane.cluster import ControlPlane
    from tests.support.service import Ports, UsageBackend

GROUP_LABEL = "descheduler.test/group"
BENCH_NAMESPACE = "peers-bench"
"""Where the deschedulers' ServiceAccounts and Leases live."""
OURS = "load-aware"
OURS_TAINT = "load-aware+taint"
"""Ours with ``hotspotTaint`` on: a PreferNoSchedule taint keeps the stock scheduler off hotspots."""
OURS_NOGUARD = "load-aware-noguard"
"""Ours with the ping-pong guard off (``pingPongGuard.enabled: false``): the product before issue 30."""
OURS_SHIPPED = "load-aware-shipped"
"""Ours with the configuration we ship (``--config-from``): a ``manifests/`` kustomization's ConfigMap,
with only what this machine and the benchmark's time scale must set replaced (``shipped_config``)."""
SHIPPED_CONFIGMAP = "load-aware-descheduler-config"
"""The base kustomization's generated ConfigMap (its rendered name carries a content hash)."""
OURS_RAW = "load-aware-raw"
"""Ours deciding on the raw usage samples, as before the migration-aware estimate (``raw_sample.py``)."""
PEER = "k8s-descheduler"
KOORD = "koordinator"
"""Koordinator's koord-descheduler (LowNodeLoad + MigrationController, ``EvictDirectly``); its usage is the
NodeMetrics the benchmark writes from the model our Prometheus scrapes (``benchmarks/koordinator.py``)."""
ACCOUNTS = {
    OURS: "load-aware-descheduler",
    OURS_TAINT: "load-aware-descheduler",
    OURS_NOGUARD: "load-aware-descheduler",
    OURS_RAW: "load-aware-descheduler",
    OURS_SHIPPED: "load-aware-descheduler",
    PEER: "k8s-descheduler",
    KOORD: "koord-descheduler",
}

LOW_CPU = 40.0
HIGH_CPU = 70.0
NODE_CPUS = 4
BASE_CORES = 0.3
"""System load of every node outside its pods (the usage exporter's constant)."""
HOT_PODS_PER_NODE = 6
HOT_POD_CORES = 0.6
"""Six busy pods of 0.6 cores and 0.3 of system load: 3.9 of 4 cores (97.5 %); two must go (67.5 %)."""
COOL_POD_CORES = 0.08
"""Ten quiet pods of 0.08 cores: 1.1 of 4 cores (27.5 %), under the low threshold."""
BUSY_REPLICAS = 6
QUIET_REPLICAS = 10
WINDOW = "5s"
"""The usage window of both deschedulers (a 5 s rate over 1 s scrapes)."""
PEER_QUERY = (
    'clamp(label_replace(1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[' + WINDOW + "])),"
    ' "instance", "$1", "instance", "(.*):[0-9]+"), 0, 1)'
)
"""The node CPU utilisation in <0; 1>, labelled ``instance=<node name>``, as LowNodeUtilization wants."""
PEER_MEMORY_QUERY = (
    "clamp(label_replace(1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes,"
    ' "instance", "$1", "instance", "(.*):[0-9]+"), 0, 1)'
)
"""The node memory utilisation, for the memory-hotspot shape (the peer takes one figure per node)."""
GI = 2**30


@dataclass(frozen=True)
class Hotspot:
    """Which resource makes the hot nodes hot, and the sizes of the pods in its units (cores or GiB)."""

    resource: str
    capacity: float
    base: float
    busy: float
    quiet: float
    busy_cores: float
    quiet_cores: float
    busy_gib: float
    quiet_gib: float


HOTSPOTS = {
    "cpu": Hotspot("cpu", NODE_CPUS, BASE_CORES, HOT_POD_CORES, COOL_POD_CORES, HOT_POD_CORES, COOL_POD_CORES,
                   0.25, 0.25),
    # 2 GiB of the node's own + 6 busy pods of 2 GiB = 14 of 16 GiB (87.5 %); two evictions cure it
    # (62.5 %); the quiet nodes use 2 + 10 x 0.3 = 5 GiB (31 %). CPU stays under 40 % everywhere.
    "memory": Hotspot("memory", 16.0, 2.0, 2.0, 0.3, 0.1, 0.08, 2.0, 0.3),
}  # fmt: skip
"""``--hotspot``: the issue-16 shape (CPU) and one whose hot nodes are hot by memory."""


def thresholds(hotspot: str) -> tuple[dict[str, float], dict[str, float]]:
    """Low and high thresholds for every descheduler: cpu 40/70, and memory 40/70 in the memory shape."""
    if hotspot == "memory":
        return {"cpu": LOW_CPU, "memory": LOW_CPU}, {"cpu": HIGH_CPU, "memory": HIGH_CPU}
    return {"cpu": LOW_CPU}, {"cpu": HIGH_CPU}


# --- pure figures ------------------------------------------------------------------------------------------


def needed_evictions(pod_cores: Sequence[float], *, base: float, cpus: float, high: float) -> int:
    """The fewest pods whose removal brings a node strictly under ``high`` percent: largest first."""
    used = base + sum(pod_cores)
    count = 0
    for cores in sorted(pod_cores, reverse=True):
        if 100.0 * min(used, cpus) / cpus < high:
            break
        used -= cores
        count += 1
    return count


def unneeded_evictions(
    evictions: Sequence[tuple[float, str]],
    landed: Mapping[str, tuple[str, float]],
    cores: Mapping[str, float],
    *,
    base: float,
    cpus: float,
    high: float,
) -> int:
    """Evictions from a node that was not hot when the request reached the server.

    A node's true usage at time ``t`` is its base load plus the pods that had landed on it by ``t``
    (``landed``: pod -> (node, time first seen running); 0 for the starting pods) and had not been evicted
    before ``t``. Judging each eviction at its own time credits a descheduler for re-curing a node a
    replacement made hot again, and charges it for evicting on a lagging figure.
    """
    evicted_at: dict[str, float] = {}
    unneeded = 0
    for t, pod in sorted(evictions):
        if pod not in landed:
            continue
        node = landed[pod][0]
        used = base + sum(
            cores[q]
            for q, (n, seen) in landed.items()
            if n == node and seen <= t and not (q in evicted_at and evicted_at[q] < t)
        )
        if 100.0 * min(used, cpus) / cpus <= high:
            unneeded += 1
        evicted_at.setdefault(pod, t)
    return unneeded


def arrivals(
    new: Mapping[str, str],
    present: Mapping[str, str],
    cores: Mapping[str, float],
    *,
    base: float,
    cpus: float,
    high: float,
) -> tuple[list[str], list[str]]:
    """Of the pods ``new`` (pod -> node) that just started running, those that landed on a node already
    hot before they arrived, and those that made their node hot (not hot before, hot with them).

    ``present``: every pod running now (the new ones included). A node's usage before the arrivals is its
    base load plus the pods present that are not new (uncapped: a node over its capacity is hot). Pods that
    arrive on one node in the same observation (100 ms here) arrive together: none of them counts the
    others as there before it. Their sum is the old measure (hot once they ran).
    """
    already: list[str] = []
    made: list[str] = []
    for pod, node in sorted(new.items()):
        before = base + sum(cores[q] for q, n in present.items() if n == node and q not in new)
        after = before + sum(cores[q] for q, n in new.items() if n == node)
        if 100.0 * before / cpus > high:
            already.append(pod)
        elif 100.0 * min(after, cpus) / cpus > high:
            made.append(pod)
    return already, made


_KLOG_CYCLE = re.compile(
    r'^I(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2}\.\d+)\s+\d+ \S+\] "Number of evictions/requests"'
)
_KOORD_CYCLE = re.compile(
    r'^I(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2}\.\d+)\s+\d+ \S+\] "try to process nodePool"'
)
"""koord-descheduler (``--v=4``) starts each LowNodeLoad pass over a node pool with this line."""


def cycle_times(log_text: str, *, peer: bool, year: int, koord: bool = False) -> list[float]:
    """Unix times at which each cycle ended, read from the log lines' own timestamps.

    The log is read after the run, not counted while it runs: klog (the peer) flushes its buffer only every
    few seconds, so counting lines as they appear would lag by up to that long. klog stamps local time
    without a year; ours writes ISO 8601 UTC on each ``cycle_summary`` record.
    """
    out: list[float] = []
    for line in log_text.splitlines():
        if peer or koord:
            m = (_KOORD_CYCLE if koord else _KLOG_CYCLE).match(line)
            if m:
                month, day, hour, minute, sec = m.groups()
                stamp = datetime(year, int(month), int(day), int(hour), int(minute)).timestamp()
                out.append(stamp + float(sec))
        elif '"cycle_summary"' in line:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                out.append(datetime.fromisoformat(json.loads(line)["timestamp"]).timestamp())
    return sorted(out)


def app_of(pod: str) -> str:
    """The Deployment of a pod named ``<deployment>-<replicaset hash>-<suffix>``."""
    return pod.rsplit("-", 2)[0]


def backoff_figures(log_text: str) -> tuple[int, int]:
    """From our JSON log: ping-pong back-offs announced, and pods skipped with ``ping-pong-backoff``."""
    announced = skipped = 0
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "ping_pong_backoff":
            announced += 1
        elif record.get("event") == "cycle_summary":
            skipped += int((record.get("skips") or {}).get("ping-pong-backoff", 0))
    return announced, skipped


def is_eviction(event: AuditEvent) -> bool:
    return event.verb == "create" and event.resource == "pods/eviction"


@dataclass
class Row:
    """One descheduler's figures, all measured in the same run."""

    name: str
    evictions: int = 0
    refused: int = 0
    """Eviction requests the server refused (429: a PDB)."""
    unneeded: int = 0
    landed_hot: int = 0
    """Replacements that landed on a node already hot before they arrived (issue 13's measure)."""
    made_hot: int = 0
    """Replacements that made their node hot (not hot before they arrived, hot with them)."""
    replacements: int = 0
    cycles_to_cure: int | None = None
    seconds_to_cure: float | None = None
    pushed_below_low: int = 0
    pdb_violations: int = 0
    pdb_samples: int = 0
    requests_per_cycle: float = float("nan")
    request_mix: dict[str, float] = field(default_factory=dict)

    @property
    def lease_per_cycle(self) -> float:
        """Lease requests per cycle: leader election, whose timings differ between the two (see README)."""
        return sum(v for k, v in self.request_mix.items() if k.endswith(" leases"))

    queries_per_cycle: float = float("nan")
    """Prometheus queries per cycle after start-up (nothing else queries it during a run)."""
    peak_rss_mib: float = float("nan")
    cpu_seconds: float = float("nan")
    run_seconds: float = 0.0
    first_cycle_s: float | None = None
    first_eviction_s: float | None = None
    hot_nodes: int = 0
    needed: int = 0
    backoffs: int = 0
    """Ping-pong back-offs our descheduler announced (``ping_pong_backoff`` log lines)."""
    backoff_skips: int = 0
    """Pods skipped with ``ping-pong-backoff``, summed over the cycles."""


def _fmt(value: float | int | None, spec: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def table(rows: Sequence[Row]) -> str:
    """The comparison as a Markdown table, one row per descheduler."""
    head = [
        "descheduler", "evictions (refused)", "unneeded", "replacements on a node already hot",
        "replacements that made a node hot", "hot once running (old measure)",
        "cycles / s until none hot", "pushed below low", "PDB violations (samples)", "API requests per cycle",
        "Prometheus queries per cycle", "peak RSS MiB", "CPU s (run s)", "first cycle / first eviction s",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cure = (
            f"{r.cycles_to_cure} / {r.seconds_to_cure:.1f}"
            if r.cycles_to_cure is not None and r.seconds_to_cure is not None
            else "not cured"
        )
        cells = [
            r.name,
            f"{r.evictions} ({r.refused})",
            str(r.unneeded),
            f"{r.landed_hot} of {r.replacements}",
            f"{r.made_hot} of {r.replacements}",
            f"{r.landed_hot + r.made_hot} of {r.replacements}",
            cure,
            str(r.pushed_below_low),
            f"{r.pdb_violations} ({r.pdb_samples})",
            f"{_fmt(r.requests_per_cycle, '.1f')} ({_fmt(r.lease_per_cycle, '.1f')} lease)",
            _fmt(r.queries_per_cycle, ".1f"),
            _fmt(r.peak_rss_mib, ".0f"),
            f"{_fmt(r.cpu_seconds, '.1f')} ({r.run_seconds:.0f})",
            f"{_fmt(r.first_cycle_s, '.1f')} / {_fmt(r.first_eviction_s, '.1f')}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _spread(values: Sequence[float | int | None], spec: str = ".0f") -> str:
    """Median and range of one figure over repeated runs: ``12 (10-15)``; ``-`` where no run has it."""
    import statistics

    known = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not known:
        return "-"
    median = format(statistics.median(known), spec)
    low, high = format(min(known), spec), format(max(known), spec)
    return median if low == high else f"{median} ({low}-{high})"


def usage_reads_per_cycle(row: Row) -> float:
    """How often a descheduler reads usage per cycle: Prometheus queries, or for Koordinator the NodeMetric
    requests it sends (its informer watches them; a re-list or re-watch counts)."""
    if not row.name.startswith(KOORD):
        return row.queries_per_cycle
    return sum(v for k, v in row.request_mix.items() if k.endswith(" nodemetrics"))


def spread_table(rows: Sequence[Row]) -> str:
    """Repeated runs of each descheduler as one row each: median (min-max) of every figure, and how many
    runs cured the cluster before the timeout."""
    by_name: dict[str, list[Row]] = {}
    for r in rows:
        by_name.setdefault(r.name, []).append(r)
    head = [
        "descheduler", "runs", "evictions", "refused", "unneeded", "replacements on a hot node",
        "cured (runs)", "cycles until none hot", "s until none hot", "PDB violations", "CPU s",
        "peak RSS MiB",
        "API requests per cycle", "usage reads per cycle",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, runs in by_name.items():
        cured = [r for r in runs if r.seconds_to_cure is not None]
        cells = [
            name,
            str(len(runs)),
            _spread([r.evictions for r in runs]),
            _spread([r.refused for r in runs]),
            _spread([r.unneeded for r in runs]),
            _spread([r.landed_hot + r.made_hot for r in runs]),
            f"{len(cured)} of {len(runs)}",
            _spread([r.cycles_to_cure for r in cured]),
            _spread([r.seconds_to_cure for r in cured], ".1f"),
            _spread([r.pdb_violations for r in runs]),
            _spread([r.cpu_seconds for r in runs], ".1f"),
            _spread([r.peak_rss_mib for r in runs]),
            _spread([r.requests_per_cycle for r in runs], ".1f"),
            _spread([usage_reads_per_cycle(r) for r in runs], ".1f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rows_from_json(paths: Sequence[Path]) -> list[Row]:
    """Rows written with ``--json`` (one file per run of the script)."""
    return [Row(**item) for path in paths for item in json.loads(path.read_text())]


def prometheus_queries(metrics_text: str) -> float:
    """Queries Prometheus has answered so far, from its own ``prometheus_http_requests_total``."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _queries_now(url: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        return prometheus_queries(response.read().decode())


def proc_figures(pid: int) -> tuple[float, float]:
    """Peak RSS (MiB, ``VmHWM``) and CPU seconds (user + system) of a live process, from /proc."""
    hwm = float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return hwm, (int(fields[11]) + int(fields[12])) / ticks


# --- configurations ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    interval_s: float
    consecutive: int
    object_window_s: float
    taint: bool = False
    guard: bool = True
    hotspot: str = "cpu"


def ours_config(group: str, prometheus_url: str, ports: Ports, settings: Settings) -> dict[str, Any]:
    """LowNodeLoad at cpu 40/70, the usage window of the peer, leader election and limits at their defaults
    except the per-workload window, scaled to the interval (5 cycles, as Koordinator's 5m at 60s)."""
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "deschedulingInterval": f"{settings.interval_s:g}s",
        "leaderElection": {
            "leaderElect": True,
            "resourceName": "load-aware-descheduler",
            "resourceNamespace": BENCH_NAMESPACE,
        },
        "healthzBindAddress": f"127.0.0.1:{ports.healthz}",
        "metricsBindAddress": f"127.0.0.1:{ports.metrics}",
        "nodeSelector": {"matchLabels": {GROUP_LABEL: group}},
        "metricsProviders": [
            {
                "source": "Prometheus",
                "prometheus": {
                    "url": prometheus_url,
                    "window": WINDOW,
                    "timeout": "2s",
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
                            "lowThresholds": thresholds(settings.hotspot)[0],
                            "highThresholds": thresholds(settings.hotspot)[1],
                            "anomalyCondition": {"consecutiveAbnormalities": settings.consecutive},
                            "hotspotTaint": {"enabled": settings.taint},
                            "pingPongGuard": {"enabled": settings.guard},
                            "nodeMetricExpirationSeconds": 30,
                        },
                    },
                    {
                        "name": "MigrationController",
                        "args": {
                            "objectLimiters": {"workload": {"duration": f"{settings.object_window_s:g}s"}}
                        },
                    },
                ],
            }
        ],
    }


def configmap_config(rendered: str, source: str, name: str = SHIPPED_CONFIGMAP) -> dict[str, Any]:
    """The configuration held by the ConfigMap ``name`` (or ``name-<hash>``, as a configMapGenerator names it)
    in ``rendered``, the output of ``kubectl kustomize``; a missing or malformed one is an error naming it."""
    for doc in yaml.safe_load_all(rendered):
        meta = doc.get("metadata") if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" else None
        found = meta.get("name", "") if isinstance(meta, dict) else ""
        if found != name and not (isinstance(found, str) and found.startswith(f"{name}-")):
            continue
        data = doc.get("data")
        if not isinstance(data, dict) or len(data) != 1:
            raise ValueError(
                f"{source}: ConfigMap {found}: data must hold exactly one key, the configuration"
            )
        config = yaml.safe_load(next(iter(data.values())))
        if not isinstance(config, dict):
            raise ValueError(f"{source}: ConfigMap {found}: its data is not a configuration mapping")
        return config
    raise ValueError(f"{source}: no ConfigMap {name} (or {name}-<hash>) in the rendered kustomization")


def render_kustomization(path: Path, kubectl: Path) -> str:
    """``kubectl kustomize path``: what ``kubectl apply -k`` would send, the overlays' patches included."""
    import subprocess

    done = subprocess.run([str(kubectl), "kustomize", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"{path}: kubectl kustomize failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def shipped_config(
    shipped: dict[str, Any], group: str, prometheus_url: str, ports: Ports, settings: Settings
) -> dict[str, Any]:
    """What we ship, with only these replaced: where it runs (nodes of this run, the Lease's namespace, local
    ports), where usage comes from (this machine's Prometheus, labelled and windowed as for every row), and
    the time scale every row shares: the interval, ``consecutiveAbnormalities`` and the per-workload window
    (the shipped 60 s / 5 / 5m would make one row take half an hour). Thresholds, limits, the hotspot taint,
    the guard and everything else stay as shipped."""
    import copy

    config = copy.deepcopy(shipped)
    bench = ours_config(group, prometheus_url, ports, settings)
    for key in ("deschedulingInterval", "healthzBindAddress", "metricsBindAddress", "nodeSelector"):
        config[key] = bench[key]
    config["metricsProviders"] = bench["metricsProviders"]
    config.setdefault("leaderElection", {})["resourceNamespace"] = BENCH_NAMESPACE
    for profile in config.get("profiles", []):
        for plugin in profile.get("pluginConfig", []):
            args = plugin.setdefault("args", {})
            if plugin.get("name") == "LowNodeLoad":
                args.setdefault("anomalyCondition", {})["consecutiveAbnormalities"] = settings.consecutive
            elif plugin.get("name") == "MigrationController":
                limiters = args.setdefault("objectLimiters", {})
                limiters.setdefault("workload", {})["duration"] = f"{settings.object_window_s:g}s"
    return config


def koord_config(kubeconfig: Path, group: str, ports: Ports, settings: Settings) -> dict[str, Any]:
    """The ACK guide's ConfigMap as koord-descheduler reads it (``EvictDirectly``), with what ours is given
    on purpose: the same thresholds, interval, consecutive cycles, node expiry, per-workload window and
    ``maxMigratingPerNode`` (2, the default of both), the same nodes."""
    from benchmarks import koordinator

    low, high = thresholds(settings.hotspot)
    config = koordinator.koord_config(
        kubeconfig,
        dry_run=False,
        interval=f"{settings.interval_s:g}s",
        health_port=ports.healthz,
        metrics_port=ports.metrics,
        low_node_load={
            "lowThresholds": low,
            "highThresholds": high,
            "anomalyCondition": {"consecutiveAbnormalities": settings.consecutive},
            "nodeMetricExpirationSeconds": 30,
        },
        migration={
            "maxMigratingPerNode": 2,
            "objectLimiters": {"workload": {"duration": f"{settings.object_window_s:g}s"}},
        },
    )
    config["nodeSelector"] = {"matchLabels": {GROUP_LABEL: group}}
    return config


def peer_policy(group: str, prometheus_url: str, hotspot: str = "cpu") -> dict[str, Any]:
    """LowNodeUtilization with ``metricsUtilization`` from Prometheus: one ``MetricResource`` threshold
    pair (it takes a single utilisation figure per node), the same 40/70, the same nodes."""
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "nodeSelector": f"{GROUP_LABEL}={group}",
        "metricsProviders": [{"source": "Prometheus", "prometheus": {"url": prometheus_url}}],
        "profiles": [
            {
                "name": "load",
                "pluginConfig": [
                    {"name": "DefaultEvictor", "args": {}},
                    {
                        "name": "LowNodeUtilization",
                        "args": {
                            "thresholds": {"MetricResource": int(LOW_CPU)},
                            "targetThresholds": {"MetricResource": int(HIGH_CPU)},
                            "metricsUtilization": {
                                "source": "Prometheus",
                                "prometheus": {
                                    "query": PEER_MEMORY_QUERY if hotspot == "memory" else PEER_QUERY
                                },
                            },
                        },
                    },
                ],
                "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}},
            }
        ],
    }


def peer_process(
    plane: ControlPlane, binary: Path, policy: Mapping[str, Any], kubeconfig: Path, interval_s: float,
    workdir: Path,
) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """Command line and environment of the Kubernetes descheduler with ``policy``, as the ServiceAccount of
    ``kubeconfig``, its in-cluster files and certificates under ``workdir`` (see ``peer_command``)."""
    from tests.support.prometheus import free_port

    path = workdir / "policy.yaml"
    path.write_text(yaml.safe_dump(dict(policy)))
    secrets = workdir / "serviceaccount"
    secrets.mkdir(exist_ok=True)
    token = json.loads(kubeconfig.read_text())["users"][0]["user"]["token"]
    (secrets / "token").write_text(token)
    shutil.copy(plane.pki.ca_crt, secrets / "ca.crt")
    argv = peer_command(binary, path, kubeconfig, interval_s, secrets, workdir, free_port())
    host, port = plane.server.removeprefix("https://").rsplit(":", 1)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    env.pop("KUBECONFIG", None)
    return argv, env


def audit_policy(users: Sequence[str]) -> dict[str, Any]:
    """An audit policy that logs (metadata only) the requests of ``users`` and nothing else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [{"level": "Metadata", "users": list(users)}, {"level": "None"}],
    }


def peer_command(
    binary: Path, policy: Path, kubeconfig: Path, interval_s: float, secrets: Path, workdir: Path, port: int
) -> list[str]:
    """The Kubernetes descheduler in a private mount namespace whose /run holds a pod's service-account
    files: its Prometheus client is built only in-cluster (token and CA read from
    ``/var/run/secrets/kubernetes.io/serviceaccount``) or from a Secret (which also needs that CA file)."""
    target = "/run/secrets/kubernetes.io/serviceaccount"
    argv = [
        str(binary), f"--policy-config-file={policy}", f"--kubeconfig={kubeconfig}",
        f"--descheduling-interval={interval_s:g}s", "--v=1", "--leader-elect=true",
        f"--leader-elect-resource-namespace={BENCH_NAMESPACE}", "--bind-address=127.0.0.1",
        f"--secure-port={port}", f"--cert-dir={workdir / 'certs'}",
    ]  # fmt: skip
    script = (
        f"mount -t tmpfs tmpfs /run && mkdir -p {target} && cp {secrets}/token {secrets}/ca.crt {target}/ && "
        'exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "peer", *argv]


# --- the live run ------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods-per-node", type=int, default=QUIET_REPLICAS, help="quiet pods per cool node")
    parser.add_argument("--hot-fraction", type=float, default=0.10)
    parser.add_argument(
        "--quiet-cpu-request",
        default="100m",
        help="CPU request of a quiet pod (the busy ones request 250m): at 100m a hot node that lost two pods "
        "requests as much as a cool one and kube-scheduler often puts replacements back; "
        "50m steers them away",
    )
    parser.add_argument(
        "--runs",
        default=f"{OURS}:2,{OURS_TAINT}:2,{PEER}:2,{PEER}:6",
        help="descheduler:interval-seconds, comma separated, run in this order",
    )
    parser.add_argument(
        "--hotspot", choices=sorted(HOTSPOTS), default="cpu", help="the resource that makes the hot nodes hot"
    )
    parser.add_argument(
        "--koord-source", type=Path, default=None,
        help=f"a checkout of Koordinator at its benchmarked commit (needed for {KOORD} runs: CRDs, binary)",
    )  # fmt: skip
    parser.add_argument(
        "--config-from", type=Path, default=None,
        help=f"a kustomization (e.g. manifests) whose ConfigMap {SHIPPED_CONFIGMAP} is the configuration of "
        f"{OURS_SHIPPED} runs; interval, consecutiveAbnormalities and the workload window are the run's",
    )  # fmt: skip
    parser.add_argument("--consecutive", type=int, default=2, help="our consecutiveAbnormalities")
    parser.add_argument("--object-window", type=float, default=10.0, help="our objectLimiters window, s")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds to keep running once cured")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a descheduler gets to cure")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, audit log)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    parser.add_argument(
        "--summarise", type=Path, nargs="+", default=None,
        help="print one row per descheduler, median (min-max), from these --json files, and run nothing",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.summarise:
        print(spread_table(rows_from_json(args.summarise)))
        return 0
    runs = [(spec.split(":")[0], float(spec.split(":")[1])) for spec in args.runs.split(",")]
    for tool, _ in runs:
        if tool not in ACCOUNTS:
            parser.error(f"--runs: unknown descheduler {tool!r} (known: {', '.join(ACCOUNTS)})")
        if tool == KOORD and args.koord_source is None:
            parser.error(f"--runs {KOORD} needs --koord-source")
        if tool == OURS_SHIPPED and args.config_from is None:
            parser.error(f"--runs {OURS_SHIPPED} needs --config-from")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="peers-"))
    # SIGTERM unwinds like Ctrl-C, so the control plane, Prometheus and the descheduler are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        rows = run_all(args, runs, workdir)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table(rows))
    for r in rows:
        mix = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r.request_mix.items(), key=lambda kv: -kv[1]))
        print(f"{r.name}: {r.hot_nodes} hot nodes needing {r.needed} evictions; requests per cycle: {mix}")
        print(f"{r.name}: ping-pong back-offs {r.backoffs}, pods skipped ping-pong-backoff {r.backoff_skips}")
    if args.json is not None:
        args.json.write_text(json.dumps([{**r.__dict__} for r in rows], indent=1, default=str) + "\n")
    return 0


def run_all(args: argparse.Namespace, runs: Sequence[tuple[str, float]], workdir: Path) -> list[Row]:
    from descheduler.kube.connection import connect
    from tests.controlplane import build
    from tests.controlplane.cluster import ControlPlane
    from tests.support.service import UsageBackend

    if shutil.which("unshare") is None and any(tool == PEER for tool, _ in runs):
        raise SystemExit(
            "unshare (util-linux) is needed to give the Kubernetes descheduler its in-cluster files"
        )
    comps = build.CONTROL_PLANE + ((build.PEER_DESCHEDULER,) if any(t == PEER for t, _ in runs) else ())
    binaries = build.ensure_all(comps)
    if any(t == KOORD for t, _ in runs):
        from benchmarks import koordinator

        binaries["koord-descheduler"] = koordinator.build(args.koord_source).binary
    shipped = None
    if any(t == OURS_SHIPPED for t, _ in runs):
        rendered = render_kustomization(args.config_from, binaries["kubectl"])
        shipped = configmap_config(rendered, str(args.config_from))
        print(f"{OURS_SHIPPED}: {args.config_from}'s ConfigMap {SHIPPED_CONFIGMAP}, with the interval, "
              "consecutiveAbnormalities and workload window of every row", flush=True)  # fmt: skip
    policy = audit_policy([f"system:serviceaccount:{BENCH_NAMESPACE}:{sa}" for sa in ACCOUNTS.values()])
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {os.cpu_count()} CPUs", flush=True)
    started = time.monotonic()
    plane = ControlPlane.start(workdir / "controlplane", binaries, audit_policy=policy)
    print(f"control plane up in {time.monotonic() - started:.1f}s", flush=True)
    backend = UsageBackend()
    api = connect(str(plane.kubeconfig), qps=1000, burst=1000)
    rows: list[Row] = []
    try:
        backend.start(workdir / "prometheus")
        kubeconfigs = setup_accounts(plane, workdir)
        if "koord-descheduler" in binaries:
            from benchmarks import koordinator

            for crd in koordinator.crd_paths(args.koord_source):
                plane.kubectl("apply", "--server-side", "-f", str(crd))
        for index, (tool, interval) in enumerate(runs):
            taint, guard = tool == OURS_TAINT, tool != OURS_NOGUARD
            settings = Settings(
                interval, args.consecutive, args.object_window, taint=taint, guard=guard, hotspot=args.hotspot
            )
            name = f"{tool} ({interval:g}s)"
            group = f"run{index}-{tool.replace('+', '-')}"
            print(f"\n== {name}: building the cluster {group}", flush=True)
            built = time.monotonic()
            cluster = build_cluster(
                plane, api, group, args.nodes, args.hot_fraction, args.pods_per_node, args.quiet_cpu_request,
                HOTSPOTS[args.hotspot],
            )  # fmt: skip
            print(f"cluster built in {time.monotonic() - built:.0f}s", flush=True)
            row = run_one(
                plane, api, backend, cluster, tool, name, settings, kubeconfigs[tool],
                binaries.get("koord-descheduler" if tool == KOORD else "descheduler"), workdir / group, args,
                shipped=shipped,
            )  # fmt: skip
            rows.append(row)
            print(table([row]), flush=True)
            teardown(plane, group)
    finally:
        api.close()
        backend.close()
        plane.stop()
    return rows


def setup_accounts(plane: ControlPlane, workdir: Path) -> dict[str, Path]:
    """A ServiceAccount per descheduler, bound to cluster-admin (what each needs is not the question here),
    so the audit log tells their requests apart; a token kubeconfig for each."""
    from tests.controlplane.objects import cluster_admin_account

    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BENCH_NAMESPACE}}
    ]
    plane.apply(docs)
    plane.wait_for(
        "ServiceAccount default",
        lambda: plane.kubectl("get", "sa", "default", "-n", BENCH_NAMESPACE, check=False).returncode == 0,
    )
    for sa in ACCOUNTS.values():
        plane.apply(cluster_admin_account(sa, BENCH_NAMESPACE))
    return {
        tool: plane.token_kubeconfig(BENCH_NAMESPACE, sa, workdir / f"{sa}.kubeconfig")
        for tool, sa in ACCOUNTS.items()
    }


@dataclass
class Cluster:
    group: str
    hot: list[str]
    cool: list[str]
    cores: dict[str, float]
    """Cores used by a pod of each Deployment (its ``app`` label)."""
    start_pods: dict[str, str]
    """Pod name -> node, as the run starts."""
    pdbs: list[str]
    hotspot: Hotspot = HOTSPOTS["cpu"]
    sizes: dict[str, float] = field(default_factory=dict)
    """What a pod of each Deployment uses of the hotspot's resource (cores or GiB): the pure figures'."""
    rss: dict[str, float] = field(default_factory=dict)
    """Memory (bytes) a pod of each Deployment uses, when the shape sets it (the memory hotspot)."""

    @property
    def nodes(self) -> list[str]:
        return [*self.hot, *self.cool]


def build_cluster(
    plane: ControlPlane,
    api: KubeApi,
    group: str,
    nodes: int,
    hot_fraction: float,
    quiet_per_node: int,
    quiet_cpu: str,
    hotspot: Hotspot = HOTSPOTS["cpu"],
) -> Cluster:
    """The skew: the hot nodes alone are schedulable while the busy Deployments start, so all their pods
    land there; then the cool nodes open and the quiet Deployments fill them."""
    from tests.controlplane import objects

    n_hot = max(1, round(nodes * hot_fraction))
    hot = [f"{group}-hot-{i:03d}" for i in range(n_hot)]
    cool = [f"{group}-node-{i:03d}" for i in range(nodes - n_hot)]
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": group}}])
    plane.wait_for(
        f"ServiceAccount default in {group}",
        lambda: plane.kubectl("get", "sa", "default", "-n", group, check=False).returncode == 0,
    )
    plane.add_nodes(group, hot)
    plane.add_nodes(group, cool, unschedulable=True)
    n_busy = n_hot * HOT_PODS_PER_NODE // BUSY_REPLICAS
    busy = [f"busy-{i:02d}" for i in range(n_busy)]
    n_quiet = math.ceil(len(cool) * quiet_per_node / QUIET_REPLICAS)
    quiet = [f"quiet-{i:03d}" for i in range(n_quiet)]
    cores = {**dict.fromkeys(busy, hotspot.busy_cores), **dict.fromkeys(quiet, hotspot.quiet_cores)}
    sizes = {**dict.fromkeys(busy, hotspot.busy), **dict.fromkeys(quiet, hotspot.quiet)}
    rss: dict[str, float] = {}
    if hotspot.resource == "memory":
        rss = {**dict.fromkeys(busy, hotspot.busy_gib * GI), **dict.fromkeys(quiet, hotspot.quiet_gib * GI)}

    def apps(names: list[str], cpu: str, memory: str, replicas: int) -> list[dict[str, Any]]:
        docs: list[dict[str, Any]] = []
        for app in names:
            docs.append(objects.deployment(app, group, replicas=replicas, cpu=cpu, memory=memory))
            docs.append(objects.pdb(app, app, max_unavailable=1))
        return docs

    def running(count: int, where: set[str] | None = None) -> list[dict[str, Any]] | None:
        pods = plane.running_pods(group)
        if len(pods) < count:
            return None
        if where is not None and any(p["spec"]["nodeName"] not in where for p in pods):
            raise RuntimeError("a busy pod ran outside the hot nodes")
        return pods

    plane.apply(apps(busy, "250m", "256Mi", BUSY_REPLICAS), namespace=group)
    plane.wait_for(
        "busy pods Running", lambda: running(n_busy * BUSY_REPLICAS, set(hot)), timeout_s=300, interval_s=1
    )
    plane.kubectl("uncordon", *cool)
    plane.apply(apps(quiet, quiet_cpu, "64Mi", QUIET_REPLICAS), namespace=group)
    total = n_busy * BUSY_REPLICAS + n_quiet * QUIET_REPLICAS
    pods = plane.wait_for("every pod Running", lambda: running(total), timeout_s=600, interval_s=2)
    start_pods = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    per_node = Counter(start_pods.values())
    print(
        f"{len(hot)} hot + {len(cool)} cool nodes, {total} pods in {n_busy + n_quiet} Deployments with PDBs; "
        f"pods per hot node {sorted(per_node[n] for n in hot)}",
        flush=True,
    )
    return Cluster(group, hot, cool, cores, start_pods, busy + quiet, hotspot, sizes, rss)


def teardown(plane: ControlPlane, group: str) -> None:
    plane.kubectl("delete", "namespace", group, "--wait=false", check=False)
    plane.kubectl("delete", "nodes", "-l", f"{GROUP_LABEL}={group}", "--wait=false", check=False)
    with contextlib.suppress(AssertionError):
        plane.wait_for(
            f"namespace {group} gone",
            lambda: plane.kubectl("get", "namespace", group, check=False).returncode != 0,
            timeout_s=180,
            interval_s=2,
        )


class Usage:
    """The usage exporter of the real-cluster tests, noting each new pod's node and whether that node was
    hot before it arrived (``landed_hot``) or was made hot by it (``made_hot``), see ``arrivals``."""

    def __init__(self, api: KubeApi, cluster: Cluster) -> None:
        from tests.controlplane.usage import ClusterUsage

        inner = ClusterUsage(
            api, cluster.group, dict.fromkeys(cluster.nodes, NODE_CPUS), cluster.cores, cluster.rss or None
        )
        self.hotspot = cluster.hotspot
        self.inner = inner
        self.initial = set(cluster.start_pods)
        self.landed_hot: list[str] = []
        self.made_hot: list[str] = []
        self.landed: dict[str, tuple[str, float]] = {n: (node, 0.0) for n, node in cluster.start_pods.items()}
        """Pod -> (node, time it was first seen running there)."""
        original = inner.sync
        pod_cores = {**{p: cluster.sizes[app_of(p)] for p in cluster.start_pods}}
        h = cluster.hotspot

        def sync() -> None:
            before = set(inner.placements)
            original()
            now = time.time()
            new = {n: inner.placements[n] for n in set(inner.placements) - before - self.initial}
            if not new:
                return
            present = {name: inner.placements[name] for ns, name in inner.model.pods() if ns == cluster.group}
            for name in present:
                pod_cores.setdefault(name, cluster.sizes[app_of(name)])
            for name, node in new.items():
                self.landed[name] = (node, now)
            already, made = arrivals(new, present, pod_cores, base=h.base, cpus=h.capacity, high=HIGH_CPU)
            self.landed_hot += already
            self.made_hot += made

        inner.sync = sync  # type: ignore[method-assign]

    def percent(self, node: str) -> float:
        """The node's true usage of the hotspot's resource now, in percent."""
        if self.hotspot.resource == "memory":
            return self.inner.memory_percent(node)
        return self.inner.node_percent(node)

    def percents(self, nodes: Sequence[str]) -> dict[str, float]:
        """``percent`` of every node (the memory figure sums every pod: one pass, not one per node)."""
        if self.hotspot.resource != "memory":
            return {n: self.inner.node_percent(n) for n in nodes}
        usage = self.inner.model.usage()
        return {n: 100.0 * (usage[n][1] + sum(p[3] for p in usage[n][2])) / (16 * GI) for n in nodes}


@dataclass
class BudgetWatch:
    """Every PDB of the namespace, listed from the server every 200 ms: fewer healthy than desired is a
    violation (counted once per PDB and sample)."""

    api: KubeApi
    namespace: str
    samples: int = 0
    violations: int = 0

    def check(self) -> None:
        items = self.api.get(f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets")["items"]
        self.samples += 1
        for pdb in items:
            status = pdb.get("status") or {}
            if int(status.get("currentHealthy", 0)) < int(status.get("desiredHealthy", 0)):
                self.violations += 1

    @contextlib.contextmanager
    def running(self) -> Iterator[BudgetWatch]:
        from tests.support.sampling import sampling

        with sampling(self.check, "pdb-watch", 0.2):
            yield self


def run_one(
    plane: ControlPlane, api: KubeApi, backend: UsageBackend, cluster: Cluster, tool: str, name: str,
    settings: Settings, kubeconfig: Path, peer_binary: Path | None, workdir: Path, args: argparse.Namespace,
    shipped: dict[str, Any] | None = None,
) -> Row:  # fmt: skip
    import subprocess

    from tests.support.service import REPO, Ports, descheduler_command, subprocess_env

    workdir.mkdir(parents=True, exist_ok=True)
    row = Row(name)
    h = cluster.hotspot
    pods_on: dict[str, list[float]] = {n: [] for n in cluster.nodes}
    for pod, node in cluster.start_pods.items():
        pods_on[node].append(cluster.sizes[app_of(pod)])
    needed = {n: needed_evictions(c, base=h.base, cpus=h.capacity, high=HIGH_CPU) for n, c in pods_on.items()}
    row.needed = sum(needed.values())
    usage = Usage(api, cluster)
    budgets = BudgetWatch(api, cluster.group)
    log_path = workdir / "descheduler.log"
    feeder: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if tool == KOORD:
        from benchmarks.koordinator_agreement import feeding

        feeder = feeding(api, usage.inner.model)
    with usage.inner.following(), budgets.running():
        backend.install(usage.inner.model, full_window=True, timeout=60)
        start_percent = usage.percents(cluster.nodes)
        row.hot_nodes = sum(v > HIGH_CPU for v in start_percent.values())
        if tool in (OURS, OURS_TAINT, OURS_NOGUARD, OURS_RAW, OURS_SHIPPED):
            ports = Ports.free()
            config = workdir / "config.yaml"
            if tool == OURS_SHIPPED:
                assert shipped is not None
                doc = shipped_config(shipped, cluster.group, backend.url, ports, settings)
            else:
                doc = ours_config(cluster.group, backend.url, ports, settings)
            config.write_text(yaml.safe_dump(doc))
            argv = descheduler_command(
                "run", "--config", str(config), "--kubeconfig", str(kubeconfig), "--log-format", "json"
            )
            if tool == OURS_RAW:  # the same command line, with the estimate switched off
                argv = [sys.executable, "-m", "benchmarks.raw_sample", *argv[3:]]
            env = subprocess_env()
            marker = '"event": "cycle_summary"'
        elif tool == KOORD:
            from benchmarks import koordinator

            assert peer_binary is not None
            config = workdir / "koord.yaml"
            config.write_text(yaml.safe_dump(koord_config(kubeconfig, cluster.group, Ports.free(), settings)))
            argv = koordinator.command(peer_binary, config)
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            marker = '"try to process nodePool"'
        else:
            assert peer_binary is not None
            policy = peer_policy(cluster.group, backend.url, settings.hotspot)
            argv, env = peer_process(plane, peer_binary, policy, kubeconfig, settings.interval_s, workdir)
            marker = "Number of evictions/requests"
        with log_path.open("wb") as log, feeder as fed:
            t0 = time.time()
            proc = subprocess.Popen(argv, cwd=workdir if tool in (PEER, KOORD) else REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
            try:
                first_seen_t, cured_t = None, None
                queries_at_first = 0.0
                figures: tuple[float, float] = (float("nan"), float("nan"))
                while True:
                    time.sleep(0.25)
                    now = time.time()
                    if proc.poll() is not None:
                        raise RuntimeError(
                            f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
                        )
                    cycles = log_path.read_text(errors="replace").count(marker)
                    if first_seen_t is None and cycles >= 1:
                        first_seen_t, queries_at_first = now, _queries_now(backend.url)
                    hot = [n for n, v in usage.percents(cluster.nodes).items() if v > HIGH_CPU]
                    if not hot and cured_t is None:
                        cured_t, row.seconds_to_cure = now, now - t0
                        print(f"{name}: no node hot after {now - t0:.1f}s", flush=True)
                    if cured_t is not None and now - cured_t >= args.settle:
                        break
                    if cured_t is None and now - t0 > args.timeout:
                        print(f"{name}: {len(hot)} nodes still hot after {args.timeout:.0f}s", flush=True)
                        break
                figures = proc_figures(proc.pid)
                queries_at_end = _queries_now(backend.url)
                stop_t = time.time()
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        end_percent = usage.percents(cluster.nodes)
    if fed is not None:
        print(
            f"{name}: NodeMetric feeder {fed.writes} writes, {fed.errors} failed, slowest pass "
            f"{fed.slowest_pass:.2f}s",
            flush=True,
        )
    row.peak_rss_mib, row.cpu_seconds = figures
    row.run_seconds = stop_t - t0
    row.pdb_samples, row.pdb_violations = budgets.samples, budgets.violations
    row.landed_hot = len(usage.landed_hot)
    row.made_hot = len(usage.made_hot)
    row.replacements = len(set(usage.inner.placements) - usage.initial)
    row.pushed_below_low = sum(
        start_percent[n] >= LOW_CPU and end_percent[n] < LOW_CPU for n in cluster.nodes
    )
    user = f"system:serviceaccount:{BENCH_NAMESPACE}:{ACCOUNTS[tool]}"
    assert plane.audit_log is not None
    time.sleep(1.0)  # the audit backend writes each event once the response completes
    events = [
        e
        for e in parse_audit(plane.audit_log.read_text().splitlines())
        if e.user == user and e.received >= t0
    ]
    evictions = [e for e in events if is_eviction(e)]
    done = [e for e in evictions if e.code == 201]
    row.evictions, row.refused = len(done), sum(e.code == 429 for e in evictions)
    row.unneeded = unneeded_evictions(
        [(e.received, e.name) for e in done],
        usage.landed,
        {pod: cluster.sizes[app_of(pod)] for pod in usage.landed},
        base=h.base,
        cpus=h.capacity,
        high=HIGH_CPU,
    )
    times = cycle_times(
        log_path.read_text(errors="replace"),
        peer=tool == PEER,
        year=time.localtime(t0).tm_year,
        koord=tool == KOORD,
    )
    if cured_t is not None:
        row.cycles_to_cure = sum(t <= cured_t for t in times)
    if times:
        first_cycle_t = times[0]
        row.first_cycle_s = first_cycle_t - t0
        after = [e for e in events if first_cycle_t <= e.received <= stop_t]
        cycles_after = max(1, sum(first_cycle_t < t <= stop_t for t in times))
        row.requests_per_cycle = len(after) / cycles_after
        if first_seen_t is not None:
            row.queries_per_cycle = (queries_at_end - queries_at_first) / max(
                1, sum(first_seen_t < t <= stop_t for t in times)
            )
        mix = Counter(f"{e.verb} {e.resource}" for e in after)
        row.request_mix = {k: v / cycles_after for k, v in mix.items()}
    if done:
        row.first_eviction_s = min(e.received for e in done) - t0
    if tool not in (PEER, KOORD):
        row.backoffs, row.backoff_skips = backoff_figures(log_path.read_text(errors="replace"))
    (workdir / "audit.jsonl").write_text("\n".join(json.dumps(e.__dict__) for e in events))
    return row


if __name__ == "__main__":
    sys.exit(main())
