"""Whole cycles: hotspot order, reason texts, the prod pass, node pools and the plan's explanations."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.config.load import load_config_document
from descheduler.planner import PlannerState, commit, evicted_from, plan, reasons
from tests.unit.builders import NOW, World, cpu, evicted, node_classes, report, settings, skip_codes

NO_WORKLOAD_LIMITS = {"objectLimiters": {}, "maxMigratingPerWorkload": 0, "maxUnavailablePerWorkload": 0}


def two_hotspots() -> World:
    world = World()
    world.node("cpu-hot", usage={"cpu": "9", "memory": "4Gi"}, memory="40Gi")  # 90% cpu, 10% memory
    world.node("mem-hot", usage={"cpu": "6", "memory": "32Gi"}, memory="40Gi")  # 60% cpu, 80% memory
    world.node("cool", cpu="100", memory="400Gi", usage=cpu("1"))
    world.deployment("web", replicas=10)
    world.pod("on-cpu-hot", on="cpu-hot", owner="web", usage={"cpu": "1", "memory": "1Gi"})
    world.pod("on-mem-hot", on="mem-hot", owner="web", usage={"cpu": "1", "memory": "1Gi"})
    return world


@pytest.mark.parametrize(
    ("weights", "first"),
    [
        ({"cpu": 1, "memory": 1}, "mem-hot"),
        ({"cpu": 3, "memory": 1}, "cpu-hot"),
        ({"cpu": 1}, "mem-hot"),  # memory is in the thresholds: it keeps its default weight 1
        ({"cpu": 1, "memory": 0}, "cpu-hot"),  # an explicit 0 leaves memory out
    ],
)
def test_hotspots_are_handled_hottest_first_by_weighted_usage(weights: dict[str, int], first: str) -> None:
    config = settings(
        low={"cpu": 20, "memory": 20},
        high={"cpu": 50, "memory": 70},
        args={"resourceWeights": weights},
        top={"maxNoOfPodsToEvictTotal": 1},
    )
    result = two_hotspots().plan(config)
    assert [e.node for e in result.evictions] == [first]


def test_the_reason_lists_every_resource_over_its_threshold_in_name_order() -> None:
    world = World().node("hot", memory="10Gi", usage={"cpu": "9", "memory": "9.5Gi"})
    world.node("cool", cpu="100", memory="100Gi", usage=cpu("1"))
    world.deployment("web", replicas=4).pod("p", on="hot", owner="web", usage={"cpu": "5", "memory": "2Gi"})
    result = world.plan(settings(low={"cpu": 20, "memory": 20}, high={"cpu": 50, "memory": 80}))
    assert [e.reason for e in result.evictions] == [
        "node is overutilized, node cpu usage(90.00%)>threshold(50.00%), "
        "node memory usage(95.00%)>threshold(80.00%)"
    ]


def test_each_eviction_reason_shows_the_usage_left_before_it() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", cpu="100", usage=cpu("1"))
    world.deployment("web", replicas=10)
    world.pod("a", on="hot", owner="web", usage=cpu("2"))
    world.pod("b", on="hot", owner="web", usage=cpu("2"))
    result = world.plan(settings(migration=NO_WORKLOAD_LIMITS))
    assert [e.reason for e in result.evictions] == [
        "node is overutilized, node cpu usage(90.00%)>threshold(50.00%)",
        "node is overutilized, node cpu usage(70.00%)>threshold(50.00%)",
    ]


def test_lownodeload_not_enabled_plans_nothing_and_says_so() -> None:
    doc = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration", "profiles": []}
    world = World().node("hot", usage=cpu("9"))
    result = plan(world.snapshot(), world.usage(), load_config_document(doc), PlannerState(), NOW)
    assert (result.evictions, result.node_reports) == ((), ())
    assert "not enabled" in result.notes[0]


def test_a_cycle_with_no_hotspot_changes_nothing() -> None:
    world = World().node("a", usage=cpu("4")).node("b", usage=cpu("1"))
    world.deployment("web", replicas=4).pod("p", on="a", owner="web", usage=cpu("4"))
    result = world.plan(settings())
    assert (result.evictions, result.pod_skips) == ((), ())
    assert result.notes == ("pool default: 2 nodes (1 low, 1 normal), 0 skipped, 0 eviction(s)",)


# --- the prod pass (prodLowThresholds / prodHighThresholds) -------------------------------------------------

PROD = {"cpu": 20}, {"cpu": 40}


def prod_world(overall: str = "5.5") -> World:
    """A node within its overall threshold (60%) whose prod pods alone use 50% (prod high 40%)."""
    world = World().node("prod-heavy", usage=cpu(overall)).node("idle", usage=cpu("1"))
    world.deployment("api", replicas=10).deployment("batch", replicas=10)
    world.pod("api-1", on="prod-heavy", owner="api", qos="Burstable", usage=cpu("2.5"))
    world.pod("api-2", on="prod-heavy", owner="api", qos="Burstable", usage=cpu("2.5"))
    world.pod("batch-1", on="prod-heavy", owner="batch", qos="BestEffort", usage=cpu("0.5"))
    world.pod("api-idle", on="idle", owner="api", qos="Burstable", usage=cpu("0.5"))
    return world


def prod_config(consecutive: int = 1, **extra: Any) -> Any:
    args = {"prodLowThresholds": PROD[0], "prodHighThresholds": PROD[1], **extra}
    return settings(
        low={"cpu": 20}, high={"cpu": 60}, consecutive=consecutive, args=args, migration=NO_WORKLOAD_LIMITS
    )


def test_the_prod_pass_moves_prod_pods_off_a_node_whose_prod_usage_is_over() -> None:
    result = prod_world().plan(prod_config())
    assert report(result, "prod-heavy").node_class == "normal"
    assert report(result, "prod-heavy").prod_class == "hotspot"
    assert [(e.pod.name, e.destination, e.prod) for e in result.evictions] == [("api-2", "idle", True)]
    assert result.evictions[0].reason == ("node is overutilized, prod cpu usage(50.00%)>threshold(40.00%)")
    assert "default/batch-1" not in skip_codes(result)


def test_a_node_over_overall_is_left_to_the_load_pass_even_if_its_prod_usage_is_over() -> None:
    result = prod_world(overall="9").plan(prod_config())
    assert [e.prod for e in result.evictions] == [False, False]  # 90% - 2 x 25% is below 60%
    assert all(e.reason.startswith("node is overutilized, node cpu") for e in result.evictions)


def test_the_prod_pass_counts_its_own_consecutive_cycles() -> None:
    plans = prod_world().cycles(prod_config(consecutive=2), count=2)
    assert [report(p, "prod-heavy").prod_anomaly_count for p in plans] == [1, 2]
    assert [len(p.evictions) for p in plans] == [0, 1]


def test_the_prod_pass_needs_destinations_low_on_both_counts() -> None:
    world = prod_world()
    world.pod("api-idle-2", on="idle", owner="api", qos="Burstable", usage=cpu("1.5"))  # prod 2 cores: 20%
    world.pod(
        "api-idle-3", on="idle", owner="api", qos="Burstable", usage=cpu("0.1")
    )  # now 21%: not prod-low
    result = world.plan(prod_config())
    assert report(result, "idle").prod_class == "normal"
    assert result.evictions == ()
    assert report(result, "prod-heavy").stop_code == reasons.STOP_NOTHING_TO_DO


def test_the_prod_pass_never_pushes_a_destination_over_its_prod_high_threshold() -> None:
    world = prod_world()
    world.node_usage["idle"] = cpu("1.5")
    world.pod("api-idle-2", on="idle", owner="api", qos="Burstable", usage=cpu("1.5"))  # prod 2 cores
    result = world.plan(prod_config())
    # idle has prod room 4 - 2 = 2 cores < 2.5: nothing fits
    assert result.evictions == ()
    assert skip_codes(result)["default/api-2"] == reasons.NO_DESTINATION


def test_without_prod_thresholds_nodes_have_no_prod_class() -> None:
    result = prod_world().plan(settings(high={"cpu": 60}))
    assert report(result, "prod-heavy").prod_class == ""
    assert result.evictions == ()


# --- node pools --------------------------------------------------------------------------------------------


def pools_world() -> World:
    world = World()
    world.node("big-hot", cpu="100", usage=cpu("70"), labels={"size": "big"})
    world.node("big-idle", cpu="100", usage=cpu("5"), labels={"size": "big"})
    world.node("small-hot", cpu="10", usage=cpu("7"), labels={"size": "small"})
    world.node("small-busy", cpu="10", usage=cpu("4"), labels={"size": "small"})
    world.node("other", cpu="10", usage=cpu("1"), labels={"size": "odd"})
    world.deployment("web", replicas=10)
    for node in ("big-hot", "small-hot"):
        world.pod(f"p-{node}", on=node, owner="web", usage=cpu("1"))
    return world


POOLS: list[dict[str, Any]] = [
    {"name": "big", "nodeSelector": {"matchLabels": {"size": "big"}}, "highThresholds": {"cpu": 80}},
    {"name": "small", "nodeSelector": {"matchLabels": {"size": "small"}}},
]


def test_each_node_pool_has_its_own_thresholds_and_inherits_unset_ones() -> None:
    result = pools_world().plan(settings(args={"nodePools": POOLS}))
    assert node_classes(result) == {
        "big-hot": "normal",  # 70% is below the big pool's 80%
        "big-idle": "low",
        "small-hot": "hotspot",  # inherits the top-level 50%
        "small-busy": "normal",
        "other": "skipped",
    }
    assert report(result, "other").skip_code == reasons.NODE_OUTSIDE_POOLS
    assert report(result, "small-hot").pool == "small"


def test_pods_only_move_within_their_node_pool() -> None:
    result = pools_world().plan(settings(args={"nodePools": POOLS}))
    assert result.evictions == ()  # big-idle is low, but in the other pool
    assert report(result, "small-hot").stop_code == reasons.STOP_NOTHING_TO_DO


def test_a_node_pool_can_confirm_hotspots_with_its_own_anomaly_condition() -> None:
    pools = [
        {
            "name": "big",
            "nodeSelector": {"matchLabels": {"size": "big"}},
            "highThresholds": {"cpu": 60},
            "anomalyCondition": {"consecutiveAbnormalities": 3},
        },
        {"name": "rest"},
    ]
    plans = pools_world().cycles(settings(consecutive=1, args={"nodePools": pools}), count=3)
    assert [report(p, "big-hot").node_class for p in plans] == ["over", "over", "hotspot"]
    assert report(plans[0], "small-hot").node_class == "hotspot"


def test_a_node_matching_several_pools_belongs_to_the_first() -> None:
    pools = [{"name": "first", "nodeSelector": {"matchLabels": {"size": "big"}}}, {"name": "all"}]
    result = pools_world().plan(settings(args={"nodePools": pools}))
    assert {r.node: r.pool for r in result.node_reports} == {
        "big-hot": "first",
        "big-idle": "first",
        "small-hot": "all",
        "small-busy": "all",
        "other": "all",
    }


def test_deviation_thresholds_are_computed_per_pool() -> None:
    pools = [{"name": "big", "nodeSelector": {"matchLabels": {"size": "big"}}}, {"name": "rest"}]
    config = settings(
        low={"cpu": 10}, high={"cpu": 10}, args={"nodePools": pools, "useDeviationThresholds": True}
    )
    result = pools_world().plan(config)
    big = next(r for r in report(result, "big-hot").resources if r.resource == "cpu")
    assert (big.low_percent, big.high_percent) == (27.5, 47.5)  # mean of 70% and 5%


def test_pools_can_switch_deviation_mode_on_their_own() -> None:
    pools = [
        {
            "name": "big",
            "nodeSelector": {"matchLabels": {"size": "big"}},
            "useDeviationThresholds": True,
            "lowThresholds": {"cpu": 10},
            "highThresholds": {"cpu": 10},
        },
        {"name": "rest"},
    ]
    result = pools_world().plan(settings(args={"nodePools": pools}))
    small = next(r for r in report(result, "small-hot").resources if r.resource == "cpu")
    assert (small.low_percent, small.high_percent) == (20.0, 50.0)
    big = next(r for r in report(result, "big-hot").resources if r.resource == "cpu")
    assert big.high_percent == 47.5


# --- the plan as data ----------------------------------------------------------------------------------


def test_the_plan_serializes_every_decision() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("4"))
    world.pod("ds", on="hot", owner="agent", owner_kind="DaemonSet", usage=cpu("0.1"))
    result = world.plan(settings())
    doc = result.to_dict()
    assert doc["evictions"][0]["pod"] == "default/p"
    assert doc["evictions"][0]["node"] == "hot"
    assert doc["evictions"][0]["destination"] == "cool"
    assert doc["evictions"][0]["usage"] == {"cpu": 4000, "memory": 1073741824}
    assert doc["skips"] == [
        {
            "pod": "default/ds",
            "node": "hot",
            "code": "filtered-daemonset",
            "message": "owned by DaemonSet agent: it runs on every node",
            "pass": "load",
        }
    ]
    hot = next(n for n in doc["nodes"] if n["node"] == "hot")
    assert hot["class"] == "hotspot"
    assert hot["resources"][0] == {
        "resource": "cpu",
        "allocatable": 10000,
        "usage": 9000,
        "usagePercent": 90.0,
        "low": 2000,
        "lowPercent": 20.0,
        "high": 5000,
        "highPercent": 50.0,
        "over": True,
        "sample": 9000,
        "samplePercent": 90.0,
        "other": 4900,
    }
    assert hot["stop"] == {"code": "no-longer-over", "message": "no longer over after 1 eviction(s)"}
    assert result.skip_counts() == {"filtered-daemonset": 1}


def test_the_same_inputs_give_the_same_plan() -> None:
    world = two_hotspots()
    config = settings(low={"cpu": 20, "memory": 20}, high={"cpu": 50, "memory": 70})
    assert world.plan(config).to_dict() == world.plan(config).to_dict()


def test_a_hotspot_whose_pods_cannot_move_keeps_being_a_hotspot_until_something_changes() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.pod("bare", on="hot", usage=cpu("4"))
    state = PlannerState()
    for i in range(3):
        result = world.plan(settings(), state, NOW + 60 * i)
        state = commit(result.state, evicted_from(result, evicted(result)), NOW + 60 * i)
    assert report(result, "hot").anomaly_count == 3
    assert report(result, "hot").stop_code == reasons.STOP_CANDIDATES_EXHAUSTED


def test_after_each_eviction_the_rest_are_ranked_again_against_the_excess_that_is_left() -> None:
    # 90% of 10 cores with a 50% high threshold: 4 cores too many. The 3.5-core pod covers most of it; of the
    # 0.5 core left, the 0.6-core pod is the closest cover, though the 1-core pod ranked above it at first.
    world = World().node("hot", cpu="10", usage=cpu("9")).node("cool", cpu="100", usage=cpu("1"))
    world.deployment("web", replicas=10)
    world.pod("big", on="hot", owner="web", usage=cpu("3.5"))
    world.pod("one-core", on="hot", owner="web", usage=cpu("1"))
    world.pod("small", on="hot", owner="web", usage=cpu("0.6"))
    result = world.plan(settings(migration=NO_WORKLOAD_LIMITS))
    assert evicted(result) == ["default/big", "default/small"]
