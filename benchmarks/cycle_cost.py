"""What does a cycle cost? Planning time, initial cache sync time and peak memory at 500 and 5,000 nodes.

Run from the repository root::

    python -m benchmarks.cycle_cost                      # 500 and 5,000 nodes, 30 pods per node
    python -m benchmarks.cycle_cost --sizes 20 --runs 2 --sync-runs 1   # a quick check

For each size a child process serves the synthetic cluster (``benchmarks.apiserver``) so that the
server's CPU and memory stay out of the figures. Then, each in a fresh process:

- *floor*: the same LIST pages the cache asks for, fetched with the product's HTTP client and decoded with
  ``json.loads`` only, page by page, with the garbage collector off; that CPU time is the floor the sync is
  compared with (target: within 2x). The same pages are also decoded by orjson (if installed), by the
  cache's msgspec structs alone, and into the cache's values both ways (fast path; ``json.loads`` +
  ``parse.py``), all with the collector off.
- *sync* (``--sync-runs`` times): ``ClusterCache`` start -> ``wait_synced`` (wall and process CPU time),
  ``snapshot()``, then ``plan()`` ``--runs`` times on that snapshot with the synthetic usage (median),
  then three cycles as the service runs them (snapshot, usage fetch from a Prometheus stand-in served
  by the parent, plan; the 2nd and 3rd after ``--churn`` pod changes delivered by the watch), and the
  process's peak RSS (``VmHWM``): that process held the cache, a snapshot and a plan.
- *exact* (unless ``--no-compare-exact``): the same sync with the fast decoder off (``json.loads`` and
  ``parse.py`` alone, as before issue 15), for the before/after in one run.

The planning configuration confirms hotspots at once (``consecutiveAbnormalities: 1``) so the measured
cycle is one that acts on every hot node, the most expensive kind.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import synth
from benchmarks.common import median, proc_status_kib, quiet_logs, summary_line, verdict
from descheduler.cluster.types import UsageSample, UsageSnapshot

PLAN_TARGET_S = 1.0
RSS_TARGET_MIB = 400.0
STEADY_TARGET_S = 1.0
SYNC_FLOOR_TARGET = 2.0


# -- child processes ------------------------------------------------------------------------------------


def _child_floor(kubeconfig: str, page_size: int, repeats: int) -> dict[str, Any]:
    """Fetch every page the cache would LIST; time fetch+decode (wall) and decode alone (CPU)."""
    from descheduler.kube.cache import ClusterCache
    from descheduler.kube.connection import connect

    api = connect(kubeconfig, qps=1000.0, burst=1000)
    # Exactly the LISTs a default cache sends: its reflectors' paths and selectors (never started here).
    lists = [
        (r.spec.path, r.label_selector, r.field_selector)
        for r in ClusterCache(api, page_size=page_size)._reflectors.values()
    ]
    bodies: list[bytes] = []
    started = time.perf_counter()
    for path, label_selector, field_selector in lists:
        token: str | None = None
        while True:
            query: dict[str, Any] = {
                "limit": page_size,
                "continue": token,
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
            }
            response = api.request_raw("GET", path, query=query)
            if response.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {response.status}")
            bodies.append(response.data)
            token = (json.loads(response.data).get("metadata") or {}).get("continue") or None
            if not token:
                break
    fetch_wall = time.perf_counter() - started
    decode: list[float] = []
    decode_gc_on: list[float] = []
    for _ in range(repeats):
        decode.append(_cpu_of(lambda: _each(json.loads, bodies), gc_off=True))
        decode_gc_on.append(_cpu_of(lambda: _each(json.loads, bodies), gc_off=False))
    return {
        "bytes": sum(len(b) for b in bodies),
        "pages": len(bodies),
        "fetch_decode_wall": fetch_wall,
        "decode_cpu": median(decode),
        "decode_cpu_gc_on": median(decode_gc_on),
        "decoders": _decoders(api, page_size, bodies, paths=[path for path, _, _ in lists]),
    }


def _each(decode: Any, bodies: list[bytes]) -> None:
    """Decode every page, keeping none (a decoded page is dropped before the next, as the cache does)."""
    for body in bodies:
        decode(body)


def _cpu_of(work: Any, *, gc_off: bool) -> float:
    """Process CPU of ``work()``; with ``gc_off`` the collector is off meanwhile (the floor's rule)."""
    gc.collect()
    if gc_off:
        gc.disable()
    try:
        cpu = time.process_time()
        result = work()
        spent = time.process_time() - cpu
    finally:
        gc.enable()
    del result
    gc.collect()
    return spent


def _decoders(api: Any, page_size: int, bodies: list[bytes], paths: list[str]) -> dict[str, float]:
    """The decoders compared on the same pages, GC off (CPU s): bare decoding, and decoding into the
    cache's values (the fast path, and ``json.loads`` + ``parse.py`` as before it)."""
    from descheduler.cluster.fastparse import FAST_KINDS
    from descheduler.kube.cache import ClusterCache

    by_path = {r.spec.path: r for r in ClusterCache(api, page_size=page_size)._reflectors.values()}
    pages: list[tuple[Any, bytes]] = []
    for body in bodies:
        # Which resource a page is of: its kind (PodList -> Pod) names the reflector.
        kind = str(json.loads(body[:200].split(b',"metadata"')[0] + b"}").get("kind", ""))[: -len("List")]
        reflector = next((r for r in by_path.values() if r.spec.kind == kind), None)
        if reflector is None:
            raise RuntimeError(f"page of unknown kind {kind!r}")
        pages.append((reflector, body))
    out: dict[str, float] = {}
    try:
        import orjson

        out["orjson.loads"] = _cpu_of(lambda: _each(orjson.loads, bodies), gc_off=True)
    except ImportError:
        pass

    def structs_only() -> None:
        for reflector, body in pages:
            fast = FAST_KINDS.get(reflector.spec.kind)
            fast.decode_page(body) if fast is not None else json.loads(body)

    out["msgspec typed decode (structs only)"] = _cpu_of(structs_only, gc_off=True)

    def into_values(fast: bool) -> list[dict[str, Any]]:
        stores: list[dict[str, Any]] = []
        for reflector, body in pages:
            items: dict[str, Any] = {}
            reflector.fast = FAST_KINDS.get(reflector.spec.kind) if fast else None
            decoded = reflector.fast.decode_page(body) if reflector.fast is not None else None
            if decoded is not None:
                reflector._store_fast(decoded[0], body, items, {}, {})
            else:
                reflector._store_page(body, items, {}, {})
            stores.append(items)
        return stores

    out["json.loads + parse.py into values"] = _cpu_of(lambda: into_values(False), gc_off=True)
    out["msgspec structs + fastparse into values"] = _cpu_of(lambda: into_values(True), gc_off=True)
    return out


def _child_sync(
    kubeconfig: str,
    usage_file: str,
    page_size: int,
    plan_runs: int,
    profile: bool,
    no_gc: bool = False,
    exact_decode: bool = False,
    prom_url: str = "",
    steady_cycles: int = 3,
    churn: int = 500,
) -> dict[str, Any]:
    """Sync a ClusterCache, snapshot it, plan on it; report times and peak RSS of this process.

    ``no_gc`` (diagnostic only, not how the product runs) turns the garbage collector off to show its share.
    """
    if no_gc:
        gc.disable()
    from descheduler.kube.cache import ClusterCache
    from descheduler.kube.connection import connect
    from descheduler.planner import PlannerState, plan
    from descheduler.planner.index import IndexCache
    from descheduler.service.heap import HeapKeeper

    baseline_kib = proc_status_kib("VmHWM")
    api = connect(kubeconfig, qps=50.0, burst=100)  # the configuration's clientConnection defaults
    cache = ClusterCache(api, page_size=page_size, fast_decode=not exact_decode)
    wall = time.perf_counter()
    cpu = time.process_time()
    cache.start()
    if not cache.wait_synced(timeout=900):
        raise RuntimeError("cache did not sync within 900 s")
    sync_wall = time.perf_counter() - wall
    sync_cpu = time.process_time() - cpu
    errors = cache.object_errors
    after_sync_kib = proc_status_kib("VmRSS")
    heap = HeapKeeper()
    if not no_gc:
        heap.settle()  # as the service does once the cache has synced
    started = time.perf_counter()
    snapshot = cache.snapshot()
    snapshot_s = time.perf_counter() - started

    with open(usage_file, encoding="utf-8") as handle:
        raw = json.load(handle)
    now = synth.NOW
    usage = UsageSnapshot(
        nodes={k: UsageSample(v, now) for k, v in raw["nodes"].items()},
        pods={k: UsageSample(v, now) for k, v in raw["pods"].items()},
    )
    del raw
    config = synth.effective_config()
    times: list[float] = []
    result = None
    plan_profile = cProfile.Profile() if profile else None
    steady_profile = cProfile.Profile() if profile else None
    indexes = IndexCache()  # as the service's runner keeps it: the index of an unchanged snapshot reused
    for i in range(plan_runs):
        gc.collect()
        started = time.perf_counter()
        if plan_profile is not None and i == 0:
            plan_profile.enable()
        result = plan(snapshot, usage, config, PlannerState(), now, cache=indexes)
        if plan_profile is not None and i == 0:
            plan_profile.disable()
        times.append(time.perf_counter() - started)
    steady, steady_steps = (
        _steady_cycles(
            cache,
            api,
            prom_url,
            config,
            now,
            cycles=steady_cycles,
            churn=churn,
            profiler=steady_profile,
            heap=heap,
            indexes=indexes,
        )
        if prom_url
        else ([], [])
    )
    peak_kib = proc_status_kib("VmHWM")
    fallbacks = sum(stats["fallbacks"] for stats in cache.stats().values())
    cache.stop()
    assert result is not None
    classes: dict[str, int] = {}
    for report in result.node_reports:
        classes[report.node_class] = classes.get(report.node_class, 0) + 1
    out: dict[str, Any] = {
        "nodes": len(snapshot.nodes),
        "pods": len(snapshot.pods),
        "workloads": len(snapshot.workloads),
        "pdbs": len(snapshot.pdbs),
        "object_errors": len(errors),
        "fallbacks": fallbacks,
        "steady_cycle_cpu": steady,
        "steady_steps": steady_steps,
        "sync_wall": sync_wall,
        "sync_cpu": sync_cpu,
        "snapshot_s": snapshot_s,
        "plan_times": times,
        "evictions": len(result.evictions),
        "classes": classes,
        "baseline_mib": baseline_kib / 1024,
        "after_sync_rss_mib": after_sync_kib / 1024,
        "peak_rss_mib": peak_kib / 1024,
    }
    if profile:
        out["profile"] = {
            "sync": _profile_sync(api, page_size),
            "plan": _top(plan_profile),  # type: ignore[arg-type]
            "last steady cycle": _top(steady_profile, 18),  # type: ignore[arg-type]
        }
    return out


CHURN = 500
"""Pods changed by default (a merge patch of an annotation: a MODIFIED event each) before every steady cycle,
as status and metadata updates keep arriving in a large cluster; the snapshot and index must follow them.
``--churn`` lowers it for the smoke test, whose 500 patches at the client's 50 QPS cost 20 s a cycle."""


def _steady_cycles(
    cache: Any,
    api: Any,
    prom_url: str,
    config: Any,
    now: float,
    cycles: int,
    churn: int = CHURN,
    profiler: cProfile.Profile | None = None,
    heap: Any = None,
    indexes: Any = None,
) -> tuple[list[float], list[dict[str, float]]]:
    """CPU of steady cycles as the service runs them (``CycleRunner.run_cycle``'s steps): the cache's
    snapshot, the node usage fetch from the Prometheus stand-in (served by the parent process, so its
    CPU is not counted), the pod usage fetch for the nodes that need it, and the plan; timed on this
    thread's clock. Before each, ``churn`` pods are changed and the cycle waits for the watch to deliver
    them (their decoding is the watch thread's, not the cycle's). Returns the cycles' CPU and, of it,
    the snapshot and index's. ``indexes``: the ``IndexCache`` the cycles carry (a new one if None)."""
    from descheduler.config.providers import PrometheusSettings
    from descheduler.planner import PlannerState, plan, pod_usage_nodes
    from descheduler.planner.index import IndexCache
    from descheduler.usage.prometheus import PrometheusSource

    source = PrometheusSource(PrometheusSettings(url=prom_url), clock=lambda: now)
    indexes = indexes if indexes is not None else IndexCache()
    pods = cache.snapshot().pods
    changed = pods[:: max(1, len(pods) // churn)][:churn]
    times: list[float] = []
    steps: list[dict[str, float]] = []
    collector = _GcClock()
    try:
        for cycle in range(cycles):
            if cycle:
                before = cache.stats()["pods"]["events"]
                for pod in changed:
                    api.request(
                        "PATCH",
                        f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                        body={"metadata": {"annotations": {"benchmark/cycle": str(cycle)}}},
                        content_type="application/merge-patch+json",
                    )
                deadline = time.monotonic() + 120
                while cache.stats()["pods"]["events"] < before + len(changed):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the watch did not deliver the changes within 120 s")
                    time.sleep(0.05)
            gc.collect()
            profiling = profiler is not None and cycle == cycles - 1
            if profiling:
                assert profiler is not None
                profiler.enable()
            collector.spent = 0.0
            marks = [time.thread_time()]
            # As the service runs a cycle: the collector off inside it, the heap kept after it.
            with heap.cycle() if heap is not None else contextlib.nullcontext():
                snapshot = cache.snapshot()
                indexes.index_of(snapshot)
                marks.append(time.thread_time())
                node_usage = source.fetch_nodes(snapshot.nodes)
                marks.append(time.thread_time())
                state = PlannerState()
                wanted = pod_usage_nodes(snapshot, node_usage, config, state, now, cache=indexes)
                marks.append(time.thread_time())
                usage_pods = source.fetch_pods(wanted, snapshot.nodes, snapshot.pods)
                usage = UsageSnapshot(
                    nodes=node_usage.nodes, pods=usage_pods, node_errors=node_usage.node_errors
                )
                marks.append(time.thread_time())
                plan(snapshot, usage, config, state, now, cache=indexes)
                marks.append(time.thread_time())
            marks.append(time.thread_time())
            times.append(marks[-1] - marks[0])
            step = {name: marks[i + 1] - marks[i] for i, name in enumerate(STEADY_STEPS)}
            step["garbage collector (wall, in the steps above)"] = collector.spent
            steps.append(step)
            if profiling:
                assert profiler is not None
                profiler.disable()
    finally:
        collector.close()
        source.close()
    return times, steps


STEADY_STEPS = (
    "snapshot + index",
    "node usage fetch",
    "pod_usage_nodes",
    "pod usage fetch",
    "plan",
    "heap upkeep after the cycle (HeapKeeper)",
)


class _GcClock:
    """Wall time the garbage collector spends while installed (``gc.callbacks``): how much of a cycle is
    the collector walking a heap of 150,000 pods rather than the cycle's own work."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._started = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._started

    def close(self) -> None:
        gc.callbacks.remove(self._tick)


def _profile_sync(api: Any, page_size: int) -> list[str]:
    """Where sync CPU goes: every reflector's LIST run in this thread under cProfile.

    cProfile sees only the thread it runs in and the cache lists from one thread per resource, so the
    same ``_list`` the reflector threads run is called here, one resource after the other.
    """
    from descheduler.kube.cache import ClusterCache

    cache = ClusterCache(api, page_size=page_size)
    profiler = cProfile.Profile()
    profiler.enable()
    for reflector in cache._reflectors.values():
        reflector._list()
    profiler.disable()
    return _top(profiler, 18)


def _top(profiler: cProfile.Profile, count: int = 12) -> list[str]:
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tottime, calls, cumtime, f"{Path(filename).name}:{line}({name})"))
    rows.sort(reverse=True)
    return [
        f"{tot:8.3f}s self {cum:8.3f}s cum {calls:>9} calls  {where}"
        for tot, calls, cum, where in rows[:count]
    ]


def _run_child(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cycle_cost", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {args[:2]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    line = proc.stdout.strip().splitlines()[-1]
    result: dict[str, Any] = json.loads(line)
    return result


# -- the benchmark --------------------------------------------------------------------------------------


def measure(
    spec: synth.SynthSpec,
    runs: int,
    sync_runs: int,
    page_size: int,
    profile: bool,
    diagnose_gc: bool,
    compare_exact: bool = True,
    steady_cycles: int = 3,
    churn: int = CHURN,
) -> dict[str, Any]:
    from benchmarks.apiserver import ServerProcess
    from benchmarks.fakeprom import FakePrometheus

    cluster = synth.generate(spec)
    hot = len(cluster.hot_nodes)
    node_usage, pod_usage = cluster.node_usage(), cluster.pod_usage()
    pod_nodes = {pod.key: pod.node for pod in cluster.pods}
    # The Prometheus stand-in of the steady cycles runs here, so its serving CPU is not the child's.
    prom = FakePrometheus(lambda: node_usage, lambda: pod_usage, lambda: pod_nodes).start()
    with tempfile.TemporaryDirectory(prefix="cycle-cost-") as tmp:
        usage_file = Path(tmp) / "usage.json"
        usage_file.write_text(json.dumps({"nodes": node_usage, "pods": pod_usage}))
        del cluster
        gc.collect()
        started = time.perf_counter()
        with ServerProcess(spec, Path(tmp)) as server:
            load_s = time.perf_counter() - started
            kubeconfig = str(server.kubeconfig)

            def sync(*extra: str, plan_runs: int = runs) -> dict[str, Any]:
                return _run_child(
                    [
                        "--child",
                        "sync",
                        "--kubeconfig",
                        kubeconfig,
                        "--usage-file",
                        str(usage_file),
                        "--page-size",
                        str(page_size),
                        "--runs",
                        str(plan_runs),
                        "--prom-url",
                        prom.url,
                        "--steady-cycles",
                        str(steady_cycles),
                        "--churn",
                        str(churn),
                        *extra,
                    ]
                )

            floor = _run_child(
                ["--child", "floor", "--kubeconfig", kubeconfig, "--page-size", str(page_size)]
            )
            syncs = [sync(*(["--profile"] if profile and i == 0 else [])) for i in range(sync_runs)]
            exact = sync("--exact-decode", plan_runs=1) if compare_exact else None
            no_gc = sync("--no-gc", plan_runs=1) if diagnose_gc else None
            objects = server.objects
    prom.stop()
    plan_times = [t for s in syncs for t in s["plan_times"]]
    steady = [t for s in syncs for t in s["steady_cycle_cpu"][1:]]
    steady_steps = [step for s in syncs for step in s["steady_steps"][1:]]
    return {
        "nodes": spec.nodes,
        "pods": syncs[0]["pods"],
        "objects": objects,
        "hot": hot,
        "server_load_s": load_s,
        "floor": floor,
        "no_gc": no_gc,
        "exact": exact,
        "syncs": syncs,
        "plan_median": median(plan_times),
        "plan_min": min(plan_times),
        "plan_max": max(plan_times),
        "steady_median": median(steady),
        "steady_cycles": steady,
        "churn": churn,
        "steady_steps": {
            name: median([step[name] for step in steady_steps])
            for name in (steady_steps[0] if steady_steps else {})
        },
        "first_cycle": median([s["steady_cycle_cpu"][0] for s in syncs]),
        "sync_wall": median([s["sync_wall"] for s in syncs]),
        "sync_cpu": median([s["sync_cpu"] for s in syncs]),
        "snapshot_s": median([s["snapshot_s"] for s in syncs]),
        "peak_rss": max(s["peak_rss_mib"] for s in syncs),
        "after_sync_rss": median([s["after_sync_rss_mib"] for s in syncs]),
        "baseline_rss": median([s["baseline_mib"] for s in syncs]),
    }


def report(results: list[dict[str, Any]]) -> dict[str, str]:
    figures: dict[str, str] = {}
    for r in results:
        floor = r["floor"]
        first = r["syncs"][0]
        n = r["nodes"]
        print(f"\n== {n} nodes, {r['pods']} pods ({r['hot']} hot nodes), {r['objects']} objects served ==")
        print(
            f"  snapshot: {first['workloads']} workloads, {first['pdbs']} PDBs, "
            f"object errors {first['object_errors']}"
        )
        print(f"  plan: {first['evictions']} evictions planned, node classes {first['classes']}")
        print(
            f"  planning time (median of {len(r['syncs']) * len(first['plan_times'])} runs): "
            f"{r['plan_median']:.3f} s (min {r['plan_min']:.3f}, max {r['plan_max']:.3f})"
        )
        print(f"  cache.snapshot(): {r['snapshot_s']:.3f} s")
        print(f"  LIST payload: {floor['bytes'] / 2**20:.1f} MiB in {floor['pages']} pages")
        print(
            f"  initial sync (median of {len(r['syncs'])}): wall {r['sync_wall']:.2f} s, "
            f"client CPU {r['sync_cpu']:.2f} s"
        )
        print(
            f"  floor: json.loads of the same pages {floor['decode_cpu']:.2f} s CPU; "
            f"fetch + json.loads {floor['fetch_decode_wall']:.2f} s wall"
        )
        cpu_ratio = r["sync_cpu"] / floor["decode_cpu"] if floor["decode_cpu"] > 0 else float("inf")
        wall_ratio = (
            r["sync_wall"] / floor["fetch_decode_wall"] if floor["fetch_decode_wall"] > 0 else float("inf")
        )
        print(f"  sync / floor: {cpu_ratio:.2f}x CPU, {wall_ratio:.2f}x wall")
        print(
            f"  floor with the GC on (as reported before issue 15): {floor['decode_cpu_gc_on']:.2f} s; "
            f"objects left to parse.py by the fast path: {first['fallbacks']}"
        )
        print("  decoders on the same pages, GC off (CPU):")
        print(f"    {'json.loads (the floor)':44s} {floor['decode_cpu']:6.2f} s")
        for name, seconds in floor["decoders"].items():
            print(f"    {name:44s} {seconds:6.2f} s  ({seconds / floor['decode_cpu']:.2f}x)")
        if r["exact"] is not None:
            exact_cpu = r["exact"]["sync_cpu"]
            exact_rss = r["exact"]["peak_rss_mib"]
            print(
                f"  the same sync through json.loads + parse.py (as before): {exact_cpu:.2f} s CPU "
                f"({exact_cpu / floor['decode_cpu']:.2f}x the floor), peak RSS {exact_rss:.0f} MiB"
            )
            figures[f"sync_exact_cpu_{n}"] = f"{exact_cpu:.2f}s"
        print(
            f"  cycle CPU (snapshot + usage fetch + plan): first {r['first_cycle']:.3f} s, "
            f"steady {r['steady_median']:.3f} s after {r['churn']} pod changes each "
            f"(median of {len(r['steady_cycles'])}), by step (median CPU of the cycle's thread):"
        )
        for name, spent in r["steady_steps"].items():
            print(f"    {name:<45} {spent:.3f} s")
        figures[f"steady_cycle_{n}"] = f"{r['steady_median']:.3f}s"
        if r["no_gc"] is not None:
            off = r["no_gc"]["sync_cpu"]
            print(
                f"  diagnostic: the same sync with the garbage collector off takes {off:.2f} s CPU "
                f"({off / floor['decode_cpu']:.2f}x the floor): the collector's share is "
                f"{1 - off / r['sync_cpu']:.0%}"
            )
        print(
            f"  RSS: {r['baseline_rss']:.0f} MiB after imports, {r['after_sync_rss']:.0f} MiB after sync, "
            f"peak {r['peak_rss']:.0f} MiB (sync + snapshot + plan)"
        )
        print(f"  (server process: generating and loading the cluster took {r['server_load_s']:.1f} s)")
        for name, rows in (first.get("profile") or {}).items():
            print(f"  profile of {name} (top functions by own time):")
            for row in rows:
                print("    " + row)
        figures[f"plan_{n}"] = f"{r['plan_median']:.3f}s"
        figures[f"sync_{n}"] = f"{r['sync_wall']:.2f}s"
        figures[f"sync_cpu_{n}"] = f"{r['sync_cpu']:.2f}s"
        figures[f"floor_{n}"] = f"{floor['decode_cpu']:.2f}s"
        figures[f"sync_vs_floor_{n}"] = f"{cpu_ratio:.2f}x"
        figures[f"rss_{n}"] = f"{r['peak_rss']:.0f}MiB"
    if len(results) >= 2:
        a, b = results[0], results[-1]
        scale = b["pods"] / a["pods"]
        print(f"\n== growth {a['nodes']} -> {b['nodes']} nodes (pods x{scale:.1f}) ==")
        growth = {
            "plan": b["plan_median"] / a["plan_median"],
            "sync_cpu": b["sync_cpu"] / a["sync_cpu"],
            "rss_above_baseline": (b["peak_rss"] - b["baseline_rss"])
            / max(1e-9, a["peak_rss"] - a["baseline_rss"]),
        }
        for name, factor in growth.items():
            print(f"  {name}: x{factor:.1f} (linear would be x{scale:.1f})")
            figures[f"growth_{name}"] = f"{factor:.1f}x"
    big = results[-1]
    cpu_ratio = big["sync_cpu"] / big["floor"]["decode_cpu"]
    print(f"\n== targets at {big['nodes']} nodes / {big['pods']} pods ==")
    print(
        f"  planning < {PLAN_TARGET_S:g} s: {big['plan_median']:.3f} s -> "
        f"{verdict(big['plan_median'] < PLAN_TARGET_S)}"
    )
    print(
        f"  peak RSS < {RSS_TARGET_MIB:g} MiB: {big['peak_rss']:.0f} MiB -> "
        f"{verdict(big['peak_rss'] < RSS_TARGET_MIB)}"
    )
    print(
        f"  sync within {SYNC_FLOOR_TARGET:g}x json.loads with the GC off (CPU): {cpu_ratio:.2f}x -> "
        f"{verdict(cpu_ratio <= SYNC_FLOOR_TARGET)}"
    )
    print(
        f"  steady cycle < {STEADY_TARGET_S:g} s CPU (usage fetch included): {big['steady_median']:.3f} s -> "
        f"{verdict(big['steady_median'] < STEADY_TARGET_S)}"
    )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Cost of a cycle: planning, initial sync, peak memory.")
    parser.add_argument("--sizes", default="500,5000", help="comma-separated node counts (default 500,5000)")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--hot-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5, help="planning runs per sync process")
    parser.add_argument("--sync-runs", type=int, default=2, help="fresh processes syncing the cache")
    parser.add_argument("--page-size", type=int, default=500, help="LIST page size (the cache's default)")
    parser.add_argument("--profile", action="store_true", help="print cProfile tops of sync and planning")
    parser.add_argument(
        "--diagnose-gc", action="store_true", help="one more sync with the garbage collector off (diagnostic)"
    )
    parser.add_argument(
        "--no-compare-exact",
        action="store_true",
        help="skip the sync through json.loads + parse.py (the decoder before issue 15)",
    )
    parser.add_argument(
        "--steady-cycles",
        type=int,
        default=3,
        help="steady cycles per sync process (the first not counted)",
    )
    parser.add_argument(
        "--churn", type=int, default=CHURN, help=f"pods changed before each steady cycle (default {CHURN})"
    )
    parser.add_argument("--no-gc", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--exact-decode", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prom-url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=("floor", "sync"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--usage-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quiet_logs()

    if args.child == "floor":
        print(json.dumps(_child_floor(args.kubeconfig, args.page_size, repeats=2)))
        return
    if args.child == "sync":
        result = _child_sync(
            args.kubeconfig,
            args.usage_file,
            args.page_size,
            args.runs,
            args.profile,
            args.no_gc,
            args.exact_decode,
            args.prom_url,
            args.steady_cycles,
            args.churn,
        )
        print(json.dumps(result))
        return

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print(
        f"cycle_cost: sizes {sizes}, {args.pods_per_node} pods/node, {args.hot_fraction:.0%} hot nodes, "
        f"seed {args.seed}, {args.sync_runs} sync processes x {args.runs} planning runs; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    results = []
    for nodes in sizes:
        spec = synth.SynthSpec(
            nodes=nodes, pods_per_node=args.pods_per_node, hot_fraction=args.hot_fraction, seed=args.seed
        )
        started = time.perf_counter()
        results.append(
            measure(
                spec,
                args.runs,
                args.sync_runs,
                args.page_size,
                args.profile,
                args.diagnose_gc,
                compare_exact=not args.no_compare_exact,
                steady_cycles=args.steady_cycles,
                churn=args.churn,
            )
        )
        print(f"[{nodes} nodes measured in {time.perf_counter() - started:.0f} s]", flush=True)
    figures = report(results)
    print()
    print(summary_line(figures))


if __name__ == "__main__":
    main()
