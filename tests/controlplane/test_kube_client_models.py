"""The official Kubernetes client's models deserialize what the real kube-apiserver answers, and what our
event recorder writes there: discovery, lists with paging and selectors, errors as Status objects,
evictions (dry-run, refused by a budget, done), Leases with their conflicts, and watches (events and
bookmarks).

The models are generated from the real API's OpenAPI schema, so these tests pin down the shapes the
product's own decoding assumes (the same fields, read with the official client as a second opinion).
The metrics API (``metrics.k8s.io``) needs a metrics-server this control plane does not run, and a
watch from compacted history needs a server whose watch cache has moved on: both are checked against
the stand-in in ``tests/integration/test_kube_client_models.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from descheduler.cluster.parse import parse_pod
from descheduler.kube.api import KubeApi
from descheduler.kube.events import EventRecorder
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.placed import module_namespace

pytestmark = pytest.mark.controlplane

DEDICATED = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}


@dataclass
class Models:
    """The module's namespace and nodes on the shared control plane."""

    plane: ControlPlane
    ns: str
    node_1: str
    node_2: str

    def pod(self, name: str) -> dict[str, Any] | None:
        found = self.plane.kubectl("get", "pod", name, "-n", self.ns, "-o", "name", check=False)
        return None if found.returncode else self.plane.get_json("pod", name, "-n", self.ns)


def _build(plane: ControlPlane, ns: str) -> Models:
    """Two nodes (one tainted), a priority class, a Deployment pinned to the tainted node, bare pods
    (one guarded by a budget that allows no disruption, one that never schedules), a StatefulSet and a
    ReplicationController with no pods, and a budget over the Deployment."""
    models = Models(plane, ns, f"{ns}-node-1", f"{ns}-node-2")
    plane.add_nodes(ns, [models.node_1], cpu="8")
    plane.add_nodes(ns, [models.node_2])
    plane.kubectl("taint", "nodes", models.node_1, "dedicated=db:NoSchedule")
    web = objects.deployment("web", ns, replicas=2, node_name=models.node_1)
    web["spec"]["template"]["spec"].update(
        priorityClassName=ns, tolerations=[{"key": "dedicated", "operator": "Exists"}]
    )
    pending = objects.bare_pod("pending", ns, "")
    del pending["spec"]["nodeName"]
    pending["spec"]["schedulerName"] = "no-such-scheduler"  # Pending for good, touched by nobody
    plane.apply(
        [
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": ns},
             "value": 100},
            web,
            objects.pdb("web-pdb", "web", max_unavailable=1),
            objects.bare_pod("guarded", ns, models.node_2),
            objects.pdb("guarded-pdb", "guarded", min_available=1),
            objects.bare_pod("victim", ns, models.node_2),
            objects.bare_pod("doomed", ns, models.node_2),
            pending,
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
             "spec": {"replicas": 0, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                      "template": objects.pod_template("db", ns)}},
            {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
             "spec": {"replicas": 2, "selector": {"app": "legacy"},
                      "template": objects.pod_template("legacy", ns)}},
        ],
        namespace=ns,
    )  # fmt: skip
    plane.wait_for(
        "the web and bare pods Running and both budgets computed",
        lambda: (
            len(plane.running_pods(ns)) == 5
            and [p["status"].get("disruptionsAllowed") for p in plane.get_json("pdb", "-n", ns)["items"]]
            == [0, 1]
        ),
        timeout_s=60,
    )
    return models


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Models]:
    with module_namespace(control_plane, "client-models") as ns:
        yield _build(control_plane, ns)


@pytest.fixture
def official(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=cfg)
    api_client = client.ApiClient(cfg)
    yield api_client
    api_client.close()


def status_of(api_client: client.ApiClient, error: ApiException) -> client.V1Status:
    status = api_client.deserialize(error.body, "V1Status", "application/json")
    assert isinstance(status, client.V1Status)
    return status


def test_discovery_documents_deserialize(cluster: Models, official: client.ApiClient) -> None:
    versions = client.CoreApi(official).get_api_versions()
    assert versions.versions == ["v1"]
    groups = client.ApisApi(official).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"apps", "policy", "events.k8s.io", "coordination.k8s.io", "resource.k8s.io"} <= names
    resources = client.CoreV1Api(official).get_api_resources()
    by_name = {r.name: r for r in resources.resources}
    assert by_name["pods/eviction"].kind == "Eviction" and by_name["pods"].namespaced
    assert client.VersionApi(official).get_code().git_version.startswith("v1.35.")


def test_lists_and_gets_of_every_cached_kind_deserialize(cluster: Models, official: client.ApiClient) -> None:
    core, apps, ns = client.CoreV1Api(official), client.AppsV1Api(official), cluster.ns
    nodes = core.list_node(label_selector=f"{objects.GROUP_LABEL}={ns}")
    assert [n.metadata.name for n in nodes.items] == [cluster.node_1, cluster.node_2]
    assert nodes.items[0].spec.taints == [client.V1Taint(**DEDICATED)]
    assert nodes.items[0].status.allocatable["cpu"] == "8"
    first = core.list_namespaced_pod(ns, limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    rest = core.list_namespaced_pod(ns, _continue=first.metadata._continue)
    names = [p.metadata.name for p in first.items + rest.items]
    assert names == sorted(names) and len(names) == 6 and {"guarded", "pending", "victim"} <= set(names)
    assert rest.metadata._continue is None
    (web_1, web_2) = core.list_namespaced_pod(ns, label_selector="app=web").items
    pod = core.read_namespaced_pod(web_1.metadata.name, ns)
    assert pod.spec.priority == 100 and pod.metadata.owner_references[0].controller
    assert pod.metadata.creation_timestamp is not None and pod.metadata.uid
    assert ns in {n.metadata.name for n in core.list_namespace().items}
    assert core.list_namespaced_replication_controller(ns).items[0].spec.replicas == 2
    assert apps.list_namespaced_deployment(ns).items[0].spec.replicas == 2
    assert apps.list_namespaced_replica_set(ns).items[0].metadata.owner_references[0].kind == "Deployment"
    assert apps.list_namespaced_stateful_set(ns).items[0].spec.service_name == "db"
    pdbs = client.PolicyV1Api(official).list_namespaced_pod_disruption_budget(ns)
    assert {p.metadata.name: p.status.disruptions_allowed for p in pdbs.items} == {
        "guarded-pdb": 0,
        "web-pdb": 1,
    }
    selected = core.list_namespaced_pod(
        ns, field_selector=f"spec.nodeName={cluster.node_1}", label_selector="app=web"
    )
    assert sorted(p.metadata.name for p in selected.items) == sorted(
        [web_1.metadata.name, web_2.metadata.name]
    )


def test_errors_deserialize_as_status_objects(cluster: Models, official: client.ApiClient) -> None:
    core = client.CoreV1Api(official)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", cluster.ns)
    status = status_of(official, missing.value)
    assert (missing.value.status, status.reason, status.message) == (404, "NotFound", 'pods "nope" not found')
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="guarded", namespace=cluster.ns))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction("guarded", cluster.ns, eviction)
    status = status_of(official, refused.value)
    assert refused.value.status == 429 and status.reason == "TooManyRequests"
    assert status.details.causes[0].reason == "DisruptionBudget"
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(cluster.ns, label_selector="app in (")
    assert bad.value.status == 400 and status_of(official, bad.value).reason == "BadRequest"


def test_eviction_delete_and_dry_run_answers_deserialize(cluster: Models, official: client.ApiClient) -> None:
    core = client.CoreV1Api(official)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="victim", namespace=cluster.ns))
    core.create_namespaced_pod_eviction("victim", cluster.ns, eviction, dry_run="All")
    assert cluster.pod("victim") is not None
    core.create_namespaced_pod_eviction("victim", cluster.ns, eviction)
    cluster.plane.wait_for("the evicted pod gone", lambda: cluster.pod("victim") is None, timeout_s=20)
    deleted = core.delete_namespaced_pod(
        "doomed", cluster.ns, body=client.V1DeleteOptions(grace_period_seconds=0)
    )
    assert deleted.metadata.name == "doomed"


def test_events_written_by_the_recorder_deserialize_in_both_apis(
    cluster: Models, official: client.ApiClient, admin_api: KubeApi
) -> None:
    recorder = EventRecorder(admin_api)
    pod = parse_pod(cluster.pod("guarded") or {})
    recorder.record(
        pod, "Normal", "Descheduled", f'Pod evicted from node "{cluster.node_2}" by the reason "hot"'
    )
    assert recorder.flush(5)
    recorder.close()
    (core_event,) = [
        e
        for e in client.CoreV1Api(official).list_namespaced_event(cluster.ns).items
        if e.reason == "Descheduled"
    ]
    assert core_event.involved_object.name == "guarded"
    # Only ours: events.k8s.io/v1 serves the controllers' core events with eventTime null, which this
    # client's EventsV1Event model refuses (a difference the stand-in hid: it held only our events).
    (new_event,) = (
        client.EventsV1Api(official)
        .list_namespaced_event(cluster.ns, field_selector="reason=Descheduled")
        .items
    )
    assert new_event.regarding.uid == pod.uid and new_event.note.startswith("Pod evicted")
    assert new_event.event_time is not None and new_event.reporting_controller == "load-aware-descheduler"


def test_lease_create_update_and_conflict_deserialize(cluster: Models, official: client.ApiClient) -> None:
    coordination = client.CoordinationV1Api(official)
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name="lock", namespace=cluster.ns),
        spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = coordination.create_namespaced_lease(cluster.ns, body)
    stale = created.metadata.resource_version
    created.spec.holder_identity = "b"
    updated = coordination.replace_namespaced_lease("lock", cluster.ns, created)
    assert updated.spec.holder_identity == "b" and updated.metadata.resource_version != stale
    created.metadata.resource_version = stale
    with pytest.raises(ApiException) as conflict:
        coordination.replace_namespaced_lease("lock", cluster.ns, created)
    assert conflict.value.status == 409 and status_of(official, conflict.value).reason == "Conflict"


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def test_watch_events_and_bookmarks_deserialize(cluster: Models, official: client.ApiClient) -> None:
    """A pod's life as the real server tells it: a delete is a MODIFIED (deletionTimestamp) then a
    DELETED, even with no grace period. The real server sends a timed bookmark only about once a minute
    (the stand-in sent them on demand), so the bookmark here is the one that ends a watch-list's initial
    events, which it always sends. A watch from a compacted resourceVersion (410 Gone) stays on the
    stand-in: a young real server replays such a version from its watch cache instead."""
    core, ns = client.CoreV1Api(official), cluster.ns
    start_rv = core.list_namespaced_pod(ns).metadata.resource_version
    body = objects.bare_pod("watched", ns, "")
    del body["spec"]["nodeName"]
    body["spec"]["schedulerName"] = "no-such-scheduler"
    core.create_namespaced_pod(ns, body)
    core.patch_namespaced_pod("watched", ns, {"metadata": {"labels": {"app": "watched", "v": "2"}}})
    core.delete_namespaced_pod("watched", ns, grace_period_seconds=0)
    seen = list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            ns,
            field_selector="metadata.name=watched",
            resource_version=start_rv,
            timeout_seconds=1,
        )
    )
    assert [e["type"] for e in seen] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert all(isinstance(e["object"], client.V1Pod) for e in seen)
    assert seen[1]["object"].metadata.labels["v"] == "2"
    assert seen[2]["object"].metadata.deletion_timestamp is not None
    initial: list[tuple[str, Any]] = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    ):
        initial.append((event["type"], event["object"]))
        if event["type"] == "BOOKMARK":
            break
    kinds = [t for t, _ in initial]
    assert kinds == ["ADDED"] * (len(kinds) - 1) + ["BOOKMARK"] and len(kinds) > 1
    assert all(isinstance(obj, client.V1Pod) for t, obj in initial if t != "BOOKMARK")
    bookmark = initial[-1][1]  # the client leaves bookmarks undecoded
    assert bookmark["metadata"]["annotations"][INITIAL_EVENTS_END] == "true"
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(seen[-1]["object"].metadata.resource_version)
    # The watch cache serves recent versions (start_rv still is one); an older one than it holds is
    # read from etcd, which on a young server still has it: gone only once etcd has compacted.
