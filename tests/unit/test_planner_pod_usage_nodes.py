"""The usage fetch's second step: which nodes need pod usage, judged from node usage alone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from descheduler.planner import Plan, PlannerState, plan, pod_usage_nodes
from descheduler.planner.index import IndexCache
from descheduler.planner.reference import REFERENCE
from tests.unit.builders import NOW, World, cpu, settings
from tests.unit.test_planner_fit import random_world, random_world_config


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
    config = random_world_config()
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


def test_a_young_pod_makes_its_node_wanted_once_it_lands_in_a_carried_index() -> None:
    """The index keeps each node's youngest pod from cycle to cycle: a young pod arriving on a node whose
    bucket was carried must be seen, and a node whose pods did not change keeps its figure."""
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1")).node("idle", usage=cpu("1"))
    world.deployment("web", replicas=4)
    world.pod("a", on="hot", owner="web", usage=cpu("3"))
    world.pod("b", on="cool", owner="web", usage=cpu("0.5"))
    for i in range(16):  # enough pods that one change derives the index rather than building it afresh
        world.pod(f"c{i}", on="idle", owner="web", usage=cpu("0.05"))
    snapshot, usage, config = world.snapshot(), world.usage(), settings()
    cache = IndexCache()
    assert pod_usage_nodes(snapshot, usage, config, PlannerState(), NOW, cache=cache) == frozenset({"hot"})
    index = cache.index_of(snapshot)
    idle_youngest = index.youngest_on("idle")
    young = replace(next(p for p in snapshot.pods if p.name == "b"), uid="uid-b2", created=NOW - 30)
    changed = replace(snapshot, pods=tuple(young if p.name == "b" else p for p in snapshot.pods))
    wanted = pod_usage_nodes(changed, usage, config, PlannerState(), NOW, cache=cache)
    assert wanted == frozenset({"hot", "cool"})
    derived = cache.index_of(changed)
    assert derived is not index and derived._youngest.get("idle") == idle_youngest
    assert derived.youngest_on("cool") == NOW - 30


def test_an_estimate_kept_from_the_classification_holds_only_for_the_same_figures_and_pods() -> None:
    """The classification before the pod usage fetch keeps each unsampled node's estimate for the plan
    after it; the plan must see a node's new figures and new pods, never a kept estimate of old ones."""
    world = World().node("hot", usage=cpu("9")).node("quiet", usage=cpu("2")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=6)
    for i in range(3):
        world.pod(f"h{i}", on="hot", owner="web", usage=cpu("2"))
    world.pod("q", on="quiet", owner="web", usage=cpu("1"))
    world.pod("c", on="cool", owner="web", usage=cpu("0.5"))
    snapshot, config = world.snapshot(), settings(low={"cpu": 30}, high={"cpu": 60})
    usage = world.usage()
    node_only = replace(usage, pods={})
    cache = IndexCache()  # the cycle's two calls share the index, as the service's runner has them
    wanted = pod_usage_nodes(snapshot, node_only, config, PlannerState(), NOW, cache=cache)
    assert wanted == frozenset({"hot"})
    fetched = replace(usage, pods={k: v for k, v in usage.pods.items() if k.split("/")[1].startswith("h")})

    def quiet_usage(result: Plan) -> int:
        report = next(r for r in result.node_reports if r.node == "quiet")
        return next(r.usage for r in report.resources if r.resource == "cpu")

    assert quiet_usage(plan(snapshot, fetched, config, PlannerState(), NOW, cache=cache)) == 2000
    # The same snapshot (and index) next cycle, quiet's sample now higher: not the kept estimate.
    warmer = dict(fetched.nodes)
    warmer["quiet"] = replace(warmer["quiet"], resources={**warmer["quiet"].resources, "cpu": 5000})
    next_cycle = plan(snapshot, replace(fetched, nodes=warmer), config, PlannerState(), NOW, cache=cache)
    assert quiet_usage(next_cycle) == 5000
    # A pod more on quiet, younger than the window (a new bucket, the same figures): estimated afresh.
    extra = replace(
        next(p for p in snapshot.pods if p.name == "q"), name="q2", uid="uid-q2", created=NOW - 60
    )
    more = replace(snapshot, pods=(*snapshot.pods, extra))
    cycles = [(snapshot, fetched), (snapshot, replace(fetched, nodes=warmer)), (more, fetched)]
    fast = [plan(s, u, config, PlannerState(), NOW, cache=cache).to_dict() for s, u in cycles]
    assert fast == [plan(s, u, config, PlannerState(), NOW, parts=REFERENCE).to_dict() for s, u in cycles]
