"""Closing the loop, in the model: the same skewed cluster through three variants of the descheduler.

Run from the repository root::

    python -m benchmarks.closedloop_variants             # 100 nodes, 10 hot, 60 s, consecutive 1
    python -m benchmarks.closedloop_variants --interval 10 --consecutive 5

This is the closed-loop *model* (``closedloop.World``), not the real control plane: every cycle the real
planner decides on the cluster's pods and on usage as a metrics pipeline reports it (each node's sample is
the mean of its true usage over the last ``window / interval`` cycles, a 5-minute ``rate()``; a pod's own
sample appears ``--pod-sample-delay`` cycles after it starts), every planned eviction happens, and each
replacement is placed by a model of the stock kube-scheduler's default profile: it scores nodes by
*requests* (NodeResourcesFit LeastAllocated and NodeResourcesBalancedAllocation, weight 1 each) and by
TaintToleration (weight 3: a node with an untolerated ``PreferNoSchedule`` taint scores 0, others 100),
never by usage. The variants:

- ``as today``: the planner decides on the raw node samples (the estimate is switched off);
- ``migration-aware``: the planner's estimate (``planner/estimate.py``), as shipped;
- ``+ taint``: the estimate plus ``hotspotTaint`` (``planner/steer.py``), taints applied before the
  cycle's evictions, so the scheduler model steers replacements away from hot nodes and from nodes with
  less room than a pod in motion.

Reported per variant: evictions; unneeded evictions (the node's true usage was already at or under its
high threshold when the eviction was decided); replacements placed on a node whose true usage was over a
high threshold before they arrived (issue 13's measure), and, apart, those that pushed their node over;
initially-hot nodes pushed below their low threshold; cycles until no node is over (true usage); and
the ratio of evictions to the fewest that would cure the cluster (``balance_quality``'s exact lower bound).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks import synth
from benchmarks.balance_quality import lower_bound
from benchmarks.closedloop import World, replacement_pod
from benchmarks.common import quiet_logs, summary_line, verdict
from descheduler.cluster.build import build_snapshot
from descheduler.cluster.types import ClusterSnapshot, Node, Pod, Taint, UsageSample, UsageSnapshot
from descheduler.planner import PlannerState, commit, plan
from descheduler.planner.estimate import NodeEstimate, UsageEstimator
from descheduler.planner.parts import FAST, Parts
from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY, TAINT_VALUE, SteerState, steer

VARIANTS = ("as today", "migration-aware", "+ taint")
WINDOW = 300.0
"""The default Prometheus window the planner assumes (``metricsProviders`` unset)."""
REMOVE_AFTER = 3


class RawSample(UsageEstimator):
    """The planner before the estimate: a node's usage is its raw sample."""

    def estimate(
        self,
        node: str,
        sample: Mapping[str, int],
        sample_time: float,
        pods: Sequence[Pod],
        resources: Sequence[str],
    ) -> NodeEstimate:
        raw = {name: len(pods) if name == "pods" else int(sample.get(name, 0)) for name in resources}
        return NodeEstimate(sample=dict(raw), other=dict(raw), usage=dict(raw))


RAW_SAMPLES = Parts(estimator=RawSample)
"""The planner with its estimate replaced by the raw sample (``as today``)."""


class StockScheduler(World):
    """The world with replacements placed as the default kube-scheduler profile would, by requests
    (``policy = "stock"``), or on the least-loaded node by true usage (``"least-loaded"``, the load-aware
    scheduler of ``closedloop.World``); both prefer nodes without an untolerated PreferNoSchedule taint."""

    tainted: set[str]
    policy: str = "stock"

    def choose_node(self, pod: synth.SynthPod, exclude: str = "") -> str | None:
        fitting = [n for n in self.nodes if self.fits(pod, n)]
        if not fitting:
            return None
        if self.policy == "least-loaded":
            options = [n for n in fitting if n != exclude]  # as closedloop.World: never back to the source
            if not options:
                return None
            return min(options, key=lambda n: (n in self.tainted, self.load(n), n))

        def score(name: str) -> tuple[float, str]:
            node = self.nodes[name]
            req = self.requested[name]
            cpu = (req["cpu"] + pod.cpu_request_m) / node.cpu_m
            memory = (req["memory"] + pod.memory_request) / node.memory
            least_allocated = ((1 - cpu) + (1 - memory)) / 2 * 100
            balanced = (1 - abs(cpu - memory) / 2) * 100
            toleration = 0.0 if name in self.tainted else 100.0
            return -(least_allocated + balanced + 3 * toleration), name

        return min(fitting, key=score)


@dataclass
class Result:
    variant: str
    evictions: int = 0
    unneeded: int = 0
    on_hot: int = 0
    below_low: int = 0
    initially_over: int = 0
    cycles_to_cool: int | None = None
    unplaced: int = 0
    bound: int = 0
    bound_in_order: int = 0
    """The same bound when lower-priority pods must go first (Koordinator's order, the planner's)."""
    below_low_cpu: int = 0
    taints_added: int = 0
    cycles_run: int = 0
    made_hot: int = 0
    """Nodes not over before a cycle that a replacement pushed over a high threshold (true usage)."""
    made_hot_pods: int = 0
    """Replacements that pushed their node over a high threshold (it was not over before they arrived);
    ``on_hot`` counts those that arrived on a node already over. Their sum: over once they ran."""
    from_made_hot: int = 0
    """Evictions from nodes that were not over at the start (made hot by replacements)."""
    per_cycle: list[int] | None = None


def run_variant(args: argparse.Namespace, variant: str) -> Result:
    spec = synth.SynthSpec(
        nodes=args.nodes, pods_per_node=args.pods_per_node, hot_fraction=args.hot_fraction, seed=args.seed
    )
    cluster = synth.generate(spec)
    lag = max(1, round(WINDOW / args.interval))
    world = StockScheduler(cluster, lag_cycles=lag, seed=args.seed)
    world.tainted = set()
    world.policy = args.scheduler
    parsed = build_snapshot(cluster.objects())
    pods: dict[str, Pod] = {p.key: p for p in parsed.pods}
    nodes: dict[str, Node] = {n.name: n for n in parsed.nodes}
    high = dict(synth.HIGH_THRESHOLDS)
    low = dict(synth.LOW_THRESHOLDS)
    config = synth.effective_config(consecutive_abnormalities=args.consecutive)
    result = Result(variant=variant, per_cycle=[])
    initially_over = world.over_nodes(high)
    result.initially_over = len(initially_over)
    bound = lower_bound(world, parsed, config, high)
    result.bound, result.bound_in_order = bound.total, bound.in_order
    started_at: dict[str, float] = {}
    state = PlannerState()
    steering = SteerState()
    ours = Taint(TAINT_KEY, TAINT_VALUE, TAINT_EFFECT)
    quiet = 0
    made_hot: set[str] = set()
    start = synth.NOW + WINDOW  # every pod of the input has been measured for a whole window
    for cycle in range(1, args.max_cycles + 1):
        now = start + cycle * args.interval
        shown = tuple(
            replace(n, taints=(*n.taints, ours)) if n.name in world.tainted else n for n in nodes.values()
        )
        snapshot = ClusterSnapshot(
            nodes=shown,
            pods=tuple(pods.values()),
            pdbs=parsed.pdbs,
            workloads=parsed.workloads,
            namespaces=parsed.namespaces,
        )
        truth = world.pod_usage()
        delay = args.pod_sample_delay * args.interval
        usage = UsageSnapshot(
            nodes={n: UsageSample(u, now) for n, u in world.measured_node_usage().items()},
            pods={k: UsageSample(u, now) for k, u in truth.items() if started_at.get(k, -1e18) + delay < now},
        )
        parts = RAW_SAMPLES if variant == "as today" else FAST
        decided = plan(snapshot, usage, config, state, now, parts=parts)
        if variant == "+ taint":
            first = cycle == 1
            decision = steer(
                shown, decided.node_reports, steering, REMOVE_AFTER, takeover=first, moving=decided.moving
            )
            steering = decision.state
            world.tainted |= {c.node for c in decision.add}  # before the evictions
            result.taints_added += len(decision.add)
        over_before = world.over_nodes(high)
        destinations: set[str] = set()
        for planned in decided.evictions:
            if not any(world.percent(planned.node, r, None) > high[r] for r in high):
                result.unneeded += 1
            if planned.node not in initially_over:
                result.from_made_hot += 1
            old, new = world.evict_and_replace(planned.pod.key, now)
            template = pods.pop(old.key)
            if new is None:
                result.unplaced += 1
                continue
            before = {
                r: world.usage[new.node][r] - (new.cpu_usage_m if r == "cpu" else new.memory_usage)
                for r in high
            }
            base = {"cpu": world.nodes[new.node].cpu_m, "memory": world.nodes[new.node].memory}
            if any(before[r] * 100.0 / base[r] > high[r] for r in high):
                result.on_hot += 1
            elif any(world.usage[new.node][r] * 100.0 / base[r] > high[r] for r in high):
                result.made_hot_pods += 1
            pods[new.key] = replacement_pod(template, new)
            started_at[new.key] = now
            destinations.add(new.node)
        made_hot |= (world.over_nodes(high) - over_before) & destinations
        if variant == "+ taint":
            world.tainted -= {c.node for c in decision.remove}
        state = commit(decided.state, decided.evictions, now)
        world.tick()
        result.evictions += len(decided.evictions)
        result.cycles_run = cycle
        assert result.per_cycle is not None
        result.per_cycle.append(len(decided.evictions))
        if result.cycles_to_cool is None and not world.over_nodes(high):
            result.cycles_to_cool = cycle
        if result.cycles_to_cool is not None:
            quiet += 1
            if quiet > args.settle_cycles:
                break
    result.made_hot = len(made_hot)
    result.below_low_cpu = sum(1 for n in initially_over if world.percent(n, "cpu", None) <= low["cpu"])
    result.below_low = sum(
        1 for n in initially_over if all(world.percent(n, r, None) <= low[r] for r in ("cpu", "memory"))
    )
    return result


def table(results: Sequence[Result]) -> list[str]:
    rows = [
        ("evictions", [str(r.evictions) for r in results]),
        ("fewest that would cure (exact bound)", [str(r.bound) for r in results]),
        ("... when lower priority must go first", [str(r.bound_in_order) for r in results]),
        ("evictions / bound", [f"{r.evictions / r.bound:.2f}x" if r.bound else "-" for r in results]),
        ("unneeded evictions (node already at or under high)", [str(r.unneeded) for r in results]),
        ("replacements placed on a node already over high", [str(r.on_hot) for r in results]),
        ("replacements that pushed a node over high", [str(r.made_hot_pods) for r in results]),
        (
            "replacements on a node over high once placed (the sum)",
            [str(r.on_hot + r.made_hot_pods) for r in results],
        ),
        (
            "initially hot nodes pushed below low (every resource / cpu)",
            [f"{r.below_low} / {r.below_low_cpu} of {r.initially_over}" for r in results],
        ),
        (
            "cycles until no node is over",
            [str(r.cycles_to_cool) if r.cycles_to_cool is not None else "never" for r in results],
        ),
        ("nodes a replacement pushed over high", [str(r.made_hot) for r in results]),
        ("evictions from nodes not hot at the start", [str(r.from_made_hot) for r in results]),
        ("replacements that fit nowhere", [str(r.unplaced) for r in results]),
        ("hotspot taints added", [str(r.taints_added) for r in results]),
    ]
    headers = ["", *(r.variant for r in results)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join([name, *cells]) + " |" for name, cells in rows]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Three variants of the closed loop, in the model.")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--hot-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--interval", type=float, default=60.0, help="deschedulingInterval, seconds")
    parser.add_argument("--consecutive", type=int, default=1, help="consecutiveAbnormalities")
    parser.add_argument(
        "--pod-sample-delay", type=int, default=1, help="cycles before a new pod has a sample"
    )
    parser.add_argument(
        "--scheduler",
        choices=("stock", "least-loaded"),
        default="stock",
        help="how replacements are placed: by requests (default profile) or on the least-loaded node",
    )
    parser.add_argument("--max-cycles", type=int, default=200)
    parser.add_argument("--settle-cycles", type=int, default=10, help="cycles run after no node is over")
    args = parser.parse_args(argv)
    quiet_logs()
    started = time.perf_counter()
    results = [run_variant(args, variant) for variant in VARIANTS]
    print(
        f"closedloop_variants (the model, not the real control plane): {args.nodes} nodes x "
        f"{args.pods_per_node} pods, {args.hot_fraction:.0%} hot, seed {args.seed}; "
        f"interval {args.interval:g}s, "
        f"consecutiveAbnormalities {args.consecutive}, usage window {WINDOW:g}s, {args.scheduler} scheduler"
    )
    for line in table(results):
        print("  " + line)
    aware, tainted = results[1], results[2]
    print("targets:")
    print(f"  0 unneeded evictions (migration-aware): {verdict(aware.unneeded == 0)}")
    print(f"  0 replacements on a hot node with the taint: {verdict(tainted.on_hot == 0)}")
    within = bool(tainted.bound) and tainted.evictions <= 1.2 * tainted.bound
    print(f"  evictions within 1.2x of the fewest (with the taint): {verdict(within)}")
    print(f"  run time {time.perf_counter() - started:.1f} s")
    print()
    fields: dict[str, Any] = {}
    for key, r in zip(("today", "aware", "taint"), results, strict=True):
        fields[f"{key}_evictions"] = str(r.evictions)
        fields[f"{key}_unneeded"] = str(r.unneeded)
        fields[f"{key}_on_hot"] = str(r.on_hot)
        fields[f"{key}_made_hot"] = str(r.made_hot_pods)
        fields[f"{key}_below_low"] = str(r.below_low)
        fields[f"{key}_cooled"] = "1" if r.cycles_to_cool is not None else "0"
        fields[f"{key}_cycles"] = str(r.cycles_to_cool if r.cycles_to_cool is not None else r.cycles_run)
    fields["bound"] = str(results[0].bound)
    print(summary_line(fields))


if __name__ == "__main__":
    main()
