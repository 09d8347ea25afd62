"""A hostile CEL selector in a ResourceClaim, through the live service's cycle (issue 37, point 18): the
cycle ends in bounded time with the device pod kept (``resource-claim-cel-error``), other pods still
move, and the next cycle runs as well."""

from __future__ import annotations

import time
import uuid

import pytest

from descheduler.planner import reasons
from descheduler.planner.cel import MAX_COST
from tests.unit.builders import GPU_DRIVER, NOW, World, cpu, cycle_runner, exactly, gpu, settings
from tests.unit.fakes import Cluster, FakeEvictor, Usage
from tests.unit.guards import within

A = f"device.attributes['{GPU_DRIVER}']"
HEAVY = "[" + ", ".join(str(i) for i in range(85)) + f"].all(x, !has({A}.uuid) || {A}.uuid != string(x))"
"""Just under the estimated cost limit; every device has its own ``uuid``, so no verdict is reused."""


def hostile_world(devices_per_node: int, selector: str) -> World:
    """``hot`` holds a plain pod and a device pod whose claim carries ``selector``; ``a`` and ``b`` have
    ``devices_per_node`` GPUs each, in slices of 128."""
    world = World().node("hot", usage=cpu("9.9"))
    world.node("a", cpu="40", usage=cpu("1")).node("b", cpu="40", usage=cpu("2"))
    world.deployment("gpu-app", replicas=4).deployment("web", replicas=4)
    world.device_class("gpu", f"device.driver == '{GPU_DRIVER}'")
    world.resource_slice("hot-gpus", [gpu("gpu-0")], node="hot")
    tag = uuid.uuid4()
    for node in ("a", "b"):
        for start in range(0, devices_per_node, 128):
            chunk = [
                gpu(f"gpu-{i}", attributes={"uuid": {"string": f"{tag}-{node}-{i}"}})
                for i in range(start, min(start + 128, devices_per_node))
            ]
            world.resource_slice(f"{node}-{start}", chunk, node=node, pool=f"{node}-{start}")
    world.pod("web-1", on="hot", owner="web", usage=cpu("3"))
    world.device_pod("p", on="hot", usage=cpu("4"), requests=[exactly("gpu", selector)], allocated=["gpu-0"])
    return world


@pytest.mark.parametrize(
    ("case", "selector", "message"),
    [
        ("costly on each of 1,280 devices", HEAVY, "the CEL cost budget of this cycle is spent"),
        (
            "lists doubled through 22 chained maps",
            "[[1]]" + ".map(l, l + l)" * 22 + ".size() > 0",
            f"estimated cost above {MAX_COST})",
        ),
        (
            "strings doubled through 34 chained maps",
            '["ab"]' + ".map(s, s + s)" * 34 + ".size() > 0",
            f"estimated cost above {MAX_COST})",
        ),
    ],
)
def test_a_hostile_selector_keeps_its_pod_and_the_service_cycle_ends_in_bounded_time(
    case: str, selector: str, message: str
) -> None:
    world = hostile_world(640, selector)
    evictor = FakeEvictor()
    config = settings(migration={"evictResourceClaimPods": True, "objectLimiters": {}})
    run = cycle_runner(config, Cluster(world.snapshot()), Usage(world), evictor, wall_clock=lambda: NOW)
    started = time.process_time()
    with within(120):
        first = run.run_cycle()
        second = run.run_cycle()
    spent = time.process_time() - started
    assert first is not None and second is not None
    assert evictor.calls == ["default/web-1"]
    skip = next(s for s in first.plan.pod_skips if s.pod == "default/p")
    assert skip.code == reasons.RESOURCE_CLAIM_CEL_ERROR and skip.message.endswith(message)
    print(f"{case}: two cycles took {spent:.1f} s of CPU")
