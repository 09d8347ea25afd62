"""The watch cache's snapshot and the planner's index follow changes without rebuilding, and end up
exactly where a full rebuild would: random event sequences, checked step by step against one."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from descheduler.cluster.types import ClusterSnapshot, Node, OwnerRef, Pod, Workload
from descheduler.kube.cache import _Reflector
from descheduler.planner.index import ClusterIndex, IndexCache
from tests.unit.test_fastparse import reflector

# -- the cache's ordered values -----------------------------------------------------------------------------


def pod_reflector() -> _Reflector:
    return reflector("Pod", fast=True)


def pod_json(name: int, version: int, bad: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p{name:03d}", "namespace": f"ns{name % 3}", "uid": f"u{name}"},
        "spec": {
            "nodeName": f"n{version % 4}",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "x" if bad else f"{version}m"}}}],
        },
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BAD", "READ"]),
        st.integers(0, 40),
        st.integers(0, 9),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVENTS, st.booleans())
def test_the_ordered_values_follow_any_sequence_of_watch_events(
    events: list[tuple[str, int, int]], exact_path: bool
) -> None:
    r = pod_reflector()
    for kind, name, version in events:
        if kind == "READ":
            expected = tuple(value for _, value in sorted(r.items.items()))
            assert r.values() == expected
            assert all(a is b for a, b in zip(r.values(), expected, strict=True))
            continue
        event_type = "MODIFIED" if kind == "BAD" else kind
        line = json.dumps({"type": event_type, "object": pod_json(name, version, bad=kind == "BAD")}).encode()
        if exact_path or not r._apply_fast(line):
            r._apply(json.loads(line))
    assert r.values() == tuple(value for _, value in sorted(r.items.items()))


def test_an_unchanged_cache_hands_out_the_very_same_values_and_a_burst_sorts_once() -> None:
    r = pod_reflector()
    for name in range(200):  # more changes than the bisection path takes: a full sort
        r._apply(json.loads(json.dumps({"type": "ADDED", "object": pod_json(name, 1)})))
    first = r.values()
    assert r.values() is first
    assert [p.name for p in first] == sorted(p.name for p in first) or [p.key for p in first] == sorted(
        p.key for p in first
    )
    r._apply(json.loads(json.dumps({"type": "DELETED", "object": pod_json(7, 1)})))
    assert "ns1/p007" not in {p.key for p in r.values()} and len(r.values()) == 199


# -- the planner's index ---------------------------------------------------------------------------------

NODES = tuple(Node(name=f"n{i}", labels={}, allocatable={"cpu": 1000}) for i in range(5))
WORKLOADS = (
    Workload("ReplicaSet", "ns", "rs", "rs-uid", 3, OwnerRef("Deployment", "d", "d-uid")),
    Workload("Deployment", "ns", "d", "d-uid", 3),
    Workload("StatefulSet", "ns", "s", "s-uid", 2),
)
OWNERS = (None, OwnerRef("ReplicaSet", "rs", "rs-uid"), OwnerRef("StatefulSet", "s", "s-uid"))


def make_pod(i: int, variant: int) -> Pod:
    return Pod(
        namespace="ns",
        name=f"p{i}",
        uid=f"uid-{i}",
        node_name=f"n{variant % 6}" if variant % 6 < 5 else "",
        phase=("Running", "Pending", "Succeeded", "Failed")[variant % 4],
        ready=variant % 3 != 0,
        terminating=variant % 5 == 0,
        owner=OWNERS[(i + variant) % 3],
    )


CHANGES = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["add", "modify", "delete"]), st.integers(0, 60), st.integers(0, 50)),
        max_size=6,
    ),
    min_size=1,
    max_size=12,
)


def same_index(a: ClusterIndex, b: ClusterIndex) -> None:
    assert a.snapshot is b.snapshot
    assert a.nodes == b.nodes
    assert a.pod_uids == b.pod_uids
    assert {k: [id(p) for p in v] for k, v in a.pods_by_node.items() if v} == {
        k: [id(p) for p in v] for k, v in b.pods_by_node.items() if v
    }
    for pod in a.snapshot.pods:
        assert a.workload_of(pod) == b.workload_of(pod)
        assert a.pod_exists(pod.uid, pod.key) and b.pod_exists("", pod.key)
        ref = a.workload_of(pod)
        if ref is not None:
            assert a.unavailable_pods(ref.identity) == b.unavailable_pods(ref.identity)
    assert a.pod_exists("uid-none", "ns/none") == b.pod_exists("uid-none", "ns/none") is False
    # Which node holds each name (carried from the last index once it was asked for, built afresh here).
    for key in [p.key for p in a.snapshot.pods] + ["ns/none"]:
        assert a.nodes_holding([key]) == b.nodes_holding([key])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(10, 80), CHANGES, st.booleans())
def test_an_index_derived_from_the_last_one_equals_a_full_build(
    size: int, steps: list[list[tuple[str, int, int]]], change_workloads: bool
) -> None:
    pods = {i: make_pod(i, i) for i in range(size)}
    workloads = WORKLOADS
    snapshot = ClusterSnapshot(nodes=NODES, pods=tuple(pods[i] for i in sorted(pods)), workloads=workloads)
    index = ClusterIndex(snapshot)
    for step, changes in enumerate(steps):
        before = set(pods)
        for op, i, variant in changes:
            if op == "delete":
                pods.pop(i, None)
            else:  # add, or modify: a new object for that pod, as the cache stores after an event
                pods[i] = make_pod(i, variant)
        if change_workloads and step % 3 == 2:
            workloads = (*workloads[1:], Workload("ReplicaSet", "ns", f"rs{step}", f"rs{step}-uid", 1))
        snapshot = ClusterSnapshot(
            nodes=NODES, pods=tuple(pods[i] for i in sorted(pods)), workloads=workloads
        )
        derived = index.updated(snapshot)
        full = ClusterIndex(snapshot)
        if derived is not None:
            same_index(derived, full)
        # Pods only modified (none added or deleted): the diff is the changed positions, so a few changes
        # must give a derived index.
        small = len(changes) * 2 <= len(snapshot.pods) // 8 and set(pods) == before
        assert derived is not None or not small
        index = derived if derived is not None else full


@pytest.mark.parametrize(
    ("case", "change"),
    [
        ("one pod modified", lambda pods: pods.__setitem__(10, make_pod(10, 11))),
        ("one pod deleted", lambda pods: pods.pop(700)),
        ("one pod added at the end", lambda pods: pods.append(make_pod(5000, 1))),
    ],
    ids=["modified", "deleted", "added"],
)
def test_the_index_after_one_change_is_derived_not_rebuilt(
    case: str, change: Callable[[list[Pod]], Any]
) -> None:
    pods = [make_pod(i, i) for i in range(2000)]
    first = ClusterSnapshot(nodes=NODES, pods=tuple(pods), workloads=WORKLOADS)
    before = ClusterIndex(first)
    change(pods)
    second = ClusterSnapshot(nodes=NODES, pods=tuple(pods), workloads=WORKLOADS)
    after = before.updated(second)
    assert after is not None and after._workloads_by_uid is before._workloads_by_uid
    same_index(after, ClusterIndex(second))


def test_the_index_of_a_snapshot_with_one_changed_pod_is_derived_not_rebuilt() -> None:
    pods = [make_pod(i, i) for i in range(2000)]
    first = ClusterSnapshot(nodes=NODES, pods=tuple(pods), workloads=WORKLOADS)
    cache = IndexCache()
    before = cache.index_of(first)
    assert cache.index_of(first) is before  # the same snapshot object: the same index
    pods[10] = make_pod(10, 11)
    second = ClusterSnapshot(nodes=NODES, pods=tuple(pods), workloads=WORKLOADS)
    after = cache.index_of(second)
    assert cache.last is after and after is not before and after._workloads_by_uid is before._workloads_by_uid
    same_index(after, ClusterIndex(second))
