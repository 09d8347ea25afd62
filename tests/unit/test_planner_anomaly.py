"""Anomaly counting across cycles, and how ``plan`` and ``commit`` share the state."""

from __future__ import annotations

import pytest

from descheduler.planner import AnomalyCount, Departure, Migration, PlannerState, commit, evicted_from
from tests.unit.builders import NOW, World, cpu, evicted, report, settings


def hot_world(hot: str = "9") -> World:
    world = World().node("hot", usage=cpu(hot)).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=6)
    world.pod("web-1", on="hot", owner="web", usage=cpu("4"))
    return world


@pytest.mark.parametrize("consecutive", [1, 2, 3, 5])
def test_an_over_node_becomes_a_hotspot_on_the_nth_consecutive_over_cycle(consecutive: int) -> None:
    plans = hot_world().cycles(settings(consecutive=consecutive), count=consecutive)
    classes = [report(p, "hot").node_class for p in plans]
    assert classes == ["over"] * (consecutive - 1) + ["hotspot"]
    assert [report(p, "hot").anomaly_count for p in plans] == list(range(1, consecutive + 1))
    assert [len(p.evictions) for p in plans] == [0] * (consecutive - 1) + [1]


def test_the_default_needs_five_consecutive_cycles() -> None:
    plans = hot_world().cycles(settings(product_defaults=True), count=6)
    assert [len(p.evictions) for p in plans] == [0, 0, 0, 0, 1, 0]


def test_one_cycle_not_over_resets_the_count() -> None:
    world = hot_world()
    config = settings(consecutive=3)
    state = PlannerState()
    counts = []
    for i, hot_usage in enumerate(["9", "9", "4", "9", "9", "9"]):
        world.node_usage["hot"] = cpu(hot_usage)
        result = world.plan(config, state, NOW + 60 * i)
        state = commit(result.state, evicted_from(result, evicted(result)), NOW + 60 * i)
        counts.append((report(result, "hot").anomaly_count, len(result.evictions)))
    assert counts == [(1, 0), (2, 0), (0, 0), (1, 0), (2, 0), (3, 1)]


def test_a_committed_eviction_resets_the_count_but_keeps_the_node_confirmed() -> None:
    world = hot_world()
    config = settings(args={"anomalyCondition": {"consecutiveAbnormalities": 2, "timeout": "10m"}})
    first = world.plan(config)
    second = world.plan(config, first.state, NOW + 60)
    assert evicted(second) == ["default/web-1"]
    after = commit(second.state, evicted_from(second, evicted(second)), NOW + 60)
    cured = AnomalyCount(0, NOW + 60, 0, NOW + 60, cure=True, began=NOW + 60, spent=1)
    assert after.anomalies["hot"] == cured
    # The pod is still listed (leaving): the next round waits for it, nothing is evicted meanwhile.
    third = world.plan(config, after, NOW + 120)
    hot = report(third, "hot")
    assert (hot.anomaly_count, hot.stop_code, third.evictions) == (1, "cure-in-motion", ())


def test_a_failed_eviction_neither_resets_the_count_nor_records_a_migration() -> None:
    # A timeout longer than the run: the node stays confirmed, so it is acted on again every cycle.
    world = hot_world()
    config = settings(args={"anomalyCondition": {"consecutiveAbnormalities": 2, "timeout": "10m"}})
    state = PlannerState()
    tried = []
    for i in range(4):
        result = world.plan(config, state, NOW + 60 * i)
        state = commit(result.state, evicted_from(result, []), NOW + 60 * i)
        tried.append(len(result.evictions))
    assert state.anomalies["hot"] == AnomalyCount(4, NOW + 180, 0, NOW + 60)
    assert state.migrations == ()
    assert tried == [0, 1, 1, 1]


def test_plan_alone_records_no_migration_and_resets_no_count() -> None:
    result = hot_world().plan(settings())
    assert evicted(result) == ["default/web-1"]
    assert result.state.migrations == ()
    assert result.state.anomalies["hot"].count == 1


def test_commit_records_only_the_pods_really_evicted() -> None:
    world = hot_world("10")
    world.pod("web-2", on="hot", owner="web", usage=cpu("1"))
    world.node_usage["cool"] = cpu("0")
    result = world.plan(settings(high={"cpu": 50}))
    assert sorted(evicted(result)) == ["default/web-1", "default/web-2"]
    state = commit(result.state, evicted_from(result, ["default/web-2"]), NOW)
    assert [(m.pod, m.node, m.started) for m in state.migrations] == [("default/web-2", "hot", NOW)]
    assert state.migrations[0].workload == "uid-deployment-default-web"


def test_commit_rejects_a_pod_the_plan_did_not_propose() -> None:
    result = hot_world().plan(settings())
    with pytest.raises(ValueError, match="not planned"):
        commit(result.state, evicted_from(result, ["default/other"]), NOW)


def test_a_skipped_node_keeps_its_count_for_the_cycle() -> None:
    world = hot_world()
    config = settings(consecutive=3)
    first = world.plan(config)
    world.node_age["hot"] = 600.0
    second = world.plan(config, first.state, NOW + 60)
    assert report(second, "hot").node_class == "skipped"
    world.node_age["hot"] = 0.0
    third = world.plan(config, second.state, NOW + 120)
    assert report(third, "hot").anomaly_count == 2


def test_a_count_not_written_for_detector_cache_timeout_expires() -> None:
    world = hot_world()
    config = settings(consecutive=3, args={"detectorCacheTimeout": "5m"})
    stale = PlannerState(anomalies={"hot": AnomalyCount(2, NOW - 301)})
    fresh = PlannerState(anomalies={"hot": AnomalyCount(2, NOW - 300)})
    assert report(world.plan(config, stale), "hot").anomaly_count == 1
    assert report(world.plan(config, fresh), "hot").anomaly_count == 3


def test_counts_of_nodes_gone_from_the_cluster_are_forgotten() -> None:
    state = PlannerState(anomalies={"gone": AnomalyCount(3, NOW)})
    assert "gone" not in hot_world().plan(settings(), state).state.anomalies


def test_a_paused_plugin_classifies_but_neither_counts_nor_evicts() -> None:
    state = PlannerState(anomalies={"hot": AnomalyCount(4, NOW - 60)})
    result = hot_world().plan(settings(consecutive=1, args={"paused": True}), state)
    assert result.evictions == ()
    assert result.state.anomalies["hot"] == AnomalyCount(4, NOW - 60)
    assert any("paused" in note for note in result.notes)


def test_migrations_leave_the_state_when_neither_in_flight_nor_in_the_object_limiter_window() -> None:
    world = hot_world()
    world.pod("leaving", on="cool", owner="web", terminating=True)
    migrations = (
        Migration("default/leaving", "uid-pod-default-leaving", "default", "cool", "w", NOW - 3600),
        Migration("default/recent", "uid-recent", "default", "hot", "w", NOW - 100),
        Migration("default/old", "uid-old", "default", "hot", "w", NOW - 301),
    )
    result = world.plan(settings(), PlannerState(migrations=migrations))
    assert [m.pod for m in result.state.migrations] == ["default/leaving", "default/recent"]


def test_the_state_serializes_to_a_plain_document() -> None:
    state = PlannerState(
        anomalies={"a": AnomalyCount(2, 1.0)},
        migrations=(Migration("ns/p", "u", "ns", "a", "w", 5.0),),
        departures=(Departure("ns/p", "u", "a", "w", 1.0, 5.0, {"cpu": 300}),),
    )
    assert state.to_dict() == {
        "anomalies": {"a": {"count": 2, "updated": 1.0}},
        "prodAnomalies": {},
        "migrations": [
            {"pod": "ns/p", "uid": "u", "namespace": "ns", "node": "a", "workload": "w", "started": 5.0}
        ],
        "departures": [
            {
                "pod": "ns/p",
                "uid": "u",
                "node": "a",
                "workload": "w",
                "created": 1.0,
                "left": 5.0,
                "usage": {"cpu": 300},
            }
        ],
    }
