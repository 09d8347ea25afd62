"""The offline loop: the real planner, cycle after cycle, over a snapshot that evolves with its evictions.

Cycle ``k`` runs at ``start + (k - 1) * deschedulingInterval``, where ``start`` is one interval after the
newest pod's creationTimestamp, so runs are reproducible. Between cycles each evicted pod is gone: its
usage leaves its node (explicit node samples are lowered by the pod's usage), and its migration is over.
With ``reschedule`` a simple scheduler re-creates it on the least-loaded node that fits (node
selector, required affinity, taints, requests), carrying its usage there; a pod that fits nowhere
stays Pending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from descheduler.cluster.selectors import pod_node_affinity_matches, untolerated_taint
from descheduler.cluster.types import ClusterSnapshot, Node, Pod, UsageSample, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.planner import Plan, PlannerState, commit, plan
from descheduler.simulate.inputs import UsageSeries
from descheduler.usage.samples import build_sample, join_reasons


@dataclass(frozen=True, slots=True)
class Rescheduled:
    pod: str
    source: str
    destination: str
    """Empty when no node fits: the pod stays Pending."""


@dataclass(frozen=True)
class CycleResult:
    cycle: int
    now: float
    plan: Plan
    rescheduled: tuple[Rescheduled, ...] = ()


@dataclass
class _World:
    snapshot: ClusterSnapshot
    adjustments: dict[str, dict[str, int]] = field(default_factory=dict)
    """Usage moved away from (negative) or onto (positive) nodes whose usage the file gives explicitly."""


def start_time(snapshot: ClusterSnapshot, interval: float) -> float:
    newest = max((p.created for p in snapshot.pods), default=0.0)
    return newest + interval


def usage_for_cycle(series: UsageSeries, world: _World, cycle: int, now: float) -> UsageSnapshot:
    """The usage the planner sees in ``cycle``: file samples, adjusted for pods moved in earlier cycles.

    Every sample passes the live sources' trust rule (``build_sample``: NaN, negative, absurd against
    the node's allocatable): an untrusted node sample skips the node with the live reason text, an
    untrusted pod sample is dropped. A node with neither its own sample nor a sample for any of its
    pods has no usage: it is skipped, as the live service skips a node its usage source does not know."""
    allocatable = {node.name: node.allocatable for node in world.snapshot.nodes}
    pods: dict[str, UsageSample] = {}
    for pod in world.snapshot.pods:
        samples = series.pods.get(pod.key)
        if samples:
            sample = UsageSeries.at(samples, cycle)
            checked = build_sample(
                sample.resources, now - sample.age, allocatable=allocatable.get(pod.node_name, {}), now=now
            )
            if isinstance(checked, UsageSample):
                pods[pod.key] = checked
    nodes: dict[str, UsageSample] = {}
    errors: dict[str, str] = {}
    by_node: dict[str, list[Pod]] = {}
    for pod in world.snapshot.pods:
        if pod.node_name and not pod.is_terminal:
            by_node.setdefault(pod.node_name, []).append(pod)
    for node in world.snapshot.nodes:
        samples = series.nodes.get(node.name)
        resources: dict[str, int]
        if samples:
            sample = UsageSeries.at(samples, cycle)
            resources = dict(sample.resources)
            for name, delta in world.adjustments.get(node.name, {}).items():
                resources[name] = max(0, resources.get(name, 0) + delta)
            timestamp = now - sample.age
        else:
            measured = [pods[p.key] for p in by_node.get(node.name, []) if p.key in pods]
            if not measured:
                continue
            resources = {"cpu": 0, "memory": 0}
            for pod_sample in measured:
                for name, amount in pod_sample.resources.items():
                    resources[name] = resources.get(name, 0) + amount
            timestamp = min(s.timestamp for s in measured)
        checked = build_sample(resources, timestamp, allocatable=node.allocatable, now=now)
        if isinstance(checked, UsageSample):
            nodes[node.name] = checked
        else:
            errors[node.name] = join_reasons(checked)
    return UsageSnapshot(nodes=nodes, pods=pods, node_errors=errors)


def _adjust(world: _World, node: str, usage: Mapping[str, int], sign: int) -> None:
    bucket = world.adjustments.setdefault(node, {})
    for name, amount in usage.items():
        if name != "pods":
            bucket[name] = bucket.get(name, 0) + sign * amount


def _fits(pod: Pod, node: Node, requested: Mapping[str, int], count: int) -> bool:
    if not node.ready or node.unschedulable:
        return False
    if not pod_node_affinity_matches(pod, node) or untolerated_taint(pod, node) is not None:
        return False
    for name, amount in pod.requests.items():
        if amount > 0 and amount > node.allocatable.get(name, 0) - requested.get(name, 0):
            return False
    return not ("pods" in node.allocatable and count + 1 > node.allocatable["pods"])


def _reschedule(
    world: _World, result: Plan, usage: UsageSnapshot, cycle: int, now: float, weights: Mapping[str, int]
) -> tuple[list[Pod], list[Rescheduled]]:
    """Least-loaded placement of the evicted pods on the cluster as it is after the evictions."""
    evicted = {e.pod.key for e in result.evictions}
    remaining = [p for p in world.snapshot.pods if p.key not in evicted]
    requested: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    for pod in remaining:
        if pod.node_name and not pod.is_terminal:
            bucket = requested.setdefault(pod.node_name, {})
            for name, amount in pod.requests.items():
                bucket[name] = bucket.get(name, 0) + amount
            counts[pod.node_name] = counts.get(pod.node_name, 0) + 1
    load: dict[str, dict[str, int]] = {}
    for name, sample in usage.nodes.items():
        load[name] = {r: sample.resources.get(r, 0) for r in ("cpu", "memory")}
    for eviction in result.evictions:
        source = load.get(eviction.node)
        if source is not None:
            for r in source:
                source[r] = max(0, source[r] - eviction.usage.get(r, 0))

    def score(node: Node) -> tuple[float, str]:
        total = 0.0
        weight_sum = 0
        for r in ("cpu", "memory"):
            weight = weights.get(r, 0)
            capacity = node.allocatable.get(r, 0)
            if weight > 0 and capacity > 0:
                total += weight * load[node.name][r] / capacity
                weight_sum += weight
        return (total / weight_sum if weight_sum else 0.0), node.name

    placed: list[Pod] = []
    moves: list[Rescheduled] = []
    for eviction in result.evictions:
        pod = eviction.pod
        options = [
            n
            for n in world.snapshot.nodes
            if n.name in load and _fits(pod, n, requested.get(n.name, {}), counts.get(n.name, 0))
        ]
        new_uid = f"{pod.uid}~{cycle}"
        if not options:
            placed.append(replace(pod, uid=new_uid, node_name="", phase="Pending", ready=False, created=now))
            moves.append(Rescheduled(pod.key, eviction.node, ""))
            continue
        target = min(options, key=score)
        placed.append(
            replace(
                pod,
                uid=new_uid,
                node_name=target.name,
                phase="Running",
                ready=True,
                terminating=False,
                created=now,
            )
        )
        bucket = requested.setdefault(target.name, {})
        for name, amount in pod.requests.items():
            bucket[name] = bucket.get(name, 0) + amount
        counts[target.name] = counts.get(target.name, 0) + 1
        for r in ("cpu", "memory"):
            load[target.name][r] += eviction.usage.get(r, 0)
        _adjust(world, target.name, eviction.usage, +1)
        moves.append(Rescheduled(pod.key, eviction.node, target.name))
    return placed, moves


def run(
    config: EffectiveConfig,
    snapshot: ClusterSnapshot,
    series: UsageSeries,
    cycles: int,
    reschedule: bool = False,
) -> list[CycleResult]:
    """Run ``cycles`` planner cycles; every planned eviction is assumed to succeed."""
    interval = config.config.descheduling_interval
    start = start_time(snapshot, interval)
    weights = (
        config.low_node_load.resource_weights if config.low_node_load is not None else {"cpu": 1, "memory": 1}
    )
    world = _World(snapshot)
    state = PlannerState()
    results: list[CycleResult] = []
    for cycle in range(1, cycles + 1):
        now = start + (cycle - 1) * interval
        usage = usage_for_cycle(series, world, cycle, now)
        result = plan(world.snapshot, usage, config, state, now)
        state = commit(result.state, result, [e.pod.key for e in result.evictions], now)
        moves: list[Rescheduled] = []
        placed: list[Pod] = []
        if result.evictions and reschedule:
            placed, moves = _reschedule(world, result, usage, cycle, now, weights)
        for eviction in result.evictions:
            _adjust(world, eviction.node, eviction.usage, -1)
        evicted = {e.pod.key for e in result.evictions}
        if evicted:
            kept = tuple(p for p in world.snapshot.pods if p.key not in evicted)
            world.snapshot = replace(world.snapshot, pods=kept + tuple(placed))
        results.append(CycleResult(cycle=cycle, now=now, plan=result, rescheduled=tuple(moves)))
    return results
