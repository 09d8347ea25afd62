"""The offline loop: the real planner, cycle after cycle, over a snapshot that evolves with its evictions.

Cycle ``k`` runs at ``start + (k - 1) * deschedulingInterval``, where ``start`` is one interval (or one
metrics window, if longer) after the newest pod's creationTimestamp, so runs are reproducible and every
pod of the input has been measured for a whole window. Between cycles each evicted pod is gone and its
migration is over. With ``reschedule`` a simple scheduler re-creates it on the least-loaded node that
fits (node selector, required affinity, taints, requests), carrying its usage there; a pod that fits
nowhere stays Pending.

Node samples behave as a metrics pipeline's window averages do (the window of ``metricsProviders``, 5
minutes by default): a moved pod's usage leaves its old node's sample, and enters its new node's, in
proportion to how much of the window has passed since the move. The planner's migration-aware estimate
(``planner/estimate.py``) is what sees through this lag, exactly as in the live service.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from descheduler.cluster.selectors import pod_node_affinity_matches, untolerated_taint
from descheduler.cluster.types import ClusterSnapshot, Node, Pod, UsageSample, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.config.providers import usage_window
from descheduler.planner import SUMMARISED, Plan, PlannerState, SkipForm, commit, plan
from descheduler.planner.estimate import window_share
from descheduler.planner.index import IndexCache
from descheduler.planner.parts import FAST, Parts
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


@dataclass(frozen=True, slots=True)
class _Move:
    """A pod's usage that left ``source`` at ``at`` and, if it was placed, arrived on ``destination``."""

    usage: Mapping[str, int]
    source: str
    destination: str
    created: float
    """When the pod that left was created (for nodes whose sample is the sum of their pods')."""
    at: float


@dataclass
class _World:
    snapshot: ClusterSnapshot
    window: float = 0.0
    """Seconds a node sample averages over (the configured metrics window)."""
    moves: list[_Move] = field(default_factory=list)
    replacements: set[str] = field(default_factory=set)
    """uids of pods re-created by the rescheduler: their usage arrives through ``moves``."""


def start_time(snapshot: ClusterSnapshot, interval: float, window: float = 0.0) -> float:
    newest = max((p.created for p in snapshot.pods), default=0.0)
    return newest + max(interval, window)


def usage_for_cycle(series: UsageSeries, world: _World, cycle: int, now: float) -> UsageSnapshot:
    """The usage the planner sees in ``cycle``: file samples, plus and minus the window-averaged share of
    the pods moved in earlier cycles.

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
        resources: dict[str, float]
        if samples:
            sample = UsageSeries.at(samples, cycle)
            timestamp = now - sample.age
            moved: dict[str, float] = {}
            for move in world.moves:
                if move.source == node.name:  # the file's sample held the pod for the whole window
                    gone = 1.0 - window_share(float("-inf"), move.at, timestamp, world.window)
                    _add(moved, move.usage, -gone)
                if move.destination == node.name:
                    _add(moved, move.usage, window_share(move.at, None, timestamp, world.window))
            resources = {name: float(amount) for name, amount in sample.resources.items()}
            for name, delta in moved.items():
                value = resources.get(name, 0.0)
                if math.isfinite(value):  # a broken value stays broken, to be reported as such
                    resources[name] = max(0.0, value + delta)
        else:
            measured = [
                (pod, pods[pod.key])
                for pod in by_node.get(node.name, [])
                if pod.key in pods and pod.uid not in world.replacements
            ]
            moves = [m for m in world.moves if node.name in (m.source, m.destination)]
            if not measured and not moves:
                continue
            timestamp = min((pod_sample.timestamp for _, pod_sample in measured), default=now)
            resources = {"cpu": 0.0, "memory": 0.0}
            for pod, pod_sample in measured:
                _add(
                    resources, pod_sample.resources, window_share(pod.created, None, timestamp, world.window)
                )
            for move in moves:
                if move.source == node.name:
                    _add(resources, move.usage, window_share(move.created, move.at, timestamp, world.window))
                if move.destination == node.name:
                    _add(resources, move.usage, window_share(move.at, None, timestamp, world.window))
        checked = build_sample(resources, timestamp, allocatable=node.allocatable, now=now)
        if isinstance(checked, UsageSample):
            nodes[node.name] = checked
        else:
            errors[node.name] = join_reasons(checked)
    return UsageSnapshot(nodes=nodes, pods=pods, node_errors=errors)


def _add(total: dict[str, float], usage: Mapping[str, int], factor: float) -> None:
    for name, amount in usage.items():
        if name != "pods":
            total[name] = total.get(name, 0.0) + factor * amount


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
        world.replacements.add(new_uid)
        moves.append(Rescheduled(pod.key, eviction.node, target.name))
    return placed, moves


def run(
    config: EffectiveConfig,
    snapshot: ClusterSnapshot,
    series: UsageSeries,
    cycles: int,
    reschedule: bool = False,
    *,
    parts: Parts = FAST,
    skip_form: SkipForm = SUMMARISED,
) -> list[CycleResult]:
    """Run ``cycles`` planner cycles; every planned eviction is assumed to succeed. ``parts``: the
    planner's implementation (tests replay with ``reference.REFERENCE``); ``skip_form``: how the pods a
    hotspot never needed are reported (``--explain all`` asks for ``detailed``)."""
    interval = config.config.descheduling_interval
    window = usage_window(config.config.metrics_providers)
    start = start_time(snapshot, interval, window)
    weights = (
        config.low_node_load.resource_weights if config.low_node_load is not None else {"cpu": 1, "memory": 1}
    )
    world = _World(snapshot, window=window)
    state = PlannerState()
    indexes = IndexCache()  # this run's own: each cycle's index derived from the last one's
    results: list[CycleResult] = []
    for cycle in range(1, cycles + 1):
        now = start + (cycle - 1) * interval
        usage = usage_for_cycle(series, world, cycle, now)
        result = plan(
            world.snapshot, usage, config, state, now, cache=indexes, parts=parts, skip_form=skip_form
        )
        state = commit(result.state, result.evictions, now)
        moves: list[Rescheduled] = []
        placed: list[Pod] = []
        if result.evictions and reschedule:
            placed, moves = _reschedule(world, result, usage, cycle, now, weights)
        destinations = {m.pod: m.destination for m in moves}
        for eviction in result.evictions:
            world.moves.append(
                _Move(
                    usage=eviction.usage,
                    source=eviction.node,
                    destination=destinations.get(eviction.pod.key, ""),
                    created=eviction.pod.created,
                    at=now,
                )
            )
        evicted = {e.pod.key for e in result.evictions}
        if evicted:
            kept = tuple(p for p in world.snapshot.pods if p.key not in evicted)
            world.snapshot = replace(world.snapshot, pods=kept + tuple(placed))
        results.append(CycleResult(cycle=cycle, now=now, plan=result, rescheduled=tuple(moves)))
    return results
