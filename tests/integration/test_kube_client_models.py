"""The official Kubernetes client's models deserialize everything the test API server answers.

The models are generated from the real API's OpenAPI schema (and validate types), so a field that is
missing, misnamed or of the wrong type in the server's answers fails here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from descheduler.cluster.parse import parse_pod
from descheduler.kube.api import KubeApi
from descheduler.kube.events import EventRecorder
from tests.apiserver import ApiServer, objects

pytestmark = pytest.mark.integration


@pytest.fixture
def official(apiserver: ApiServer) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(apiserver.kubeconfig_path), client_configuration=cfg)
    api_client = client.ApiClient(cfg)
    yield api_client
    api_client.close()


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    for obj in (
        objects.namespace("default"),
        objects.node("node-1", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
        objects.node("node-2"),
        objects.pod("web-1", node="node-1", priority=100),
        objects.pod("web-2", node="node-2"),
        objects.pod("pending", phase="Pending"),
        objects.pdb("web-pdb", disruptions_allowed=1),
        objects.deployment("web"),
        objects.replicaset("web-rs", deployment="web"),
        objects.statefulset("db"),
        objects.replicationcontroller("legacy"),
    ):
        apiserver.create(obj)
    return apiserver


def status_of(api_client: client.ApiClient, error: ApiException) -> client.V1Status:
    status = api_client.deserialize(error.body, "V1Status", "application/json")
    assert isinstance(status, client.V1Status)
    return status


def test_discovery_documents_deserialize(cluster: ApiServer, official: client.ApiClient) -> None:
    versions = client.CoreApi(official).get_api_versions()
    assert versions.versions == ["v1"]
    groups = client.ApisApi(official).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"apps", "policy", "events.k8s.io", "coordination.k8s.io", "metrics.k8s.io"} <= names
    resources = client.CoreV1Api(official).get_api_resources()
    by_name = {r.name: r for r in resources.resources}
    assert by_name["pods/eviction"].kind == "Eviction" and by_name["pods"].namespaced
    assert client.VersionApi(official).get_code().git_version == "v1.32.4"


def test_lists_and_gets_of_every_cached_kind_deserialize(
    cluster: ApiServer, official: client.ApiClient
) -> None:
    core, apps = client.CoreV1Api(official), client.AppsV1Api(official)
    nodes = core.list_node()
    assert [n.metadata.name for n in nodes.items] == ["node-1", "node-2"]
    assert nodes.items[0].spec.taints[0].effect == "NoSchedule"
    assert nodes.items[0].status.allocatable["cpu"] == "8"
    first = core.list_pod_for_all_namespaces(limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    rest = core.list_pod_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in first.items + rest.items] == ["pending", "web-1", "web-2"]
    assert rest.metadata._continue is None
    pod = core.read_namespaced_pod("web-1", "default")
    assert pod.spec.priority == 100 and pod.metadata.owner_references[0].controller
    assert pod.metadata.creation_timestamp is not None and pod.metadata.uid
    assert core.list_namespace().items[0].metadata.name == "default"
    assert core.list_replication_controller_for_all_namespaces().items[0].spec.replicas == 2
    assert apps.list_deployment_for_all_namespaces().items[0].spec.replicas == 3
    assert (
        apps.list_replica_set_for_all_namespaces().items[0].metadata.owner_references[0].kind == "Deployment"
    )
    assert apps.list_stateful_set_for_all_namespaces().items[0].spec.service_name == "db"
    pdbs = client.PolicyV1Api(official).list_pod_disruption_budget_for_all_namespaces()
    assert pdbs.items[0].status.disruptions_allowed == 1
    selected = core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=node-1", label_selector="app=web"
    )
    assert [p.metadata.name for p in selected.items] == ["web-1"]


def test_errors_deserialize_as_status_objects(cluster: ApiServer, official: client.ApiClient) -> None:
    core = client.CoreV1Api(official)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", "default")
    status = status_of(official, missing.value)
    assert (missing.value.status, status.reason, status.message) == (404, "NotFound", 'pods "nope" not found')
    cluster.patch(
        "poddisruptionbudgets", "default", "web-pdb", {"status": {"disruptionsAllowed": 0}}, group="policy"
    )
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="web-1", namespace="default"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction("web-1", "default", eviction)
    status = status_of(official, refused.value)
    assert refused.value.status == 429 and status.reason == "TooManyRequests"
    assert status.details.causes[0].reason == "DisruptionBudget"
    with pytest.raises(ApiException) as bad:
        core.list_pod_for_all_namespaces(label_selector="app in (")
    assert bad.value.status == 400 and status_of(official, bad.value).reason == "BadRequest"


def test_eviction_delete_and_dry_run_answers_deserialize(
    cluster: ApiServer, official: client.ApiClient
) -> None:
    core = client.CoreV1Api(official)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="web-1", namespace="default"))
    core.create_namespaced_pod_eviction("web-1", "default", eviction, dry_run="All")
    assert cluster.get("pods", "default", "web-1") is not None
    core.create_namespaced_pod_eviction("web-1", "default", eviction)
    assert cluster.get("pods", "default", "web-1") is None
    deleted = core.delete_namespaced_pod(
        "web-2", "default", body=client.V1DeleteOptions(grace_period_seconds=0)
    )
    assert deleted.metadata.name == "web-2"


def test_events_written_by_the_recorder_deserialize_in_both_apis(
    cluster: ApiServer, official: client.ApiClient, kube_api: KubeApi
) -> None:
    recorder = EventRecorder(kube_api)
    pod = parse_pod(cluster.get("pods", "default", "web-1") or {})
    recorder.record(pod, "Normal", "Descheduled", 'Pod evicted from node "node-1" by the reason "hot"')
    assert recorder.flush(5)
    recorder.close()
    core_event = client.CoreV1Api(official).list_namespaced_event("default").items[0]
    assert core_event.involved_object.name == "web-1" and core_event.reason == "Descheduled"
    new_event = client.EventsV1Api(official).list_namespaced_event("default").items[0]
    assert new_event.regarding.uid == pod.uid and new_event.note.startswith("Pod evicted")
    assert new_event.event_time is not None and new_event.reporting_controller == "load-aware-descheduler"


def test_lease_create_update_and_conflict_deserialize(cluster: ApiServer, official: client.ApiClient) -> None:
    coordination = client.CoordinationV1Api(official)
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name="lock", namespace="kube-system"),
        spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = coordination.create_namespaced_lease("kube-system", body)
    stale = created.metadata.resource_version
    created.spec.holder_identity = "b"
    updated = coordination.replace_namespaced_lease("lock", "kube-system", created)
    assert updated.spec.holder_identity == "b" and updated.metadata.resource_version != stale
    created.metadata.resource_version = stale
    with pytest.raises(ApiException) as conflict:
        coordination.replace_namespaced_lease("lock", "kube-system", created)
    assert conflict.value.status == 409 and status_of(official, conflict.value).reason == "Conflict"


def test_watch_events_bookmarks_and_gone_deserialize(cluster: ApiServer, official: client.ApiClient) -> None:
    core = client.CoreV1Api(official)
    start_rv = core.list_pod_for_all_namespaces().metadata.resource_version
    cluster.create(objects.pod("web-3", node="node-2"))
    cluster.patch("pods", "default", "web-3", {"metadata": {"labels": {"app": "web", "v": "2"}}})
    cluster.delete("pods", "default", "web-3")
    threading.Timer(0.3, cluster.send_bookmarks).start()
    seen: list[tuple[str, Any]] = []
    for event in watch.Watch().stream(
        core.list_pod_for_all_namespaces,
        resource_version=start_rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    ):
        seen.append((event["type"], event["object"]))
    kinds = [t for t, _ in seen]
    assert kinds[:3] == ["ADDED", "MODIFIED", "DELETED"] and "BOOKMARK" in kinds
    assert all(isinstance(obj, client.V1Pod) for t, obj in seen if t != "BOOKMARK")
    bookmark = next(obj for t, obj in seen if t == "BOOKMARK")  # the client leaves bookmarks undecoded
    assert int(bookmark["metadata"]["resourceVersion"]) > int(start_rv)
    assert seen[1][1].metadata.labels["v"] == "2"
    cluster.compact()
    started = time.monotonic()
    with pytest.raises(ApiException) as gone:
        for _ in watch.Watch().stream(
            core.list_pod_for_all_namespaces, resource_version=start_rv, timeout_seconds=1
        ):
            pass
    assert gone.value.status == 410
    assert time.monotonic() - started < 1


def test_metrics_api_answers_match_the_metrics_server_shape(
    cluster: ApiServer, official: client.ApiClient
) -> None:
    cluster.set_node_metrics("node-1", {"cpu": "1250m", "memory": "2Gi"})
    cluster.set_pod_metrics("default", "web-1", {"app": {"cpu": "10m", "memory": "20Mi"}})
    custom = client.CustomObjectsApi(official)
    nodes = custom.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
    assert nodes["kind"] == "NodeMetricsList" and nodes["items"][0]["usage"] == {
        "cpu": "1250m",
        "memory": "2Gi",
    }
    pods = custom.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", "default", "pods")
    assert pods["items"][0]["containers"][0]["usage"]["cpu"] == "10m"
    assert "resourceVersion" not in pods["items"][0]["metadata"]
