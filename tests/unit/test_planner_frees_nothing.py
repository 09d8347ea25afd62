"""A pod whose usage is 0 on every resource its node is over on is not evicted for that node."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.planner import reasons
from tests.unit.builders import World, evicted, report, settings, skip_codes

IDLE = {"cpu": "0", "memory": "0"}


def cpu_hotspot(idle_usage: dict[str, str], hot_pods: int = 110) -> World:
    """A cpu hotspot (90%, high 50%) holding two idle BestEffort pods, which Koordinator's order puts
    first (batch class), and one busy Burstable pod; a cool node has room for all of them."""
    world = World().node("hot", memory="10Gi", pods=hot_pods, usage={"cpu": "9", "memory": "4Gi"})
    world.node("cool", cpu="100", memory="100Gi", usage={"cpu": "1", "memory": "1Gi"})
    world.deployment("idle", replicas=10).deployment("web", replicas=10)
    world.pod("idle-1", on="hot", owner="idle", qos="BestEffort", usage=idle_usage)
    world.pod("idle-2", on="hot", owner="idle", qos="BestEffort", usage=idle_usage)
    world.pod("web-1", on="hot", owner="web", qos="Burstable", usage={"cpu": "5", "memory": "1Gi"})
    return world


@pytest.mark.parametrize(
    ("case", "idle_usage", "thresholds", "hot_pods", "expected"),
    [
        (
            "idle pods on a cpu hotspot free nothing: the busy pod goes",
            IDLE,
            ({"cpu": 20}, {"cpu": 50}),
            110,
            ["default/web-1"],
        ),
        (
            "a pod using memory on a node over on cpu only still frees nothing there",
            {"cpu": "0", "memory": "2Gi"},
            ({"cpu": 20}, {"cpu": 50}),
            110,
            ["default/web-1"],
        ),
        (
            "a pod using memory on a node also over on memory frees memory: the newest goes; then memory "
            "is no longer over and the other frees nothing",
            {"cpu": "0", "memory": "2Gi"},
            ({"cpu": 20, "memory": 20}, {"cpu": 50, "memory": 30}),
            110,
            ["default/idle-2", "default/web-1"],
        ),
        (
            "on a node over on pods every pod frees a slot, until pods are no longer over",
            IDLE,
            ({"cpu": 20, "pods": 1}, {"cpu": 50, "pods": 2}),
            110,
            ["default/idle-2", "default/web-1"],
        ),
        (
            "while pods stay over, idle pods keep freeing slots",
            IDLE,
            ({"cpu": 20, "pods": 20}, {"cpu": 50, "pods": 30}),
            4,  # 3 of 4 slots used: still over on pods after the first eviction
            ["default/idle-2", "default/idle-1"],
        ),
    ],
)
def test_only_pods_that_free_something_the_node_is_over_on_are_evicted(
    case: str,
    idle_usage: dict[str, str],
    thresholds: tuple[dict[str, float], dict[str, float]],
    hot_pods: int,
    expected: list[str],
) -> None:
    low, high = thresholds
    # maxMigratingPerNode 2, the product default: two idle pods would use up the node's slots
    world = cpu_hotspot(idle_usage, hot_pods)
    result = world.plan(settings(low=low, high=high, migration={"maxMigratingPerNode": 2}))
    assert evicted(result) == expected, case


def test_a_pod_that_frees_nothing_is_reported_with_its_reason_and_uses_no_limit() -> None:
    result = cpu_hotspot(IDLE).plan(settings(migration={"maxMigratingPerNode": 1}))
    assert evicted(result) == ["default/web-1"]
    codes = skip_codes(result)
    assert codes["default/idle-1"] == codes["default/idle-2"] == reasons.FREES_NOTHING
    skip = next(s for s in result.pod_skips if s.pod == "default/idle-1")
    assert skip.message == "its usage of cpu is 0: evicting it frees nothing of what hot is over on"
    assert report(result, "hot").stop_code == reasons.STOP_NO_LONGER_OVER


def test_a_node_whose_movable_pods_all_free_nothing_stays_over_and_says_so() -> None:
    world = cpu_hotspot(IDLE)
    world.objects = [o for o in world.objects if o["metadata"]["name"] != "web-1"]
    result = world.plan(settings())
    assert evicted(result) == []
    assert set(skip_codes(result).values()) == {reasons.FREES_NOTHING}
    assert report(result, "hot").stop_code == reasons.STOP_CANDIDATES_EXHAUSTED


def prod_hotspot() -> World:
    """Within its overall threshold, but its prod pods use 50% (prod high 40%); the prod pod that
    goes first by deletion cost is idle."""
    world = World().node("prod-heavy", usage={"cpu": "5.5", "memory": "1Gi"})
    world.node("idle", usage={"cpu": "1", "memory": "1Gi"})
    world.deployment("api", replicas=10)
    cheapest = {"controller.kubernetes.io/pod-deletion-cost": "-100"}  # first in Koordinator's order
    world.pod("api-idle", on="prod-heavy", owner="api", qos="Burstable", annotations=cheapest, usage=IDLE)
    world.pod("api-1", on="prod-heavy", owner="api", qos="Burstable", usage={"cpu": "2.5", "memory": "1Gi"})
    world.pod("api-2", on="prod-heavy", owner="api", qos="Burstable", usage={"cpu": "2.5", "memory": "1Gi"})
    return world


def test_the_prod_pass_skips_prod_pods_whose_prod_usage_frees_nothing() -> None:
    args: dict[str, Any] = {"prodLowThresholds": {"cpu": 20}, "prodHighThresholds": {"cpu": 40}}
    result = prod_hotspot().plan(settings(low={"cpu": 20}, high={"cpu": 60}, args=args))
    assert [(e.pod.name, e.prod) for e in result.evictions] == [("api-2", True)]
    skip = next(s for s in result.pod_skips if s.pod == "default/api-idle")
    assert (skip.code, skip.prod) == (reasons.FREES_NOTHING, True)
    assert skip.message.startswith("its prod usage of cpu is 0")
