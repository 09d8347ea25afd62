"""The shipped RBAC and DRA objects on a real API server: the descheduler's ServiceAccount (a token from
the TokenRequest API, the shipped ClusterRole) may list and watch ResourceSlices, ResourceClaims and
DeviceClasses, and every write to them is refused by the server itself (403), a claim's status included:
slices and classes belong to drivers and admins, claims to the namespaces that use them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from descheduler.kube.errors import ApiStatusError
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import install_manifests

pytestmark = pytest.mark.controlplane

API = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def descheduler_api(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeApi]:
    """Our client as the descheduler's ServiceAccount, with exactly the shipped RBAC."""
    docs = install_manifests(control_plane)
    (account,) = [d["metadata"] for d in docs if d["kind"] == "ServiceAccount"]
    path = tmp_path_factory.mktemp("dra-identity") / "kubeconfig"
    api = connect(
        str(control_plane.token_kubeconfig(account["namespace"], account["name"], path)), qps=100, burst=100
    )
    yield api
    api.close()


@pytest.fixture
def dra_objects(control_plane: ControlPlane, namespace: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """One object of each kind, made by the admin: kind -> (its collection's path, the object)."""
    node = f"{namespace}-n"
    control_plane.add_nodes(namespace, [node])
    gpu_class = objects.device_class(f"{namespace}-gpu")
    slice_ = objects.resource_slice(
        f"{node}-gpus", node, [objects.device("gpu-0")], group=namespace,
        node_uid=control_plane.get_json("node", node)["metadata"]["uid"],
    )  # fmt: skip
    claim = objects.resource_claim("shared", gpu_class["metadata"]["name"])
    control_plane.apply([gpu_class, slice_])
    control_plane.apply([claim], namespace=namespace)
    return {
        "DeviceClass": (f"{API}/deviceclasses", gpu_class),
        "ResourceSlice": (f"{API}/resourceslices", slice_),
        "ResourceClaim": (f"{API}/namespaces/{namespace}/resourceclaims", claim),
    }


def status_of(call: Any) -> int:
    try:
        call()
    except ApiStatusError as exc:
        return exc.status
    return 200


KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim")


@pytest.mark.parametrize("kind", KINDS)
def test_the_descheduler_may_list_and_watch(
    descheduler_api: KubeApi, dra_objects: dict[str, tuple[str, dict[str, Any]]], kind: str
) -> None:
    collection, obj = dra_objects[kind]
    listed = descheduler_api.get(collection)
    assert obj["metadata"]["name"] in {i["metadata"]["name"] for i in listed["items"]}
    everywhere = f"{API}/resourceclaims" if kind == "ResourceClaim" else collection
    stream = descheduler_api.watch(
        everywhere,
        {"resourceVersion": listed["metadata"]["resourceVersion"], "timeoutSeconds": 1},
        read_timeout=5,
    )
    try:
        # Opened (a refusal raises) and ended by the server; claims of other tests' namespaces may change
        # meanwhile, but no event may be an ERROR.
        kinds = {json.loads(line)["type"] for line in stream.lines()}
        assert kinds <= {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"}, kinds
    finally:
        stream.close()


@pytest.mark.parametrize("kind", KINDS)
def test_every_write_is_refused_by_the_server(
    descheduler_api: KubeApi, dra_objects: dict[str, tuple[str, dict[str, Any]]], kind: str
) -> None:
    collection, obj = dra_objects[kind]
    item = f"{collection}/{obj['metadata']['name']}"
    fresh = {**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata']['name']}-2"}}
    fresh["metadata"].pop("ownerReferences", None)
    merge = "application/merge-patch+json"
    attempts = {
        "get": lambda: descheduler_api.get(item),
        "create": lambda: descheduler_api.request("POST", collection, body=fresh),
        "update": lambda: descheduler_api.request("PUT", item, body=obj),
        "patch": lambda: descheduler_api.request(
            "PATCH", item, body={"metadata": {"labels": {"x": "y"}}}, content_type=merge
        ),
        "delete": lambda: descheduler_api.request("DELETE", item),
        "deletecollection": lambda: descheduler_api.request("DELETE", collection),
    }
    assert {verb: status_of(call) for verb, call in attempts.items()} == dict.fromkeys(attempts, 403)


def test_a_claims_status_cannot_be_written(
    control_plane: ControlPlane, descheduler_api: KubeApi, dra_objects: dict[str, tuple[str, dict[str, Any]]]
) -> None:
    collection, obj = dra_objects["ResourceClaim"]
    item = f"{collection}/{obj['metadata']['name']}/status"
    namespace = collection.split("/")[5]
    claim = control_plane.get_json("resourceclaim", obj["metadata"]["name"], "-n", namespace)
    claim["status"] = {"reservedFor": [{"resource": "pods", "name": "someone", "uid": "0000"}]}
    merge = "application/merge-patch+json"
    attempts = {
        "update": lambda: descheduler_api.request("PUT", item, body=claim),
        "patch": lambda: descheduler_api.request(
            "PATCH", item, body={"status": claim["status"]}, content_type=merge
        ),
    }
    assert {verb: status_of(call) for verb, call in attempts.items()} == {"update": 403, "patch": 403}
    after = control_plane.get_json("resourceclaim", obj["metadata"]["name"], "-n", namespace)
    assert not after.get("status", {}).get("reservedFor")
