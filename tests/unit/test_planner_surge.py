"""Surge-first moves (``surgeSingleReplica``): a single-replica Deployment's pod on a hotspot is moved by a
rollout restart only when the rollout creates the new pod before it stops the old one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from descheduler.cluster.parse import RESTARTED_AT, rollout_of
from descheduler.cluster.types import Rollout
from descheduler.config.load import ConfigError
from descheduler.planner import PlannerState, commit, journal, reasons
from descheduler.planner.model import EVICT, RESTART, Plan
from descheduler.planner.settings import loop_warnings
from descheduler.planner.surge import fenceposts, scaled
from descheduler.report.text import render_plan_text
from tests.unit.builders import NOW, World, cpu, report, settings, skip_codes

SURGE = {"surgeSingleReplica": True}
ROLLING = "RollingUpdate"


def rolling(surge: int | str, unavailable: int | str) -> dict[str, Any]:
    return {"type": ROLLING, "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}


def hotspot(**deployment: Any) -> World:
    """A hot node whose load is one single-replica Deployment's pod, a cool node to take it."""
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", 1, **deployment)
    return world.pod("web-1", on="hot", owner="web", usage=cpu("3"))


def fate(result: Plan) -> str:
    """``restart``/``evict`` for the planned move of default/web-1, else its skip code."""
    for planned in result.evictions:
        if planned.pod.key == "default/web-1":
            return planned.action
    return skip_codes(result).get("default/web-1", "untouched")


# -- Kubernetes' rounding -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("surge", "unavailable", "replicas", "expected"),
    [
        ("25%", "25%", 1, (1, 0)),  # the default: surge rounds up, unavailable down
        ("1%", "99%", 1, (1, 0)),
        ("0%", "0%", 1, (0, 1)),  # both 0: the controller makes maxUnavailable 1
        (0, "25%", 1, (0, 1)),
        (1, 0, 1, (1, 0)),
        (2, 0, 1, (2, 0)),
        ("100%", "100%", 1, (1, 1)),
        ("50%", "50%", 3, (2, 1)),
        ("34%", "33%", 3, (2, 0)),
    ],
)
def test_fenceposts_round_as_the_deployment_controller_does(
    surge: int | str, unavailable: int | str, replicas: int, expected: tuple[int, int]
) -> None:
    rollout = Rollout(max_surge=surge, max_unavailable=unavailable)
    assert fenceposts(rollout, replicas) == expected


def test_a_percent_is_scaled_in_integers_without_float_error() -> None:
    # 7% of 100 is 7 exactly in both directions; float arithmetic would ceil 7.000000000000001 to 8.
    assert scaled("7%", 100, round_up=True) == 7
    assert scaled("7%", 100, round_up=False) == 7
    assert scaled("29%", 100, round_up=True) == 29


# -- the rule -------------------------------------------------------------------------------------------

COMPLETE = {"rolled_out": True}


@pytest.mark.parametrize(
    ("deployment", "expected"),
    [
        ({**COMPLETE}, RESTART),  # Kubernetes' default strategy surges one pod for one replica
        ({**COMPLETE, "strategy": rolling(1, 0)}, RESTART),
        ({**COMPLETE, "strategy": rolling("100%", "0%")}, RESTART),
        ({**COMPLETE, "strategy": {"type": "Recreate"}}, reasons.SURGE_RECREATE),
        ({**COMPLETE, "strategy": rolling(0, 1)}, reasons.SURGE_NO_SURGE),
        ({**COMPLETE, "strategy": rolling("0%", "0%")}, reasons.SURGE_NO_SURGE),
        ({**COMPLETE, "strategy": rolling(1, 1)}, reasons.SURGE_UNAVAILABLE),
        ({**COMPLETE, "strategy": rolling(1, "100%")}, reasons.SURGE_UNAVAILABLE),
        ({**COMPLETE, "strategy": rolling("1", 0)}, reasons.SURGE_UNKNOWN),  # not a percent: unreadable
        ({**COMPLETE, "paused": True}, reasons.SURGE_PAUSED),
        ({}, reasons.SURGE_ROLLING_OUT),  # no status: never observed
        (
            {"status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 2}},
            reasons.SURGE_ROLLING_OUT,
        ),
        (
            {
                **COMPLETE,
                "status": {"observedGeneration": 0, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1},
            },
            reasons.SURGE_ROLLING_OUT,
        ),
        (
            {"status": {"observedGeneration": 0, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 0}},
            reasons.SURGE_ROLLING_OUT,
        ),
    ],
)
def test_a_single_replica_deployment_is_restarted_only_when_it_surges_first(
    deployment: dict[str, Any], expected: str
) -> None:
    world = hotspot(**deployment)
    assert fate(world.plan(settings(migration=SURGE))) == expected
    # Off (the default), the pod stays protected whatever its strategy.
    assert fate(world.plan(settings())) == reasons.REPLICAS_ONE


def test_each_skip_message_names_the_condition_and_the_numbers() -> None:
    messages = {
        code: next(s.message for s in hotspot(**spec).plan(settings(migration=SURGE)).pod_skips)
        for code, spec in (
            ("surge", {**COMPLETE, "strategy": rolling(0, 1)}),
            ("unavailable", {**COMPLETE, "strategy": rolling(1, "100%")}),
        )
    }
    assert "maxSurge 0 resolves to 0" in messages["surge"]
    assert "maxUnavailable 100% resolves to 1" in messages["unavailable"]
    assert "Deployment default/web expects 1 replica" in messages["surge"]


def test_restart_moves_and_reserves_like_an_eviction() -> None:
    result = hotspot(**COMPLETE).plan(settings(migration=SURGE))
    (planned,) = result.evictions
    assert (planned.action, planned.destination, planned.workload_kind, planned.workload_name) == (
        RESTART,
        "cool",
        "Deployment",
        "web",
    )
    assert planned.reason.startswith("node is overutilized, node cpu usage(")
    assert planned.to_dict()["action"] == RESTART


@pytest.mark.parametrize(
    ("owner", "owner_kind", "code", "said"),
    [
        ("db", "StatefulSet", reasons.REPLICAS_ONE, "rolling update deletes its pod before"),
        (None, "ReplicaSet", reasons.FILTERED_BARE, "restarts Deployments only"),
        ("agent", "DaemonSet", reasons.FILTERED_DAEMONSET, "restarts Deployments only"),
    ],
)
def test_statefulsets_bare_pods_and_daemonsets_stay_protected_and_say_so(
    owner: str | None, owner_kind: str, code: str, said: str
) -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1")).statefulset("db", 1)
    world.pod("web-1", on="hot", owner=owner, owner_kind=owner_kind, usage=cpu("3"))
    result = world.plan(settings(migration=SURGE))
    assert fate(result) == code
    assert said in result.pod_skips[0].message


def test_a_multi_replica_deployment_is_still_evicted() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", 4, rolled_out=True)
    world.pod("web-1", on="hot", owner="web", usage=cpu("3"))
    assert fate(world.plan(settings(migration=SURGE))) == EVICT


def test_the_evict_annotation_still_means_evict() -> None:
    world = (
        World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1")).deployment("web", 1, rolled_out=True)
    )
    world.pod(
        "web-1",
        on="hot",
        owner="web",
        usage=cpu("3"),
        annotations={"descheduler.alpha.kubernetes.io/evict": "1"},
    )
    assert fate(world.plan(settings(migration=SURGE))) == EVICT


# -- restarts never overlap ------------------------------------------------------------------------------


def test_a_second_restart_waits_for_the_first_to_leave_the_window() -> None:
    """After a restart the old pod is gone and a new one of the same Deployment runs on the hotspot again
    (it landed back): within the objectLimiters window it is not restarted again."""
    world = hotspot(**COMPLETE)
    config = settings(migration={**SURGE, "objectLimiters": {"workload": {"duration": "5m"}}})
    first = world.plan(config)
    assert fate(first) == RESTART
    state = commit(first.state, first.evictions, NOW)
    world.remove_pod("web-1").pod("web-2", on="hot", owner="web", usage=cpu("3"))
    again = world.plan(config, state, NOW + 60)
    assert skip_codes(again)["default/web-2"] == reasons.SURGE_RESTARTING
    later = world.plan(config, state, NOW + 301)
    assert [e.pod.key for e in later.evictions] == ["default/web-2"]


def test_a_restart_in_flight_blocks_another_even_without_an_object_limiter() -> None:
    world = hotspot(**COMPLETE)
    config = settings(migration={**SURGE, "objectLimiters": {}, "maxMigratingPerWorkload": 0})
    first = world.plan(config)
    state = commit(first.state, first.evictions, NOW)
    # The old pod is still there (leaving) and its replacement landed back on the hotspot: in flight.
    world.pod("web-2", on="hot", owner="web", usage=cpu("3"))
    codes = skip_codes(world.plan(config, state, NOW + 600))
    assert codes["default/web-2"] == reasons.SURGE_RESTARTING
    assert codes["default/web-1"] == reasons.FILTERED_TERMINATING


def test_two_pods_of_one_deployment_are_never_restarted_in_one_cycle() -> None:
    world = World().node("hot", usage=cpu("9.9")).node("cool", usage=cpu("0"))
    world.deployment("web", 1, rolled_out=True)
    world.pod("web-1", on="hot", owner="web", usage=cpu("3"))
    world.pod("web-2", on="hot", owner="web", usage=cpu("3"))
    config = settings(migration={**SURGE, "objectLimiters": {}, "maxMigratingPerWorkload": 0})
    result = world.plan(config)
    assert [e.action for e in result.evictions] == [RESTART]
    assert reasons.SURGE_RESTARTING in skip_codes(result).values()


# -- configuration ---------------------------------------------------------------------------------------


def test_surge_with_skip_check_expected_replicas_is_refused() -> None:
    with pytest.raises(ConfigError, match="surgeSingleReplica cannot be combined"):
        settings(migration={**SURGE, "skipCheckExpectedReplicas": True})


def test_surge_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="surgeSingleReplica"):
        settings(migration={"surgeSingleReplica": "yes please"})


@pytest.mark.parametrize(("taint", "warned"), [(False, True), (True, False)])
def test_surge_without_the_hotspot_taint_warns_that_a_pod_may_land_back(taint: bool, warned: bool) -> None:
    config = settings(migration=SURGE, args={"hotspotTaint": {"enabled": taint}})
    assert any("may land back" in w for w in loop_warnings(config)) is warned
    assert not any("may land back" in w for w in loop_warnings(settings()))


# -- parsing ----------------------------------------------------------------------------------------------


def test_rollout_fields_are_read_with_kubernetes_defaults_and_problems_named() -> None:
    assert rollout_of(None, None, None, None, None) == Rollout()
    given = rollout_of(rolling(1, "0%"), True, 3, {"observedGeneration": 2, "replicas": 1}, "77")
    assert (given.max_surge, given.max_unavailable, given.paused, given.generation) == (1, "0%", True, 3)
    assert (given.observed_generation, given.replicas, given.resource_version) == (2, 1, "77")
    bad = rollout_of({"type": "Blue"}, "no", -1, [], None)
    assert "spec.strategy.type" in bad.problem and "spec.paused" in bad.problem
    assert "metadata.generation" in bad.problem and "status must be an object" in bad.problem


def test_simulate_tells_a_restart_from_an_eviction() -> None:
    restart = render_plan_text(hotspot(**COMPLETE).plan(settings(migration=SURGE)), "Cycle 1")
    assert any("default/web-1" in line and "would-restart" in line for line in restart)
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1")).deployment("web", 4)
    plain = render_plan_text(world.pod("web-1", on="hot", owner="web", usage=cpu("3")).plan(settings()), "C")
    assert not any("ACTION" in line for line in plain), "without restarts the table is as before"


def test_a_restarted_pod_counts_as_leaving_while_it_waits_for_its_replacement() -> None:
    """Its old pod runs on until the new one is ready; counted as running, the node would stay over and
    lose a second single-replica pod it does not need to lose."""
    world = World().node("hot", usage=cpu("6")).node("cool", usage=cpu("1"))
    for name in ("a", "b"):
        world.deployment(name, 1, rolled_out=True)
        world.pod(f"{name}-1", on="hot", owner=name, usage=cpu("1.5"))
    config = settings(migration=SURGE)
    first = world.plan(config)
    assert [(e.pod.key, e.action) for e in first.evictions] == [("default/b-1", RESTART)]
    state = commit(first.state, first.evictions, NOW)
    # Next cycle: the sample still holds both pods, and both still run (the surge pod is starting).
    again = world.plan(config, state, NOW + 10)
    assert again.evictions == ()
    hot = next(r for r in again.node_reports if r.node == "hot")
    assert hot.node_class != "hotspot"
    assert skip_codes(again).get("default/b-1", "") in ("", reasons.FILTERED_TERMINATING)


def test_a_successor_rebuilt_from_the_journal_still_counts_the_restarted_pod_as_leaving() -> None:
    world = hotspot(**COMPLETE)
    first = world.plan(settings(migration=SURGE))
    state = commit(first.state, first.evictions, NOW)
    entries = journal.project(state.migrations, {}, state.departures)
    stored = journal.decode(journal.encode(entries, writer="test"), "test")
    assert [e.action for e in stored] == [RESTART]
    # The migration itself says it is a restart: its record stays one after its departure aged out.
    assert (
        journal.decode(journal.encode(journal.project(state.migrations, {}), writer="t"), "t")[0].action
        == RESTART
    )
    rebuilt = journal.rebuild(stored).state
    assert [d.restart for d in rebuilt.departures] == [True]
    # The successor's first cycle: the old pod still runs, and is neither moved again nor counted.
    again = world.plan(settings(migration=SURGE), rebuilt, NOW + 5)
    assert again.evictions == ()
    assert skip_codes(again).get("default/web-1") == reasons.FILTERED_TERMINATING


def test_an_unknown_action_in_a_record_is_refused() -> None:
    text = journal.encode(
        (journal.Entry("a/b", "u", "n", "", "", "", 1.0, journal.EVICTED, action="migrate"),), writer="t"
    )
    with pytest.raises(journal.JournalUnreadable, match="action"):
        journal.decode(text, "ConfigMap x")


def test_a_restarted_pod_leaves_the_usage_window_when_it_is_gone_not_when_the_patch_was_sent() -> None:
    """Its load stays in the node's sample while it runs (here 12 s, with a 5 s window): the estimate must
    not take it out of the sample from the moment of the patch, or the node looks over once the old pod
    is gone and a second pod is restarted for nothing."""
    short = {"metricsProviders": [{"source": "Prometheus", "prometheus": {"window": "5s"}}]}
    config = settings(migration=SURGE, top=short)
    world = World().node("hot", usage=cpu("6")).node("cool", usage=cpu("1"))
    for name in ("a", "b"):
        world.deployment(name, 1, rolled_out=True)
        world.pod(f"{name}-1", on="hot", owner=name, usage=cpu("1.5"))
    first = world.plan(config)
    assert [e.pod.key for e in first.evictions] == ["default/b-1"]
    state = commit(first.state, first.evictions, NOW)
    waiting = world.plan(config, state, NOW + 10)
    (departure,) = waiting.state.departures
    assert (departure.left, departure.restart) == (NOW + 10, True), "still there: it has not left yet"
    # Gone at NOW + 12; the 5 s sample still holds it (unchanged) at that cycle.
    world.remove_pod("b-1")
    gone = world.plan(config, waiting.state, NOW + 12)
    (departure,) = gone.state.departures
    assert (departure.left, departure.restart) == (NOW + 12, False)
    assert gone.evictions == (), "the node is cured: a-1 stays"


# -- a restart that never completes ----------------------------------------------------------------------

STALLED = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
LOAD = {"low": {"cpu": 45}, "high": {"cpu": 70}}


def restarted_then_stuck(
    spec: dict[str, Any], conditions: list[dict[str, str]]
) -> tuple[World, PlannerState]:
    """The issue's cluster: ``hot`` measured at 9 of 10 cores, 5 of them its single-replica Deployment's
    pod, restarted towards ``cool``; ``other`` a second hotspot with a 3-core pod. Then the surge pod stays
    Pending (the rollout half done, generation 2 observed) and ``cool`` fills up to 6 cores."""
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1")).node("other", usage=cpu("9"))
    world.deployment("web", 1, rolled_out=True, spec_extra=spec)
    world.pod("web-1", on="hot", owner="web", usage=cpu("5"))
    world.deployment("big", 4, rolled_out=True).pod("big-1", on="other", owner="big", usage=cpu("3"))
    first = world.plan(settings(**LOAD, migration=SURGE))
    assert [(e.pod.key, e.action) for e in first.evictions] == [("default/web-1", RESTART)]
    state = commit(first.state, first.evictions, NOW)
    web = world.edit("Deployment", "web")
    web["metadata"]["generation"] = 2
    web["status"] = {
        "observedGeneration": 2,
        "replicas": 2,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "conditions": conditions,
    }
    world.pod("web-2", on="", owner="web", phase="Pending", ready=False)
    world.set_node_usage("cool", cpu("6"))
    return world, state


@pytest.mark.parametrize(
    ("spec", "conditions", "after", "staying"),
    [
        ({}, [], 3600, True),  # the issue's hour: Kubernetes' default 600 s long past
        ({}, [], 590, False),  # within the default deadline: the old pod is still leaving
        ({"progressDeadlineSeconds": 60, "minReadySeconds": 30}, [], 95, True),
        ({"progressDeadlineSeconds": 60, "minReadySeconds": 30}, [], 85, False),  # minReadySeconds too
        ({"progressDeadlineSeconds": 1200}, [], 900, False),  # its own deadline, not a fixed 600 s
        ({"progressDeadlineSeconds": 1200}, [STALLED], 120, True),  # the Deployment says it stalled
    ],
)
def test_a_restart_that_never_completes_stops_hiding_its_hot_node(
    spec: dict[str, Any], conditions: list[dict[str, str]], after: float, staying: bool
) -> None:
    world, state = restarted_then_stuck(spec, conditions)
    later = world.plan(settings(**LOAD, migration=SURGE), state, NOW + after)
    (restart,) = [m.restart for m in later.state.migrations if m.pod == "default/web-1"]
    assert restart == ("failed" if staying else "restarting")
    if staying:
        assert report(later, "hot").node_class == "hotspot", "measured 9 of 10 cores: still over"
        assert [e.destination for e in later.evictions if e.destination == "hot"] == []
        assert skip_codes(later).get("default/web-1") != reasons.FILTERED_TERMINATING
    else:
        assert skip_codes(later).get("default/web-1", "") in ("", reasons.FILTERED_TERMINATING)
        assert report(later, "hot").node_class != "hotspot"


def test_a_failed_restart_releases_its_max_migrating_per_node_slot() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", 1, rolled_out=True).pod("web-1", on="hot", owner="web", usage=cpu("5"))
    world.deployment("api", 4, rolled_out=True).pod("api-1", on="hot", owner="api", usage=cpu("1"))
    config = settings(**LOAD, migration={**SURGE, "maxMigratingPerNode": 1})
    first = world.plan(config)
    assert [(e.pod.key, e.action) for e in first.evictions] == [("default/web-1", RESTART)]
    state = commit(first.state, first.evictions, NOW)
    world.pod("web-2", on="", owner="web", phase="Pending", ready=False)
    later = world.plan(config, state, NOW + 3600)
    assert [e.pod.key for e in later.evictions] == ["default/api-1"], "the slot is free again"
    assert skip_codes(later)["default/web-1"] == reasons.SURGE_RESTARTING
    assert "restart failed" in next(s.message for s in later.pod_skips if s.pod == "default/web-1")


# -- surge restarts and PodDisruptionBudgets ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "moved"),
    [
        # minAvailable 1 over one replica: the budget allows no eviction, and the restart needs none.
        (0, {"default/web-1": RESTART}),
        # One disruption allowed: the restart leaves it to the eviction of the other pod it covers.
        (1, {"default/web-1": RESTART, "default/api-1": EVICT}),
    ],
)
def test_a_surge_restart_neither_needs_nor_spends_a_pdb_disruption(
    allowed: int, moved: dict[str, str]
) -> None:
    """The new pod is Ready before the old one goes, so the budget's healthy count never drops; and the
    patch does not go through the Eviction API, so what the budget allows is left to real evictions."""
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("0")).node("cool-2", usage=cpu("0"))
    world.deployment("web", 1, rolled_out=True).pod("web-1", on="hot", owner="web", usage=cpu("3"))
    world.deployment("api", 4, rolled_out=True)
    world.pod("api-1", on="hot", owner="api", usage=cpu("3"), labels={"app": "web"})
    world.pdb("web-pdb", "web", allowed)
    result = world.plan(settings(migration=SURGE))
    assert {e.pod.key: e.action for e in result.evictions} == moved
    if allowed == 0:
        assert skip_codes(result)["default/api-1"] == reasons.PDB, "evictions still need the budget"


def test_a_deployments_own_deadline_stall_and_restart_stamp_are_read() -> None:
    stalled = {"conditions": [STALLED]}
    template = {"metadata": {"annotations": {RESTARTED_AT: "2026-01-01T13:00:00+01:00"}}}
    given = rollout_of(None, None, 2, stalled, "1", progress=(90, 15), template=template)
    assert (given.progress_deadline, given.min_ready, given.deadline_exceeded) == (90, 15, True)
    assert given.restarted_at == NOW and given.problem == ""
    default = rollout_of(None, None, 2, {"conditions": [{"type": "Progressing", "status": "True"}]}, "1")
    assert (default.progress_deadline, default.min_ready, default.deadline_exceeded) == (600, 0, False)
    assert default.restarted_at == 0.0
    bad = rollout_of(None, None, 2, None, "1", progress=(-1, "x"), template={"metadata": "no"})
    assert "spec.progressDeadlineSeconds" in bad.problem and "spec.minReadySeconds" in bad.problem


@pytest.mark.parametrize(
    ("action", "outcome", "problem"),
    [
        (RESTART, "failed", ""),
        (RESTART, "completed", ""),
        (RESTART, "overdue", "outcome"),  # not an outcome
        (EVICT, "failed", "outcome"),  # an eviction has none
    ],
)
def test_a_restarts_outcome_is_kept_in_its_record_and_checked_when_read(
    action: str, outcome: str, problem: str
) -> None:
    entry = journal.Entry("a/b", "u", "n", "w", "Deployment", "b", 1.0, journal.EVICTED, action=action)
    text = journal.encode((replace(entry, outcome=outcome),), writer="t")
    if problem:
        with pytest.raises(journal.JournalUnreadable, match=problem):
            journal.decode(text, "ConfigMap x")
        return
    (stored,) = journal.decode(text, "ConfigMap x")
    (migration,) = journal.rebuild((stored,)).state.migrations
    assert (stored.outcome, migration.restart) == (outcome, outcome)
