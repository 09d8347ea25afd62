"""The planner's shortcuts (tiered ranking, per-workload filter verdicts, PDBs looked up by label, the
one-pass usage estimate, bounded destination search) never change a plan: the same pods move, in the same
order, to the same nodes, and every pod left alone keeps its reason, word for word.

Each test plans twice, once as shipped and once with ``parts=REFERENCE_BOUNDED`` (``planner/reference.py``:
every shortcut undone), and compares the whole plan.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from benchmarks import synth
from benchmarks.planning_shapes import SHAPES, build
from descheduler.cluster.types import ClusterSnapshot, OwnerRef, Pod, UsageSample, UsageSnapshot
from descheduler.config.load import load_config
from descheduler.planner import Departure, Plan, PlannerState, plan
from descheduler.planner.estimate import NodeEstimate, UsageEstimator
from descheduler.planner.index import ClusterIndex
from descheduler.planner.parts import FAST, Parts
from descheduler.planner.reference import REFERENCE_BOUNDED, ShareByShareEstimator
from descheduler.report.text import render_json
from descheduler.simulate.inputs import load_cluster, load_usage
from descheduler.simulate.runner import run
from tests.unit.builders import NOW, World, cpu, settings

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (REPO / "tests" / "scenarios").iterdir() if (p / "config.yaml").is_file())
EXAMPLE = REPO / "config" / "examples" / "hotspot"


def whole(result: Plan) -> dict[str, Any]:
    """Everything a plan says: evictions in order, every node's report, every skip in order, notes."""
    return result.to_dict()


def simulate_json(folder: Path, cycles: int, parts: Parts = FAST) -> Any:
    """What ``descheduler simulate --output json`` prints for the scenario, planned with ``parts``."""
    snapshot = load_cluster(folder / "cluster.yaml")
    series = load_usage(folder / "usage.yaml", snapshot)
    results = run(load_config(folder / "config.yaml"), snapshot, series, cycles, parts=parts)
    return json.loads(render_json(results))


@pytest.mark.parametrize("folder", [*SCENARIOS, EXAMPLE], ids=[f.name for f in [*SCENARIOS, EXAMPLE]])
def test_every_scenario_replays_identically_with_every_shortcut_undone(folder: Path) -> None:
    fast = simulate_json(folder, 8)
    assert simulate_json(folder, 8, REFERENCE_BOUNDED) == fast
    assert any(cycle["evictions"] for cycle in fast["cycles"]), "a scenario where nothing moves proves little"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_synthetic_cluster_of_every_benchmark_shape_plans_identically_with_every_shortcut_undone(
    shape: str,
) -> None:
    snapshot, usage = build(120, 30, shape, seed=3)
    config = synth.effective_config()
    fast = plan(snapshot, usage, config, PlannerState(), synth.NOW)
    reference = plan(snapshot, usage, config, PlannerState(), synth.NOW, parts=REFERENCE_BOUNDED)
    assert fast.evictions and fast.pod_skips
    assert whole(reference) == whole(fast)


def ranking_world(seed: int) -> tuple[World, dict[str, Any]]:
    """Hot nodes crowded with pods that tie on some sort keys and differ on others (priority classes,
    QoS, deletion costs, equal usage, equal ages), budgets by label, several namespaces, sometimes a
    prod pass; a few cool nodes to move them to."""
    rng = random.Random(seed)
    world = World()
    namespaces = ("default", "team-a", "team-b")
    for i in range(rng.randint(5, 9)):
        hot = i < 3
        world.node(
            f"n{i}",
            usage=cpu(
                f"{rng.uniform(7, 9.8) if hot else rng.uniform(0.2, 2.5):.2f}", f"{rng.randint(2, 36)}Gi"
            ),
            pods=rng.choice((4, 10, 110)),
        )
    apps = [f"app{j}" for j in range(6)]
    for ns in namespaces:
        for app in apps:
            world.deployment(app, replicas=rng.choice((2, 5, 12, 40)), namespace=ns)
            if rng.random() < 0.4:
                world.pdb(f"{app}-pdb", app, rng.randint(0, 2), namespace=ns)
        if rng.random() < 0.3:
            world.pdb("everything-app0", "app0", 5, namespace=ns)  # a second budget over app0: pdb-multiple
    for i in range(3):
        for j in range(rng.randint(6, 22)):
            labels: dict[str, str] = {}
            if rng.random() < 0.3:
                labels["koordinator.sh/priority-class"] = rng.choice(
                    ("koord-prod", "koord-batch", "koord-free")
                )
            if rng.random() < 0.2:
                labels["koordinator.sh/qosClass"] = rng.choice(("LS", "BE", "LSR"))
            annotations = {}
            if rng.random() < 0.3:
                annotations["controller.kubernetes.io/pod-deletion-cost"] = str(rng.choice((-5, 0, 10, "x")))
            usage = rng.choice(("0.5", "1", "1", "2", "0", f"{rng.uniform(0.1, 3):.2f}"))
            world.pod(
                f"p{i}-{j}",
                on=f"n{i}",
                owner=rng.choice(apps),
                namespace=rng.choice(namespaces),
                usage=cpu(usage, f"{rng.choice((1, 1, 2, 4))}Gi"),
                requests={"cpu": f"{rng.choice((100, 500, 1000))}m", "memory": "1Gi"},
                labels=labels,
                annotations=annotations,
                priority=rng.choice((None, 0, 100, 9500, 5500)),
                qos=rng.choice(("Burstable", "BestEffort", "Guaranteed")),
                created=NOW - 86400 + 60 * rng.randint(0, 5),
                volumes=[{"name": "scratch", "emptyDir": {}}] if rng.random() < 0.1 else (),
            )
    per_node = rng.choice((None, 2, 5))
    config: dict[str, Any] = {
        "low": {"cpu": 30, "memory": 60},
        "high": {"cpu": 60, "memory": 85},
        "top": {"maxNoOfPodsToEvictPerNode": per_node} if per_node is not None else {},
        "migration": {"maxMigratingPerNode": rng.choice((2, 4, 0))},
    }
    if rng.random() < 0.4:
        config["args"] = {"prodHighThresholds": {"cpu": 40}, "prodLowThresholds": {"cpu": 20}}
    return world, config


@pytest.mark.parametrize("seed", range(30))
def test_random_crowded_hotspots_plan_identically_over_cycles_with_every_shortcut_undone(seed: int) -> None:
    world, options = ranking_world(seed)
    config = settings(**options)
    fast = world.cycles(config, 3)
    reference = world.cycles(config, 3, parts=REFERENCE_BOUNDED)
    assert [whole(r) for r in reference] == [whole(f) for f in fast]


# --- the one-pass usage estimate ------------------------------------------------------------------------


def _pod(
    name: str,
    created: float,
    terminating: bool = False,
    workload: str = "db",
    started: bool = True,
    node: str = "n",
) -> Pod:
    return Pod(
        namespace="default",
        name=name,
        uid=f"uid-{node}-{name}",
        node_name=node,
        phase="Running" if started else "Pending",
        created=created,
        terminating=terminating,
        owner=OwnerRef(kind="StatefulSet", name=workload, uid=f"uid-{workload}"),
        requests={"cpu": 100, "memory": 1000},
    )


def figures(estimate: NodeEstimate) -> tuple[dict[str, int], ...]:
    """Every figure of an estimate, to compare two of them whole."""
    return (estimate.sample, estimate.other, estimate.usage, estimate.running)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    window=st.sampled_from((0.0, 300.0, 0.1, 299.7)),
    lag=st.floats(0, 400),
    sample=st.tuples(st.integers(0, 50_000), st.integers(0, 10**12)),
    pods=st.lists(
        st.tuples(
            st.floats(NOW - 1000, NOW),  # created
            st.booleans(),  # terminating
            st.sampled_from(("own", "none", "claimed")),  # its usage sample
            st.tuples(st.integers(0, 9000), st.integers(0, 10**10)),
            st.sampled_from(("db", "web")),
            st.booleans(),  # started (phase Running)
        ),
        max_size=12,
    ),
    departed=st.lists(
        st.tuples(st.floats(NOW - 1000, NOW), st.floats(0, 900), st.integers(0, 9000)), max_size=4
    ),
    resources=st.sampled_from((("cpu", "memory"), ("cpu", "memory", "pods"), ("memory",))),
)
def test_the_one_pass_estimate_equals_the_formula_share_by_share_to_the_last_unit(
    window: float,
    lag: float,
    sample: tuple[int, int],
    pods: list[tuple[float, bool, str, tuple[int, int], str, bool]],
    departed: list[tuple[float, float, int]],
    resources: tuple[str, ...],
) -> None:
    sample_time = NOW - lag
    snapshot_pods = []
    samples: dict[str, UsageSample] = {}
    departures = []
    for i, (created, terminating, kind, (cpu_m, memory), workload, started) in enumerate(pods):
        pod = _pod(f"p{i}", created, terminating, workload, started)
        snapshot_pods.append(pod)
        if kind != "none":
            samples[pod.key] = UsageSample({"cpu": cpu_m, "memory": memory}, sample_time)
        if kind == "claimed":  # an evicted pod of the same name (a StatefulSet's) owns that sample
            departures.append(
                Departure(
                    pod.key,
                    f"old-{pod.uid}",
                    "elsewhere",
                    f"uid-{workload}",
                    created - 500,
                    created,
                    {"cpu": 7},
                )
            )
    for j, (created, stayed, cpu_m) in enumerate(departed):
        departures.append(
            Departure(
                f"default/gone-{j}", f"uid-gone-{j}", "n", "uid-db", created, created + stayed, {"cpu": cpu_m}
            )
        )
    snapshot = ClusterSnapshot(pods=tuple(snapshot_pods))
    usage = UsageSnapshot(pods=samples)
    index = ClusterIndex(snapshot)
    node_sample = {"cpu": sample[0], "memory": sample[1]}
    fast = UsageEstimator(usage, index, departures, window)
    reference = ShareByShareEstimator(usage, index, departures, window)
    got = fast.estimate("n", node_sample, sample_time, snapshot_pods, resources)
    want = reference.estimate("n", node_sample, sample_time, snapshot_pods, resources)
    assert figures(got) == figures(want)


def test_the_reference_estimate_and_the_fast_one_see_young_pods_and_departures_alike() -> None:
    """A plain case both must get right, so the property above cannot pass on two equal mistakes."""
    pods = [_pod("old", NOW - 3600, False, "db"), _pod("young", NOW - 60, False, "db")]
    usage = UsageSnapshot(pods={"default/old": UsageSample({"cpu": 1000}, NOW)})
    departures = [Departure("default/gone", "uid-gone", "n", "uid-db", NOW - 3600, NOW - 60, {"cpu": 500})]
    index = ClusterIndex(ClusterSnapshot(pods=tuple(pods)))
    result = UsageEstimator(usage, index, departures, 300.0).estimate("n", {"cpu": 2500}, NOW, pods, ("cpu",))
    # The node's sample: 500 other + old 1000 + 4/5 of gone's 500 = 2500 (young adds nothing yet: no sample).
    # Now: other 1100 (2500 - 1000 - 400) + old 1000 + young at its workload's latest (old's 1000) x 4/5.
    assert result.other == {"cpu": 1100}
    assert result.usage == {"cpu": 1100 + 1000 + 800}


# --- nodes without any pod sample: the estimate is the sample, without a per-pod pass -------------------


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    window=st.sampled_from((0.0, 300.0, 0.1)),
    lag=st.floats(0, 400),
    nodes=st.lists(
        st.tuples(
            st.lists(st.tuples(st.floats(NOW - 1000, NOW), st.booleans(), st.booleans()), max_size=5),
            st.booleans(),  # a pod evicted from it recently
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_a_cluster_where_only_some_nodes_have_pod_samples_is_estimated_as_the_formula_says(
    window: float, lag: float, nodes: list[tuple[list[tuple[float, bool, bool]], bool]]
) -> None:
    """A cycle fetches pod usage for a few nodes; every other node takes the shortcut, and every node,
    shortcut or not, must come out as the formula computes it share by share."""
    sample_time = NOW - lag
    pods: list[Pod] = []
    samples: dict[str, UsageSample] = {}
    departures = []
    for n, (specs, departed) in enumerate(nodes):
        for i, (created, terminating, sampled) in enumerate(specs):
            pod = _pod(f"p{n}-{i}", created, terminating, workload=f"w{i % 2}", node=f"n{n}")
            pods.append(pod)
            if sampled:
                samples[pod.key] = UsageSample({"cpu": 300 + i, "memory": 10**9 + n}, sample_time)
        if departed:
            departures.append(
                Departure(
                    f"default/gone-{n}",
                    f"uid-gone-{n}",
                    f"n{n}",
                    "uid-w0",
                    NOW - 900,
                    NOW - 100,
                    {"cpu": 250},
                )
            )
    index = ClusterIndex(ClusterSnapshot(pods=tuple(pods)))
    usage = UsageSnapshot(pods=samples)
    fast = UsageEstimator(usage, index, departures, window)
    reference = ShareByShareEstimator(usage, index, departures, window)
    for n in range(len(nodes)):
        node, mine = f"n{n}", index.pods_on(f"n{n}")
        assert (node in fast.sampled) == any(p.key in samples for p in mine)
        got = fast.estimate(
            node, {"cpu": 4000, "memory": 8 * 10**9}, sample_time, mine, ("cpu", "memory", "pods")
        )
        want = reference.estimate(
            node, {"cpu": 4000, "memory": 8 * 10**9}, sample_time, mine, ("cpu", "memory", "pods")
        )
        assert figures(got) == figures(want)


def test_a_node_whose_pods_have_no_sample_keeps_its_sample_unless_a_pod_is_young_or_one_left() -> None:
    old, young = NOW - 3600, NOW - 60
    pods = [
        _pod("a", old, node="quiet"),
        _pod("b", old, terminating=True, node="quiet"),
        _pod("c", old, node="busy"),
    ]
    pods += [_pod("d", old, node="fresh"), _pod("e", young, node="fresh"), _pod("f", old, node="left")]
    usage = UsageSnapshot(pods={"default/c": UsageSample({"cpu": 1000}, NOW)})
    departures = [Departure("default/gone", "uid-gone", "left", "uid-db", old, NOW - 60, {"cpu": 500})]
    index = ClusterIndex(ClusterSnapshot(pods=tuple(pods)))
    estimator = UsageEstimator(usage, index, departures, 300.0)
    assert estimator.sampled == {"busy"}

    def usage_of(node: str) -> int:
        return estimator.estimate(node, {"cpu": 2000}, NOW, index.pods_on(node), ("cpu",)).usage["cpu"]

    assert usage_of("quiet") == 2000
    assert usage_of("busy") == 2000  # its one pod was there all along: in the sample and on the node
    assert usage_of("fresh") == 2000 + 800  # e projected at its workload's latest (c's 1000) x 4/5
    assert usage_of("left") == 2000 - 400  # 4/5 of what left 60 s ago is still in the sample


def test_a_pod_name_held_on_two_nodes_marks_both_as_sampled() -> None:
    """Names are unique in a real cluster; a hand-written snapshot may repeat one, and then the sample
    must not be assumed to belong to one of the two nodes only."""
    pods = (
        _pod("same", NOW - 3600, node="a"),
        _pod("same", NOW - 3600, node="b"),
        _pod("other", NOW - 3600, node="c"),
    )
    index = ClusterIndex(ClusterSnapshot(pods=pods))
    assert index.nodes_holding(["default/same"]) == {"a", "b"}
    assert index.nodes_holding(["default/other", "default/nobody"]) == {"c"}


def test_a_change_that_repeats_a_name_is_not_carried_over_but_found_afresh() -> None:
    pods = [_pod(f"p{i}", NOW - 3600, node="a") for i in range(40)]
    first = ClusterIndex(ClusterSnapshot(pods=tuple(pods)))
    assert first.nodes_holding(["default/p3"]) == {"a"}  # the name map is built, so the next one carries it
    second = first.updated(ClusterSnapshot(pods=(*pods, _pod("p3", NOW - 60, node="b"))))
    assert second is not None
    assert second.nodes_holding(["default/p3"]) == {"a", "b"}


@pytest.mark.parametrize(
    "amounts",
    [
        [300, 400, 500],
        [2**52 + 1, 2**52 + 3, 7],  # past 2**53 the float additions round: the sums must round alike
        [300.5, 400, 0.25],  # a usage file may hold fractions
        [0, 0, 0],
    ],
    ids=["integers", "beyond-2**53", "fractions", "zeros"],
)
def test_a_node_whose_pods_were_all_there_for_the_whole_window_sums_as_the_formula_does(
    amounts: list[float],
) -> None:
    pods = [_pod(f"p{i}", NOW - 3600, terminating=i == 1, node="n") for i in range(len(amounts))]
    samples = {p.key: UsageSample({"cpu": amount}, NOW) for p, amount in zip(pods, amounts, strict=True)}  # type: ignore[dict-item]
    index = ClusterIndex(ClusterSnapshot(pods=tuple(pods)))
    usage = UsageSnapshot(pods=samples)
    sample = {"cpu": 2**54}
    got = UsageEstimator(usage, index, [], 300.0).estimate("n", sample, NOW, pods, ("cpu", "pods"))
    want = ShareByShareEstimator(usage, index, [], 300.0).estimate("n", sample, NOW, pods, ("cpu", "pods"))
    assert figures(got) == figures(want)
