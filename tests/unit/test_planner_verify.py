"""Decide from the cache, verify from the server: what the server holds can stop a planned eviction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from descheduler.cluster.types import ClusterSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.config.migration import PAUSE_ANNOTATION
from descheduler.planner import Plan, PlannedEviction, reasons
from descheduler.planner.candidates import resolve_priority_threshold
from descheduler.planner.index import ClusterIndex
from descheduler.planner.order import EVICTION_COST
from descheduler.planner.settings import compile_settings
from descheduler.planner.verify import ServerView, Threshold, recheck
from tests.unit.builders import NOW, World, cpu, settings
from tests.unit.fakes import server_view

CONFIG = settings(low={"cpu": 20}, high={"cpu": 50})


def cached_world(replicas: int = 6) -> World:
    """A hot node with four pods of a Deployment of ``replicas``, two cool nodes with room."""
    world = World()
    world.node("hot", cpu="10", usage=cpu("8"))
    world.node("cool", cpu="10", usage=cpu("1"))
    world.node("cool-2", cpu="10", usage=cpu("1"))
    world.deployment("web", replicas=replicas)
    for i in range(1, 5):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("2"))
    return world


def first_eviction(world: World, config: EffectiveConfig = CONFIG) -> tuple[Plan, PlannedEviction]:
    decided = world.plan(config)
    assert decided.evictions, "the scenario must plan an eviction"
    return decided, decided.evictions[0]


def view_of(snapshot: ClusterSnapshot, key: str) -> ServerView:
    """What the server would answer for ``key``: the pod, every workload, every pod of the namespace."""
    return server_view(snapshot, key)


def check(
    cache: World,
    server: Callable[[World, str], World] | None,
    *,
    config: EffectiveConfig = CONFIG,
    earlier: int = 0,
    view: ServerView | None = None,
) -> str | None:
    """The code of the disagreement (None: the eviction holds) when the server holds ``server(world)``."""
    snapshot = cache.snapshot()
    decided, planned = first_eviction(cache, config)
    index = ClusterIndex(snapshot)
    s = compile_settings(config)
    threshold = Threshold(*resolve_priority_threshold(s, index))
    served = server(cached_world_like(cache), planned.pod.name) if server is not None else cache
    seen = view if view is not None else view_of(served.snapshot(), planned.pod.key)
    sent = list(decided.evictions[1 : 1 + earlier])
    found = recheck(planned, index.workload_of(planned.pod), seen, s, decided.state, sent, threshold, NOW)
    return None if found is None else found.code


def cached_world_like(world: World) -> World:
    """A copy of the world's objects to change the way the server changed them."""
    import copy

    return World(objects=copy.deepcopy(world.objects))


def scale(replicas: int) -> Callable[[World, str], World]:
    def change(world: World, name: str) -> World:
        for obj in world.objects:
            if obj["kind"] in ("Deployment", "ReplicaSet"):
                obj["spec"]["replicas"] = replicas
        return world

    return change


def pod_change(mutate: Callable[[dict[str, object]], None]) -> Callable[[World, str], World]:
    def change(world: World, name: str) -> World:
        pod = next(o for o in world.objects if o["kind"] == "Pod" and o["metadata"]["name"] == name)
        mutate(pod)
        return world

    return change


def _gone(world: World, name: str) -> World:
    world.objects = [o for o in world.objects if o["metadata"]["name"] != name]
    return world


def _deployment_gone(world: World, name: str) -> World:
    world.objects = [o for o in world.objects if o["kind"] not in ("Deployment", "ReplicaSet")]
    return world


def _two_siblings_unready(world: World, name: str) -> World:
    siblings = [o for o in world.objects if o["kind"] == "Pod" and o["metadata"]["name"] != name]
    for obj in siblings[:2]:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return world


def _set(path: tuple[str, ...], value: object) -> Callable[[dict[str, object]], None]:
    def mutate(obj: dict[str, object]) -> None:
        target: dict[str, object] = obj
        for part in path[:-1]:
            target = target.setdefault(part, {})  # type: ignore[assignment]
        target[path[-1]] = value

    return mutate


def node_change(mutate: Callable[[dict[str, object]], None]) -> Callable[[World, str], World]:
    """The server's copy of the hot node (where every planned pod runs), changed by ``mutate``."""

    def change(world: World, name: str) -> World:
        mutate(next(o for o in world.objects if o["kind"] == "Node" and o["metadata"]["name"] == "hot"))
        return world

    return change


def _node_gone(world: World, name: str) -> World:
    world.objects = [o for o in world.objects if not (o["kind"] == "Node" and o["metadata"]["name"] == "hot")]
    return world


def _namespace_paused(world: World, name: str) -> World:
    annotations = {PAUSE_ANNOTATION: "INC-2211"}
    world.objects.append({"kind": "Namespace", "metadata": {"name": "default", "annotations": annotations}})
    return world


AUTOSCALER_TAINT = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("server", "code"),
    [
        pytest.param(None, None, id="the server agrees: the eviction holds"),
        pytest.param(
            pod_change(_set(("metadata", "annotations"), {"karpenter.sh/do-not-disrupt": "true"})),
            reasons.VERIFY_REFUSED,
            id="opted out since the plan",
        ),
        pytest.param(
            node_change(_set(("metadata", "annotations"), {PAUSE_ANNOTATION: "maintenance"})),
            reasons.VERIFY_REFUSED,
            id="its node paused since the plan",
        ),
        pytest.param(_namespace_paused, reasons.VERIFY_REFUSED, id="its namespace paused since the plan"),
        pytest.param(
            node_change(_set(("spec", "taints"), AUTOSCALER_TAINT)),
            reasons.VERIFY_REFUSED,
            id="an autoscaler started removing its node",
        ),
        pytest.param(_node_gone, reasons.VERIFY_REFUSED, id="its node is gone"),
        pytest.param(scale(1), reasons.VERIFY_WORKLOAD_CHANGED, id="scaled to 1 while the cache said 6"),
        pytest.param(scale(0), reasons.VERIFY_WORKLOAD_CHANGED, id="scaled to 0"),
        pytest.param(scale(8), reasons.VERIFY_WORKLOAD_CHANGED, id="scaled up: still a stale cache"),
        pytest.param(_gone, reasons.VERIFY_POD_CHANGED, id="the pod is gone"),
        pytest.param(
            pod_change(_set(("metadata", "uid"), "successor")), reasons.VERIFY_POD_CHANGED, id="replaced"
        ),
        pytest.param(
            pod_change(_set(("spec", "nodeName"), "cool")), reasons.VERIFY_POD_CHANGED, id="on another node"
        ),
        pytest.param(
            pod_change(_set(("metadata", "deletionTimestamp"), "2026-01-01T12:00:00Z")),
            reasons.VERIFY_POD_CHANGED,
            id="terminating",
        ),
        pytest.param(
            pod_change(_set(("status", "phase"), "Succeeded")), reasons.VERIFY_POD_CHANGED, id="finished"
        ),
        pytest.param(_deployment_gone, reasons.VERIFY_WORKLOAD_CHANGED, id="its Deployment is gone"),
        pytest.param(
            _two_siblings_unready, reasons.VERIFY_REFUSED, id="siblings unready: maxUnavailablePerWorkload"
        ),
        pytest.param(
            pod_change(_set(("metadata", "annotations"), {EVICTION_COST: "2147483647"})),
            reasons.VERIFY_REFUSED,
            id="annotated never-evict since the plan",
        ),
    ],
)
def test_a_planned_eviction_is_sent_only_when_the_server_agrees(
    server: Callable[[World, str], World] | None, code: str | None
) -> None:
    assert check(cached_world(), server) == code


def test_a_read_that_failed_never_lets_an_eviction_through() -> None:
    view = ServerView(pod=None, problem="GET /api/v1/namespaces/default/pods/web-1: timed out")
    assert check(cached_world(), None, view=view) == reasons.VERIFY_UNREADABLE


def test_evictions_already_sent_this_cycle_count_against_the_workload_on_the_server() -> None:
    """One eviction of the workload at a time: the plan's second one is refused once the first was sent."""
    config = settings(
        low={"cpu": 20},
        high={"cpu": 50},
        migration={"maxMigratingPerWorkload": 1, "objectLimiters": {}, "maxUnavailablePerWorkload": 3},
    )
    world = World()
    world.node("hot", cpu="10", usage=cpu("9"))
    world.node("cool", cpu="10", usage=cpu("0.5"))
    world.node("cool-2", cpu="10", usage=cpu("0.5"))
    world.deployment("web", replicas=6)
    world.deployment("api", replicas=6)
    for i in range(1, 3):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("2.5"))
        world.pod(f"api-{i}", on="hot", owner="api", usage=cpu("2.5"))
    decided, _ = first_eviction(world, config)
    assert len(decided.evictions) >= 2, "the hot node needs two evictions, one per workload"
    first, second = decided.evictions[:2]
    snapshot = world.snapshot()
    index = ClusterIndex(snapshot)
    s = compile_settings(config)

    def verdict(planned: PlannedEviction, earlier: list[PlannedEviction]) -> str | None:
        view = view_of(snapshot, planned.pod.key)
        found = recheck(
            planned, index.workload_of(planned.pod), view, s, decided.state, earlier, Threshold(None, ""), NOW
        )
        return None if found is None else found.message

    assert verdict(second, []) is None
    assert verdict(second, [first]) is None, "another workload's eviction does not count"
    same_workload = replace(
        first, pod=replace(first.pod, name="web-x", uid="web-x"), workload=second.workload
    )
    refused = verdict(second, [same_workload])
    assert refused is not None and "migrating-per-workload" in refused


def test_a_disagreement_names_the_cache_resources_to_list_again() -> None:
    world = cached_world()
    snapshot = world.snapshot()
    decided, planned = first_eviction(world)
    index = ClusterIndex(snapshot)
    served = scale(1)(cached_world_like(world), planned.pod.name).snapshot()
    found = recheck(
        planned,
        index.workload_of(planned.pod),
        view_of(served, planned.pod.key),
        compile_settings(CONFIG),
        decided.state,
        [],
        Threshold(None, ""),
        NOW,
    )
    assert found is not None
    assert set(found.stale) == {"deployments", "replicasets"}
    assert "expects 1 replicas on the API server, the cache said 6" in found.message


def test_a_bare_pod_is_checked_for_itself_only() -> None:
    world = World()
    world.node("hot", cpu="10", usage=cpu("8"))
    world.node("cool", cpu="10", usage=cpu("1"))
    world.pod("lonely", on="hot", usage=cpu("4"), annotations={"descheduler.alpha.kubernetes.io/evict": "1"})
    snapshot = world.snapshot()
    decided, planned = first_eviction(world)
    pod = snapshot.pods[0]
    same = server_view(snapshot, pod.key, workloads=(), pods=(pod,))
    moved = replace(same, pod=replace(pod, node_name="cool"))
    args = (None, compile_settings(CONFIG), decided.state, [], Threshold(None, ""), NOW)
    assert recheck(planned, args[0], same, *args[1:]) is None
    found = recheck(planned, args[0], moved, *args[1:])
    assert found is not None and found.code == reasons.VERIFY_POD_CHANGED
