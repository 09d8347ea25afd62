"""DRA objects in the watch cache, against the test API server: ResourceSlices, ResourceClaims (every
namespace) and DeviceClasses are listed, watched and parsed into the snapshot only when the cache is asked
for them (the service asks when ``evictResourceClaimPods`` is on); one the parser refuses is left out and
named like any other object. Before a device-holding pod is evicted its claims are read again
(``ServerReader.read_claims``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from descheduler.config.load import load_config_document
from descheduler.kube.api import KubeApi
from descheduler.kube.cache import DEFAULT_RESOURCES, DRA_RESOURCES, ClusterCache
from descheduler.kube.verify import ServerReader
from descheduler.service.process import cache_resources
from tests.apiserver import ApiServer, Fault
from tests.apiserver import objects as api_objects
from tests.apiserver.waiting import eventually
from tests.controlplane import objects
from tests.support.service import Ports, service_config

pytestmark = pytest.mark.integration

GROUP = "dra"


def allocated(claim: dict[str, Any], node: str, device: str, pod_uid: str) -> dict[str, Any]:
    """``claim`` with the status kube-scheduler writes: one device of ``node``'s pool, reserved for a pod."""
    claim["metadata"]["uid"] = f"uid-{claim['metadata']['name']}"
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": objects.DRIVER, "pool": node, "device": device}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": pod_uid}],
    }
    return claim


def seed(server: ApiServer) -> None:
    server.create(api_objects.namespace("default"))
    server.create(api_objects.namespace("team-a"))
    server.create(api_objects.node("node-0"))
    server.create(objects.device_class("gpu"))
    server.create(
        objects.resource_slice(
            "node-0-gpus", "node-0", [objects.device(f"gpu-{i}", index=i) for i in range(2)], group=GROUP
        )
    )
    broken = objects.resource_slice("broken", "node-0", [objects.device("gpu-9")], group=GROUP)
    del broken["spec"]["driver"]
    server.create(broken)
    server.create(
        {**objects.resource_claim("shared", "gpu"), "metadata": {"name": "shared", "namespace": "team-a"}}
    )
    server.create(allocated(objects.resource_claim("trainer-0-gpu", "gpu"), "node-0", "gpu-1", "pod-uid-0"))


@pytest.fixture
def dra_cache(kube_api: KubeApi) -> Iterator[ClusterCache]:
    c = ClusterCache(
        kube_api, resources=DEFAULT_RESOURCES | DRA_RESOURCES, page_size=1, watch_timeout=30,
        backoff_initial=0.2, backoff_max=1.0,
    )  # fmt: skip
    yield c
    c.stop()


def test_slices_claims_of_every_namespace_and_classes_are_listed_and_parsed(
    apiserver: ApiServer, dra_cache: ClusterCache
) -> None:
    seed(apiserver)
    dra_cache.start()
    assert dra_cache.wait_synced(10)
    snap = dra_cache.snapshot()
    (slice_,) = snap.resource_slices
    assert (slice_.name, slice_.driver, slice_.pool, slice_.node_name) == (
        "node-0-gpus",
        objects.DRIVER,
        "node-0",
        "node-0",
    )
    assert [d.name for d in slice_.devices] == ["gpu-0", "gpu-1"]
    assert [c.name for c in snap.device_classes] == ["gpu"]
    assert snap.device_classes[0].selectors == (f'device.driver == "{objects.DRIVER}"',)
    claims = {c.key: c for c in snap.resource_claims}
    assert set(claims) == {"default/trainer-0-gpu", "team-a/shared"}
    held = claims["default/trainer-0-gpu"]
    assert held.allocated and held.node_name == "node-0" and held.reserved_for == ("pod-uid-0",)
    assert [(r.pool, r.device) for r in held.results] == [("node-0", "gpu-1")]
    assert not claims["team-a/shared"].allocated
    # The broken slice is left out and named; the good objects are kept.
    assert list(dra_cache.object_errors) == ["ResourceSlice broken"]
    assert "driver" in dra_cache.object_errors["ResourceSlice broken"]
    # Claims are listed across namespaces, in pages.
    lists = apiserver.requests_for(verb="list", resource="resourceclaims")
    assert [r.path for r in lists] == ["/apis/resource.k8s.io/v1/resourceclaims"] * 2
    assert set(dra_cache.ages(time.time())) >= DRA_RESOURCES


def test_changes_reach_the_snapshot_through_the_watch(apiserver: ApiServer, dra_cache: ClusterCache) -> None:
    seed(apiserver)
    dra_cache.start()
    assert dra_cache.wait_synced(10)
    apiserver.patch(
        "resourceclaims", "default", "trainer-0-gpu", {"status": {"allocation": None, "reservedFor": None}},
        group="resource.k8s.io",
    )  # fmt: skip
    apiserver.delete("deviceclasses", "", "gpu", group="resource.k8s.io")
    fixed = objects.resource_slice("broken", "node-0", [objects.device("gpu-9")], group=GROUP)
    apiserver.replace({**fixed, "metadata": {**fixed["metadata"], "resourceVersion": None}})

    def claim() -> Any:
        return next(c for c in dra_cache.snapshot().resource_claims if c.name == "trainer-0-gpu")

    eventually(lambda: not claim().allocated, what="the claim's allocation gone")
    eventually(lambda: dra_cache.snapshot().device_classes == (), what="the class deleted")
    eventually(lambda: len(dra_cache.snapshot().resource_slices) == 2, what="the fixed slice kept")
    assert dra_cache.object_errors == {}


def test_the_default_cache_neither_lists_nor_watches_them(apiserver: ApiServer, kube_api: KubeApi) -> None:
    seed(apiserver)
    c = ClusterCache(kube_api, watch_timeout=30, backoff_initial=0.2, backoff_max=1.0)
    c.start()
    try:
        assert c.wait_synced(10)
        snap = c.snapshot()
        eventually(
            lambda: apiserver.open_watches() == len(DEFAULT_RESOURCES), what="every reflector watching"
        )
    finally:
        c.stop()
    assert (snap.resource_slices, snap.resource_claims, snap.device_classes) == ((), (), ())
    assert [r.describe() for r in apiserver.requests if r.group == "resource.k8s.io"] == []


@pytest.mark.parametrize("evict_claim_pods", [True, False])
def test_the_service_watches_them_only_when_resource_claim_pods_may_move(evict_claim_pods: bool) -> None:
    doc = service_config(prometheus_url="http://127.0.0.1:9", ports=Ports.free())
    doc["profiles"][0]["pluginConfig"][1]["args"]["evictResourceClaimPods"] = evict_claim_pods
    wanted = cache_resources(load_config_document(doc))
    assert wanted & DRA_RESOURCES == (DRA_RESOURCES if evict_claim_pods else frozenset())
    assert wanted >= DEFAULT_RESOURCES


def test_read_claims_gets_each_claim_from_the_server_and_says_which_are_gone(
    apiserver: ApiServer, kube_api: KubeApi
) -> None:
    seed(apiserver)
    reader = ServerReader(kube_api)
    view = reader.read_claims("default", ["trainer-0-gpu", "gone"], time.monotonic() + 10)
    assert view.problem == "" and view.requests == 2 and reader.requests == 2
    held = view.claims["trainer-0-gpu"]
    assert held is not None and held.allocated and held.reserved_for == ("pod-uid-0",)
    assert view.claims["gone"] is None
    lists = apiserver.requests_for(verb="list", resource="resourceclaims")
    assert [(r.path, r.query["fieldSelector"]) for r in lists] == [
        ("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", "metadata.name=trainer-0-gpu"),
        ("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", "metadata.name=gone"),
    ]
    assert apiserver.requests_for(verb="get") == []  # the shipped RBAC grants no get on claims


def test_read_claims_reports_a_failed_read_as_a_problem(apiserver: ApiServer, kube_api: KubeApi) -> None:
    seed(apiserver)
    apiserver.inject(Fault(verb="list", resource="resourceclaims", status=500, message="etcd down"))
    view = ServerReader(kube_api).read_claims("default", ["trainer-0-gpu"], time.monotonic() + 10)
    assert "etcd down" in view.problem and view.requests == 1


def test_a_server_without_the_dra_api_leaves_them_empty_and_the_cache_synced(
    apiserver: ApiServer, dra_cache: ClusterCache
) -> None:
    """A cluster before resource.k8s.io/v1 answers 404: the cycles go on (no stalled sync) with no claims,
    so a pod holding claims stays put."""
    seed(apiserver)
    apiserver.inject(
        Fault(group="resource.k8s.io", status=404, message="the server could not find the resource")
    )
    dra_cache.start()
    assert dra_cache.wait_synced(10), "a 404 for a DRA kind must not hold the whole cache unsynced"
    snap = dra_cache.snapshot()
    assert (snap.resource_slices, snap.resource_claims, snap.device_classes) == ((), (), ())
    assert [n.name for n in snap.nodes] == ["node-0"]
