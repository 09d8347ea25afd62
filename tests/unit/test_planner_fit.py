"""The destination check: a pod moves only to a low node that accepts it and stays at or below high."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.planner import reasons
from tests.unit.builders import World, cpu, evicted, report, settings, skip_codes


def one_pod(pod: dict[str, Any] | None = None, **cool: Any) -> World:
    """A hotspot with one movable 3-core pod and one low node ``cool`` configured by ``cool``."""
    world = World().node("hot", usage=cpu("9"))
    node: dict[str, Any] = {"usage": cpu("1")}
    node.update(cool)
    world.node("cool", **node)
    world.deployment("web", replicas=4)
    options: dict[str, Any] = {"usage": cpu("3")}
    options.update(pod or {})
    world.pod("p", on="hot", owner="web", **options)
    return world


def destination(world: World, **config: Any) -> str | None:
    result = world.plan(settings(**config))
    return result.evictions[0].destination if result.evictions else None


@pytest.mark.parametrize(
    ("pod", "cool", "fits"),
    [
        ({}, {}, True),
        ({"node_selector": {"disk": "ssd"}}, {}, False),
        ({"node_selector": {"disk": "ssd"}}, {"labels": {"disk": "ssd"}}, True),
        ({"affinity_in": ("zone", ["a", "b"])}, {"labels": {"zone": "c"}}, False),
        ({"affinity_in": ("zone", ["a", "b"])}, {"labels": {"zone": "b"}}, True),
        ({}, {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}, False),
        ({}, {"taints": [{"key": "gpu", "value": "yes", "effect": "NoExecute"}]}, False),
        ({}, {"taints": [{"key": "gpu", "value": "yes", "effect": "PreferNoSchedule"}]}, True),
        (
            {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
            {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
            True,
        ),
        ({"requests": {"cpu": "11"}}, {}, False),  # more than the node's allocatable
        ({"requests": {"cpu": "10"}}, {}, True),
        ({"requests": {"memory": "41Gi"}}, {}, False),
        ({"usage": cpu("4")}, {}, True),  # 1 + 4 = 5: exactly at the high threshold
        ({"usage": cpu("4.001")}, {}, False),  # would go over the high threshold
        ({"usage": {"cpu": "1", "memory": "39Gi"}}, {}, True),  # memory has no threshold: 100%
        ({"usage": {"cpu": "1", "memory": "40Gi"}}, {}, False),  # 1Gi + 40Gi is over 100% of 40Gi
    ],
)
def test_a_pod_moves_only_if_a_low_node_accepts_it_and_stays_at_or_below_high(
    pod: dict[str, Any], cool: dict[str, Any], fits: bool
) -> None:
    world = one_pod(pod, **cool)
    result = world.plan(settings())
    if fits:
        assert [e.destination for e in result.evictions] == ["cool"]
    else:
        assert result.evictions == ()
        assert skip_codes(result) == {"default/p": reasons.NO_DESTINATION}


def test_requests_already_on_the_destination_count_against_its_allocatable() -> None:
    world = one_pod({"requests": {"cpu": "2"}})
    world.pod("resident", on="cool", requests={"cpu": "9"})
    assert destination(world) is None


def test_a_destination_with_no_pod_slots_left_does_not_fit() -> None:
    world = one_pod(pods=1)
    world.pod("resident", on="cool")
    assert destination(world) is None


def test_node_fit_false_skips_the_scheduling_checks_but_never_the_load_check() -> None:
    taint = [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    assert destination(one_pod(taints=taint), args={"nodeFit": False}) == "cool"
    assert destination(one_pod({"usage": cpu("5")}), args={"nodeFit": False}) is None


def test_the_pod_usage_is_reserved_on_its_destination_for_the_rest_of_the_cycle() -> None:
    world = World().node("hot", usage=cpu("10")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=10)
    world.pod("a", on="hot", owner="web", usage=cpu("3"))
    world.pod("b", on="hot", owner="web", usage=cpu("3"))
    result = world.plan(settings(migration={"maxUnavailablePerWorkload": 0}))
    assert len(result.evictions) == 1  # 1 + 3 = 4 fits, 4 + 3 = 7 would not
    assert list(skip_codes(result).values()) == [reasons.NO_DESTINATION]


def test_the_coolest_fitting_low_node_is_chosen_and_reservations_move_the_next_pod_on() -> None:
    world = World().node("hot", cpu="100", usage=cpu("90"))
    world.node("cool-a", cpu="100", usage=cpu("10")).node("cool-b", cpu="100", usage=cpu("12"))
    world.deployment("web", replicas=10)
    for name in ("p1", "p2", "p3"):
        world.pod(name, on="hot", owner="web", usage=cpu("5"))
    result = world.plan(settings(migration={"maxUnavailablePerWorkload": 0, "maxMigratingPerWorkload": 0}))
    assert [(e.pod.name, e.destination) for e in result.evictions] == [
        ("p3", "cool-a"),  # 10% < 12%
        ("p2", "cool-b"),  # cool-a now at 15%
        ("p1", "cool-a"),  # 15% < 17%
    ]


def test_a_pod_is_never_moved_onto_a_node_that_is_over_or_merely_normal() -> None:
    world = World().node("hot", usage=cpu("9")).node("busy", usage=cpu("4")).node("hotter", usage=cpu("9.5"))
    world.deployment("web", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("0.5"))
    result = world.plan(settings())
    assert result.evictions == ()
    assert report(result, "hot").stop_code == reasons.STOP_NOTHING_TO_DO


def test_a_cordoned_node_is_never_a_destination() -> None:
    assert destination(one_pod(unschedulable=True)) is None


def test_a_pod_that_fits_nowhere_is_skipped_with_what_failed_where() -> None:
    world = one_pod({"node_selector": {"disk": "ssd"}, "usage": cpu("2.5")})
    world.node("cool-ssd-busy", labels={"disk": "ssd"}, usage=cpu("3"))
    result = world.plan(settings(low={"cpu": 30}))
    assert result.pod_skips[0].message == (
        "no low node fits (2 checked): 1 fail nodeSelector/affinity, 1 would go over their high threshold"
    )


def test_a_pod_larger_than_any_low_nodes_room_is_skipped_without_a_scan() -> None:
    result = one_pod({"usage": cpu("6")}).plan(settings())
    assert result.pod_skips[0].message == (
        "its cpu usage (6) is more than any low node has left below its high threshold"
    )


def test_eviction_stops_when_the_low_nodes_summed_headroom_is_used_up() -> None:
    world = World().node("hot", usage=cpu("10")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=10)
    for name in ("a", "b", "c", "d"):
        world.pod(name, on="hot", owner="web", usage=cpu("2"))
    result = world.plan(settings(migration={"maxUnavailablePerWorkload": 0, "maxMigratingPerWorkload": 0}))
    assert len(result.evictions) == 2  # 4 cores of room: two 2-core pods
    assert report(result, "hot").stop_code == reasons.STOP_HEADROOM_USED
    assert result.pod_skips == ()


def test_no_eviction_without_low_nodes_and_the_plan_says_why() -> None:
    world = World().node("hot", usage=cpu("9")).node("busy", usage=cpu("3"))
    world.deployment("web", replicas=4).pod("p", on="hot", owner="web", usage=cpu("1"))
    result = world.plan(settings())
    assert result.evictions == ()
    assert any("no low node in pool default" in note for note in result.notes)


@pytest.mark.parametrize(("number_of_nodes", "moves"), [(0, True), (1, True), (2, False), (3, False)])
def test_nothing_moves_unless_low_nodes_outnumber_number_of_nodes(number_of_nodes: int, moves: bool) -> None:
    world = one_pod()
    world.node("cool-2", usage=cpu("1"))
    result = world.plan(settings(args={"numberOfNodes": number_of_nodes}))
    assert bool(evicted(result)) == moves
