"""Properties over random clusters and configurations: no limit, filter or PDB is ever exceeded, no
destination ever ends above its high threshold, and no pod is evicted that frees nothing of what its node
is over on. The checks restate the rules independently of the planner's code, from the plan's own
reports and the inputs."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, target
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from descheduler.cluster.selectors import selector_matches
from descheduler.config.load import EffectiveConfig
from descheduler.planner import Plan, PlannerState, commit
from tests.unit.builders import NOW, World, settings

NAMESPACES = ("default", "team-a", "team-b")
WORKLOADS = ("web", "api", "db")


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[World, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    world = World()
    node_names = [f"n{i}" for i in range(draw(st.integers(2, 6)))]
    for index, name in enumerate(node_names):
        cores = draw(st.integers(4, 16))
        # The first node runs hot and the second cool, so most examples have work to do; the rest vary.
        share = {0: st.integers(70, 100), 1: st.integers(0, 15)}.get(index, st.integers(0, 100))
        world.node(
            name,
            cpu=str(cores),
            memory=f"{draw(st.integers(8, 32))}Gi",
            pods=draw(st.integers(3, 30)),
            usage={"cpu": f"{cores * 10 * draw(share)}m", "memory": f"{draw(st.integers(0, 8))}Gi"},
            unschedulable=draw(st.booleans()) and draw(st.booleans()),
            labels={"disk": draw(st.sampled_from(["ssd", "hdd"]))},
            taints=[{"key": "gpu", "value": "y", "effect": "NoSchedule"}]
            if draw(st.integers(0, 5)) == 0
            else [],
        )
    replicas = {}
    for ns in NAMESPACES:
        for name in WORKLOADS:
            replicas[(ns, name)] = draw(st.integers(1, 12))
            world.deployment(name, replicas=replicas[(ns, name)], namespace=ns)
    for i in range(draw(st.integers(1, 25))):
        ns = draw(st.sampled_from(NAMESPACES))
        kind = draw(st.sampled_from(["ReplicaSet"] * 6 + ["DaemonSet", "bare", "Job"]))
        owner = draw(st.sampled_from(WORKLOADS)) if kind != "bare" else None
        options: dict[str, Any] = {
            "on": draw(st.sampled_from([node_names[0], node_names[0], *node_names])),
            "namespace": ns,
            "owner": owner,
            "usage": {  # idle pods (0 cpu or 0 memory) are common: they must never go for nothing
                "cpu": f"{draw(st.one_of(st.just(0), st.integers(0, 3000)))}m",
                "memory": f"{draw(st.one_of(st.just(0), st.integers(0, 2048)))}Mi",
            },
            "requests": {"cpu": f"{draw(st.integers(0, 4000))}m"},
            "terminating": draw(st.integers(0, 9)) == 0,
            "ready": draw(st.integers(0, 5)) > 0,
            "priority": draw(st.sampled_from([None, 0, 5500, 9500, 2000000000])),
            "labels": {"tier": draw(st.sampled_from(["front", "back"]))},
        }
        if kind in ("DaemonSet", "Job"):
            options["owner_kind"] = kind
        if draw(st.integers(0, 4)) == 0:
            options["volumes"] = [{"name": "v", "emptyDir": {}}]
        if draw(st.integers(0, 4)) == 0:
            options["node_selector"] = {"disk": "ssd"}
        if draw(st.integers(0, 6)) == 0:
            options["annotations"] = {"descheduler.alpha.kubernetes.io/evict": "true"}
        world.pod(f"p{i}", **options)
    for ns in NAMESPACES:
        if draw(st.booleans()):
            world.pdb(f"{ns}-web", app="web", allowed=draw(st.integers(0, 3)), namespace=ns)
        if draw(st.integers(0, 3)) == 0:
            world.pdb(f"{ns}-front", app="web", allowed=draw(st.integers(0, 3)), namespace=ns)
    low = draw(st.integers(10, 40))
    high = draw(st.integers(max(low, 40), 80))
    optional_int = st.one_of(st.none(), st.integers(0, 4))
    top = {k: v for k, v in {
        "maxNoOfPodsToEvictPerNode": draw(optional_int),
        "maxNoOfPodsToEvictPerNamespace": draw(optional_int),
        "maxNoOfPodsToEvictTotal": draw(optional_int),
    }.items() if v is not None}  # fmt: skip
    int_or_percent = st.one_of(st.none(), st.integers(0, 4), st.sampled_from(["25%", "50%", "0%"]))
    migration: dict[str, Any] = {
        "maxMigratingPerNode": draw(optional_int),
        "maxMigratingPerNamespace": draw(optional_int),
        "maxMigratingGlobally": draw(optional_int),
        "maxMigratingPerWorkload": draw(int_or_percent),
        "maxUnavailablePerWorkload": draw(int_or_percent),
        "evictLocalStoragePods": draw(st.booleans()),
        "evictAllBarePods": draw(st.booleans()),
        "skipCheckExpectedReplicas": draw(st.booleans()),
        "objectLimiters": draw(st.sampled_from([{}, {"workload": {"duration": "5m"}}])),
    }
    migration = {k: v for k, v in migration.items() if v is not None}
    args: dict[str, Any] = {"numberOfNodes": draw(st.integers(0, 2)), "nodeFit": draw(st.booleans())}
    if draw(st.booleans()):
        args["evictableNamespaces"] = {"exclude": [draw(st.sampled_from(NAMESPACES))]}
    if draw(st.integers(0, 3)) == 0:
        args["podSelectors"] = [{"name": "front", "selector": {"matchLabels": {"tier": "front"}}}]
    memory_high = draw(st.integers(50, 100))
    thresholds = {
        "low": {"cpu": low, "memory": min(low + 20, memory_high)},
        "high": {"cpu": high, "memory": memory_high},
    }
    return world, thresholds, top, migration, args


def workload_cap(value: int | str | None, replicas: int | None) -> float:
    if value in (0, "0%"):
        return math.inf
    if (
        replicas is None
    ):  # unknown replicas (moved by the evict annotation): one at a time unless an int says more
        return value if isinstance(value, int) else 1
    if value is None:  # Koordinator's table: 10% of more than 10 replicas rounded down, 4-10: 2, else 1
        cap = max(1, math.floor(replicas / 10)) if replicas > 10 else (2 if replicas >= 4 else 1)
    elif isinstance(value, int):
        cap = value
    else:  # a percent is scaled down, never below 1
        cap = max(1, math.floor(replicas * int(value.rstrip("%")) / 100))
    return min(cap, replicas)


def replicas_of(world: World, workload: str) -> int | None:
    """Expected replicas of the Deployment with this uid; None for a Job (replicas unknown)."""
    for obj in world.objects:
        if obj["kind"] == "Deployment" and obj["metadata"]["uid"] == workload:
            return int(obj["spec"]["replicas"])
    assert workload.startswith("uid-job-"), f"evicted pod of unknown workload {workload!r}"
    return None


def check_plan(
    world: World,
    config: EffectiveConfig,
    plan: Plan,
    flying: Counter[str],
    top: dict[str, Any],
    migration: dict[str, Any],
    args: dict[str, Any],
    earlier: list[Any],
) -> None:
    snapshot = world.snapshot()
    pods = {p.key: p for p in snapshot.pods}
    reports = {r.node: r for r in plan.node_reports}
    keys = [e.pod.key for e in plan.evictions]
    assert len(keys) == len(set(keys)), "a pod is evicted twice"

    for e in plan.evictions:
        pod = pods[e.pod.key]
        # filters
        assert not pod.terminating and not pod.is_terminal
        annotated = "descheduler.alpha.kubernetes.io/evict" in pod.annotations
        assert pod.owner is None or pod.owner.kind != "DaemonSet"
        assert pod.owner is None or pod.owner.kind != "Job" or annotated  # unknown replicas: only by consent
        if not annotated:
            assert pod.owner is not None or migration.get("evictAllBarePods")
            assert not pod.has_local_storage or migration.get("evictLocalStoragePods")
            assert pod.priority is None or pod.priority < 2_000_000_000
            if not migration.get("skipCheckExpectedReplicas") and pod.owner is not None:
                replicas = replicas_of(world, e.workload)
                assert replicas != 1
                assert replicas != workload_cap(migration.get("maxMigratingPerWorkload"), replicas)
                assert replicas != workload_cap(migration.get("maxUnavailablePerWorkload"), replicas)
        excluded = args.get("evictableNamespaces", {}).get("exclude", [])
        assert pod.namespace not in excluded
        if "podSelectors" in args:
            assert pod.labels.get("tier") == "front"
        # it frees something of what its node is over on (the resources its reason names)
        over = re.findall(r"node (?:prod )?(\S+) usage\(", e.reason)
        assert over and any(e.usage.get(name, 0) > 0 for name in over), (e.pod.key, e.reason, e.usage)
        # source and destination
        source, dest = reports[e.node], reports[e.destination]
        assert source.node_class == "hotspot"
        assert dest.node_class == "low" and not dest.cordoned
        assert e.node != e.destination

    # destinations never end above their high threshold, nor beyond allocatable requests when nodeFit
    moved_in: dict[str, Counter[str]] = {}
    for e in plan.evictions:
        moved_in.setdefault(e.destination, Counter()).update(e.usage)
    for node, added in moved_in.items():
        for resource in reports[node].resources:
            assert resource.usage + added[resource.resource] <= resource.high, (node, resource.resource)
        if args["nodeFit"]:
            node_obj = next(n for n in snapshot.nodes if n.name == node)
            requested = Counter[str]()
            for pod in snapshot.pods:
                if pod.node_name == node and not pod.is_terminal:
                    requested.update(pod.requests)
            for e in plan.evictions:
                if e.destination == node:
                    requested.update(pods[e.pod.key].requests)
            for name, amount in requested.items():
                if amount:
                    assert amount <= node_obj.allocatable.get(name, 0), (node, name)

    # per-cycle limits
    by_node = Counter(e.node for e in plan.evictions)
    by_ns = Counter(e.pod.namespace for e in plan.evictions)
    if "maxNoOfPodsToEvictPerNode" in top:
        assert max(by_node.values(), default=0) <= top["maxNoOfPodsToEvictPerNode"]
    if "maxNoOfPodsToEvictPerNamespace" in top:
        assert max(by_ns.values(), default=0) <= top["maxNoOfPodsToEvictPerNamespace"]
    if "maxNoOfPodsToEvictTotal" in top:
        assert len(plan.evictions) <= top["maxNoOfPodsToEvictTotal"]

    # migration limits, counting migrations still in flight (earlier evictions whose pods are still there)
    for node, count in by_node.items():
        if migration.get("maxMigratingPerNode"):
            assert flying[f"node:{node}"] + count <= migration["maxMigratingPerNode"]
    for ns, count in by_ns.items():
        if migration.get("maxMigratingPerNamespace"):
            assert flying[f"ns:{ns}"] + count <= migration["maxMigratingPerNamespace"]
    if migration.get("maxMigratingGlobally"):
        assert flying["all"] + len(plan.evictions) <= migration["maxMigratingGlobally"]
    by_workload = Counter(e.workload for e in plan.evictions if e.workload)
    for workload, count in by_workload.items():
        replicas = replicas_of(world, workload)
        cap = workload_cap(migration.get("maxMigratingPerWorkload"), replicas)
        assert flying[f"workload:{workload}"] + count <= cap
        if migration.get("objectLimiters"):
            window = sum(1 for w, started in earlier if w == workload and started > plan.now - 300)
            assert window + count <= cap

    # PDBs
    for pdb in snapshot.pdbs:
        matched = [
            e
            for e in plan.evictions
            if e.pod.namespace == pdb.namespace and selector_matches(pdb.selector, pods[e.pod.key].labels)
        ]
        assert len(matched) <= max(0, pdb.disruptions_allowed)
    for e in plan.evictions:
        covering = [
            p
            for p in snapshot.pdbs
            if p.namespace == e.pod.namespace and selector_matches(p.selector, pods[e.pod.key].labels)
        ]
        assert len(covering) <= 1


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_no_plan_ever_breaks_a_filter_limit_pdb_or_destination_threshold(
    scenario: tuple[World, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    world, thresholds, top, migration, args = scenario
    config = settings(thresholds["low"], thresholds["high"], top=top, migration=migration, args=args)
    state = PlannerState()
    flying: Counter[str] = Counter()
    earlier: list[Any] = []
    total = 0
    for cycle in range(3):
        now = NOW + 60 * cycle
        result = world.plan(config, state, now)
        check_plan(world, config, result, flying, top, migration, args, earlier)
        state = commit(result.state, result.evictions, now)
        # The snapshot does not change: every committed eviction stays in flight (its pod is still there).
        for e in result.evictions:
            flying.update([f"node:{e.node}", f"ns:{e.pod.namespace}", "all", f"workload:{e.workload}"])
            earlier.append((e.workload, now))
        total += len(result.evictions)
    target(float(total))  # steer the search toward busy plans, where limits are under pressure


def test_the_property_checker_catches_a_plan_that_breaks_a_limit() -> None:
    """The properties above can fail: a plan tampered to exceed maxNoOfPodsToEvictTotal is caught."""
    world = World().node("hot", usage={"cpu": "9", "memory": "1Gi"})
    world.node("cool", cpu="100", usage={"cpu": "1", "memory": "1Gi"})
    world.deployment("web", replicas=10)
    for name in ("a", "b"):
        world.pod(name, on="hot", owner="web", usage={"cpu": "2", "memory": "1Gi"})
    top = {"maxNoOfPodsToEvictTotal": 1}
    config = settings(top=top)
    result = world.plan(config)
    assert len(result.evictions) == 1
    args = {"nodeFit": True}
    check_plan(world, config, result, Counter(), top, {}, args, [])
    other = next(p for p in world.snapshot().pods if p.key != result.evictions[0].pod.key)
    tampered = replace(result, evictions=(*result.evictions, replace(result.evictions[0], pod=other)))
    try:
        check_plan(world, config, tampered, Counter(), top, {}, args, [])
    except AssertionError:
        return
    raise AssertionError("the checker accepted a plan with two evictions under maxNoOfPodsToEvictTotal: 1")
