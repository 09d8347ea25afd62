"""Where each pass may move pods: Koordinator's node sets (``classifyNodes`` in ``utilization_util.go``).

The load pass moves pods to nodes low overall whose prod usage is not over (a low node over on prod is a
prod source, not a destination). The prod pass moves prod pods to nodes low on their prod thresholds and
not over overall: low overall (Koordinator's both-low set) or normal (its prod-low set).
"""

from __future__ import annotations

import pytest

from tests.unit.builders import World, cpu, evicted, settings

# Thresholds: overall 30/70, prod 10/20 (percent of 10 cores).
PROD = {"prodLowThresholds": {"cpu": 10}, "prodHighThresholds": {"cpu": 20}}


def world_with_destination(hot_pass: str, prod: str, batch: str) -> World:
    """``hot`` for the load pass: 9 cores (90%) of batch pods, over overall. For the prod pass: 5 cores
    (50%, normal overall) of prod pods, 1 core each, over the prod high threshold (20%).
    ``dest`` runs ``prod`` cores of a prod pod and ``batch`` cores of a BestEffort (batch) pod."""
    world = World().deployment("web", 8).deployment("batch", 8)
    if hot_pass == "load":
        world.node("hot", usage=cpu("9"))
        for i in range(3):
            world.pod(f"batch-{i}", on="hot", owner="batch", usage=cpu("3"), qos="BestEffort")
    else:
        world.node("hot", usage=cpu("5"))
        for i in range(5):
            world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("1"))
    world.node("dest", usage=cpu(str(float(prod) + float(batch))))
    world.pod("dest-web", on="dest", owner="web", usage=cpu(prod))
    world.pod("dest-batch", on="dest", owner="batch", usage=cpu(batch), qos="BestEffort")
    return world


@pytest.mark.parametrize(
    ("case", "hot", "dest_prod", "dest_batch", "moves"),
    [
        # The load pass needs dest low overall (<= 30%) and not over on prod (> 20%).
        ("load pass: dest low overall, prod low", "load", "0.5", "1", True),
        (
            "load pass: dest low overall but prod-over is a prod source, not a destination",
            "load",
            "2.5",
            "0",
            False,
        ),
        ("load pass: dest normal overall is no destination", "load", "0.5", "4", False),
        # The prod pass needs dest low on prod (<= 10%) and not over overall (<= 70%).
        ("prod pass: dest low on both counts", "prod", "0.5", "1", True),
        ("prod pass: dest normal overall but prod-low is a destination", "prod", "0.5", "4", True),
        ("prod pass: dest prod-normal is no destination", "prod", "1.5", "0", False),
    ],
)
def test_each_pass_moves_pods_to_koordinators_destination_set(
    case: str, hot: str, dest_prod: str, dest_batch: str, moves: bool
) -> None:
    world = world_with_destination(hot, dest_prod, dest_batch)
    result = world.plan(settings(low={"cpu": 30}, high={"cpu": 70}, args=PROD))
    moved_to_dest = [e for e in result.evictions if e.destination == "dest"]
    assert bool(moved_to_dest) == moves, (case, evicted(result))
