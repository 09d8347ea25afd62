"""The disagreements the real kube-scheduler found in our destination check (``tests/controlplane/judge.py``,
``benchmarks/scheduler_agreement.py``), as fixed scenarios: each is a node where we said the replacement
fits and the scheduler left it Pending. Here the coolest low node, ``cool``, is such a node and ``warm``
is not: the pod must go to ``warm``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from descheduler.cluster.parse import ObjectError, parse_pod
from tests.unit.builders import World, cpu, settings

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def anti_affinity(app: str, key: str = HOSTNAME) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def pod_affinity(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME}
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def spread(key: str, max_skew: int = 1) -> dict[str, Any]:
    constraint = {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    return {"topologySpreadConstraints": [constraint]}


def host_port(port: int, protocol: str = "TCP", host_ip: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"containerPort": 80, "hostPort": port, "protocol": protocol}
    if host_ip is not None:
        entry["hostIP"] = host_ip
    container = {
        "name": "main",
        "image": "app:1",
        "ports": [entry],
        "resources": {"requests": {"cpu": "100m"}},
    }
    return {"containers": [container]}


Resident = tuple[str, str, dict[str, Any]]
"""A pod already bound: (node, app label, spec fields)."""

CASES: list[tuple[str, dict[str, Any], list[Resident], str]] = [
    # (case, the moving pod's spec fields, pods already there, where it must go)
    ("its anti-affinity excludes a pod on the node", anti_affinity("web"), [("cool", "web", {})], "warm"),
    ("its anti-affinity excludes a pod of another app", anti_affinity("db"), [("cool", "db", {})], "warm"),
    ("a pod there excludes it by its anti-affinity", {}, [("cool", "db", anti_affinity("web"))], "warm"),
    ("a pod in the node's zone excludes it", {}, [("other", "db", anti_affinity("web", ZONE))], "warm"),
    ("its hostname spread would be skewed by 2", spread(HOSTNAME), [("cool", "web", {})], "warm"),
    ("its zone spread would be skewed by 2", spread(ZONE), [("other", "web", {})], "warm"),
    ("a skew of 2 is within its maxSkew of 2", spread(HOSTNAME, 2), [("cool", "web", {})], "cool"),
    ("its host port is taken there", host_port(8080), [("cool", "db", host_port(8080))], "warm"),
    (
        "its host port is taken on every address",
        host_port(8080, host_ip="10.0.0.1"),
        [("cool", "db", host_port(8080))],
        "warm",
    ),
    (
        "the same port of another protocol is free",
        host_port(8080, "UDP"),
        [("cool", "db", host_port(8080))],
        "cool",
    ),
    ("its pod affinity finds no pod there", pod_affinity("db"), [("warm", "db", {})], "warm"),
]


def world_of(pod: dict[str, Any], residents: list[Resident]) -> World:
    """A hot node with one movable 3-core pod of app ``web``; ``cool`` (1 core used, zone a) and ``warm``
    (2 cores, zone b) are low and may take it; ``other`` (zone a) is neither hot nor low."""
    world = World().node("hot", usage=cpu("9"), labels={ZONE: "c"})
    world.node("cool", usage=cpu("1"), labels={ZONE: "a"})
    world.node("warm", usage=cpu("2"), labels={ZONE: "b"})
    world.node("other", usage=cpu("3"), labels={ZONE: "a"})
    world.deployment("web", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("3"), spec_extra=pod)
    for i, (node, app, spec) in enumerate(residents):
        world.pod(f"resident-{i}", on=node, labels={"app": app}, usage=cpu("0"), spec_extra=spec)
    return world


@pytest.mark.parametrize(("case", "pod", "residents", "destination"), CASES, ids=[c[0] for c in CASES])
def test_a_pod_moves_only_where_the_real_scheduler_would_place_it(
    case: str, pod: dict[str, Any], residents: list[Resident], destination: str
) -> None:
    result = world_of(pod, residents).plan(settings())
    assert [e.destination for e in result.evictions] == [destination]


def test_two_pods_excluding_each_other_are_not_both_sent_to_one_node() -> None:
    world = World().node("hot", usage=cpu("9"))
    world.node("cool", usage=cpu("0.1"))
    world.node("warm", usage=cpu("1.5"))
    world.deployment("web", replicas=4)
    for name in ("a", "b"):  # cool stays the coolest with both: only their anti-affinity splits them
        world.pod(name, on="hot", owner="web", usage=cpu("1"), spec_extra=anti_affinity("web"))
    result = world.plan(settings())
    assert sorted(e.destination for e in result.evictions) == ["cool", "warm"]


def test_a_node_without_the_spread_topology_label_takes_no_pod_spread_over_it() -> None:
    world = World().node("hot", usage=cpu("9"), labels={ZONE: "c"})
    world.node("cool", usage=cpu("1"))
    world.node("warm", usage=cpu("2"), labels={ZONE: "b"})
    world.deployment("web", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("3"), spec_extra=spread(ZONE))
    assert [e.destination for e in world.plan(settings()).evictions] == ["warm"]


def pod_with(spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"containers": [{"name": "a", "ports": [{"hostPort": "8080"}]}]},
            "spec.containers[0].ports[0].hostPort",
        ),
        (
            {"containers": [{"name": "a", "ports": [{"hostPort": 70000}]}]},
            "spec.containers[0].ports[0].hostPort",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}
                ]
            },
            "spec.topologySpreadConstraints[0]",
        ),
        (
            anti_affinity("web", "") | {"containers": []},
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        ),
    ],
)
def test_a_pod_with_an_unreadable_placement_field_is_refused_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ObjectError, match=re.escape(f"Pod ns/p: {field}")):
        parse_pod(pod_with(spec))
