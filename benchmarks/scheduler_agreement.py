"""Agreement of our destination check with the real kube-scheduler 1.35 (issue 42).

For ``--shapes`` seeded random shapes (3-6 kwok nodes with allocatable, labels and taints, pods bound to
them, a pod with requests, init/sidecar containers, overhead, nodeSelector, node affinity, tolerations,
pod anti-affinity, topology spread and host ports: ``tests/controlplane/judge.py``), asks per node both our
check and the scheduler (a probe pod pinned to the node) whether the pod could land there, and prints the
table: "we say fits, scheduler refuses" must be 0; "we say no, scheduler places" is classified by our
reason. ``--json`` writes the table (benchmarks/data/scheduler-agreement-<date>.json). ``--dra`` gives
every shape devices and the pod device claims instead (``tests/controlplane/judge_dra.py``; the planner's
path for a device-holding pod), a run of its own (benchmarks/data/scheduler-agreement-dra-<date>.json).

    python -m benchmarks.scheduler_agreement --shapes 300 \
        --json benchmarks/data/scheduler-agreement-$(date +%F).json
    python -m benchmarks.scheduler_agreement --dra --shapes 120 \
        --json benchmarks/data/scheduler-agreement-dra-$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from tests.controlplane import judge
from tests.controlplane.cluster import ControlPlane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=300)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=50, help="shapes probed together")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--dra", action="store_true", help="shapes with devices and device claims")
    args = parser.parse_args(argv)
    started = time.monotonic()
    verdicts: list[judge.Verdict] = []
    shapes_seen: list[judge.Shape] = []
    with tempfile.TemporaryDirectory(prefix="scheduler-agreement-") as root:
        plane = ControlPlane.start(Path(root))
        try:
            seeds = list(range(args.first_seed, args.first_seed + args.shapes))
            for start in range(0, len(seeds), args.batch):
                shapes = [
                    judge.random_shape(seed, "d" if args.dra else "b", args.dra)
                    for seed in seeds[start : start + args.batch]
                ]
                shapes_seen += shapes
                verdicts += judge.judge(plane, shapes)
                judge.cleanup(plane, shapes)
                print(f"{len(verdicts)} probes after {time.monotonic() - started:.0f}s", flush=True)
        finally:
            plane.stop()
    result = judge.table(verdicts)
    result["date"] = datetime.now(UTC).date().isoformat()
    result["seeds"] = [args.first_seed, args.first_seed + args.shapes - 1]
    result["dra"] = args.dra
    result["features"] = dict(Counter(f for s in shapes_seen for f in s.features).most_common())
    result["seconds"] = round(time.monotonic() - started)
    width = max(len(k) for k in result)
    for key in (
        "shapes",
        "probes",
        "both_fit",
        "both_refuse",
        "we_fit_scheduler_refuses",
        "we_refuse_scheduler_places",
    ):
        print(f"{key:<{width}}  {result[key]}")
    for case in result["we_fit_scheduler_refuses_cases"]:
        where = f"seed {case['seed']} {case['node']}"
        print(f"  WE FIT, SCHEDULER REFUSES: {where}: {case['scheduler']} {case['features']}")
    print("both refuse, by the scheduler's reason:")
    for reason, count in result["both_refuse_classes"].items():
        print(f"  {count:5d}  {reason}")
    print("we say no, scheduler places, by our reason:")
    for reason, count in result["we_refuse_scheduler_places_classes"].items():
        print(f"  {count:5d}  {reason}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result["we_fit_scheduler_refuses"] else 0


if __name__ == "__main__":
    sys.exit(main())
