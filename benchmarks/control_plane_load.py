"""What load does it put on the control plane? Requests to the API server and queries to Prometheus.

Run from the repository root::

    python -m benchmarks.control_plane_load              # 50 and 500 nodes, 10 cycles each
    python -m benchmarks.control_plane_load --sizes 20 --cycles 3   # a quick check

The product's own parts are wired as the service wires them (``ClusterCache``, ``PrometheusSource``,
``Evictor`` with an ``EventRecorder``, ``CycleRunner``) against the test API server, which records every
request by verb and resource, and a Prometheus stand-in (``benchmarks.fakeprom``) that counts queries.
After the initial sync, ``--cycles`` cycles run 60 simulated seconds apart. Between cycles the world
answers as a cluster would: each evicted pod's controller makes a replacement on the least-loaded node
that fits (written straight into the server's store, so it is not counted as the descheduler's
request; the cache sees it through its watch), the PodDisruptionBudget's controller restores the
budget, and Prometheus reports the moved load.

Targets: no LIST and no GET after the initial sync; one eviction request per eviction attempted; one
Event per eviction; Prometheus queries per cycle bounded whatever the node count (three node queries,
then pod queries in at most ``MAX_POD_BATCHES`` batches each, only for the nodes over a threshold).
Leader election is off here: with it on, the Lease adds one GET and one UPDATE every ``retryPeriod``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import synth
from benchmarks.apiserver import FastPagingApiServer, load
from benchmarks.closedloop import World
from benchmarks.common import quiet_logs, summary_line, verdict
from benchmarks.fakeprom import FakePrometheus
from tests.apiserver import RecordedRequest
from tests.apiserver.resources import by_kind

INTERVAL = 60.0


def _label(request: RecordedRequest) -> str:
    """``verb resource[/subresource]``; requests outside the resource API (discovery, /version) by path."""
    if not request.is_resource:
        return f"{request.method} {request.path} (not a resource)"
    if request.subresource:
        return f"{request.verb} {request.resource}/{request.subresource}"
    return f"{request.verb} {request.resource}"


def _commit_pod(server: FastPagingApiServer, obj: dict[str, Any]) -> int:
    """Create a pod as its controller would (straight into the store: not the descheduler's request)."""
    stored = server.store.commit(by_kind("v1", "Pod"), "ADDED", obj, None)
    return int(stored["metadata"]["resourceVersion"])


def _wait(condition: Any, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


def measure(nodes: int, cycles: int, seed: int, hot_fraction: float, consecutive: int) -> dict[str, Any]:
    from descheduler.config.providers import PrometheusSettings
    from descheduler.kube.cache import ClusterCache
    from descheduler.kube.connection import connect
    from descheduler.kube.events import EventRecorder
    from descheduler.kube.evict import Evictor
    from descheduler.service.cycle import CycleRunner
    from descheduler.service.edges import Clocks, Edges, Timing
    from descheduler.usage.prometheus import QUERY_NAMES, PrometheusSource

    spec = synth.SynthSpec(nodes=nodes, hot_fraction=hot_fraction, seed=seed)
    cluster = synth.generate(spec)
    world = World(cluster)
    server = FastPagingApiServer()
    load(server, cluster.objects())
    prom = FakePrometheus(
        lambda: world.usage, world.pod_usage, lambda: {key: pod.node for key, pod in world.pods.items()}
    )
    clock = [synth.NOW]
    server.start()
    prom.start()
    cache = None
    events = None
    source = None
    try:
        with tempfile.TemporaryDirectory(prefix="cp-load-") as tmp:
            kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
            api = connect(str(kubeconfig), qps=50.0, burst=100)
            cache = ClusterCache(api)
            started = time.perf_counter()
            cache.start()
            if not cache.wait_synced(timeout=300):
                raise RuntimeError("cache did not sync")
            sync_s = time.perf_counter() - started
            watched = len(cache.stats())
            if not _wait(lambda: server.open_watches() >= watched, 30):
                raise RuntimeError(f"only {server.open_watches()} of {watched} watches opened")
            boundary = len(server.requests)
            sync_requests = Counter(_label(r) for r in server.requests)

            config = synth.effective_config(consecutive_abnormalities=consecutive)
            source = PrometheusSource(PrometheusSettings(url=prom.url), clock=lambda: clock[0])
            events = EventRecorder(api)
            evictor = Evictor(api, evict_qps=1000.0, evict_burst=1000, dry_run=False, events=events)
            runner = CycleRunner(
                config,
                Edges(cluster=cache, usage=source, evictor=evictor),
                clocks=Clocks(wall=lambda: clock[0]),
                timing=Timing(budget_seconds=INTERVAL),
            )
            attempted = evicted = 0
            results: Counter[str] = Counter()
            per_cycle_queries: list[int] = []
            per_cycle_series: list[int] = []
            for cycle in range(1, cycles + 1):
                clock[0] = synth.NOW + cycle * INTERVAL
                before = source.queries_sent
                series_before = prom.series_returned
                record = runner.run_cycle()
                assert record is not None
                per_cycle_queries.append(source.queries_sent - before)
                per_cycle_series.append(prom.series_returned - series_before)
                if not events.flush(timeout=30):
                    raise RuntimeError("events were not written within 30 s")
                last_rv = 0
                for outcome in record.evictions:
                    results[outcome.result] += 1
                    if outcome.result != "not-attempted":
                        attempted += 1
                    if outcome.result != "evicted":
                        continue
                    evicted += 1
                    old, new = world.evict_and_replace(outcome.pod, clock[0])
                    if new is not None:
                        last_rv = _commit_pod(server, synth.pod_object(new, cluster.daemonset_uids))
                    if old.workload is not None and old.workload.pdb:
                        server.patch(
                            "poddisruptionbudgets",
                            old.namespace,
                            old.workload.name,
                            {"status": {"disruptionsAllowed": 1, "disruptedPods": None}},
                            group="policy",
                        )
                world.tick()
                if last_rv and not _wait(
                    lambda rv=last_rv: int(cache.resource_version("pods") or 0) >= rv, 30
                ):
                    raise RuntimeError("the cache did not see the replacement pods within 30 s")
            steady = server.requests[boundary:]
    finally:
        if events is not None:
            events.close()
        if cache is not None:
            cache.stop()
        if source is not None:
            source.close()
        prom.stop()
        server.stop()
    by_kind_steady = Counter(_label(r) for r in steady)
    return {
        "nodes": nodes,
        "pods": len(cluster.pods),
        "sync_s": sync_s,
        "sync_requests": sync_requests,
        "steady": by_kind_steady,
        "lists": sum(1 for r in steady if r.verb == "list"),
        "gets": sum(1 for r in steady if r.verb == "get"),
        "watches": sum(1 for r in steady if r.verb == "watch"),
        "eviction_requests": sum(1 for r in steady if r.resource == "pods" and r.subresource == "eviction"),
        "event_requests": sum(1 for r in steady if r.resource == "events" and r.verb == "create"),
        "attempted": attempted,
        "evicted": evicted,
        "results": results,
        "queries_per_cycle": per_cycle_queries,
        "series_per_cycle": per_cycle_series,
        "prom_served": prom.total,
        "query_names": len(QUERY_NAMES),
        "server_errors": list(server.errors),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Requests to the API server and Prometheus queries per cycle."
    )
    parser.add_argument("--sizes", default="50,500", help="comma-separated node counts (default 50,500)")
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--hot-fraction", type=float, default=0.05)
    parser.add_argument(
        "--consecutive", type=int, default=2, help="anomalyCondition.consecutiveAbnormalities"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    quiet_logs()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print(
        f"control_plane_load: sizes {sizes}, {args.cycles} cycles {INTERVAL:g}s apart (simulated), "
        f"consecutiveAbnormalities {args.consecutive}, load average {os.getloadavg()[0]:.2f}"
    )
    figures: dict[str, str] = {"cycles": str(args.cycles)}
    all_ok = {"no_list_get": True, "one_request_per_eviction": True, "one_event_per_eviction": True}
    queries: dict[int, float] = {}
    for nodes in sizes:
        r = measure(nodes, args.cycles, args.seed, args.hot_fraction, args.consecutive)
        print(f"\n== {nodes} nodes, {r['pods']} pods ==")
        print(f"  initial sync {r['sync_s']:.2f} s; its requests (LIST pages, then one WATCH per resource):")
        for label, count in sorted(r["sync_requests"].items()):
            print(f"    {label:<40} {count}")
        print(f"  requests in the {args.cycles} steady-state cycles, by verb and resource:")
        for label, count in sorted(r["steady"].items()) or [("(none)", 0)]:
            print(f"    {label:<40} {count}")
        print(f"  LIST {r['lists']}, GET {r['gets']}, WATCH re-opened {r['watches']}")
        print(
            f"  evictions attempted {r['attempted']} (results {dict(r['results'])}), "
            f"eviction requests {r['eviction_requests']}, events written {r['event_requests']}"
        )
        print(
            f"  Prometheus queries per cycle: {r['queries_per_cycle']} "
            f"(the server answered {r['prom_served']}); series returned per cycle: {r['series_per_cycle']} "
            f"({3 * (nodes + r['pods'])} if every pod were fetched)"
        )
        if r["server_errors"]:
            print(f"  API server errors: {r['server_errors'][:3]}")
        all_ok["no_list_get"] &= r["lists"] == 0 and r["gets"] == 0
        all_ok["one_request_per_eviction"] &= r["eviction_requests"] == r["attempted"]
        all_ok["one_event_per_eviction"] &= r["event_requests"] == r["attempted"]
        per_cycle = r["queries_per_cycle"]
        queries[nodes] = sum(per_cycle) / len(per_cycle) if per_cycle else 0.0
        figures[f"list_get_{nodes}"] = str(r["lists"] + r["gets"])
        figures[f"evictions_{nodes}"] = str(r["attempted"])
        figures[f"eviction_requests_{nodes}"] = str(r["eviction_requests"])
        figures[f"events_{nodes}"] = str(r["event_requests"])
        figures[f"queries_per_cycle_{nodes}"] = f"{queries[nodes]:g}"
    from descheduler.usage.prometheus import MAX_POD_BATCHES

    bound = 3 + 3 * MAX_POD_BATCHES
    bounded = all(q <= bound for q in queries.values())
    print("\ntargets:")
    print(f"  no LIST or GET after the initial sync: {verdict(all_ok['no_list_get'])}")
    print(f"  one eviction request per eviction: {verdict(all_ok['one_request_per_eviction'])}")
    print(f"  one event per eviction: {verdict(all_ok['one_event_per_eviction'])}")
    print(f"  Prometheus queries per cycle at most {bound} at every size ({queries}): {verdict(bounded)}")
    print()
    print(summary_line(figures))


if __name__ == "__main__":
    main()
