"""Does planning stay linear in every cluster shape? Planning time per shape and size, and its growth.

Run from the repository root::

    python -m benchmarks.planning_shapes                          # 500, 1,000, 2,000, 5,000 and 10,000 nodes
    python -m benchmarks.planning_shapes --sizes 500,1000 --runs 3  # quicker
    python -m benchmarks.planning_shapes --cache /tmp/shapes --build-only  # build once, then time with
    flock /work/heavy.lock python -m benchmarks.planning_shapes --cache /tmp/shapes

The default synthetic cluster (5 % hot) is the easy case: few candidates, and the coolest low node
usually takes each one. The hard cases have many candidates and many low nodes that refuse them:

- ``default``: ``synth`` as is (5 % hot nodes, about 15 % low).
- ``hot20-low50``: 20 % of the nodes hot, 50 % low with room for requests.
- ``hot20-low50-full``: the same, but every low node's requests fill its allocatable (a reserved pod in
  ``kube-system`` takes what the node's own pods leave), so no pod fits anywhere by requests although the
  low nodes have usage room: every candidate is rejected by every low node unless the search is bounded.

Plans are made in the form the service makes them (``summarised``: a hotspot that stopped for its own reason
counts its filtered pods per reason; ``--explain all`` lists each). Besides the time, each row gives the
plan's skip entries (``PodSkip`` plus ``SkipSummary``) and the bytes of the audit a dry-run cycle would log
for it (its ``audit_lines`` as JSON lines, every planned eviction passing the server-side dry-run).

The cluster is parsed in this process (no API server: planning is pure). Each size and shape is planned
``--runs`` times on the same snapshot and usage (median; ``first`` is the first run alone, which also
builds the ``ClusterIndex`` the others reuse, as a cycle reuses it after the usage fetch). A separate,
untimed run counts the per-node destination checks (``DestinationSet._reject`` calls) to show the
search's work directly. The last line is the usual ``SUMMARY``; the growth exponent is fitted between
the smallest and the largest size.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import pickle
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import synth
from benchmarks.common import median, quiet_logs, summary_line, verdict
from descheduler.cluster.build import build_snapshot
from descheduler.cluster.types import ClusterSnapshot, Pod, UsageSnapshot
from descheduler.planner import DETAILED, SUMMARISED, Plan, PlannerState, SkipForm, plan, pod_usage_nodes
from descheduler.planner.fit import DestinationSet
from descheduler.planner.index import IndexCache
from descheduler.service.audit import audit_lines
from descheduler.service.records import CycleRecord, EvictionRecord

PLAN_TARGETS_S = {5000: 0.5, 10000: 1.2}
"""Targets in every shape (issue 15): under 0.5 s at 5,000 nodes, under 1.2 s at 10,000."""

SHAPES: dict[str, tuple[float, float, bool]] = {
    "default": (0.05, 0.0, False),
    "hot20-low50": (0.20, 0.50, False),
    "hot20-low50-full": (0.20, 0.50, True),
}
"""name -> (hot fraction, low fraction, low nodes' requests full)."""


def fill_requests(snapshot: ClusterSnapshot, nodes: set[str]) -> ClusterSnapshot:
    """Add one unmovable pod per node in ``nodes`` whose requests take the node's remaining allocatable."""
    requested: dict[str, dict[str, int]] = {}
    for pod in snapshot.pods:
        entry = requested.setdefault(pod.node_name, {})
        for name, amount in pod.requests.items():
            entry[name] = entry.get(name, 0) + amount
    fillers = []
    for node in snapshot.nodes:
        if node.name not in nodes:
            continue
        used = requested.get(node.name, {})
        left = {name: max(0, node.allocatable.get(name, 0) - used.get(name, 0)) for name in ("cpu", "memory")}
        fillers.append(
            Pod(
                namespace="kube-system",
                name=f"reserved-{node.name}",
                uid=f"reserved-{node.name}",
                node_name=node.name,
                requests=left,
                qos_class="Burstable",
            )
        )
    return ClusterSnapshot(
        nodes=snapshot.nodes,
        pods=snapshot.pods + tuple(fillers),
        pdbs=snapshot.pdbs,
        workloads=snapshot.workloads,
        namespaces=snapshot.namespaces,
    )


@contextmanager
def counting_checks() -> Iterator[list[int]]:
    """Count ``DestinationSet._reject`` calls (one per pod x node examined) while the block runs."""
    original = DestinationSet._reject
    counter = [0]

    def counted(self: DestinationSet, *args: Any) -> str:
        counter[0] += 1
        return original(self, *args)

    DestinationSet._reject = counted  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        DestinationSet._reject = original  # type: ignore[method-assign]


def build(nodes: int, pods_per_node: int, shape: str, seed: int) -> tuple[ClusterSnapshot, UsageSnapshot]:
    hot, low, full = SHAPES[shape]
    spec = synth.SynthSpec(
        nodes=nodes, pods_per_node=pods_per_node, hot_fraction=hot, low_fraction=low, seed=seed
    )
    cluster = synth.generate(spec)
    snapshot = build_snapshot(cluster.objects())
    if full:
        snapshot = fill_requests(snapshot, {n.name for n in cluster.nodes if n.low})
    usage = synth.usage_snapshot(cluster.node_usage(), cluster.pod_usage(), synth.NOW)
    return snapshot, usage


def built(
    nodes: int, pods_per_node: int, shape: str, seed: int, cache: Path | None
) -> tuple[ClusterSnapshot, UsageSnapshot]:
    """``build``, or its pickle in ``cache`` (building 10,000 nodes takes longer than planning them, and
    is not what is measured: it can be done once, before the timed runs, outside the heavy-run lock)."""
    if cache is None:
        return build(nodes, pods_per_node, shape, seed)
    path = cache / f"{shape}-{nodes}-{pods_per_node}-{seed}.pickle"
    if path.is_file():
        with path.open("rb") as src:
            loaded: tuple[ClusterSnapshot, UsageSnapshot] = pickle.load(src)
        return loaded
    result = build(nodes, pods_per_node, shape, seed)
    cache.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)
    return result


def fetched_usage(
    snapshot: ClusterSnapshot, usage: UsageSnapshot, config: Any, cache: IndexCache | None = None
) -> UsageSnapshot:
    """The usage a live cycle plans on: every node's, and the pods' of the nodes ``pod_usage_nodes`` names
    (the service fetches pod usage in that second step only), instead of every pod's. ``cache``: the
    cycle's index cache, so the plan after it finds the index built here."""
    wanted = pod_usage_nodes(
        snapshot,
        UsageSnapshot(nodes=usage.nodes, node_errors=usage.node_errors),
        config,
        PlannerState(),
        synth.NOW,
        cache=cache,
    )
    if wanted is None:
        return usage
    on = {pod.key for pod in snapshot.pods if pod.node_name in wanted}
    pods = {key: sample for key, sample in usage.pods.items() if key in on}
    return UsageSnapshot(nodes=usage.nodes, pods=pods, node_errors=usage.node_errors)


def audit_bytes(result: Plan) -> int:
    """The bytes of a dry-run cycle's audit of ``result`` (one JSON line per record, as the service logs
    them without its timestamp and level), every planned eviction passing the server-side dry-run."""
    passed = tuple(EvictionRecord.of(e, "would-evict", "dry-run eviction passed") for e in result.evictions)
    record = CycleRecord(
        cycle=1, started=synth.NOW, duration=0.5, dry_run=True, plan=result, evictions=passed
    )
    return sum(len(json.dumps({"event": event, **fields})) + 1 for event, fields in audit_lines(record))


def measure(
    nodes: int,
    pods_per_node: int,
    shape: str,
    seed: int,
    runs: int,
    cache: Path | None = None,
    fetched: bool = False,
    skip_form: SkipForm = SUMMARISED,
) -> dict[str, Any]:
    snapshot, usage = built(nodes, pods_per_node, shape, seed, cache)
    config = synth.effective_config()
    indexes = IndexCache()  # one snapshot planned again and again: its index built once, as in a cycle
    if fetched:
        usage = fetched_usage(snapshot, usage, config, indexes)
    times = []
    result = None
    for _ in range(runs):
        gc.collect()
        started = time.process_time()
        result = plan(snapshot, usage, config, PlannerState(), synth.NOW, cache=indexes, skip_form=skip_form)
        times.append(time.process_time() - started)
    assert result is not None
    with counting_checks() as checks:
        plan(snapshot, usage, config, PlannerState(), synth.NOW, cache=indexes)
    classes: dict[str, int] = {}
    for report in result.node_reports:
        classes[report.node_class] = classes.get(report.node_class, 0) + 1
    no_destination = result.skip_counts().get("no-destination", 0)
    return {
        "nodes": nodes,
        "pods": len(snapshot.pods),
        "shape": shape,
        "plan": median(times),
        "plan_first": times[0],
        "plan_max": max(times),
        "evictions": len(result.evictions),
        "no_destination": no_destination,
        "skip_entries": len(result.pod_skips) + len(result.skip_summaries),
        "audit_bytes": audit_bytes(result),
        "checks": checks[0],
        "classes": classes,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Planning time per cluster shape and size.")
    parser.add_argument("--sizes", default="500,1000,2000,5000,10000", help="comma-separated node counts")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shapes")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3, help="timed plans per size and shape (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cache", type=Path, help="directory of built clusters (pickles) to reuse")
    parser.add_argument("--build-only", action="store_true", help="fill --cache, measure nothing")
    parser.add_argument(
        "--explain",
        choices=("summary", "all"),
        default="summary",
        help="the plans' skip form: summary (the service's, default) or all (one skip per pod)",
    )
    parser.add_argument(
        "--fetched",
        action="store_true",
        help="plan on the usage a live cycle fetches (pod usage of the nodes pod_usage_nodes names only), "
        "not on every pod's (simulate with a full usage file)",
    )
    args = parser.parse_args(argv)
    quiet_logs()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    shapes = [s for s in args.shapes.split(",") if s.strip()]
    unknown = sorted(set(shapes) - SHAPES.keys())
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; known: {sorted(SHAPES)}")
    print(
        f"planning_shapes: sizes {sizes}, shapes {shapes}, {args.pods_per_node} pods/node, "
        f"usage: {'as a cycle fetches it' if args.fetched else 'every pod'}, "
        f"{args.runs} runs each (process CPU, median), skips: {args.explain}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    if args.build_only:
        for shape in shapes:
            for nodes in sizes:
                built(nodes, args.pods_per_node, shape, args.seed, args.cache)
        return
    form = DETAILED if args.explain == "all" else SUMMARISED
    figures: dict[str, str] = {}
    targets = {nodes: limit for nodes, limit in PLAN_TARGETS_S.items() if nodes in sizes}
    met = True
    for shape in shapes:
        rows = []
        print(f"\n== {shape} ==")
        print(
            f"  {'nodes':>6} {'pods':>7} {'plan s':>8} {'first s':>8} {'evictions':>9} {'no-dest':>8} "
            f"{'skips':>7} {'audit kB':>9} {'checks':>10}  classes"
        )
        for nodes in sizes:
            row = measure(
                nodes, args.pods_per_node, shape, args.seed, args.runs, args.cache, args.fetched, form
            )
            rows.append(row)
            print(
                f"  {nodes:>6} {row['pods']:>7} {row['plan']:>8.3f} {row['plan_first']:>8.3f} "
                f"{row['evictions']:>9} {row['no_destination']:>8} {row['skip_entries']:>7} "
                f"{row['audit_bytes'] / 1000:>9.0f} {row['checks']:>10}  {row['classes']}",
                flush=True,
            )
            figures[f"{shape.replace('-', '_')}_{nodes}"] = f"{row['plan']:.3f}s"
        if len(rows) >= 2 and rows[0]["plan"] > 0:
            first, last = rows[0], rows[-1]
            exponent = math.log(last["plan"] / first["plan"]) / math.log(last["nodes"] / first["nodes"])
            print(f"  growth exponent {first['nodes']} -> {last['nodes']} nodes: {exponent:.2f} (linear: 1)")
            figures[f"{shape.replace('-', '_')}_exponent"] = f"{exponent:.2f}x"
        for row in rows:
            if row["nodes"] in targets:
                ok = row["plan"] < targets[row["nodes"]]
                met = met and ok
                print(f"  planning < {targets[row['nodes']]} s at {row['nodes']} nodes: {verdict(ok)}")
    if targets:
        wanted = ", ".join(f"{limit} s at {nodes}" for nodes, limit in sorted(targets.items()))
        print(f"\nevery shape under {wanted} nodes: {verdict(met)}")
    print(summary_line(figures))


if __name__ == "__main__":
    main()
