"""Can ``simulate`` replay a real cluster dump? Time and memory to read a kubectl JSON dump and simulate it.

Run from the repository root::

    python -m benchmarks.simulate_dump                 # 1,000 and 5,000 nodes (30 pods per node)
    python -m benchmarks.simulate_dump --sizes 200     # quick

The synthetic cluster (``synth``) is written as ``kubectl get nodes,pods,pdb,rs,deploy,sts -A -o json``
prints it (one ``List``, full objects) plus a JSON usage file, and gzipped. Then, each in a fresh process
so peak RSS (``VmHWM``) belongs to that step alone:

- *floor*: read the file and ``json.loads`` it, garbage collector off (the decode cost itself);
- *load*: ``simulate.inputs.load_cluster`` (the streaming reader and the snapshot);
- *simulate*: the whole ``descheduler simulate`` command, one cycle, JSON output to /dev/null;
- *simulate (gzip)*: the same on the gzipped files.

Targets (issue 15), at 150,000 pods: ``simulate`` within 3x the floor (CPU) and under 2 GiB peak RSS.
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
from benchmarks.common import proc_status_kib, summary_line, verdict

RATIO_TARGET = 3.0
RSS_TARGET_MIB = 2048.0

CONFIG = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
profiles:
- name: benchmark
  plugins: {balance: {enabled: [{name: LowNodeLoad}]}}
  pluginConfig:
  - name: LowNodeLoad
    args:
      lowThresholds: {cpu: 45, memory: 55}
      highThresholds: {cpu: 75, memory: 80}
      anomalyCondition: {consecutiveAbnormalities: 1}
      evictableNamespaces: {exclude: [kube-system, monitoring]}
"""


def unique_pod_names(cluster: synth.SynthCluster) -> int:
    """Rename pods whose name is taken (synth's random 5-character DaemonSet suffixes collide a few times
    among 10,000 pods, and ``simulate`` rightly refuses a dump with a pod twice); returns how many."""
    seen: set[str] = set()
    renamed = 0
    for pod in cluster.pods:
        while pod.key in seen:
            pod.name += "x"
            renamed += 1
        seen.add(pod.key)
    return renamed


def write_files(spec: synth.SynthSpec, directory: Path) -> dict[str, Path]:
    """The dump, the usage file and the configuration, plain and gzipped."""
    cluster = synth.generate(spec)
    unique_pod_names(cluster)
    dump = directory / "cluster.json"
    with dump.open("w", encoding="utf-8") as out:
        out.write('{\n    "apiVersion": "v1",\n    "items": [\n')
        for i, obj in enumerate(cluster.objects()):
            if i:
                out.write(",\n")
            out.write(json.dumps(obj, indent=4))
        out.write('\n    ],\n    "kind": "List",\n    "metadata": {"resourceVersion": ""}\n}\n')
    usage = directory / "usage.json"
    usage.write_text(
        json.dumps(
            {
                "nodes": {
                    k: {"cpu": f"{v['cpu']}m", "memory": v["memory"]} for k, v in cluster.node_usage().items()
                },
                "pods": {
                    k: {"cpu": f"{v['cpu']}m", "memory": v["memory"]} for k, v in cluster.pod_usage().items()
                },
            }
        )
    )
    config = directory / "config.yaml"
    config.write_text(CONFIG)
    files = {"cluster": dump, "usage": usage, "config": config}
    for name in ("cluster", "usage"):
        packed = directory / f"{files[name].name}.gz"
        packed.write_bytes(gzip.compress(files[name].read_bytes(), compresslevel=6))
        files[f"{name}_gz"] = packed
    return files


# -- child processes ------------------------------------------------------------------------------------


def _child(step: str, files: dict[str, str]) -> dict[str, Any]:
    cpu = time.process_time()
    wall = time.perf_counter()
    out: dict[str, Any] = {}
    if step == "floor":
        gc.disable()
        data = Path(files["cluster"]).read_bytes()
        cpu = time.process_time()
        document = json.loads(data)
        out["items"] = len(document["items"])
    elif step == "load":
        from descheduler.simulate.inputs import load_cluster

        snapshot = load_cluster(files["cluster"])
        out["pods"] = len(snapshot.pods)
    else:
        from descheduler.cli import main

        gz = step == "simulate_gz"
        with open(os.devnull, "w", encoding="utf-8") as sink:
            stdout = sys.stdout
            sys.stdout = sink
            try:
                code = main(
                    [
                        "simulate",
                        "--config",
                        files["config"],
                        "--cluster",
                        files["cluster_gz" if gz else "cluster"],
                        "--usage",
                        files["usage_gz" if gz else "usage"],
                        "--output",
                        "json",
                    ]
                )
            finally:
                sys.stdout = stdout
        if code != 0:
            raise RuntimeError(f"simulate exited {code}")
    out["cpu"] = time.process_time() - cpu
    out["wall"] = time.perf_counter() - wall
    out["peak_rss_mib"] = proc_status_kib("VmHWM") / 1024
    return out


def _run_child(step: str, files: dict[str, Path]) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.simulate_dump",
            "--child",
            step,
            "--files",
            json.dumps({k: str(v) for k, v in files.items()}),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {step} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Reading and simulating a kubectl JSON dump.")
    parser.add_argument("--sizes", default="1000,5000", help="comma-separated node counts")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--files", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, json.loads(args.files))))
        return
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print(
        f"simulate_dump: sizes {sizes}, {args.pods_per_node} pods/node; load average {os.getloadavg()[0]:.2f}"
    )
    figures: dict[str, str] = {}
    verdicts: list[bool] = []
    for nodes in sizes:
        spec = synth.SynthSpec(nodes=nodes, pods_per_node=args.pods_per_node, seed=args.seed)
        with tempfile.TemporaryDirectory(prefix="simulate-dump-") as tmp:
            files = write_files(spec, Path(tmp))
            size = files["cluster"].stat().st_size
            packed = files["cluster_gz"].stat().st_size
            steps = {step: _run_child(step, files) for step in ("floor", "load", "simulate", "simulate_gz")}
        floor = steps["floor"]["cpu"]
        print(f"\n== {nodes} nodes, {nodes * args.pods_per_node} pods ==")
        print(
            f"  dump: {size / 2**20:.0f} MiB JSON ({packed / 2**20:.0f} MiB gzipped), "
            f"{steps['floor']['items']} objects"
        )
        print(
            f"  floor: json.loads {floor:.2f} s CPU (GC off), "
            f"peak RSS {steps['floor']['peak_rss_mib']:.0f} MiB"
        )
        for step in ("load", "simulate", "simulate_gz"):
            r = steps[step]
            print(
                f"  {step:<12} {r['cpu']:7.2f} s CPU ({r['cpu'] / floor:.2f}x the floor), "
                f"wall {r['wall']:.2f} s, peak RSS {r['peak_rss_mib']:.0f} MiB"
            )
        ratio = steps["simulate"]["cpu"] / floor
        rss = max(steps["simulate"]["peak_rss_mib"], steps["simulate_gz"]["peak_rss_mib"])
        figures[f"floor_{nodes}"] = f"{floor:.2f}s"
        figures[f"load_{nodes}"] = f"{steps['load']['cpu']:.2f}s"
        figures[f"simulate_{nodes}"] = f"{steps['simulate']['cpu']:.2f}s"
        figures[f"simulate_vs_floor_{nodes}"] = f"{ratio:.2f}x"
        figures[f"simulate_rss_{nodes}"] = f"{rss:.0f}MiB"
        ok = ratio <= RATIO_TARGET and rss < RSS_TARGET_MIB
        verdicts.append(ok)
        print(
            f"  simulate within {RATIO_TARGET:g}x json.loads and under {RSS_TARGET_MIB:.0f} MiB: "
            f"{verdict(ok)}"
        )
    print(summary_line(figures))


if __name__ == "__main__":
    main()
