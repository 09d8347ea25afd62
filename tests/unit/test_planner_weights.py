"""Every resource in the thresholds weighs 1 unless resourceWeights says otherwise, in every ordering."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.planner.settings import compile_settings
from tests.unit.builders import World, evicted, settings

GPU = "example.com/gpu"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, {"cpu": 1, "memory": 1}),
        ({"highThresholds": {"cpu": 50, "pods": 90}}, {"cpu": 1, "memory": 1, "pods": 1}),
        ({"lowThresholds": {"cpu": 20, GPU: 10}}, {"cpu": 1, "memory": 1, GPU: 1}),
        (
            {"highThresholds": {"cpu": 50, "pods": 90}, "resourceWeights": {"cpu": 3}},
            {"cpu": 3, "memory": 1, "pods": 1},
        ),
        (
            {"highThresholds": {"cpu": 50, "pods": 90}, "resourceWeights": {"pods": 0}},
            {"cpu": 1, "memory": 1, "pods": 0},
        ),
        (
            {"prodHighThresholds": {"ephemeral-storage": 80}},
            {"cpu": 1, "memory": 1, "ephemeral-storage": 1},
        ),
        (
            {"nodePools": [{"name": "gpu", "highThresholds": {GPU: 80}, "resourceWeights": {"cpu": 2}}]},
            {"cpu": 2, "memory": 1, GPU: 1},
        ),
    ],
)
def test_threshold_resources_weigh_1_unless_resource_weights_says_otherwise(
    args: dict[str, Any], expected: dict[str, int]
) -> None:
    low = args.pop("lowThresholds", {"cpu": 20})
    high = args.pop("highThresholds", {"cpu": 50})
    compiled = compile_settings(settings(low=low, high=high, args=args))
    assert dict(compiled.pools[0].weights) == expected


def pods_and_cpu_hotspots() -> World:
    """Two cpu hotspots: ``crowded`` is less hot on cpu (60%) but holds 9 of its 10 pod slots;
    ``busy`` is hotter on cpu (70%) with 1 pod. Each has one movable pod; one eviction is allowed."""
    world = World()
    world.node("crowded", pods=10, usage={"cpu": "6", "memory": "1Gi"})
    world.node("busy", pods=10, usage={"cpu": "7", "memory": "1Gi"})
    world.node("cool", cpu="100", pods=100, usage={"cpu": "1", "memory": "1Gi"})
    world.deployment("web", replicas=10).deployment("side", replicas=10)
    world.pod("on-crowded", on="crowded", owner="web", usage={"cpu": "1", "memory": "100Mi"})
    for i in range(8):
        world.pod(
            f"side-{i}",
            on="crowded",
            owner="side",
            annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647"},
            usage={"cpu": "0", "memory": "1Mi"},
        )
    world.pod("on-busy", on="busy", owner="web", usage={"cpu": "1", "memory": "100Mi"})
    return world


@pytest.mark.parametrize(
    ("weights", "first"),
    [
        (None, "crowded"),  # cpu, memory and pods weigh 1: (60 + 90) beats (70 + 10)
        ({"pods": 0}, "busy"),  # pods left out: cpu alone decides
    ],
)
def test_a_pods_threshold_takes_part_in_which_hotspot_goes_first(
    weights: dict[str, int] | None, first: str
) -> None:
    args: dict[str, Any] = {} if weights is None else {"resourceWeights": weights}
    config = settings(
        low={"cpu": 20, "pods": 50},
        high={"cpu": 50, "pods": 95},
        args=args,
        top={"maxNoOfPodsToEvictTotal": 1},
    )
    result = pods_and_cpu_hotspots().plan(config)
    assert [e.node for e in result.evictions] == [first]


def gpu_hotspot() -> World:
    """A node over on cpu (by 2 cores) and on an extended resource (by 2 units). ``cpu-eater`` frees
    exactly the cpu excess and no gpu; ``gpu-eater`` frees the gpu excess and a little cpu."""
    world = World()
    world.node("hot", extended={GPU: "10"}, usage={"cpu": "7", "memory": "1Gi", GPU: "8"})
    world.node("cool", cpu="100", extended={GPU: "100"}, usage={"cpu": "1", "memory": "1Gi", GPU: "0"})
    world.deployment("web", replicas=10)
    world.pod("cpu-eater", on="hot", owner="web", usage={"cpu": "2", "memory": "100Mi", GPU: "0"})
    world.pod("gpu-eater", on="hot", owner="web", usage={"cpu": "500m", "memory": "100Mi", GPU: "2"})
    return world


@pytest.mark.parametrize(
    ("weights", "first"),
    [
        (None, "default/gpu-eater"),  # the gpu threshold weighs 1 like cpu: covering its excess counts
        ({GPU: 0}, "default/cpu-eater"),  # gpu left out: only the cpu cover counts
    ],
)
def test_an_extended_resource_threshold_takes_part_in_which_pod_goes_first(
    weights: dict[str, int] | None, first: str
) -> None:
    args: dict[str, Any] = {} if weights is None else {"resourceWeights": weights}
    config = settings(
        low={"cpu": 20, GPU: 20},
        high={"cpu": 50, GPU: 60},
        args=args,
        top={"maxNoOfPodsToEvictPerNode": 1},
    )
    assert evicted(gpu_hotspot().plan(config)) == [first]
