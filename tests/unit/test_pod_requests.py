"""A pod's requests are what the kube-scheduler counts: sidecars, init containers, overhead, pod level."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.cluster.parse import ObjectError, parse_pod
from descheduler.planner import reasons
from tests.unit.builders import World, cpu, evicted, settings, skip_codes

GI = 2**30


def container(name: str, requests: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A container as a Pod manifest writes it; ``extra`` adds ``restartPolicy`` or ``resources``."""
    out: dict[str, Any] = {"name": name, "image": f"{name}:1"}
    if requests is not None:
        out["resources"] = {"requests": requests}
    out.update(extra)
    return out


def sidecar(name: str, requests: dict[str, str]) -> dict[str, Any]:
    """A native sidecar: an init container that keeps running (``restartPolicy: Always``)."""
    return container(name, requests, restartPolicy="Always")


def pod_object(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
        "spec": {"nodeName": "n1", **spec},
        "status": {"phase": "Running", **(status or {})},
    }


def requests_of(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, int]:
    return dict(parse_pod(pod_object(spec, status)).requests)


APP = container("app", {"cpu": "1500m", "memory": "1Gi"})


@pytest.mark.parametrize(
    ("case", "spec", "expected"),
    [
        ("app containers add up", {"containers": [APP, container("log", {"cpu": "250m"})]}, {"cpu": 1750}),
        (
            "a larger init container sets the floor",
            {"containers": [APP], "initContainers": [container("migrate", {"cpu": "3"})]},
            {"cpu": 3000},
        ),
        (
            "a smaller init container changes nothing",
            {"containers": [APP], "initContainers": [container("migrate", {"cpu": "1"})]},
            {"cpu": 1500},
        ),
        (
            "a native sidecar runs beside the app containers",
            {"containers": [APP], "initContainers": [sidecar("proxy", {"cpu": "500m"})]},
            {"cpu": 2000},
        ),
        (
            "an init container after a sidecar runs beside it",
            {
                "containers": [container("app", {"cpu": "500m"})],
                "initContainers": [sidecar("proxy", {"cpu": "1"}), container("migrate", {"cpu": "2"})],
            },
            {"cpu": 3000},
        ),
        (
            "an init container before a sidecar runs alone",
            {
                "containers": [container("app", {"cpu": "500m"})],
                "initContainers": [container("migrate", {"cpu": "2"}), sidecar("proxy", {"cpu": "1"})],
            },
            {"cpu": 2000},
        ),
        (
            "init containers are compared one by one, never summed",
            {
                "containers": [container("app", {"cpu": "100m"})],
                "initContainers": [container("a", {"cpu": "1"}), container("b", {"cpu": "2"})],
            },
            {"cpu": 2000},
        ),
        (
            "overhead comes on top",
            {
                "containers": [APP],
                "initContainers": [sidecar("proxy", {"cpu": "500m"})],
                "overhead": {"cpu": "250m"},
            },
            {"cpu": 2250},
        ),
        (
            "unset container requests default to its limits",
            {"containers": [container("app", resources={"limits": {"cpu": "2", "memory": "1Gi"}})]},
            {"cpu": 2000},
        ),
        (
            "pod-level requests replace the containers' cpu and memory",
            {"containers": [APP], "resources": {"requests": {"cpu": "4", "memory": "2Gi"}}},
            {"cpu": 4000, "memory": 2 * GI},
        ),
        (
            "pod-level requests plus overhead",
            {"containers": [APP], "resources": {"requests": {"cpu": "4"}}, "overhead": {"cpu": "100m"}},
            {"cpu": 4100},
        ),
        (
            "pod-level limits alone default the requests when no container asks",
            {"containers": [container("app")], "resources": {"limits": {"cpu": "3", "memory": "1Gi"}}},
            {"cpu": 3000, "memory": GI},
        ),
        (
            "pod-level limits leave a resource some container requests to the containers",
            {"containers": [APP], "resources": {"limits": {"cpu": "3", "memory": "4Gi"}}},
            {"cpu": 1500, "memory": GI},
        ),
    ],
)
def test_pod_requests_are_what_the_scheduler_counts(
    case: str, spec: dict[str, Any], expected: dict[str, int]
) -> None:
    got = requests_of(spec)
    assert {name: got.get(name, 0) for name in expected} == expected, case


def test_pod_level_requests_leave_other_resources_to_the_containers() -> None:
    spec = {
        "containers": [container("app", {"cpu": "1", "ephemeral-storage": "1Gi"})],
        "resources": {"requests": {"cpu": "2"}},
    }
    assert requests_of(spec) == {"cpu": 2000, "ephemeral-storage": GI}


RESIZED = {"containers": [container("app", {"cpu": "1"})]}


@pytest.mark.parametrize(
    ("case", "status", "expected_cpu"),
    [
        (
            "no resize: the spec",
            {"containerStatuses": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
            1000,
        ),
        (
            "shrinking: the kubelet still holds the larger allocation",
            {"containerStatuses": [{"name": "app", "allocatedResources": {"cpu": "3"}}]},
            3000,
        ),
        (
            "growing: the larger spec",
            {"containerStatuses": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]},
            1000,
        ),
        (
            "an infeasible resize: what actually runs, not the spec",
            {
                "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
                "containerStatuses": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}],
            },
            500,
        ),
    ],
)
def test_an_in_place_resize_counts_the_larger_of_spec_and_status(
    case: str, status: dict[str, Any], expected_cpu: int
) -> None:
    assert requests_of(RESIZED, status)["cpu"] == expected_cpu, case


def test_bad_requests_name_the_container_field() -> None:
    with pytest.raises(ObjectError, match=r"Pod ns/p: spec\.initContainers\[0\]\.resources\.requests\.cpu"):
        requests_of({"containers": [APP], "initContainers": [sidecar("proxy", {"cpu": "lots"})]})
    with pytest.raises(ObjectError, match=r"spec\.initContainers must be a list"):
        requests_of({"containers": [APP], "initContainers": {"proxy": {}}})


def sidecar_world(sidecar_cpu: str) -> World:
    """A hotspot whose one movable pod asks 1500m for its app container plus a sidecar; the only low
    node has 1500m of allocatable cpu not yet requested."""
    world = World().node("hot", cpu="10", usage=cpu("9")).node("cool", cpu="4", usage=cpu("0"))
    world.deployment("web", replicas=4)
    world.deployment("filler", replicas=4)
    world.pod("filler-1", on="cool", owner="filler", requests={"cpu": "2500m"}, usage=cpu("0"))
    world.pod(
        "web-1",
        on="hot",
        owner="web",
        requests={"cpu": "1500m"},
        usage=cpu("3"),
        spec_extra={"initContainers": [sidecar("proxy", {"cpu": sidecar_cpu})]},
    )
    return world


@pytest.mark.parametrize(("sidecar_cpu", "moves"), [("0", True), ("500m", False)])
def test_a_pod_whose_sidecar_does_not_fit_the_destination_stays(sidecar_cpu: str, moves: bool) -> None:
    result = sidecar_world(sidecar_cpu).plan(settings(low={"cpu": 80}, high={"cpu": 85}))
    assert evicted(result) == (["default/web-1"] if moves else [])
    if not moves:
        assert skip_codes(result)["default/web-1"] == reasons.NO_DESTINATION
