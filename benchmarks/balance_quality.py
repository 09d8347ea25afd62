"""Does it balance well? A closed loop: the planner evicts, a simple scheduler re-places, usage follows.

Run from the repository root::

    python -m benchmarks.balance_quality                 # 500 nodes, 30 pods per node, 5 % hot
    python -m benchmarks.balance_quality --nodes 20      # a quick check

Every cycle (60 simulated seconds): ``plan`` on the current pods and the *measured* usage, every planned
eviction happens, each evicted pod's replacement goes to the least-loaded node that fits
(``closedloop.World``), ``commit`` records the evictions, and the metrics pipeline takes a sample. The
measured node usage is the mean of the last ``--lag-cycles`` true values (a 5-minute ``rate()`` at a
60 s interval lags like this), so the planner decides on slightly stale numbers, as in production.
Configuration: thresholds 45/55 low and 75/80 high (cpu/memory %), Koordinator's defaults otherwise
(``consecutiveAbnormalities: 5``, ``maxMigratingPerNode: 2``, ``objectLimiters.workload`` 5 minutes).

Reported against the targets: evictions until no node is over a high threshold (true usage) against a
lower bound; chains of pods (a pod and its replacements) evicted twice within the objectLimiters
window; nodes made hot by a replacement.

The lower bound, per node over a high threshold at the start: the fewest movable pods (the planner's
own filters decide what is movable) whose true usage covers the node's excess in every resource over
its threshold. It is computed exactly: largest-first per resource gives a floor, then subsets of that
size and up are searched (a node whose search would pass 400,000 subsets keeps the floor, which is
still a lower bound, and is listed). The cluster's bound is the sum over nodes. A second figure, the
priority-first bound, adds the rule this planner follows (Koordinator's order): a pod of a higher
priority tier goes only once every movable pod of the lower tiers is gone.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import synth
from benchmarks.closedloop import World, replacement_pod, twice_within
from benchmarks.common import quiet_logs, summary_line, verdict
from descheduler.cluster.build import build_snapshot
from descheduler.cluster.types import ClusterSnapshot, Pod, UsageSample, UsageSnapshot
from descheduler.planner import PlannerState, commit, plan
from descheduler.planner.candidates import PodFilter
from descheduler.planner.classify import absolute_threshold
from descheduler.planner.index import ClusterIndex
from descheduler.planner.order import sort_key
from descheduler.planner.settings import compile_settings

INTERVAL = 60.0
RATIO_TARGET = 1.3
PERMANENT = frozenset({"replicas-1", "replicas-unprotected", "workload-unknown"})
"""Skip codes that say a pod can never move (not a choice the cycle made)."""


SEARCH_LIMIT = 400_000
"""Most subsets tried per node and size before settling for the per-resource bound (which stays a bound)."""


def min_cover(items: Sequence[tuple[int, ...]], need: Sequence[int]) -> tuple[int | None, bool]:
    """Fewest items whose sums reach ``need`` in every resource: (count or None if impossible, exact?).

    Per resource, taking the largest first gives that resource's minimum; the largest of those is a lower
    bound for all resources together. Subsets of that size and up are then searched, so the answer is
    exact unless the search would pass ``SEARCH_LIMIT`` subsets (then the per-resource bound is returned).
    """
    floor = 0
    for r, amount in enumerate(need):
        if amount <= 0:
            continue
        covered = count = 0
        for size in sorted((item[r] for item in items), reverse=True):
            if covered >= amount:
                break
            covered += size
            count += 1
        if covered < amount:
            return None, True
        floor = max(floor, count)
    if sum(1 for amount in need if amount > 0) <= 1:
        return floor, True
    for k in range(floor, len(items) + 1):
        if math.comb(len(items), k) > SEARCH_LIMIT:
            return floor, False
        for subset in itertools.combinations(items, k):
            if all(sum(item[r] for item in subset) >= amount for r, amount in enumerate(need)):
                return k, True
    return None, True


def min_cover_in_order(
    tiers: Sequence[Sequence[tuple[int, ...]]], need: Sequence[int]
) -> tuple[int | None, bool]:
    """The same when a tier may be touched only after every lower tier is gone (lower priority first)."""
    taken = 0
    remaining = list(need)
    for tier in tiers:
        totals = [sum(item[r] for item in tier) for r in range(len(need))]
        if all(totals[r] >= remaining[r] for r in range(len(need))):
            count, exact = min_cover(tier, tuple(remaining))
            return (None if count is None else taken + count), exact
        taken += len(tier)
        remaining = [remaining[r] - totals[r] for r in range(len(need))]
    return None, True


@dataclass
class Bound:
    total: int = 0
    """Fewest movable pods covering every over node's excess, whatever their priority (the target's bound)."""
    in_order: int = 0
    """The same when lower-priority pods must go first, as Koordinator's order (and the planner's) demands."""
    per_node: dict[str, int] = field(default_factory=dict)
    per_node_in_order: dict[str, int] = field(default_factory=dict)
    incurable: list[str] = field(default_factory=list)
    approximate: list[str] = field(default_factory=list)
    """Nodes where the search was cut short: their figure is the per-resource bound (still a lower bound)."""


def lower_bound(world: World, snapshot: ClusterSnapshot, config: Any, high: dict[str, int]) -> Bound:
    """Per node over a high threshold, the fewest movable pods whose usage covers its excess."""
    settings = compile_settings(config)
    movable = PodFilter(settings, ClusterIndex(snapshot))
    by_node: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if movable.check(pod) is None:
            by_node.setdefault(pod.node_name, []).append(pod)
    resources = sorted(high)
    bound = Bound()
    for name in sorted(world.over_nodes(high)):
        node = world.nodes[name]
        need = tuple(
            world.usage[name][r] - absolute_threshold(high[r], node.cpu_m if r == "cpu" else node.memory)
            for r in resources
        )
        tiers: dict[tuple[Any, ...], list[tuple[int, ...]]] = {}
        for pod in by_node.get(name, []):
            truth = world.pods[pod.key]
            sizes = tuple(truth.cpu_usage_m if r == "cpu" else truth.memory_usage for r in resources)
            tiers.setdefault(sort_key(pod, 0.0)[:6], []).append(sizes)
        everything = [item for tier in tiers.values() for item in tier]
        count, exact = min_cover(everything, need)
        in_order, exact_in_order = min_cover_in_order([tiers[k] for k in sorted(tiers)], need)
        if count is None or in_order is None:
            bound.incurable.append(name)
            count = in_order = len(everything)
        if not (exact and exact_in_order):
            bound.approximate.append(name)
        bound.per_node[name] = count
        bound.per_node_in_order[name] = in_order
    bound.total = sum(bound.per_node.values())
    bound.in_order = sum(bound.per_node_in_order.values())
    return bound


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = synth.SynthSpec(
        nodes=args.nodes, pods_per_node=args.pods_per_node, hot_fraction=args.hot_fraction, seed=args.seed
    )
    cluster = synth.generate(spec)
    world = World(cluster, lag_cycles=args.lag_cycles, seed=args.seed)
    parsed = build_snapshot(cluster.objects())
    pods: dict[str, Pod] = {p.key: p for p in parsed.pods}
    high = dict(synth.HIGH_THRESHOLDS)
    config = synth.effective_config(consecutive_abnormalities=args.consecutive)
    window = config.migration.object_limiters["workload"].duration

    initially_over = world.over_nodes(high)
    bound = lower_bound(world, parsed, config, high)

    state = PlannerState()
    evictions = 0
    unplaced = 0
    made_hot: set[str] = set()
    balanced_at: int | None = None
    evictions_at_balance = 0
    after_balance = 0
    per_cycle: list[int] = []
    evicted_from: Counter[str] = Counter()
    stops: Counter[str] = Counter()
    passed_over: Counter[str] = Counter()
    plan_time = 0.0
    cycle = 0
    for cycle in range(1, args.max_cycles + 1):
        now = synth.NOW + cycle * INTERVAL
        snapshot = ClusterSnapshot(
            nodes=parsed.nodes,
            pods=tuple(pods.values()),
            pdbs=parsed.pdbs,
            workloads=parsed.workloads,
            namespaces=parsed.namespaces,
        )
        measured = world.measured_node_usage()
        usage = UsageSnapshot(
            nodes={n: UsageSample(u, now) for n, u in measured.items()},
            pods={k: UsageSample(u, now) for k, u in world.pod_usage().items()},
        )
        started = time.perf_counter()
        decided = plan(snapshot, usage, config, state, now)
        plan_time += time.perf_counter() - started
        over_before = world.over_nodes(high)
        destinations: set[str] = set()
        for planned in decided.evictions:
            evicted_from[planned.node] += 1
            old, new = world.evict_and_replace(planned.pod.key, now)
            template = pods.pop(old.key)
            if new is None:
                unplaced += 1
                continue
            pods[new.key] = replacement_pod(template, new)
            destinations.add(new.node)
        made_hot |= (world.over_nodes(high) - over_before) & destinations
        for report in decided.node_reports:
            if report.node_class == "hotspot" and report.stop_code:
                stops[report.stop_code] += 1
        passed_over.update(
            s.code
            for s in decided.pod_skips
            if not s.code.startswith("filtered-") and s.code not in PERMANENT
        )
        state = commit(decided.state, decided.evictions, now)
        world.tick()
        count = len(decided.evictions)
        per_cycle.append(count)
        evictions += count
        if balanced_at is not None:
            after_balance += count
        elif not world.over_nodes(high):
            balanced_at = cycle
            evictions_at_balance = evictions
        if balanced_at is not None and cycle - balanced_at >= args.settle_cycles:
            break
    within, twice = twice_within(world.lineages, window)
    return {
        "spec": spec,
        "initially_over": len(initially_over),
        "bound": bound,
        "cycles": cycle,
        "balanced_at": balanced_at,
        "evictions_at_balance": evictions_at_balance if balanced_at is not None else evictions,
        "evictions": evictions,
        "after_balance": after_balance,
        "unplaced": unplaced,
        "made_hot": sorted(made_hot),
        "twice_within": within,
        "twice_total": twice,
        "window": window,
        "still_over": sorted(world.over_nodes(high)),
        "per_cycle": per_cycle,
        "evicted_from": evicted_from,
        "stops": stops,
        "passed_over": passed_over,
        "plan_time": plan_time,
        "max_load": max(world.load(n) for n in world.nodes),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Balance quality in a closed loop with re-placement.")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--hot-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lag-cycles", type=int, default=5, help="metrics window in cycles (5m at 60s)")
    parser.add_argument(
        "--consecutive", type=int, default=5, help="anomalyCondition.consecutiveAbnormalities"
    )
    parser.add_argument("--max-cycles", type=int, default=300)
    parser.add_argument("--settle-cycles", type=int, default=10, help="cycles run after balance is reached")
    args = parser.parse_args(argv)
    quiet_logs()

    started = time.perf_counter()
    r = run(args)
    spec = r["spec"]
    print(
        f"balance_quality: {spec.nodes} nodes x {spec.pods_per_node} pods, {spec.hot_fraction:.0%} hot, "
        f"seed {spec.seed}; metrics lag {args.lag_cycles} cycles, consecutiveAbnormalities {args.consecutive}"
    )
    print(f"  nodes over a high threshold at start: {r['initially_over']}")
    bound: Bound = r["bound"]
    print(
        f"  lower bound on evictions: {bound.total} (per node {min(bound.per_node.values(), default=0)} to "
        f"{max(bound.per_node.values(), default=0)})"
    )
    print(f"  the same bound when lower-priority pods must go first (the planner's order): {bound.in_order}")
    if bound.approximate:
        print(f"  nodes where the exact search was cut short (per-resource bound used): {bound.approximate}")
    if bound.incurable:
        print(f"  nodes movable pods cannot cure (bound counts all their movable pods): {bound.incurable}")
    if r["balanced_at"] is None:
        print(
            f"  NOT balanced after {r['cycles']} cycles; still over: {r['still_over'][:10]} "
            f"({len(r['still_over'])} nodes)"
        )
    else:
        print(
            f"  balanced after {r['balanced_at']} cycles "
            f"({r['balanced_at'] * INTERVAL / 60:.0f} simulated minutes)"
        )
    ratio = r["evictions_at_balance"] / bound.total if bound.total else float("nan")
    ratio_in_order = r["evictions_at_balance"] / bound.in_order if bound.in_order else float("nan")
    print(
        f"  evictions until balanced: {r['evictions_at_balance']} -> {ratio:.2f}x the bound, "
        f"{ratio_in_order:.2f}x the priority-first bound"
    )
    extra = Counter(r["evicted_from"].get(n, 0) - b for n, b in bound.per_node.items())
    extra_in_order = Counter(r["evicted_from"].get(n, 0) - b for n, b in bound.per_node_in_order.items())
    print(
        f"  per over node, evictions minus bound -> nodes: {dict(sorted(extra.items()))}; "
        f"minus priority-first bound: {dict(sorted(extra_in_order.items()))}"
    )
    others = sum(v for n, v in r["evicted_from"].items() if n not in bound.per_node)
    print(f"  evictions from nodes that were not over at the start: {others}")
    print(f"  evictions in the {args.settle_cycles} cycles after balance: {r['after_balance']}")
    print(f"  replacements that fit nowhere: {r['unplaced']}")
    print(
        f"  pod chains evicted twice within {r['window']:g}s (objectLimiters window): {r['twice_within']} "
        f"(twice at any distance: {r['twice_total']})"
    )
    print(f"  nodes made hot by a replacement: {len(r['made_hot'])} {r['made_hot'][:5]}")
    print(f"  hottest node at the end: {r['max_load']:.1f}% (higher of cpu and memory)")
    print(f"  evictions per cycle: {r['per_cycle']}")
    print(f"  why eviction stopped on hotspots (node-cycles): {dict(r['stops'])}")
    print(
        f"  movable pods passed over on hotspots (limits, budgets, no destination): {dict(r['passed_over'])}"
    )
    print(
        f"  planning time: {r['plan_time']:.2f} s over {r['cycles']} cycles; total run "
        f"{time.perf_counter() - started:.1f} s"
    )
    print("targets:")
    balanced = r["balanced_at"] is not None
    print(f"  balanced, within {RATIO_TARGET}x of the bound: {verdict(balanced and ratio <= RATIO_TARGET)}")
    print(f"  no pod evicted twice within the window: {verdict(r['twice_within'] == 0)}")
    print(f"  no node made hot: {verdict(not r['made_hot'])}")
    print()
    print(
        summary_line(
            {
                "over_at_start": str(r["initially_over"]),
                "bound": str(bound.total),
                "bound_priority_first": str(bound.in_order),
                "evictions": str(r["evictions_at_balance"]),
                "ratio": f"{ratio:.2f}x" if bound.total else "0x",
                "ratio_priority_first": f"{ratio_in_order:.2f}x" if bound.in_order else "0x",
                "balanced": "1" if balanced else "0",
                "cycles_to_balance": str(r["balanced_at"] if balanced else r["cycles"]),
                "evicted_twice": str(r["twice_within"]),
                "made_hot": str(len(r["made_hot"])),
                "after_balance": str(r["after_balance"]),
            }
        )
    )


if __name__ == "__main__":
    main()
