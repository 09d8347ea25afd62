"""Which pods may move at all: MigrationController and LowNodeLoad filters, each with its reason code."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.planner import reasons
from descheduler.planner.candidates import PodFilter, Rejection
from descheduler.planner.index import ClusterIndex
from descheduler.planner.settings import compile_settings
from tests.unit.builders import World, cpu, evicted, settings, skip_codes

EVICT = {"descheduler.alpha.kubernetes.io/evict": "true"}


def outcome(
    pod: dict[str, Any],
    migration: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
    replicas: int = 4,
    namespace: str = "default",
) -> str:
    """The fate of one pod on a hotspot with plenty of room elsewhere: "evicted" or its skip code.

    The node stays over even without the pod (a terminating pod no longer counts in its node's usage)."""
    world = World().node("hot", usage=cpu("9.5")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=replicas, namespace=namespace)
    world.statefulset("db", replicas=replicas, namespace=namespace)
    options: dict[str, Any] = {"on": "hot", "owner": "web", "usage": cpu("4"), "namespace": namespace}
    options.update(pod)
    world.pod("p", **options)
    result = world.plan(settings(migration=migration, args=args))
    if evicted(result):
        return "evicted"
    return skip_codes(result)[f"{namespace}/p"]


@pytest.mark.parametrize(
    ("pod", "migration", "expected"),
    [
        ({}, {}, "evicted"),
        ({"owner": "node-exporter", "owner_kind": "DaemonSet"}, {}, reasons.FILTERED_DAEMONSET),
        ({"annotations": {"kubernetes.io/config.mirror": "abc"}}, {}, reasons.FILTERED_MIRROR),
        ({"annotations": {"kubernetes.io/config.source": "file"}}, {}, reasons.FILTERED_STATIC),
        ({"terminating": True}, {}, reasons.FILTERED_TERMINATING),
        (
            {"annotations": {"scheduling.koordinator.sh/eviction-cost": "2147483647"}},
            {},
            reasons.FILTERED_EVICTION_COST,
        ),
        ({"owner": None}, {}, reasons.FILTERED_BARE),
        ({"owner": None}, {"evictAllBarePods": True}, "evicted"),
        ({"owner": None}, {"evictFailedBarePods": True}, reasons.FILTERED_BARE),
        ({"priority": 2000000000}, {}, reasons.FILTERED_CRITICAL),
        ({"priority": 2000000000}, {"evictSystemCriticalPods": True}, "evicted"),
        ({"priority": 1000}, {"priorityThreshold": {"value": 1000}}, reasons.FILTERED_PRIORITY),
        ({"priority": 999}, {"priorityThreshold": {"value": 1000}}, "evicted"),
        ({}, {"priorityThreshold": {"value": 1000}}, "evicted"),  # no spec.priority: evictable
        (
            {"priority": 2000000000},
            {"priorityThreshold": {"name": "system-cluster-critical"}},
            reasons.FILTERED_CRITICAL,
        ),
        ({"priority": 1999999999}, {"priorityThreshold": {"name": "system-cluster-critical"}}, "evicted"),
        ({"priority": 5}, {"priorityThreshold": {"name": "no-such-class"}}, reasons.FILTERED_PRIORITY),
        ({"volumes": [{"name": "v", "emptyDir": {}}]}, {}, reasons.FILTERED_LOCAL_STORAGE),
        ({"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}, {}, reasons.FILTERED_LOCAL_STORAGE),
        ({"volumes": [{"name": "v", "emptyDir": {}}]}, {"evictLocalStoragePods": True}, "evicted"),
        ({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}, {}, "evicted"),
        (
            {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]},
            {"ignorePvcPods": True},
            reasons.FILTERED_PVC,
        ),
        ({"resource_claims": True}, {}, reasons.FILTERED_RESOURCE_CLAIMS),
        ({"resource_claims": True}, {"evictResourceClaimPods": True}, reasons.RESOURCE_CLAIM_SHARED),
        ({"labels": {"movable": "yes"}}, {"labelSelector": {"matchLabels": {"movable": "yes"}}}, "evicted"),
        ({}, {"labelSelector": {"matchLabels": {"movable": "yes"}}}, reasons.FILTERED_LABEL_SELECTOR),
        ({}, {"namespaces": {"exclude": ["default"]}}, reasons.FILTERED_NAMESPACE),
        ({}, {"namespaces": {"include": ["other"]}}, reasons.FILTERED_NAMESPACE),
        ({"owner": "db", "owner_kind": "StatefulSet"}, {}, "evicted"),
        ({"owner": "batch-job", "owner_kind": "Job"}, {}, reasons.WORKLOAD_UNKNOWN),
        ({"owner": "missing"}, {}, reasons.WORKLOAD_UNKNOWN),
        ({"no_usage": True}, {}, reasons.NO_POD_USAGE),
    ],
)
def test_each_filter_keeps_its_pods_with_a_reason_and_its_flag_lets_them_go(
    pod: dict[str, Any], migration: dict[str, Any], expected: str
) -> None:
    if pod.pop("no_usage", False):
        pod["usage"] = None
    assert outcome(pod, migration) == expected


@pytest.mark.parametrize(
    ("pod", "migration", "expected"),
    [
        ({"owner": None}, {}, "evicted"),
        ({"priority": 2000000000}, {}, "evicted"),
        ({"volumes": [{"name": "v", "emptyDir": {}}]}, {}, "evicted"),
        # past the opt-in, never past the device check (a claim used by name does not move with the pod)
        ({"resource_claims": True}, {}, reasons.RESOURCE_CLAIM_SHARED),
        ({"owner": "missing"}, {}, "evicted"),
        ({"owner": "node-exporter", "owner_kind": "DaemonSet"}, {}, reasons.FILTERED_DAEMONSET),
        ({"terminating": True}, {}, reasons.FILTERED_TERMINATING),
        ({}, {"namespaces": {"exclude": ["default"]}}, reasons.FILTERED_NAMESPACE),
        ({}, {"labelSelector": {"matchLabels": {"movable": "yes"}}}, reasons.FILTERED_LABEL_SELECTOR),
    ],
)
def test_the_evict_annotation_bypasses_safety_filters_but_not_scoping_or_never_move_rules(
    pod: dict[str, Any], migration: dict[str, Any], expected: str
) -> None:
    pod = {**pod, "annotations": {**pod.get("annotations", {}), **EVICT}}
    assert outcome(pod, migration) == expected


def test_the_evict_annotation_lifts_the_single_replica_guard() -> None:
    # The annotation means "this pod may be evicted": the single-replica guard is one of the filters it lifts.
    assert outcome({"annotations": EVICT}, replicas=1) == "evicted"


@pytest.mark.parametrize(
    ("args", "namespace", "expected"),
    [
        ({"evictableNamespaces": {"exclude": ["kube-system"]}}, "kube-system", reasons.FILTERED_NAMESPACE),
        ({"evictableNamespaces": {"exclude": ["kube-system"]}}, "default", "evicted"),
        ({"evictableNamespaces": {"include": ["apps"]}}, "apps", "evicted"),
        ({"evictableNamespaces": {"include": ["apps"]}}, "default", reasons.FILTERED_NAMESPACE),
    ],
)
def test_evictable_namespaces_scope_which_pods_lownodeload_moves(
    args: dict[str, Any], namespace: str, expected: str
) -> None:
    assert outcome({}, args=args, namespace=namespace) == expected


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"tier": "web"}, "evicted"),
        ({"tier": "batch"}, "evicted"),
        ({"tier": "db"}, reasons.FILTERED_POD_SELECTOR),
    ],
)
def test_pod_selectors_let_through_pods_matching_any_of_them(labels: dict[str, str], expected: str) -> None:
    args = {
        "podSelectors": [
            {"name": "web", "selector": {"matchLabels": {"tier": "web"}}},
            {
                "name": "batch",
                "selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["batch"]}]},
            },
        ]
    }
    assert outcome({"labels": labels}, args=args) == expected


@pytest.mark.parametrize(
    ("replicas", "migration", "expected"),
    [
        (1, {}, reasons.REPLICAS_ONE),
        (1, {"skipCheckExpectedReplicas": True}, "evicted"),
        (2, {}, "evicted"),
        (3, {"maxUnavailablePerWorkload": 3}, reasons.REPLICAS_UNPROTECTED),
        (4, {"maxMigratingPerWorkload": "100%"}, reasons.REPLICAS_UNPROTECTED),
        (4, {"maxMigratingPerWorkload": "100%", "skipCheckExpectedReplicas": True}, "evicted"),
        (0, {}, reasons.REPLICAS_UNPROTECTED),  # scaling to zero: its pods are going away anyway
        (0, {"skipCheckExpectedReplicas": True}, reasons.OBJECT_LIMITER),  # every limit is 0 replicas
    ],
)
def test_workloads_that_one_eviction_could_take_down_are_protected(
    replicas: int, migration: dict[str, Any], expected: str
) -> None:
    assert outcome({}, migration, replicas=replicas) == expected


def test_a_replicaset_is_resolved_to_its_deployment_for_expected_replicas() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=1)
    world.objects[-1]["spec"]["replicas"] = 5  # the ReplicaSet says 5, the Deployment says 1
    world.pod("p", on="hot", owner="web", usage=cpu("4"))
    assert skip_codes(world.plan(settings())) == {"default/p": reasons.REPLICAS_ONE}


def test_evict_failed_bare_pods_lets_failed_bare_pods_pass_the_filter() -> None:
    world = World().node("n")
    world.pod("failed", on="n", phase="Failed")
    world.pod("running", on="n")
    config = settings(migration={"evictFailedBarePods": True})
    index = ClusterIndex(world.snapshot())
    pod_filter = PodFilter(compile_settings(config), index)
    failed, running = world.snapshot().pods
    assert pod_filter.check(failed) is None
    assert pod_filter.check(running) == Rejection(
        reasons.FILTERED_BARE, "bare pod (no controller would recreate it); see evictAllBarePods"
    )


def test_terminal_pods_are_not_candidates_at_all() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.pod("done", on="hot", phase="Succeeded", usage=cpu("4"))
    result = world.plan(settings(migration={"evictAllBarePods": True}))
    assert (result.evictions, result.pod_skips) == ((), ())


def test_a_priority_threshold_name_resolves_from_pods_using_that_class() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("4"), priority=500)
    world.objects[-1]["spec"]["priorityClassName"] = "gold"
    result = world.plan(settings(migration={"priorityThreshold": {"name": "gold"}}))
    assert skip_codes(result) == {"default/p": reasons.FILTERED_PRIORITY}
