"""Migration-aware node usage: the planner decides on what runs on a node now, not on a lagging sample.

Samples here follow a 5-minute window (the default Prometheus queries): a pod that left 60 s ago still
holds 4/5 of its usage in its old node's sample, one that arrived 30 s ago holds 1/10 in its new node's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from descheduler.cluster.types import ClusterSnapshot, OwnerRef, Pod, UsageSample, UsageSnapshot
from descheduler.planner import Departure, PlannerState, commit, evicted_from
from descheduler.planner.estimate import (
    PodShare,
    UsageEstimator,
    estimate_node_usage,
    window_share,
)
from descheduler.planner.index import ClusterIndex
from tests.unit.builders import NOW, World, cpu, evicted, report, settings

WINDOW = 300.0
CPU = ("cpu",)


def usage_of(result: object, node: str) -> tuple[int, int]:
    """(estimate, raw sample) of the node's cpu in millicores."""
    cpu_report = report(result, node).resources[0]  # type: ignore[arg-type]
    return cpu_report.usage, cpu_report.sample


# --- the formula on its own -------------------------------------------------------------------------


def share(sample: int | None, part: float, current: bool = True, latest: int | None = None) -> PodShare:
    return PodShare(
        sample=None if sample is None else {"cpu": sample},
        share=part,
        current=current,
        latest=None if latest is None else {"cpu": latest},
    )


@pytest.mark.parametrize(
    ("case", "sample", "pods", "other", "usage"),
    [
        (
            "nothing changed: the estimate is the sample",
            9000,
            [share(4000, 1.0), share(1000, 1.0)],
            4000,
            9000,
        ),
        ("an evicted pod 60s ago: its 4/5 in the sample leave", 8200, [share(4000, 0.8, False)], 5000, 5000),
        ("a terminating pod leaves at once", 9000, [share(4000, 1.0, False), share(1000, 1.0)], 4000, 5000),
        ("a replacement with no sample counts in full", 1400, [share(None, 0.1, latest=4000)], 1400, 5000),
        (
            "an old pod without a sample is already in the sample",
            3000,
            [share(None, 1.0, latest=800)],
            3000,
            3000,
        ),
        ("pods summing to more than the sample: the sample is trusted", 1000, [share(3000, 1.0)], 0, 1000),
        (
            "... and only the change since it is applied",
            1000,
            [share(3000, 1.0), share(None, 0.0, latest=500)],
            0,
            1500,
        ),
        ("... never below zero", 1000, [share(3000, 1.0, False)], 0, 0),
        ("a pod that arrived after the sample was taken", 2000, [share(500, 0.0)], 2000, 2500),
    ],
)
def test_the_estimate_is_other_usage_plus_the_pods_on_the_node_now(
    case: str, sample: int, pods: Sequence[PodShare], other: int, usage: int
) -> None:
    result = estimate_node_usage({"cpu": sample}, pods, CPU)
    assert (result.other["cpu"], result.usage["cpu"], result.sample["cpu"]) == (other, usage, sample), case


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (NOW - 3600, None, 1.0),  # there all window long
        (NOW - 60, None, 0.2),  # arrived one minute ago
        (NOW + 10, None, 0.0),  # arrived after the sample
        (NOW - 3600, NOW - 60, 0.8),  # left one minute ago
        (NOW - 3600, NOW - 600, 0.0),  # left before the window
        (NOW - 120, NOW - 60, 0.2),  # there for one minute of it
    ],
)
def test_a_pod_counts_in_a_sample_for_the_part_of_the_window_it_was_on_the_node(
    start: float, end: float | None, expected: float
) -> None:
    assert window_share(start, end, NOW, WINDOW) == pytest.approx(expected)


def test_an_instantaneous_source_counts_a_pod_in_full_or_not_at_all() -> None:
    assert [window_share(NOW - 1, None, NOW, 0), window_share(NOW - 9, NOW - 1, NOW, 0)] == [1.0, 0.0]


# --- in the planner ---------------------------------------------------------------------------------


def hot_world() -> World:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4).deployment("api", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("4"))
    world.pod("q", on="hot", owner="api", usage=cpu("1"))
    return world


def test_an_evicted_pod_leaves_its_nodes_usage_in_the_next_cycle() -> None:
    world = hot_world()
    config = settings(low={"cpu": 20}, high={"cpu": 50}, top={"maxNoOfPodsToEvictPerNode": 1})
    first = world.plan(config)
    assert evicted(first) == ["default/p"]
    state = commit(first.state, evicted_from(first, ["default/p"]), NOW)
    # A minute later p is gone, but the 5-minute sample still holds 4/5 of it: 9 - 4 * 0.2 = 8.2 cores.
    world.remove_pod("p").set_node_usage("hot", cpu("8.2"))
    second = world.plan(config, state, NOW + 60)
    assert usage_of(second, "hot") == (5000, 8200)
    assert report(second, "hot").node_class == "normal"
    assert evicted(second) == []
    # Without the record of the eviction the lagging sample alone would make q the next victim.
    forgetful = world.plan(config, PlannerState(), NOW + 60)
    assert evicted(forgetful) == ["default/q"]


def test_a_replacement_counts_on_its_new_node_before_it_has_its_own_sample() -> None:
    world = hot_world()
    config = settings(low={"cpu": 20}, high={"cpu": 50})
    first = world.plan(config)
    state = commit(first.state, evicted_from(first, evicted(first)), NOW)
    world.remove_pod("p").set_node_usage("hot", cpu("8.2"))
    # The replacement started 30 s ago on cool; no sample yet. cool's sample holds 1/10 of it: 1.4 cores.
    world.pod("p-2", on="cool", owner="web", created=NOW + 30)
    world.set_node_usage("cool", cpu("1.4"))
    second = world.plan(config, state, NOW + 60)
    # 1.4 + 4 * 9/10: web's most recent sample is the evicted pod's.
    assert usage_of(second, "cool") == (5000, 1400)
    # Once it has its own sample and the window has passed, the sample says the same.
    world.objects = [o for o in world.objects if o["metadata"].get("name") != "p-2"]
    world.pod("p-2", on="cool", owner="web", created=NOW + 30, usage=cpu("4"))
    world.set_node_usage("cool", cpu("5"))
    later = world.plan(config, second.state, NOW + 600)
    assert usage_of(later, "cool") == (5000, 5000)


def test_a_new_pod_without_a_predecessor_counts_with_its_workloads_latest_sample_else_its_requests() -> None:
    world = World().node("a", usage=cpu("2")).node("b", usage=cpu("1"))
    world.deployment("web", replicas=3)
    world.pod("old", on="a", owner="web", usage=cpu("1.5"), usage_age=120)
    world.pod("recent", on="a", owner="web", usage=cpu("0.5"), usage_age=10)
    world.pod("new", on="b", owner="web", created=NOW)  # created at the sample: nothing of it measured
    world.pod("bare", on="b", owner=None, requests={"cpu": "300m"}, created=NOW)
    result = world.plan(settings(low={"cpu": 20}, high={"cpu": 80}))
    assert usage_of(result, "b") == (1000 + 500 + 300, 1000)


def test_a_terminating_pod_leaves_the_figure_at_once() -> None:
    world = hot_world()
    world.pod("leaving", on="cool", owner="web", usage=cpu("0.8"), terminating=True)
    result = world.plan(settings(low={"cpu": 20}, high={"cpu": 50}))
    assert usage_of(result, "cool") == (200, 1000)


def test_the_audit_shows_the_sample_the_estimate_and_the_usage_outside_pods() -> None:
    world = hot_world()
    first = world.plan(settings())
    state = commit(first.state, evicted_from(first, ["default/p"]), NOW)
    world.remove_pod("p").set_node_usage("hot", cpu("8.2"))
    hot = next(n for n in world.plan(settings(), state, NOW + 60).to_dict()["nodes"] if n["node"] == "hot")
    cpu_doc = hot["resources"][0]
    assert (cpu_doc["usage"], cpu_doc["sample"], cpu_doc["samplePercent"], cpu_doc["other"]) == (
        5000,
        8200,
        82.0,
        4000,
    )


def test_a_departure_is_forgotten_once_it_is_out_of_every_usable_sample() -> None:
    world = hot_world()
    first = world.plan(settings())
    state = commit(first.state, evicted_from(first, ["default/p"]), NOW)
    assert [d.pod for d in state.departures] == ["default/p"]
    world.remove_pod("p")
    kept = world.plan(settings(), state, NOW + 300 + 180 - 1)  # window + nodeMetricExpirationSeconds
    gone = world.plan(settings(), state, NOW + 300 + 180)
    assert ([d.pod for d in kept.state.departures], list(gone.state.departures)) == (["default/p"], [])


# --- properties ----------------------------------------------------------------------------------------


@given(
    sample=st.integers(0, 100_000),
    pods=st.lists(
        st.tuples(
            st.none() | st.integers(0, 100_000),
            st.floats(0, 1),
            st.booleans(),
            st.none() | st.integers(0, 100_000),
        ),
        max_size=12,
    ),
)
def test_usage_is_never_negative_whatever_the_samples_say(
    sample: int, pods: list[tuple[int | None, float, bool, int | None]]
) -> None:
    result = estimate_node_usage({"cpu": sample}, [share(*p) for p in pods], CPU)
    assert result.other["cpu"] >= 0
    assert result.usage["cpu"] >= 0


def _pod(
    name: str, node: str, created: float, *, uid: str = "", terminating: bool = False, phase: str = "Running"
) -> Pod:
    owner = OwnerRef(kind="StatefulSet", name="db", uid="uid-db")
    return Pod(
        namespace="default",
        name=name,
        uid=uid or f"uid-{name}",
        node_name=node,
        created=created,
        owner=owner,
        terminating=terminating,
        requests={"cpu": 100},
        phase=phase,
    )


pod_specs = st.lists(
    st.tuples(
        st.integers(0, 8000),  # true usage, millicores
        st.floats(NOW - 3 * WINDOW, NOW - 1),  # created
        st.sampled_from(["stays", "evicted", "terminating", "new-no-sample", "bound-not-started"]),
        st.floats(NOW - 2 * WINDOW, NOW - 1),  # when it was evicted
    ),
    min_size=1,
    max_size=10,
)


@hypothesis_settings(max_examples=200, deadline=None)
@given(other=st.integers(0, 20_000), specs=pod_specs, lag=st.floats(0, 120))
def test_the_estimate_is_the_true_usage_of_what_runs_on_the_node_now(
    other: int, specs: list[tuple[int, float, str, float]], lag: float
) -> None:
    """A node sample built as a window average of the truth: the estimate recovers the truth now, the
    upper bound with the pods bound to the node that have not started, the lower bound without them."""
    sample_time = NOW - lag
    pods: list[Pod] = []
    samples: dict[str, UsageSample] = {}
    departures: list[Departure] = []
    measured = float(other)
    truth = other
    not_started = 0
    for i, (usage, created, fate, left) in enumerate(specs):
        name = f"db-{i}"
        left = max(left, created)
        if fate == "evicted":
            departures.append(
                Departure(f"default/{name}", f"uid-{name}", "n", "uid-db", created, left, {"cpu": usage})
            )
            measured += usage * window_share(created, left, sample_time, WINDOW)
            continue
        if fate == "bound-not-started":
            # Bound to the node after the sample: nothing of it measured, nothing of it running yet.
            created = max(created, sample_time)
            pods.append(_pod(name, "n", created, phase="Pending"))
            departures.append(
                Departure(
                    f"default/{name}",
                    f"uid-{name}-old",
                    "elsewhere",
                    "uid-db",
                    created,
                    NOW - 1e6,
                    {"cpu": usage},
                )
            )
            not_started += usage
            continue
        pods.append(_pod(name, "n", created, terminating=fate == "terminating"))
        measured += usage * window_share(created, None, sample_time, WINDOW)
        if fate == "new-no-sample":
            # Its workload's latest sample is its own size, as for a replacement of an evicted pod.
            departures.append(
                Departure(
                    f"default/{name}",
                    f"uid-{name}-old",
                    "elsewhere",
                    "uid-db",
                    created,
                    NOW - 1e6,
                    {"cpu": usage},
                )
            )
            truth += usage
            continue
        samples[f"default/{name}"] = UsageSample({"cpu": usage}, sample_time)
        if fate == "stays":
            truth += usage
    snapshot = ClusterSnapshot(pods=tuple(pods))
    estimator = UsageEstimator(UsageSnapshot(pods=samples), ClusterIndex(snapshot), departures, WINDOW)
    result = estimator.estimate("n", {"cpu": round(measured)}, sample_time, pods, CPU)
    assert abs(result.usage["cpu"] - (truth + not_started)) <= len(specs) + 1  # rounding only
    assert abs(result.running["cpu"] - truth) <= len(specs) + 1


def test_with_no_window_an_instantaneous_sample_needs_no_correction() -> None:
    pods = [_pod("a", "n", NOW - 60)]
    estimator = UsageEstimator(
        UsageSnapshot(pods={"default/a": UsageSample({"cpu": 700}, NOW)}),
        ClusterIndex(ClusterSnapshot(pods=tuple(pods))),
        [],
        0.0,
    )
    assert estimator.estimate("n", {"cpu": 1000}, NOW, pods, CPU).usage == {"cpu": 1000}


# --- two bounds: a pod bound to a node but not started yet ---------------------------------------------


def bound(part: float, latest: int) -> PodShare:
    """A pod bound to the node whose containers have not started: no sample, phase not Running."""
    return PodShare(sample=None, share=part, current=True, latest={"cpu": latest}, running=False)


@pytest.mark.parametrize(
    ("case", "sample", "pods", "usage", "running"),
    [
        ("a replacement bound here, not started: room taken, not load", 1000, [bound(0.0, 4000)], 5000, 1000),
        (
            "the same replacement once it runs counts in both",
            1000,
            [share(None, 0.0, latest=4000)],
            5000,
            5000,
        ),
        ("a started pod's own sample counts in both", 5000, [share(4000, 1.0)], 5000, 5000),
        (
            "an evicted pod leaves both, a bound one enters only the upper",
            8200,
            [share(4000, 0.8, False), bound(0.1, 3000)],
            5000 + 2700,
            5000,
        ),
        (
            "pods summing to more than the sample: the lower bound is never above the upper",
            1000,
            [share(3000, 1.0), bound(0.0, 500)],
            1500,
            1000,
        ),
    ],
)
def test_a_pod_bound_but_not_started_counts_where_the_node_receives_not_where_it_gives(
    case: str, sample: int, pods: Sequence[PodShare], usage: int, running: int
) -> None:
    result = estimate_node_usage({"cpu": sample}, pods, CPU)
    assert (result.usage["cpu"], result.running["cpu"]) == (usage, running), case


@given(
    sample=st.integers(0, 100_000),
    pods=st.lists(
        st.tuples(
            st.none() | st.integers(0, 100_000),
            st.floats(0, 1),
            st.booleans(),
            st.none() | st.integers(0, 100_000),
            st.booleans(),
        ),
        max_size=12,
    ),
)
def test_the_lower_bound_is_between_zero_and_the_upper_and_equal_to_it_when_every_pod_runs(
    sample: int, pods: list[tuple[int | None, float, bool, int | None, bool]]
) -> None:
    shares = [
        PodShare(
            sample=None if s is None else {"cpu": s},
            share=part,
            current=current,
            latest=None if latest is None else {"cpu": latest},
            running=running,
        )
        for s, part, current, latest, running in pods
    ]
    result = estimate_node_usage({"cpu": sample}, shares, CPU)
    assert 0 <= result.running["cpu"] <= result.usage["cpu"]
    everyone_runs = estimate_node_usage({"cpu": sample}, [replace(p, running=True) for p in shares], CPU)
    assert everyone_runs.running == everyone_runs.usage == result.usage


def cured_world(replacement_phase: str) -> World:
    """hot (4 cores) gave away p (4 cores) a minute ago; p's replacement p-2 was just bound back onto hot."""
    world = World().node("hot", usage=cpu("8.2")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4).deployment("api", replicas=4)
    world.pod("q", on="hot", owner="api", usage=cpu("1"))
    world.pod("p-2", on="hot", owner="web", created=NOW - 5, phase=replacement_phase)
    return world


def cured_state() -> PlannerState:
    world = hot_world()
    first = world.plan(settings(low={"cpu": 20}, high={"cpu": 50}))
    assert evicted(first) == ["default/p"]
    return commit(first.state, evicted_from(first, ["default/p"]), NOW - 60)


@pytest.mark.parametrize(
    ("phase", "node_class", "running", "evictions"),
    [
        # 4 (other) + 1 (q) = 5 cores run; p-2 (4 cores by p's sample) is bound but has not started.
        ("Pending", "normal", 5000, []),
        # Once it runs it is load: the node is over again and gives a pod away.
        ("Running", "hotspot", None, ["default/q"]),
    ],
)
def test_a_replacement_bound_back_onto_a_cured_node_makes_it_over_only_once_it_runs(
    phase: str, node_class: str, running: int | None, evictions: list[str]
) -> None:
    world = cured_world(phase)
    config = settings(low={"cpu": 20}, high={"cpu": 50}, consecutive=1)
    result = world.plan(config, cured_state(), NOW)
    hot = report(result, "hot")
    usage = hot.resources[0]
    # Upper bound: 8.2 - 0.8 x 4 (p's part) - 1 (q) = 4 outside pods, + 1 (q) + 4 x 295/300 (p-2, p's sample).
    assert (hot.node_class, usage.usage, usage.running) == (node_class, 8933, running)
    assert evicted(result) == evictions


def test_the_audit_and_simulate_show_both_bounds_where_they_differ() -> None:
    from descheduler.report.text import render_plan_text

    config = settings(low={"cpu": 20}, high={"cpu": 50})
    pending = cured_world("Pending").plan(config, cured_state(), NOW)
    nodes = {n["node"]: n["resources"][0] for n in pending.to_dict()["nodes"]}
    assert (nodes["hot"]["usage"], nodes["hot"]["running"], nodes["hot"]["runningPercent"]) == (
        8933,
        5000,
        50.0,
    )
    assert nodes["hot"]["over"] is False
    assert "running" not in nodes["cool"]  # nothing bound there that has not started
    hot_line = next(line for line in render_plan_text(pending, "c") if line.strip().startswith("hot "))
    assert "89.33 (20-50) sampled 82.00 running 50.00" in hot_line
