"""What do hostile or merely large DRA selectors cost a planning cycle (issue 37, point 18)?

Three cases, each planned as the service plans a cycle (``plan`` on a snapshot built from API objects):

- ``heavy``: a selector just under the estimated cost limit, on 1,280 devices each with its own ``uuid``
  (no verdict is reused): the cycle's CEL budget ends the work, the pod stays;
- ``growth``: ``[[1]].map(l, l + l)`` chained 22 times: refused at compile;
- ``large``: a plain DeviceClass selector over ``--devices`` devices (in slices of 125): what one cycle
  costs, and how many cycles the remembered verdicts need to cover every device.

Prints CPU seconds per cycle, the peak RSS, and ``SUMMARY ...``. ``python -m benchmarks.dra_cel``.
"""

from __future__ import annotations

import argparse
import time
import uuid

from benchmarks.common import proc_status_kib, quiet_logs, summary_line
from descheduler.planner import PlannerState, plan, reasons
from tests.unit.builders import GPU_DRIVER, NOW, World, cpu, exactly, gpu, settings

A = f"device.attributes['{GPU_DRIVER}']"
HEAVY = "[" + ", ".join(str(i) for i in range(85)) + f"].all(x, !has({A}.uuid) || {A}.uuid != string(x))"
GROWTH = "[[1]]" + ".map(l, l + l)" * 22 + ".size() > 0"
PLAIN = f"!has({A}.uuid) || {A}.uuid != ''"


def world(devices: int, selector: str, per_slice: int = 125, nodes: int = 16) -> World:
    """``hot`` with one device pod asking ``selector``; ``devices`` GPUs over ``nodes`` low nodes."""
    w = World().node("hot", usage=cpu("9.9"))
    w.deployment("gpu-app", replicas=4)
    w.device_class("gpu", f"device.driver == '{GPU_DRIVER}'")
    w.resource_slice("hot-gpus", [gpu("gpu-0")], node="hot")
    for n in range(nodes):
        w.node(f"low-{n}", cpu="40", usage=cpu("1"))
    tag = uuid.uuid4()
    made = 0
    while made < devices:
        node = f"low-{(made // per_slice) % nodes}"
        count = min(per_slice, devices - made)
        chunk = [
            gpu(f"gpu-{i}", attributes={"uuid": {"string": f"{tag}-{i}"}}) for i in range(made, made + count)
        ]
        w.resource_slice(f"s-{made}", chunk, node=node, pool=f"s-{made}")
        made += count
    w.device_pod("p", on="hot", usage=cpu("4"), requests=[exactly("gpu", selector)], allocated=["gpu-0"])
    return w


def cycles(w: World, count: int) -> list[tuple[float, str]]:
    """(CPU seconds, the pod's fate) of ``count`` plans on one snapshot, verdicts kept between them."""
    snapshot, usage = w.snapshot(), w.usage(NOW)
    config = settings(migration={"evictResourceClaimPods": True})
    out = []
    for _ in range(count):
        started = time.process_time()
        result = plan(snapshot, usage, config, PlannerState(), NOW)
        spent = time.process_time() - started
        fate = "moved" if result.evictions else next(s.code for s in result.pod_skips if s.pod == "default/p")
        out.append((spent, fate))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=200_000)
    parser.add_argument("--cycles", type=int, default=3)
    args = parser.parse_args()
    quiet_logs()
    figures: dict[str, str] = {}
    for name, devices, selector, count in (
        ("heavy", 1_280, HEAVY, 2),
        ("growth", 1_280, GROWTH, 1),
        ("large", args.devices, PLAIN, args.cycles),
    ):
        runs = cycles(world(devices, selector), count)
        for i, (spent, fate) in enumerate(runs, 1):
            print(f"{name}: {devices:,} devices, cycle {i}: {spent:.2f} s CPU, pod {fate}")
        assert all(f in (reasons.RESOURCE_CLAIM_CEL_ERROR, "moved") for _, f in runs)
        figures[f"{name}_cycle"] = f"{max(s for s, _ in runs):.2f}s"
    peak = proc_status_kib("VmHWM") / 1024
    print(f"peak RSS {peak:.0f} MiB")
    figures["peak_rss"] = f"{peak:.0f}MiB"
    print(summary_line(figures))


if __name__ == "__main__":
    main()
