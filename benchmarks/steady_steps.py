"""What a steady cycle spends on its own steps, in one process: for comparing two versions of the code.

Run from the repository root (and from the other version's checkout, alternating)::

    python -m benchmarks.steady_steps --nodes 5000 --cache /tmp/shapes --cycles 6

``cycle_cost.py`` measures a whole cycle against the API server stand-in, but on a shared machine its
figures move by 20-30 % from one run to the next (the ``json.loads`` floor of the same pages varied from 7 to
11 s within an hour on 2026-11-26), which hides changes of that size. This script times the steps that run in
the cycle's thread alone, with nothing to wait for, and reports the *minimum* over ``--cycles`` cycles (the
least disturbed one), so two checkouts run one after the other can be compared:

- ``index``: ``IndexCache.index_of`` after ``--churn`` pods changed in place (a new object each, as the watch
  cache stores after a MODIFIED event: here an annotation);
- ``pod_usage_nodes`` on the cycle's node usage (new sample objects each cycle, as a fetch builds them);
- ``plan`` on the usage a cycle fetches (``planning_shapes.fetched_usage``);
- ``node fetch`` and ``pod fetch``: ``PrometheusSource.fetch_nodes`` and ``fetch_pods`` for the wanted nodes
  (every sample built) against the Prometheus stand-in (``fakeprom.py``, served from another thread: its CPU
  is not counted; this thread's is).

The cluster is ``synth``'s default shape with pod names made unique (the generator can give two DaemonSet
pods one name, which no API server stores; ``cycle_cost.py``'s stand-in keeps one of them).
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import replace
from pathlib import Path

from benchmarks import planning_shapes, synth
from benchmarks.common import quiet_logs, summary_line
from benchmarks.fakeprom import FakePrometheus
from descheduler.cluster.types import ClusterSnapshot, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.config.providers import PrometheusSettings
from descheduler.planner import PlannerState, plan, pod_usage_nodes
from descheduler.planner.index import IndexCache
from descheduler.usage.prometheus import PrometheusSource

STEPS = ("index", "pod_usage_nodes", "plan", "node fetch", "pod fetch")


def unique_names(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot without a second pod of a name already taken (the first one stays)."""
    seen: set[str] = set()
    pods = []
    for pod in snapshot.pods:
        if pod.key not in seen:
            seen.add(pod.key)
            pods.append(pod)
    return replace(snapshot, pods=tuple(pods))


def changed(snapshot: ClusterSnapshot, count: int, cycle: int) -> ClusterSnapshot:
    """``count`` pods spread over the cluster replaced by new objects with one annotation changed."""
    pods = list(snapshot.pods)
    step = max(1, len(pods) // max(1, count))
    for i in range(0, len(pods), step)[:count]:
        pod = pods[i]
        pods[i] = replace(pod, annotations={**pod.annotations, "benchmark/cycle": str(cycle)})
    return replace(snapshot, pods=tuple(pods))


def one_cycle(
    snapshot: ClusterSnapshot,
    fetched: UsageSnapshot,
    config: EffectiveConfig,
    state: PlannerState,
    source: PrometheusSource,
    indexes: IndexCache,
) -> dict[str, float]:
    """The steps of one cycle on ``snapshot``, CPU of this thread each (``STEPS``), with the index cache
    the cycles carry (as the service's runner does)."""
    samples = {name: replace(s, resources=dict(s.resources)) for name, s in fetched.nodes.items()}
    marks = [time.thread_time()]
    indexes.index_of(snapshot)
    marks.append(time.thread_time())
    node_only = UsageSnapshot(nodes=samples, node_errors=fetched.node_errors)
    wanted = pod_usage_nodes(snapshot, node_only, config, state, synth.NOW, cache=indexes)
    marks.append(time.thread_time())
    plan(snapshot, replace(fetched, nodes=samples), config, state, synth.NOW, cache=indexes)
    marks.append(time.thread_time())
    source.fetch_nodes(snapshot.nodes)
    marks.append(time.thread_time())
    list(source.fetch_pods(wanted, snapshot.nodes, snapshot.pods))
    marks.append(time.thread_time())
    return {step: marks[i + 1] - marks[i] for i, step in enumerate(STEPS)}


def measure(nodes: int, cycles: int, churn: int, cache: Path | None) -> dict[str, float]:
    """Minimum CPU (this thread) of each step over ``cycles`` cycles, and of their sum."""
    snapshot, usage = planning_shapes.built(nodes, 30, "default", 1, cache)
    snapshot = unique_names(snapshot)
    config = synth.effective_config()
    indexes = IndexCache()
    fetched = planning_shapes.fetched_usage(snapshot, usage, config, indexes)
    node_usage = {name: dict(sample.resources) for name, sample in usage.nodes.items()}
    pod_usage = {key: dict(sample.resources) for key, sample in usage.pods.items()}
    pod_nodes = {pod.key: pod.node_name for pod in snapshot.pods}
    prom = FakePrometheus(lambda: node_usage, lambda: pod_usage, lambda: pod_nodes).start()
    source = PrometheusSource(PrometheusSettings(url=prom.url), clock=lambda: synth.NOW)
    state = PlannerState()
    try:
        # One cycle first: the index and what it keeps, as a running service has them.
        plan(snapshot, fetched, config, state, synth.NOW, cache=indexes)
        gc.collect()
        gc.freeze()
        best = dict.fromkeys((*STEPS, "total"), float("inf"))
        for cycle in range(cycles):
            snapshot = changed(snapshot, churn, cycle)
            gc.disable()  # as the service's HeapKeeper runs a cycle
            try:
                spent = one_cycle(snapshot, fetched, config, state, source, indexes)
            finally:
                gc.enable()
            gc.collect()
            for step, value in spent.items():
                best[step] = min(best[step], value)
            best["total"] = min(best["total"], sum(spent.values()))
        return best
    finally:
        source.close()
        prom.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--churn", type=int, default=500, help="pods changed before each cycle")
    parser.add_argument("--cache", type=Path, help="planning_shapes' cluster pickles (built when missing)")
    args = parser.parse_args(argv)
    quiet_logs()
    best = measure(args.nodes, args.cycles, args.churn, args.cache)
    print(f"steady_steps: {args.nodes} nodes, {args.churn} pods changed before each of {args.cycles} cycles")
    for step in (*STEPS, "total"):
        print(f"  {step:16} {best[step]:.3f} s  (min of {args.cycles}, CPU of this thread)")
    print(summary_line({f"steady_steps_{args.nodes}": f"{best['total']:.3f}s"}))


if __name__ == "__main__":
    main()
