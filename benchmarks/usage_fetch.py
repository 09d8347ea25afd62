"""What does a cycle's usage fetch cost, on a real Prometheus? All pods (one step) against two steps.

Run from the repository root (needs ``prometheus`` and ``promtool``, Debian package ``prometheus``)::

    python -m benchmarks.usage_fetch                  # 300 nodes, 30 pods per node, 5 % hot
    python -m benchmarks.usage_fetch --nodes 100      # quicker

The synthetic cluster's usage (``synth``) is written as node-exporter and cAdvisor series (6 minutes,
scraped every 30 s; per pod an ``app`` container, the pause container and the pod-level aggregate, as the
kubelet exposes them) into a TSDB with ``promtool`` and served by a real ``prometheus``. Then the same
``PrometheusSource`` fetches usage both ways, at the same instant:

- *one step* (``fetch``): the three node queries and the three pod queries for every pod in the cluster;
- *two steps* (what a cycle does now): node queries, ``planner.pod_usage_nodes`` on the node usage, then
  pod queries only for the nodes it names, matched on their ``node`` label in at most 4 batches.

Figures: queries sent, samples Prometheus loaded to answer them (``stats=all``,
``totalQueryableSamples``), series returned, pod samples built, and the client's CPU time.
Target (issue 15): Prometheus work per cycle at least 10x below the one-step fetch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import synth
from benchmarks.common import quiet_logs, summary_line, verdict
from descheduler.cluster.build import build_snapshot
from descheduler.config.providers import PrometheusSettings
from descheduler.planner import PlannerState, pod_usage_nodes
from descheduler.usage.prometheus import PrometheusSource
from tests.support.prometheus import require_binary, start_prometheus

STEP = 30.0
SPAN = 360.0
WORK_TARGET = 10.0


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def write_openmetrics(cluster: synth.SynthCluster, path: Path, end: float) -> int:
    """The cluster's usage as series ending at ``end``; returns the number of series written."""
    times = [end - SPAN + i * STEP for i in range(int(SPAN / STEP) + 1)]
    node_usage = cluster.node_usage()
    families: dict[str, list[tuple[dict[str, str], list[tuple[float, float]]]]] = {}

    def add(name: str, labels: dict[str, str], points: list[tuple[float, float]]) -> None:
        families.setdefault(name, []).append((labels, points))

    def counter(rate: float) -> list[tuple[float, float]]:
        return [(t, 1000.0 + rate * (t - times[0])) for t in times]

    def gauge(value: float) -> list[tuple[float, float]]:
        return [(t, value) for t in times]

    for node in cluster.nodes:
        instance = {"instance": f"{node.name}:9100", "job": "node-exporter"}
        busy = node_usage[node.name]["cpu"] / 1000
        add("node_cpu_seconds_total", {**instance, "cpu": "0", "mode": "user"}, counter(busy))
        add(
            "node_cpu_seconds_total",
            {**instance, "cpu": "0", "mode": "idle"},
            counter(node.cpu_m / 1000 - busy),
        )
        add("node_memory_MemTotal_bytes", instance, gauge(node.memory))
        add("node_memory_MemAvailable_bytes", instance, gauge(node.memory - node_usage[node.name]["memory"]))
    for pod in cluster.pods:
        base = {"namespace": pod.namespace, "pod": pod.name, "node": pod.node, "job": "kubelet"}
        for container, cpu, rss in (
            ("app", pod.cpu_usage_m / 1000, pod.memory_usage),
            ("POD", 0.001, 512 * 1024),
            ("", pod.cpu_usage_m / 1000 + 0.001, pod.memory_usage + 512 * 1024),
        ):
            labels = {**base, "container": container}
            add("container_cpu_usage_seconds_total", labels, counter(cpu))
            add("container_memory_rss", labels, gauge(rss))
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for name, members in families.items():
            out.write(f"# TYPE {name} unknown\n")
            for labels, points in members:
                text = _labels(labels)
                count += 1
                for t, value in points:
                    out.write(f"{name}{text} {value!r} {t:.3f}\n")
        out.write("# EOF\n")
    return count


def measure(nodes: int, pods_per_node: int, hot: float, seed: int) -> dict[str, Any]:
    spec = synth.SynthSpec(nodes=nodes, pods_per_node=pods_per_node, hot_fraction=hot, seed=seed)
    cluster = synth.generate(spec)
    snapshot = build_snapshot(cluster.objects())
    config = synth.effective_config()
    end = synth.NOW
    with tempfile.TemporaryDirectory(prefix="usage-fetch-") as tmp:
        work = Path(tmp)
        source_file = work / "series.om.txt"
        series = write_openmetrics(cluster, source_file, end)
        started = time.perf_counter()
        subprocess.run(
            [
                require_binary("promtool"),
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(source_file),
                str(work / "data"),
            ],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        import_s = time.perf_counter() - started
        source_file.unlink()
        server = start_prometheus(work / "data", work / "prometheus")
        try:
            settings = PrometheusSettings.model_validate({"url": server.url, "timeout": "120s"})
            source = PrometheusSource(settings, clock=lambda: end)
            try:
                source.fetch(snapshot.nodes, snapshot.pods)  # warm Prometheus' caches for both ways alike
                cpu = time.process_time()
                usage = source.fetch(snapshot.nodes, snapshot.pods)
                one_pods = len(dict(usage.pods))
                one = {
                    "cpu": time.process_time() - cpu,
                    "queries": source.cycle_queries,
                    "samples": source.cycle_samples,
                    "pods": one_pods,
                }
                cpu = time.process_time()
                nodes_usage = source.fetch_nodes(snapshot.nodes)
                wanted = pod_usage_nodes(snapshot, nodes_usage, config, PlannerState(), end)
                pods = source.fetch_pods(wanted, snapshot.nodes, snapshot.pods)
                built = sum(1 for p in snapshot.pods if p.node_name in (wanted or ()) and pods.get(p.key))
                two = {
                    "cpu": time.process_time() - cpu,
                    "queries": source.cycle_queries,
                    "samples": source.cycle_samples,
                    "pods": built,
                    "wanted": len(wanted) if wanted is not None else nodes,
                    "node_samples": len(nodes_usage.nodes),
                }
            finally:
                source.close()
        finally:
            server.stop()
    return {
        "nodes": nodes,
        "pods": len(snapshot.pods),
        "series": series,
        "import_s": import_s,
        "one": one,
        "two": two,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Usage fetch cost on a real Prometheus: one step vs two.")
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--hot-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    quiet_logs()
    print(
        f"usage_fetch: {args.nodes} nodes, {args.pods_per_node} pods/node, {args.hot_fraction:.0%} hot; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    r = measure(args.nodes, args.pods_per_node, args.hot_fraction, args.seed)
    one, two = r["one"], r["two"]
    print(f"  {r['series']} series written, TSDB built in {r['import_s']:.0f} s")
    print(f"  {'':<32} {'one step (all pods)':>20} {'two steps':>12}")
    print(f"  {'queries':<32} {one['queries']:>20} {two['queries']:>12}")
    print(f"  {'samples touched (stats=all)':<32} {one['samples']:>20} {two['samples']:>12}")
    print(f"  {'pod samples built':<32} {one['pods']:>20} {two['pods']:>12}")
    print(f"  {'client CPU, s':<32} {one['cpu']:>20.3f} {two['cpu']:>12.3f}")
    print(
        f"  nodes whose pods were fetched: {two['wanted']} of {r['nodes']} "
        f"({two['node_samples']} with node usage)"
    )
    factor = one["samples"] / max(1, two["samples"])
    ok = factor >= WORK_TARGET
    print(f"  Prometheus work {factor:.1f}x lower (target at least {WORK_TARGET:g}x): {verdict(ok)}")
    n = r["nodes"]
    print(
        summary_line(
            {
                f"samples_one_step_{n}": str(one["samples"]),
                f"samples_two_steps_{n}": str(two["samples"]),
                f"work_reduction_{n}": f"{factor:.1f}x",
                f"queries_two_steps_{n}": str(two["queries"]),
                f"cpu_one_step_{n}": f"{one['cpu']:.3f}s",
                f"cpu_two_steps_{n}": f"{two['cpu']:.3f}s",
            }
        )
    )


if __name__ == "__main__":
    main()
