"""Can an operator capture a large cluster with ``descheduler snapshot`` and replay it? Time and memory.

Run from the repository root::

    python -m benchmarks.snapshot_scale                 # 1,000 and 5,000 nodes (30 pods per node)
    python -m benchmarks.snapshot_scale --sizes 200     # quick

The synthetic cluster (``synth``) is served by the test API server in a child process (LIST pages of 500,
as a real API server pages them) and its usage by the Prometheus stand-in in this process. Then, each in a
fresh process that reports its own CPU and peak RSS (``VmHWM``) as it exits:

- *snapshot*: ``descheduler snapshot --kubeconfig ... --output DIR --prometheus URL`` (the dump, gzipped,
  read back once to fetch the usage of every node and pod, and the usage file);
- *floor*: ``json.loads`` of the gunzipped dump, garbage collector off (the decode cost of what was written);
- *replay*: ``descheduler simulate --cluster DIR/cluster.json.gz --usage DIR/usage.json``, one cycle.

Checked on the way: the dump holds every node the server serves and the usage file a sample for each node
and each pod of the dump; the replay's evictions are counted (whether a replay plans what the live cycle
plans is the integration test ``test_snapshot_command``'s). Issue 15 sets no target for the
snapshot itself; the replay's is ``simulate``'s (within 3x the floor, under 2 GiB at 150,000 pods).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import synth
from benchmarks.common import summary_line, verdict
from benchmarks.simulate_dump import CONFIG, RATIO_TARGET, RSS_TARGET_MIB

_MEASURED = (
    "import atexit, json, os, runpy, sys, time\n"
    "report = sys.argv.pop(1)\n"
    "def done():\n"
    "    status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
    "    with open(report, 'w') as out:\n"
    "        json.dump({'cpu': time.process_time(), 'peak_kib': int(status)}, out)\n"
    "atexit.register(done)\n"
    "sys.argv[0] = 'descheduler'\n"
    "runpy.run_module('descheduler', run_name='__main__', alter_sys=True)\n"
)
"""Runs ``python -m descheduler ARGS`` and, at exit, writes its own CPU and peak RSS (``VmHWM``) to a file.
Measured inside: a forked child's rusage starts from the parent's size, which here holds the usage."""


def _step(args: list[str], timeout: float, logs: Path) -> dict[str, Any]:
    """Run ``descheduler ARGS`` in a fresh process: its stdout, wall time, CPU and peak RSS."""
    out_path, err_path, report = (logs.with_suffix(s) for s in (".out", ".err", ".json"))
    started = time.perf_counter()
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", _MEASURED, str(report), *args], stdout=out, stderr=err)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"descheduler {args[0]} ran past {timeout:g}s") from None
    if code != 0:
        raise RuntimeError(f"descheduler {args[0]} exited {code}:\n{err_path.read_text()[-3000:]}")
    measured = json.loads(report.read_text())
    return {
        "stdout": out_path.read_text(),
        "wall": time.perf_counter() - started,
        "cpu": measured["cpu"],
        "peak_rss_mib": measured["peak_kib"] / 1024,
    }


def _floor(dump: Path) -> dict[str, Any]:
    code = (
        "import gc, gzip, json, sys, time\n"
        "data = gzip.decompress(open(sys.argv[1], 'rb').read())\n"
        "gc.disable()\n"
        "t = time.process_time()\n"
        "doc = json.loads(data)\n"
        "cpu = time.process_time() - t\n"
        "print(json.dumps({'cpu': cpu, 'bytes': len(data), 'items': len(doc['items'])}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(dump)], capture_output=True, text=True, timeout=3600, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def measure(spec: synth.SynthSpec, timeout: float) -> dict[str, Any]:
    from benchmarks.apiserver import ServerProcess
    from benchmarks.fakeprom import FakePrometheus

    cluster = synth.generate(spec)
    node_usage, pod_usage = cluster.node_usage(), cluster.pod_usage()
    pod_nodes = {pod.key: pod.node for pod in cluster.pods}
    del cluster
    gc.collect()
    prom = FakePrometheus(lambda: node_usage, lambda: pod_usage, lambda: pod_nodes).start()
    out: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="snapshot-scale-") as tmp:
            work = Path(tmp)
            started = time.perf_counter()
            with ServerProcess(spec, work, timeout=timeout) as server:
                out["load_s"] = time.perf_counter() - started
                out["served"] = server.objects
                incident = work / "incident"
                out["snapshot"] = step = _step(
                    [
                        "snapshot",
                        "--kubeconfig",
                        str(server.kubeconfig),
                        "--output",
                        str(incident),
                        "--prometheus",
                        prom.url,
                        "--qps",
                        "1000",
                    ],
                    timeout,
                    work / "snapshot",
                )
                step.pop("stdout")
            dump, usage_file = incident / "cluster.json.gz", incident / "usage.json"
            out["dump_mib"] = dump.stat().st_size / 2**20
            out["usage_mib"] = usage_file.stat().st_size / 2**20
            out["floor"] = _floor(dump)
            out["dump_text_mib"] = out["floor"]["bytes"] / 2**20
            with gzip.open(dump, "rt", encoding="utf-8") as stream:
                kinds: dict[str, int] = {}
                for item in json.load(stream)["items"]:
                    kinds[item["kind"]] = kinds.get(item["kind"], 0) + 1
            out["kinds"] = kinds
            usage = json.loads(usage_file.read_text())
            out["usage_nodes"], out["usage_pods"] = len(usage["nodes"]), len(usage["pods"])
            del usage
            config = work / "config.yaml"
            config.write_text(CONFIG)
            replay = _step(
                [
                    "simulate",
                    "--config",
                    str(config),
                    "--cluster",
                    str(dump),
                    "--usage",
                    str(usage_file),
                    "--output",
                    "json",
                ],
                timeout,
                work / "replay",
            )
            out["evictions"] = len(json.loads(replay.pop("stdout"))["cycles"][0]["evictions"])
            out["replay"] = replay
    finally:
        prom.stop()
    out["expected_nodes"], out["expected_pods"] = len(node_usage), len(pod_usage)
    return out


def report(nodes: int, result: dict[str, Any]) -> tuple[dict[str, str], list[bool]]:
    snap, replay, floor = result["snapshot"], result["replay"], result["floor"]
    kinds = result["kinds"]
    print(f"\n== {nodes} nodes ({result['served']} objects served, loaded in {result['load_s']:.0f} s) ==")
    print(
        f"  dump: {result['dump_mib']:.1f} MiB gzipped ({result['dump_text_mib']:.0f} MiB of JSON), "
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    )
    print(
        f"  usage file: {result['usage_mib']:.1f} MiB, {result['usage_nodes']} nodes and "
        f"{result['usage_pods']} pods (Prometheus: {result['expected_nodes']} and {result['expected_pods']})"
    )
    print(f"  floor (json.loads of the dump, GC off): {floor['cpu']:.2f} s")
    print(
        f"  snapshot: {snap['cpu']:.2f} s CPU ({snap['cpu'] / floor['cpu']:.2f}x the floor), "
        f"{snap['wall']:.1f} s wall, peak RSS {snap['peak_rss_mib']:.0f} MiB"
    )
    ratio = replay["cpu"] / floor["cpu"]
    print(
        f"  replay (simulate, one cycle): {replay['cpu']:.2f} s CPU ({ratio:.2f}x the floor), "
        f"{replay['wall']:.1f} s wall, peak RSS {replay['peak_rss_mib']:.0f} MiB; "
        f"{result['evictions']} evictions planned"
    )
    whole = (
        kinds.get("Node", 0) == result["expected_nodes"]
        and result["usage_nodes"] == result["expected_nodes"]
        and result["usage_pods"] == kinds.get("Pod", 0)
    )
    print(f"  every node in the dump, every node and pod of it in the usage file: {verdict(whole)}")
    checks = [whole]
    if nodes >= 5000:
        met = ratio <= RATIO_TARGET and replay["peak_rss_mib"] < RSS_TARGET_MIB
        print(
            f"  replay within {RATIO_TARGET:g}x the floor and under {RSS_TARGET_MIB:.0f} MiB: {verdict(met)}"
        )
        checks.append(met)
    figures = {
        f"snapshot_{nodes}": f"{snap['cpu']:.2f}s",
        f"snapshot_rss_{nodes}": f"{snap['peak_rss_mib']:.0f}MiB",
        f"replay_{nodes}": f"{replay['cpu']:.2f}s",
        f"replay_vs_floor_{nodes}": f"{ratio:.2f}x",
        f"replay_rss_{nodes}": f"{replay['peak_rss_mib']:.0f}MiB",
        f"dump_{nodes}": f"{result['dump_mib']:.1f}MiB",
    }
    return figures, checks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="descheduler snapshot of a large cluster, and its replay.")
    parser.add_argument("--sizes", default="1000,5000", help="comma-separated node counts")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per step")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    load = os.getloadavg()[0]
    print(f"snapshot_scale: sizes {sizes}, {args.pods_per_node} pods/node; load average {load:.2f}")
    figures: dict[str, str] = {}
    checks: list[bool] = []
    for nodes in sorted(sizes):
        spec = synth.SynthSpec(nodes=nodes, pods_per_node=args.pods_per_node, seed=args.seed)
        found, ok = report(nodes, measure(spec, args.timeout))
        figures.update(found)
        checks += ok
    print(f"\nevery check: {verdict(all(checks))}")
    print(summary_line(figures))


if __name__ == "__main__":
    main()
