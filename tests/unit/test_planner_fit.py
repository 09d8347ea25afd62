"""The destination check: a pod moves only to a low node that accepts it and stays at or below high."""

from __future__ import annotations

import random
from typing import Any

import pytest

from descheduler.config.load import EffectiveConfig
from descheduler.planner import reasons
from descheduler.planner.fit import DestinationSet
from descheduler.planner.parts import Parts
from descheduler.planner.reference import Exhaustive
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
    world = one_pod({"node_selector": {"disk": "ssd"}, "usage": cpu("2.5"), "requests": {"cpu": "2"}})
    world.node("cool-ssd-busy", labels={"disk": "ssd"}, usage=cpu("3"))
    world.node("cool-ssd-full", labels={"disk": "ssd"}, usage=cpu("1"))
    world.pod("resident", on="cool-ssd-full", requests={"cpu": "9"})
    result = world.plan(settings(low={"cpu": 30}))
    assert result.pod_skips[0].message == (
        "no low node fits (3 checked): 1 fail nodeSelector/affinity, 1 lack allocatable for its requests, "
        "1 would go over their high threshold"
    )


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            {"requests": {"cpu": "3"}},
            "its cpu request (3) is more than any low node has unrequested",
        ),
        (
            {"node_selector": {"disk": "ssd"}, "usage": cpu("2.5")},
            "its cpu usage (2500m) is more than any low node it may run on has left below its high threshold",
        ),
        (
            {"node_selector": {"disk": "ssd"}, "requests": {"cpu": "1500m"}},
            "its cpu request (1500m) is more than any low node it may run on has unrequested",
        ),
    ],
)
def test_a_pod_asking_more_than_any_low_node_has_left_is_skipped_saying_what_and_without_a_scan(
    pod: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = one_pod(pod)  # "cool": 10 cores, 1 used, 8 of them requested below
    world.pod("resident", on="cool", requests={"cpu": "8"})
    world.node("cool-ssd", labels={"disk": "ssd"}, usage=cpu("3"))  # 2 cores of room
    world.pod("resident-ssd", on="cool-ssd", requests={"cpu": "9"})
    checks = count_checks(monkeypatch)
    result = world.plan(settings(low={"cpu": 30}))
    assert [s.message for s in result.pod_skips] == [message]
    assert checks == [0]


def count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count per-node destination checks from now on (one per pod and node examined)."""
    counter = [0]
    original = DestinationSet._reject

    def counted(self: DestinationSet, *args: Any) -> str:
        counter[0] += 1
        return original(self, *args)

    monkeypatch.setattr(DestinationSet, "_reject", counted)
    return counter


def test_a_pod_asking_at_least_as_much_as_one_that_fitted_nowhere_is_not_searched_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "a" has cpu room but no memory room, "b" the other way round: a 2-core, 2Gi pod fits on neither,
    # although neither bound alone rules it out.
    world = World().node("hot", usage=cpu("9"))
    world.node("a", usage=cpu("1", memory="19Gi")).node("b", usage=cpu("4", memory="4Gi"))
    world.deployment("web", replicas=10)
    for name, cores in (("p1", "2"), ("p2", "2"), ("p3", "2.5"), ("p4", "1")):
        world.pod(name, on="hot", owner="web", usage=cpu(cores, memory="2Gi"))
    checks = count_checks(monkeypatch)
    result = world.plan(
        settings(
            low={"cpu": 45, "memory": 50},
            high={"cpu": 50, "memory": 50},
            migration={"maxUnavailablePerWorkload": 0, "maxMigratingPerWorkload": 0},
        )
    )
    assert evicted(result) == ["default/p4"]  # 1 core fits "b"
    assert sorted(skip_codes(result)) == ["default/p1", "default/p2", "default/p3"]
    # Largest first: p3 is searched on both nodes (2 checks), then p1, which asks less cpu (2 checks); p2
    # asks as much as p1 and is answered from the cache (0); p4 fits the first node tried (1).
    assert checks == [5]


def test_a_hotspot_stops_once_no_low_node_has_a_pod_slot_left() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"), pods=2)
    world.pod("resident", on="cool")
    world.deployment("web", replicas=10)
    for name in ("a", "b", "c"):
        world.pod(name, on="hot", owner="web", usage=cpu("1"))
    result = world.plan(settings(migration={"maxUnavailablePerWorkload": 0, "maxMigratingPerWorkload": 0}))
    assert len(result.evictions) == 1
    assert report(result, "hot").stop_code == reasons.STOP_HEADROOM_USED
    assert report(result, "hot").stop_message == "the low nodes have no pod slot left"


def random_world(seed: int) -> World:
    """Hot and low nodes with labels, taints and request pressure; pods with selectors and tolerations."""
    rng = random.Random(seed)
    world = World()
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    for i in range(rng.randint(6, 12)):
        hot = i < 3
        labels = {"disk": "ssd"} if rng.random() < 0.4 else {}
        world.node(
            f"n{i}",
            usage=cpu(
                f"{rng.uniform(7, 9.5) if hot else rng.uniform(0.2, 1.9):.2f}", f"{rng.randint(2, 30)}Gi"
            ),
            labels=labels,
            taints=[taint] if rng.random() < 0.2 else [],
            pods=rng.choice((3, 6, 110)),
        )
        if not hot and rng.random() < 0.5:
            world.pod(f"resident-{i}", on=f"n{i}", requests={"cpu": f"{rng.randint(4, 10)}", "memory": "1Gi"})
    world.deployment("web", replicas=100)
    for i in range(3):
        for j in range(rng.randint(3, 8)):
            world.pod(
                f"p{i}-{j}",
                on=f"n{i}",
                owner="web",
                usage=cpu(f"{rng.uniform(0.1, 3):.2f}", f"{rng.randint(1, 8)}Gi"),
                requests={
                    "cpu": f"{rng.choice((0, 500, 1000, 2000, 4000))}m",
                    "memory": f"{rng.randint(1, 4)}Gi",
                },
                node_selector={"disk": "ssd"} if rng.random() < 0.3 else None,
                tolerations=[toleration] if rng.random() < 0.3 else (),
            )
    return world


def random_world_config() -> EffectiveConfig:
    """Thresholds at which ``random_world`` has hotspots and room, with no per-workload limit."""
    return settings(
        low={"cpu": 20, "memory": 80},
        high={"cpu": 50, "memory": 90},
        migration={"maxUnavailablePerWorkload": 0, "maxMigratingPerWorkload": 0},
    )


@pytest.mark.parametrize("seed", range(40))
def test_bounds_and_caches_never_change_which_pods_move_or_where(seed: int) -> None:
    world = random_world(seed)
    config = random_world_config()
    fast = world.plan(config)
    reference = world.plan(config, parts=Parts(destinations=Exhaustive))
    assert [(e.pod.key, e.destination) for e in fast.evictions] == [
        (e.pod.key, e.destination) for e in reference.evictions
    ]


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
