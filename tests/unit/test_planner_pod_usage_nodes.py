"""The usage fetch's second step: which nodes need pod usage, judged from node usage alone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from descheduler.planner import PlannerState, plan, pod_usage_nodes
from tests.unit.builders import NOW, World, cpu, settings
from tests.unit.test_planner_fit import random_world


@pytest.mark.parametrize(
    ("config", "young_pod_age", "wanted"),
    [
        ({}, 86400, frozenset({"hot"})),  # over nodes only
        ({}, 60, frozenset({"hot", "cool"})),  # and nodes with a pod younger than the usage window
        ({"args": {"paused": True}}, 60, frozenset()),  # nothing is evicted while paused
        ({"args": {"prodHighThresholds": {"cpu": 40}}}, 86400, None),  # prod usage sums every node's pods
    ],
)
def test_pod_usage_is_wanted_for_over_nodes_and_nodes_whose_pods_changed_recently(
    config: dict[str, Any], young_pod_age: float, wanted: frozenset[str] | None
) -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1")).node("idle", usage=cpu("1"))
    world.deployment("web", replicas=4)
    world.pod("a", on="hot", owner="web", usage=cpu("3"))
    world.pod("b", on="cool", owner="web", usage=cpu("0.5"), created=NOW - young_pod_age)
    world.pod("c", on="idle", owner="web", usage=cpu("0.5"))
    assert pod_usage_nodes(world.snapshot(), world.usage(), settings(**config), PlannerState(), NOW) == wanted


@pytest.mark.parametrize("seed", range(20))
def test_a_plan_on_the_wanted_nodes_pod_usage_alone_is_the_plan_on_every_pods(seed: int) -> None:
    world = random_world(seed)
    config = settings(
        low={"cpu": 20, "memory": 80},
        high={"cpu": 50, "memory": 90},
        migration={"maxUnavailablePerWorkload": 0, "maxMigratingPerWorkload": 0},
    )
    snapshot, usage = world.snapshot(), world.usage()
    wanted = pod_usage_nodes(snapshot, replace(usage, pods={}), config, PlannerState(), NOW)
    assert wanted is not None
    on_wanted = {p.key for p in snapshot.pods if p.node_name in wanted}
    partial = replace(usage, pods={k: v for k, v in usage.pods.items() if k in on_wanted})
    full_plan = world.plan(config)
    partial_plan = plan(snapshot, partial, config, PlannerState(), NOW)
    assert [(e.pod.key, e.destination) for e in partial_plan.evictions] == [
        (e.pod.key, e.destination) for e in full_plan.evictions
    ]
    assert [(r.node, r.node_class) for r in partial_plan.node_reports] == [
        (r.node, r.node_class) for r in full_plan.node_reports
    ]
