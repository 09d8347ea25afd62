"""The world around the descheduler in a closed loop: pods re-placed after eviction, usage that follows them.

``World`` holds the true state of a synthetic cluster. After an eviction the pod's controller makes a
replacement (a new name for a Deployment's pod, the same name for a StatefulSet's) and a simple
scheduler puts it on the least-loaded node that fits: requests within allocatable, the pod limit, and
the GPU pool's taint and node selector. The replacement brings the evicted pod's usage with it, so
load really moves. ``measured_node_usage`` is what a metrics pipeline reports: the average of the last
``lag_cycles`` true values, as a 5-minute ``rate()`` at a 60 s interval would.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from benchmarks import synth
from descheduler.cluster.types import Pod

MAX_PODS = 110


@dataclass
class Lineage:
    """The chain of pods that replaced one another: a pod and every replacement made for it."""

    id: int
    evictions: list[float] = field(default_factory=list)
    """When each eviction of this chain happened (simulated seconds)."""


class World:
    """True cluster state with a least-loaded scheduler; pods keyed by ``namespace/name``."""

    def __init__(self, cluster: synth.SynthCluster, *, lag_cycles: int = 1, seed: int = 0) -> None:
        self.cluster = cluster
        self.nodes = {n.name: n for n in cluster.nodes}
        self.pods: dict[str, synth.SynthPod] = {p.key: p for p in cluster.pods}
        self.lineage: dict[str, Lineage] = {key: Lineage(i) for i, key in enumerate(self.pods)}
        self.lineages: list[Lineage] = list(self.lineage.values())
        """Every chain, including those whose last pod could not be placed."""
        self.usage = cluster.node_usage()
        self.requested = {name: {"cpu": 0, "memory": 0, "pods": 0} for name in self.nodes}
        for pod in self.pods.values():
            self._add_requests(pod, +1)
        self.lag_cycles = max(1, lag_cycles)
        self.history: dict[str, deque[dict[str, int]]] = {
            name: deque([dict(u)] * self.lag_cycles, maxlen=self.lag_cycles) for name, u in self.usage.items()
        }
        self._serial = 0
        self._ids = uuid.UUID(int=seed + 1).int

    # -- reading ----------------------------------------------------------------------------------------
    def percent(self, node: str, resource: str, usage: dict[str, dict[str, int]] | None = None) -> float:
        base = self.nodes[node].cpu_m if resource == "cpu" else self.nodes[node].memory
        return (usage or self.usage)[node][resource] * 100.0 / base

    def over_nodes(self, high: dict[str, int]) -> set[str]:
        """Nodes whose true usage is above a high threshold (percent) in some resource."""
        return {n for n in self.nodes if any(self.percent(n, r, None) > high[r] for r in high)}

    def measured_node_usage(self) -> dict[str, dict[str, int]]:
        out = {}
        for name, samples in self.history.items():
            count = len(samples)
            out[name] = {r: round(sum(s[r] for s in samples) / count) for r in ("cpu", "memory")}
        return out

    def pod_usage(self) -> dict[str, dict[str, int]]:
        return {k: {"cpu": p.cpu_usage_m, "memory": p.memory_usage} for k, p in self.pods.items()}

    def tick(self) -> None:
        """One interval passed: the metrics pipeline took another sample of every node."""
        for name, samples in self.history.items():
            samples.append(dict(self.usage[name]))

    # -- changing ---------------------------------------------------------------------------------------
    def _add_requests(self, pod: synth.SynthPod, sign: int) -> None:
        entry = self.requested[pod.node]
        entry["cpu"] += sign * pod.cpu_request_m
        entry["memory"] += sign * pod.memory_request
        entry["pods"] += sign

    def _move_usage(self, pod: synth.SynthPod, sign: int) -> None:
        entry = self.usage[pod.node]
        entry["cpu"] += sign * pod.cpu_usage_m
        entry["memory"] += sign * pod.memory_usage

    def fits(self, pod: synth.SynthPod, node: str) -> bool:
        n = self.nodes[node]
        gpu_pod = pod.workload is not None and pod.workload.gpu
        if n.gpu != gpu_pod:  # GPU nodes are tainted; GPU pods select the GPU pool
            return False
        req = self.requested[node]
        return (
            req["pods"] + 1 <= MAX_PODS
            and req["cpu"] + pod.cpu_request_m <= n.cpu_m
            and req["memory"] + pod.memory_request <= n.memory
        )

    def load(self, node: str) -> float:
        return max(self.percent(node, "cpu"), self.percent(node, "memory"))

    def choose_node(self, pod: synth.SynthPod, exclude: str = "") -> str | None:
        """The least-loaded node (true usage, higher of cpu and memory percent) that fits the pod."""
        best: tuple[float, str] | None = None
        for name in self.nodes:
            if name == exclude or not self.fits(pod, name):
                continue
            candidate = (self.load(name), name)
            if best is None or candidate < best:
                best = candidate
        return None if best is None else best[1]

    def evict_and_replace(self, key: str, now: float) -> tuple[synth.SynthPod, synth.SynthPod | None]:
        """Remove the pod; its controller makes a replacement, scheduled least-loaded. Returns (old, new)."""
        old = self.pods.pop(key)
        lineage = self.lineage.pop(key)
        lineage.evictions.append(now)
        self._add_requests(old, -1)
        self._move_usage(old, -1)
        self._serial += 1
        if old.workload is not None and old.workload.kind == "StatefulSet":
            name = old.name
        else:
            stem = old.name.rsplit("-", 1)[0]
            name = f"{stem}-r{self._serial:05d}"
        new = replace(
            old,
            name=name,
            uid=str(uuid.UUID(int=(self._ids + self._serial) % 2**128, version=4)),
            node="",
            created=now,
        )
        node = self.choose_node(new, exclude=old.node)
        if node is None:
            return old, None
        new.node = node
        self.pods[new.key] = new
        self.lineage[new.key] = lineage
        self._add_requests(new, +1)
        self._move_usage(new, +1)
        return old, new


def replacement_pod(template: Pod, new: synth.SynthPod) -> Pod:
    """The planner's view of a replacement: the evicted pod's parsed form with a new identity and node."""
    return replace(template, name=new.name, uid=new.uid, node_name=new.node, created=new.created)


def twice_within(lineages: Iterable[Lineage], window: float) -> tuple[int, int]:
    """(chains evicted twice or more within ``window`` seconds, chains evicted twice or more at all)."""
    within = total = 0
    for lineage in lineages:
        times = sorted(lineage.evictions)
        if len(times) >= 2:
            total += 1
            if any(b - a < window for a, b in itertools.pairwise(times)):
                within += 1
    return within, total
