"""Per-cycle limits, migration limits over migrations in flight, the object limiter window and PDBs."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.planner import Migration, PlannerState, reasons
from descheduler.planner.limits import workload_max
from tests.unit.builders import NOW, World, cpu, evicted, report, settings, skip_codes


def crowded(pods: int = 8, replicas: int = 20, namespaces: tuple[str, ...] = ("default",)) -> World:
    """A 100-core node at 90% (high 50%: 40 cores too many) full of 5-core pods, and an idle node."""
    world = World().node("hot", cpu="100", usage=cpu("90")).node("cool", cpu="100", usage=cpu("0"))
    for ns in namespaces:
        world.deployment("web", replicas=replicas, namespace=ns)
    for i in range(pods):
        ns = namespaces[i % len(namespaces)]
        world.pod(f"web-{i}", on="hot", owner="web", namespace=ns, usage=cpu("5"))
    return world


NO_WORKLOAD_LIMITS: dict[str, Any] = {
    "objectLimiters": {},
    "maxMigratingPerWorkload": 0,
    "maxUnavailablePerWorkload": 0,
}
"""Tests of other limits turn the per-workload ones off, so each test sees only what it exercises."""


def count(
    migration: dict[str, Any] | None = None,
    top: dict[str, Any] | None = None,
    world: World | None = None,
    state: PlannerState | None = None,
) -> int:
    options = {**NO_WORKLOAD_LIMITS, **(migration or {})}
    result = (world or crowded()).plan(settings(migration=options, top=top), state)
    return len(result.evictions)


def test_without_limits_the_hotspot_is_drained_until_it_is_no_longer_over() -> None:
    assert count() == 8


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        ({"maxNoOfPodsToEvictTotal": 3}, 3),
        ({"maxNoOfPodsToEvictTotal": 0}, 0),
        ({"maxNoOfPodsToEvictPerNode": 2}, 2),
        ({"maxNoOfPodsToEvictPerNode": 0}, 0),
    ],
)
def test_per_cycle_limits_cap_evictions(top: dict[str, Any], expected: int) -> None:
    assert count(top=top) == expected


def test_the_total_limit_stops_every_further_hotspot_and_says_why() -> None:
    world = crowded()
    world.node("hot2", cpu="100", usage=cpu("80"))
    world.pod("other", on="hot2", owner="web", usage=cpu("5"))
    result = world.plan(settings(migration=NO_WORKLOAD_LIMITS, top={"maxNoOfPodsToEvictTotal": 2}))
    assert len(result.evictions) == 2
    assert report(result, "hot").stop_code == reasons.STOP_GLOBAL_LIMIT
    assert report(result, "hot2").stop_code == reasons.STOP_GLOBAL_LIMIT
    assert list(skip_codes(result).values()) == [reasons.LIMIT_TOTAL]


def test_the_per_node_limit_applies_to_each_node() -> None:
    world = crowded()
    world.node("hot2", cpu="100", usage=cpu("80"))
    world.pod("other-1", on="hot2", owner="web", usage=cpu("5"))
    world.pod("other-2", on="hot2", owner="web", usage=cpu("5"))
    world.node("cool2", cpu="100", usage=cpu("0"))
    result = world.plan(settings(migration=NO_WORKLOAD_LIMITS, top={"maxNoOfPodsToEvictPerNode": 1}))
    assert sorted(e.node for e in result.evictions) == ["hot", "hot2"]
    assert report(result, "hot").stop_code == reasons.STOP_NODE_LIMIT


def test_the_per_namespace_limit_applies_to_each_namespace() -> None:
    world = crowded(namespaces=("a", "b"))
    result = world.plan(settings(migration=NO_WORKLOAD_LIMITS, top={"maxNoOfPodsToEvictPerNamespace": 2}))
    assert sorted(e.pod.namespace for e in result.evictions) == ["a", "a", "b", "b"]
    assert set(skip_codes(result).values()) == {reasons.LIMIT_PER_NAMESPACE}


def in_flight(
    world: World, *names: str, ns: str = "default", node: str = "hot", workload: str = ""
) -> PlannerState:
    """Migrations recorded a minute ago whose pods are still there, terminating."""
    migrations = []
    for name in names:
        world.pod(name, on=node, owner="web", namespace=ns, terminating=True)
        migrations.append(Migration(f"{ns}/{name}", f"uid-pod-{ns}-{name}", ns, node, workload, NOW - 60))
    return PlannerState(migrations=tuple(migrations))


@pytest.mark.parametrize(
    ("migration", "in_flight_pods", "expected"),
    [
        ({"maxMigratingPerNode": 2}, 0, 2),
        ({"maxMigratingPerNode": 2}, 1, 1),
        ({"maxMigratingPerNode": 2}, 2, 0),
        ({"maxMigratingPerNode": 0}, 2, 8),  # 0: no limit
        ({"maxMigratingGlobally": 3}, 1, 2),
        ({"maxMigratingPerNamespace": 3}, 2, 1),
    ],
)
def test_migration_limits_count_migrations_still_in_flight(
    migration: dict[str, Any], in_flight_pods: int, expected: int
) -> None:
    world = crowded()
    state = in_flight(world, *[f"leaving-{i}" for i in range(in_flight_pods)])
    assert count(migration, world=world, state=state) == expected


def test_a_migration_whose_pod_is_gone_is_no_longer_in_flight() -> None:
    state = PlannerState(migrations=(Migration("default/gone", "uid-gone", "default", "hot", "", NOW - 60),))
    assert count({"maxMigratingPerNode": 1}, state=state) == 1


def test_the_default_max_migrating_per_node_is_two() -> None:
    world = crowded()
    result = world.plan(
        settings(
            migration=NO_WORKLOAD_LIMITS,
            args={"anomalyCondition": {"consecutiveAbnormalities": 1}},
            product_defaults=True,
        )
    )
    assert len(result.evictions) == 2
    assert report(result, "hot").stop_code == reasons.STOP_NODE_LIMIT
    assert list(skip_codes(result).values()) == [reasons.MIGRATING_PER_NODE]


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        (0, 0),
        (1, 1),
        (3, 1),
        (4, 2),
        (10, 2),
        (11, 1),
        (19, 1),
        (20, 2),
        (21, 2),
        (29, 2),
        (30, 3),
        (100, 10),
    ],
)
def test_unset_workload_limits_follow_koordinators_table(replicas: int, expected: int) -> None:
    # more than 10 replicas: 10% rounded down (at least 1); 4 to 10: 2; fewer: 1; never above the replicas
    assert workload_max(replicas, None) == expected


@pytest.mark.parametrize(
    ("replicas", "value", "expected"),
    [
        (10, "25%", 2),  # 2.5 scaled down
        (12, "25%", 3),
        (3, "10%", 1),  # 0.3 scaled down to 0, raised to the minimum of 1
        (1, "50%", 1),
        (20, "100%", 20),
        (20, 5, 5),
        (3, 5, 3),  # capped at the replicas
        (0, 5, 0),
        (0, "50%", 0),
        (20, 0, None),  # 0: no limit (the ACK table)
        (20, "0%", None),
        (None, "50%", 1),  # unknown replicas: the careful limit
        (None, 3, 3),
        (None, None, 1),
    ],
)
def test_workload_limits_follow_koordinators_table_and_int_or_percent(
    replicas: int | None, value: int | str | None, expected: int | None
) -> None:
    assert workload_max(replicas, value) == expected


@pytest.mark.parametrize(
    ("migration", "expected"),
    [
        ({"maxMigratingPerWorkload": None}, 2),  # unset: the table, 2 for 20 replicas
        ({"maxMigratingPerWorkload": 5}, 5),
        ({"maxMigratingPerWorkload": "10%"}, 2),
        ({"maxMigratingPerWorkload": 0}, 8),
    ],
)
def test_max_migrating_per_workload_caps_one_workloads_evictions(
    migration: dict[str, Any], expected: int
) -> None:
    options = {**NO_WORKLOAD_LIMITS, **migration}
    if options["maxMigratingPerWorkload"] is None:
        del options["maxMigratingPerWorkload"]
    result = crowded().plan(settings(migration=options))
    assert len(result.evictions) == expected
    if expected < 8:
        assert set(skip_codes(result).values()) == {reasons.MIGRATING_PER_WORKLOAD}


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [(1, 0), (3, 1), (4, 2), (10, 2), (11, 1), (19, 1), (20, 2), (21, 2)],
)
def test_by_default_a_workload_loses_at_most_koordinators_table_per_cycle(
    replicas: int, expected: int
) -> None:
    # 1 replica is never moved (replicas-1); the other pods stay with migrating-per-workload
    world = crowded(pods=min(replicas, 8), replicas=replicas)
    result = world.plan(settings(migration={"objectLimiters": {}}))
    assert len(result.evictions) == expected


@pytest.mark.parametrize(
    ("replicas", "percent", "expected"),
    [(10, "25%", 2), (12, "25%", 3), (20, "12%", 2), (8, "10%", 1)],
)
def test_a_percent_limit_is_scaled_down_with_a_minimum_of_one(
    replicas: int, percent: str, expected: int
) -> None:
    world = crowded(pods=8, replicas=replicas)
    options = {**NO_WORKLOAD_LIMITS, "maxMigratingPerWorkload": percent}
    result = world.plan(settings(migration=options))
    assert len(result.evictions) == expected
    assert set(skip_codes(result).values()) == {reasons.MIGRATING_PER_WORKLOAD}


def test_max_migrating_per_workload_counts_the_workloads_pods_in_flight() -> None:
    world = crowded()
    state = in_flight(world, "leaving", workload="uid-deployment-default-web")
    assert count({"maxMigratingPerWorkload": 3}, world=world, state=state) == 2


@pytest.mark.parametrize(
    ("unready", "expected"),
    [(0, 2), (1, 1), (2, 0)],
)
def test_max_unavailable_per_workload_counts_pods_that_are_not_ready(unready: int, expected: int) -> None:
    world = crowded()
    for i in range(unready):
        world.pod(f"starting-{i}", on="cool", owner="web", ready=False)
    assert count({"maxUnavailablePerWorkload": 2}, world=world) == expected


def test_unavailable_pods_include_migrating_ones_counted_once() -> None:
    world = crowded()
    state = in_flight(world, "leaving", workload="uid-deployment-default-web")  # terminating and migrating
    assert count({"maxUnavailablePerWorkload": 3}, world=world, state=state) == 2
    world.pod("starting", on="cool", owner="web", ready=False)
    assert count({"maxUnavailablePerWorkload": 3}, world=world, state=state) == 1


def test_a_migrating_pod_not_yet_terminating_counts_as_unavailable() -> None:
    world = crowded()
    world.pod("evicted-just-now", on="cool", owner="web")
    migration = Migration(
        "default/evicted-just-now",
        "uid-pod-default-evicted-just-now",
        "default",
        "cool",
        "uid-deployment-default-web",
        NOW - 5,
    )
    state = PlannerState(migrations=(migration,))
    assert count({"maxUnavailablePerWorkload": 2}, world=world, state=state) == 1


def window(*ages: float) -> PlannerState:
    return PlannerState(
        migrations=tuple(
            Migration(
                f"default/old-{i}", f"uid-old-{i}", "default", "hot", "uid-deployment-default-web", NOW - age
            )
            for i, age in enumerate(ages)
        )
    )


LIMITER_2_PER_5M = {"objectLimiters": {"workload": {"duration": "5m", "maxMigrating": 2}}}


@pytest.mark.parametrize(
    ("migration", "state", "expected"),
    [
        (LIMITER_2_PER_5M, window(), 2),
        (LIMITER_2_PER_5M, window(100), 1),
        (LIMITER_2_PER_5M, window(100, 200), 0),
        (LIMITER_2_PER_5M, window(301, 400), 2),  # both older than the 5m window
        ({"objectLimiters": {"workload": {"duration": "10m", "maxMigrating": 2}}}, window(301, 400), 0),
        # without its own maxMigrating the limiter uses maxMigratingPerWorkload (here 3: two more)
        ({"objectLimiters": {"workload": {"duration": "5m"}}, "maxMigratingPerWorkload": 3}, window(100), 2),
        ({"objectLimiters": {}}, window(100, 200), 8),  # {} disables the limiter
    ],
)
def test_the_object_limiter_allows_so_many_evictions_per_workload_per_window(
    migration: dict[str, Any], state: PlannerState, expected: int
) -> None:
    result = crowded().plan(settings(migration={**NO_WORKLOAD_LIMITS, **migration}), state)
    assert len(result.evictions) == expected
    if expected < 8:
        assert set(skip_codes(result).values()) == {reasons.OBJECT_LIMITER}


def test_by_default_the_object_limiter_allows_the_table_per_five_minutes() -> None:
    # 20 replicas: 2 per window, and one eviction 100s ago leaves one.
    assert len(crowded().plan(settings(), window(100)).evictions) == 1


@pytest.mark.parametrize(("allowed", "expected"), [(0, 0), (1, 1), (3, 3), (100, 8)])
def test_a_pdb_allows_its_disruptions_allowed_evictions_per_cycle(allowed: int, expected: int) -> None:
    world = crowded().pdb("web-pdb", app="web", allowed=allowed)
    result = world.plan(settings(migration=NO_WORKLOAD_LIMITS))
    assert len(result.evictions) == expected
    if expected < 8:
        assert set(skip_codes(result).values()) == {reasons.PDB}


def test_a_pdb_only_covers_pods_its_selector_matches() -> None:
    world = crowded().pdb("other", app="other", allowed=0)
    assert count(world=world) == 8


def test_a_pod_matched_by_two_pdbs_cannot_be_evicted() -> None:
    world = crowded(pods=1).pdb("a", app="web", allowed=5).pdb("b", app="web", allowed=5)
    result = world.plan(settings())
    assert skip_codes(result) == {"default/web-0": reasons.PDB_MULTIPLE}


def test_limits_are_shared_across_node_pools() -> None:
    world = World()
    for pool in ("a", "b"):
        world.node(f"hot-{pool}", cpu="100", usage=cpu("90"), labels={"pool": pool})
        world.node(f"cool-{pool}", cpu="100", usage=cpu("0"), labels={"pool": pool})
        world.pod(f"p-{pool}", on=f"hot-{pool}", owner="web", usage=cpu("5"))
    world.deployment("web", replicas=20)
    pools = [{"name": p, "nodeSelector": {"matchLabels": {"pool": p}}} for p in ("a", "b")]
    result = world.plan(settings(args={"nodePools": pools}, top={"maxNoOfPodsToEvictTotal": 1}))
    assert evicted(result) == ["default/p-a"]


@pytest.mark.parametrize(
    ("value", "replicas", "says"),
    [
        (None, 12, "maxMigratingPerWorkload is 1 (unset: Koordinator's table for 12 replicas)"),
        ("25%", 10, "maxMigratingPerWorkload is 2 (25% of 10 replicas, rounded down, at least 1)"),
        (3, 10, "maxMigratingPerWorkload is 3"),
    ],
)
def test_a_workload_limit_skip_says_where_its_number_comes_from(
    value: int | str | None, replicas: int, says: str
) -> None:
    options = {**NO_WORKLOAD_LIMITS, "maxMigratingPerWorkload": value}
    if value is None:
        del options["maxMigratingPerWorkload"]
    result = crowded(pods=8, replicas=replicas).plan(settings(migration=options))
    messages = {s.message for s in result.pod_skips if s.code == reasons.MIGRATING_PER_WORKLOAD}
    assert messages and all(m.endswith(says) for m in messages)
