"""What the planner keeps in the ``ClusterIndex`` from cycle to cycle (each pod's filter verdict and rank
key, each node's summed requests) is forgotten exactly when what it was computed from changes: a plan on
an index carried over from earlier cycles (an ``IndexCache`` deriving it with ``updated``, as the live
service's does) equals, field for field, the plan on an index built afresh, and the reference planner's.

The snapshots below are derived from one another as the watch cache derives them: unchanged pods stay the
same objects, a changed pod is a new object, and workloads, budgets and namespaces are replaced as wholes.
"""

from __future__ import annotations

import random
from dataclasses import fields, replace
from typing import Any

import pytest

from descheduler.cluster.types import ClusterSnapshot, Namespace, Pod, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.planner import NodeReport, Plan, PlannerState, ResourceReport, plan, reasons
from descheduler.planner.index import ClusterIndex, IndexCache
from descheduler.planner.order import DELETION_COST, EVICTION_COST
from descheduler.planner.reference import REFERENCE_BOUNDED
from tests.unit.builders import NOW, World, cpu, settings

CONFIG = settings(low={"cpu": 30}, high={"cpu": 60})


def world() -> World:
    """Two hot nodes crowded with pods of three workloads (one under a budget) and bare pods; three cool
    nodes with a few pod slots each; three nodes in between."""
    w = World()
    for i in range(2):
        w.node(f"hot{i}", cpu="10", usage=cpu("9"))
    for i in range(3):
        w.node(f"cool{i}", cpu="10", usage=cpu("1"), pods=6)
    w.deployment("web", replicas=4).deployment("api", replicas=6).statefulset("db", replicas=3)
    w.pdb("api-pdb", "api", 1)
    for i in range(2):
        for j in range(8):
            owner = ("web", "api", "db", None)[j % 4]
            w.pod(
                f"p{i}-{j}",
                on=f"hot{i}",
                owner=owner,
                owner_kind="StatefulSet" if owner == "db" else "ReplicaSet",
                usage=cpu(f"{0.4 + 0.1 * j:.1f}"),
                requests={"cpu": f"{100 * (1 + j % 3)}m"},
                priority=(None, 100, 1000)[j % 3],
            )
    for i in range(3):
        w.pod(f"c{i}", on=f"cool{i}", owner="web", usage=cpu("0.5"), requests={"cpu": "500m"})
    # Nodes neither hot nor low, whose pods make up most of the cluster (so a few changes are a few).
    for i in range(3):
        w.node(f"mid{i}", cpu="10", usage=cpu("4.5"))
        for j in range(20):
            w.pod(f"m{i}-{j}", on=f"mid{i}", owner="db", owner_kind="StatefulSet", usage=cpu("0.2"))
    return w


def carried(cache: IndexCache, snapshot: ClusterSnapshot) -> ClusterIndex:
    """The index the planner will use for ``snapshot``: derived from the last one where it can be."""
    return cache.index_of(snapshot)


def fresh_plan(snapshot: ClusterSnapshot, usage: UsageSnapshot, config: EffectiveConfig) -> Plan:
    """The plan on an index built from nothing (no cache)."""
    return plan(snapshot, usage, config, PlannerState(), NOW)


def plans(
    cache: IndexCache, snapshot: ClusterSnapshot, usage: UsageSnapshot, config: EffectiveConfig
) -> Plan:
    """Plan on the carried index; the plan on a fresh index must be the same."""
    result = plan(snapshot, usage, config, PlannerState(), NOW, cache=cache)
    assert result.to_dict() == fresh_plan(snapshot, usage, config).to_dict()
    return result


def skip_of(result: Plan, pod: str) -> str:
    codes = [s.code for s in result.pod_skips if s.pod == pod]
    return codes[0] if codes else ""


def moved(result: Plan) -> list[str]:
    return [e.pod.key for e in result.evictions]


@pytest.fixture
def start() -> tuple[ClusterSnapshot, UsageSnapshot]:
    w = world()
    return w.snapshot(), w.usage()


@pytest.fixture
def cache() -> IndexCache:
    """The test's own index cache, as the live service's runner keeps one."""
    return IndexCache()


def remembered(index: ClusterIndex, memo: str) -> int:
    found = index._memos.get(memo)
    return len(found[1]) if found is not None else 0


def test_the_verdicts_are_carried_to_the_next_cycles_index(
    start: tuple[ClusterSnapshot, Any], cache: IndexCache
) -> None:
    snapshot, usage = start
    plans(cache, snapshot, usage, CONFIG)
    first = carried(cache, snapshot)
    assert remembered(first, "filter") >= 16 and remembered(first, "rank key") > 0
    # One pod changed (a new object): its entry goes, the others' stay.
    pods = list(snapshot.pods)
    changed = next(i for i, p in enumerate(pods) if p.name == "p0-1")
    pods[changed] = replace(pods[changed], annotations={EVICTION_COST: str(2**31 - 1)})
    second = replace(snapshot, pods=tuple(pods))
    index = carried(cache, second)
    assert index is not first and index._memos["filter"][1] is not first._memos["filter"][1]
    assert index.workloads_version is first.workloads_version  # so the whole verdicts stand
    assert remembered(index, "filter") == remembered(first, "filter") - 1
    result = plans(cache, second, usage, CONFIG)
    assert skip_of(result, "default/p0-1") == reasons.FILTERED_EVICTION_COST


def test_a_pods_verdict_follows_its_workloads_replicas(
    start: tuple[ClusterSnapshot, Any], cache: IndexCache
) -> None:
    snapshot, usage = start
    before = plans(cache, snapshot, usage, CONFIG)
    assert skip_of(before, "default/p0-0") != reasons.REPLICAS_ONE
    # web scaled down to one replica: the same pod objects, other workloads.
    workloads = tuple(
        replace(w, replicas=1) if w.name in ("web", "web-rs") else w for w in snapshot.workloads
    )
    version = carried(cache, snapshot).workloads_version
    scaled = replace(snapshot, workloads=workloads)
    assert carried(cache, scaled).workloads_version is not version
    after = plans(cache, scaled, usage, CONFIG)
    assert skip_of(after, "default/p0-0") == reasons.REPLICAS_ONE
    # And back: candidates again.
    again = plans(cache, replace(snapshot, workloads=snapshot.workloads), usage, CONFIG)
    assert skip_of(again, "default/p0-0") != reasons.REPLICAS_ONE
    assert again.to_dict() == before.to_dict()


def test_a_pods_verdict_follows_the_settings(start: tuple[ClusterSnapshot, Any], cache: IndexCache) -> None:
    snapshot, usage = start
    before = plans(cache, snapshot, usage, CONFIG)
    assert before.evictions
    excluded = settings(
        low={"cpu": 30}, high={"cpu": 60}, args={"evictableNamespaces": {"exclude": ["default"]}}
    )
    after = plans(cache, snapshot, usage, excluded)  # the very same snapshot, so the very same index
    assert not after.evictions and skip_of(after, "default/p0-0") == reasons.FILTERED_NAMESPACE
    bare = settings(low={"cpu": 30}, high={"cpu": 60}, migration={"evictAllBarePods": True})
    assert skip_of(plans(cache, snapshot, usage, bare), "default/p0-3") != reasons.FILTERED_BARE
    assert skip_of(plans(cache, snapshot, usage, CONFIG), "default/p0-3") == reasons.FILTERED_BARE
    assert plans(cache, snapshot, usage, CONFIG).to_dict() == before.to_dict()


def test_a_pods_verdict_follows_the_priority_class_a_threshold_names(
    start: tuple[ClusterSnapshot, Any], cache: IndexCache
) -> None:
    snapshot, usage = start
    config = settings(low={"cpu": 30}, high={"cpu": 60}, migration={"priorityThreshold": {"name": "custom"}})
    unknown = plans(cache, snapshot, usage, config)
    assert not unknown.evictions and skip_of(unknown, "default/p0-0") == reasons.FILTERED_PRIORITY
    # A pod using the class appears: the threshold resolves to its priority (500), on the same other pods.
    user = Pod(
        namespace="default", name="user", uid="uid-user", node_name="cool0", priority=500,
        priority_class_name="custom",
    )  # fmt: skip
    known = plans(cache, replace(snapshot, pods=(*snapshot.pods, user)), usage, config)
    assert known.evictions
    assert skip_of(known, "default/p0-2") == reasons.FILTERED_PRIORITY  # priority 1000
    assert skip_of(known, "default/p0-0") != reasons.FILTERED_PRIORITY  # no priority


def test_budgets_and_namespaces_changing_under_the_same_pods(
    start: tuple[ClusterSnapshot, Any], cache: IndexCache
) -> None:
    snapshot, usage = start
    before = plans(cache, snapshot, usage, CONFIG)
    api = [e.pod.key for e in before.evictions if "api" in e.workload]
    assert api, "an api pod moves while its budget allows one"
    closed = tuple(replace(p, disruptions_allowed=0) for p in snapshot.pdbs)
    after = plans(cache, replace(snapshot, pdbs=closed), usage, CONFIG)
    assert not [e for e in after.evictions if "api" in e.workload]
    assert skip_of(after, api[0]).startswith(reasons.PDB)
    named = replace(snapshot, namespaces=(Namespace(name="default", labels={"team": "a"}),))
    assert plans(cache, named, usage, CONFIG).to_dict() == before.to_dict()


def test_a_changed_pods_rank_key_is_computed_again(
    start: tuple[ClusterSnapshot, Any], cache: IndexCache
) -> None:
    snapshot, usage = start
    before = plans(cache, snapshot, usage, CONFIG)
    first = next(e.pod for e in before.evictions if e.node == "hot0")
    # Make the first pod moved from hot0 the last choice: a high deletion cost.
    pods = tuple(replace(p, annotations={DELETION_COST: "1000"}) if p is first else p for p in snapshot.pods)
    after = plans(cache, replace(snapshot, pods=pods), usage, CONFIG)
    assert next(e.pod.key for e in after.evictions if e.node == "hot0") != first.key


def test_a_nodes_requested_sum_follows_its_pods(
    start: tuple[ClusterSnapshot, Any], cache: IndexCache
) -> None:
    snapshot, usage = start
    plans(cache, snapshot, usage, CONFIG)
    index = carried(cache, snapshot)
    assert index.requested_on("cool0") == {"cpu": 500}
    # A pod with a large request lands on cool0 where one on cool1 was (the cache's list keeps its place):
    # their sums change, cool2's is carried as it was.
    kept = index._requested["cool2"]
    big = Pod(namespace="default", name="big", uid="uid-big", node_name="cool0", requests={"cpu": 9500})
    pods = tuple(big if p.name == "c1" else p for p in snapshot.pods)
    second = replace(snapshot, pods=pods)
    derived = carried(cache, second)
    assert derived is not index and derived._requested.get("cool2") is kept
    assert derived.requested_on("cool0") == {"cpu": 10000}
    assert derived.requested_on("cool1") == {}
    result = plans(cache, second, usage, CONFIG)
    assert all(e.destination != "cool0" for e in result.evictions)


def test_a_pod_resized_in_place_changes_its_nodes_requested_sum(
    start: tuple[ClusterSnapshot, Any], cache: IndexCache
) -> None:
    """A pod whose requests change (in-place resize) stays the same pod in the same place: the index swaps
    the object in its bucket rather than rebuilding it, and its node's summed requests must follow."""
    snapshot, usage = start
    plans(cache, snapshot, usage, CONFIG)
    index = carried(cache, snapshot)
    assert index.requested_on("cool0") == {"cpu": 500}
    pods = tuple(replace(p, requests={"cpu": 10000}) if p.name == "c0" else p for p in snapshot.pods)
    second = replace(snapshot, pods=pods)
    derived = carried(cache, second)
    assert index._node_of_key is not None
    assert derived is not index and derived._node_of_key is index._node_of_key  # derived in place
    assert derived.requested_on("cool0") == {"cpu": 10000}
    result = plans(cache, second, usage, CONFIG)
    assert all(e.destination != "cool0" for e in result.evictions)


# --- many random steps --------------------------------------------------------------------------------

CONFIGS = (
    CONFIG,
    settings(low={"cpu": 30}, high={"cpu": 60}, migration={"evictAllBarePods": True}),
    settings(
        low={"cpu": 30}, high={"cpu": 60}, args={"evictableNamespaces": {"exclude": ["team"]}},
        migration={"priorityThreshold": {"value": 1000}},
    ),
    settings(low={"cpu": 30}, high={"cpu": 60}, migration={"skipCheckExpectedReplicas": True}),
)  # fmt: skip


def mutate(rng: random.Random, snapshot: ClusterSnapshot, step: int) -> ClusterSnapshot:
    """A few of the changes a watch brings between two cycles."""
    pods = list(snapshot.pods)
    for _ in range(rng.randint(0, 3)):
        # Mostly the hot and cool nodes' pods (listed first), whose verdicts and keys the plans read.
        i = rng.randrange(min(len(pods), 20) if rng.random() < 0.8 else len(pods))
        pod = pods[i]
        change = rng.choice(("priority", "cost", "evict", "terminating", "requests", "namespace", "gone"))
        if change == "priority":
            pods[i] = replace(pod, priority=rng.choice((None, 0, 500, 1500)))
        elif change == "cost":
            key = rng.choice((DELETION_COST, EVICTION_COST))
            pods[i] = replace(pod, annotations={key: rng.choice(("-3", "7", str(2**31 - 1)))})
        elif change == "evict":
            pods[i] = replace(pod, annotations={"descheduler.alpha.kubernetes.io/evict": "true"})
        elif change == "terminating":
            pods[i] = replace(pod, terminating=not pod.terminating)
        elif change == "requests":
            pods[i] = replace(pod, requests={"cpu": rng.choice((100, 2000, 6000))})
        elif change == "namespace":
            pods[i] = replace(pod, namespace=rng.choice(("default", "team")))
        else:
            del pods[i]
    if rng.random() < 0.2:
        node = rng.choice(("cool0", "cool1", "cool2", "hot0"))
        pods.append(
            Pod(namespace="default", name=f"new{step}", uid=f"uid-new{step}", node_name=node,
                requests={"cpu": rng.choice((100, 3000))})
        )  # fmt: skip
    workloads = snapshot.workloads
    if rng.random() < 0.3:
        workloads = tuple(
            replace(w, replicas=rng.choice((0, 1, 2, 5))) if rng.random() < 0.4 else w for w in workloads
        )
    pdbs = snapshot.pdbs
    if rng.random() < 0.3:
        pdbs = tuple(replace(p, disruptions_allowed=rng.randint(0, 2)) for p in pdbs)
    namespaces = snapshot.namespaces
    if rng.random() < 0.2:
        namespaces = (Namespace(name="team", labels={"step": str(step)}),)
    return ClusterSnapshot(
        nodes=snapshot.nodes, pods=tuple(pods), pdbs=pdbs, workloads=workloads, namespaces=namespaces
    )


@pytest.mark.parametrize("seed", range(12))
def test_random_changes_between_cycles_plan_as_on_a_fresh_index_and_as_the_reference(
    seed: int, cache: IndexCache
) -> None:
    rng = random.Random(seed)
    w = world()
    usage = w.usage()
    snapshot = w.snapshot()
    steps: list[tuple[ClusterSnapshot, EffectiveConfig, dict[str, Any]]] = []
    derived = 0
    for step in range(10):
        config = rng.choice(CONFIGS)
        before = cache.last
        index = carried(cache, snapshot)
        derived += before is not None and before is not index and bool(index._memos)
        steps.append((snapshot, config, plans(cache, snapshot, usage, config).to_dict()))
        snapshot = mutate(rng, snapshot, step)
    assert derived >= 5, "most steps must plan on a carried index"
    for snapshot, config, fast in steps:
        reference = plan(snapshot, usage, config, PlannerState(), NOW, parts=REFERENCE_BOUNDED)
        assert reference.to_dict() == fast


def test_the_reports_fields_are_in_the_order_the_planner_builds_them() -> None:
    """``_reports`` and ``Levels.report`` build these positionally (twice as fast, 20,000 a cycle at
    5,000 nodes): a field added or moved must be added or moved there too."""
    assert [f.name for f in fields(NodeReport)] == [
        "node", "node_class", "pool", "anomaly_count", "consecutive_abnormalities", "cordoned",
        "resources", "skip_code", "skip_message", "prod_class", "prod_anomaly_count", "prod_resources",
        "evicted", "stop_code", "stop_message", "normal_count", "consecutive_normalities", "confirmed",
        "prod_normal_count", "prod_confirmed",
    ]  # fmt: skip
    assert [f.name for f in fields(ResourceReport)] == [
        "resource", "base", "usage", "low", "high", "usage_percent", "low_percent", "high_percent",
        "sample", "other", "running",
    ]  # fmt: skip
