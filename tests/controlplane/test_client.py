"""Our Kubernetes client against the real kube-apiserver: the list-then-watch cache, eviction outcomes
with budgets the real disruption controller computed, server-side dry-run, and Events as kubectl shows
them. These are the behaviours the stand-in server only imitates."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from descheduler.cluster.parse import parse_pod
from descheduler.cluster.types import Pod
from descheduler.kube.api import KubeApi
from descheduler.kube.cache import ClusterCache
from descheduler.kube.events import EventRecorder
from descheduler.kube.evict import Evictor
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane

pytestmark = pytest.mark.controlplane


@pytest.fixture
def nodes(control_plane: ControlPlane, namespace: str) -> list[str]:
    names = [f"{namespace}-n{i}" for i in range(2)]
    control_plane.add_nodes(namespace, names)
    return names


@pytest.fixture
def cache(admin_api: KubeApi) -> Iterator[ClusterCache]:
    c = ClusterCache(admin_api, page_size=7, watch_timeout=3, backoff_initial=0.2, backoff_max=1.0)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def pods_in(c: ClusterCache, namespace: str) -> set[str]:
    return {p.name for p in c.snapshot().pods if p.namespace == namespace}


def live_pod(plane: ControlPlane, namespace: str, name: str) -> Pod:
    return parse_pod(plane.get_json("pod", name, "-n", namespace))


def list_requests(plane: ControlPlane, resource: str) -> float:
    """Cluster-scoped LISTs of ``resource`` the API server has answered so far (from its /metrics)."""
    text = plane.kubectl("get", "--raw", "/metrics").stdout
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'verb="LIST"' in line
            and f'resource="{resource}"' in line
            and 'scope="cluster"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_the_cache_lists_in_pages_then_follows_creates_and_deletes_through_the_watch(
    control_plane: ControlPlane, namespace: str, nodes: list[str], cache: ClusterCache
) -> None:
    control_plane.apply(
        [objects.bare_pod(f"p{i:02d}", namespace, nodes[i % 2]) for i in range(23)], namespace=namespace
    )
    assert cache.wait_synced(30)
    control_plane.wait_for("23 pods in the cache", lambda: len(pods_in(cache, namespace)) == 23)
    control_plane.apply([objects.bare_pod("late", namespace, nodes[0])], namespace=namespace)
    control_plane.kubectl("delete", "pod", "p00", "-n", namespace, "--wait=true")
    control_plane.wait_for(
        "the watch to deliver the create and the delete",
        lambda: "late" in pods_in(cache, namespace) and "p00" not in pods_in(cache, namespace),
    )
    snap = cache.snapshot()
    pod = next(p for p in snap.pods if p.namespace == namespace and p.name == "late")
    assert pod.node_name == nodes[0]
    assert {n.name for n in snap.nodes} >= set(nodes)


def test_watches_that_end_resume_from_their_resource_version_without_listing_again(
    control_plane: ControlPlane, namespace: str, nodes: list[str], cache: ClusterCache
) -> None:
    assert cache.wait_synced(30)
    before = list_requests(control_plane, "pods")
    # The watch times out every 3 s; across several restarts changes keep arriving with no new LIST.
    for i in range(3):
        control_plane.apply([objects.bare_pod(f"w{i}", namespace, nodes[0])], namespace=namespace)
        control_plane.wait_for(f"pod w{i} in the cache", lambda i=i: f"w{i}" in pods_in(cache, namespace))
        time.sleep(3.5)
    assert list_requests(control_plane, "pods") == before


def test_a_terminating_pod_is_seen_with_its_deletion_timestamp_until_kwok_removes_it(
    control_plane: ControlPlane, namespace: str, nodes: list[str], cache: ClusterCache
) -> None:
    assert cache.wait_synced(30)
    control_plane.apply([objects.bare_pod("short", namespace, nodes[0])], namespace=namespace)
    control_plane.wait_for("short Running", lambda: control_plane.running_pods(namespace))
    control_plane.kubectl("delete", "pod", "short", "-n", namespace, "--wait=false")
    control_plane.wait_for("the pod to leave the cache", lambda: "short" not in pods_in(cache, namespace))


# --- evictions -----------------------------------------------------------------------------------------


@pytest.fixture
def recorder(admin_api: KubeApi) -> Iterator[EventRecorder]:
    rec = EventRecorder(admin_api)
    try:
        yield rec
    finally:
        rec.close()


def evictor(api: KubeApi, recorder: EventRecorder, **kwargs: Any) -> Evictor:
    options: dict[str, Any] = {"evict_qps": 0, "evict_burst": 1, "dry_run": False, "events": recorder}
    return Evictor(api, **(options | kwargs))


def web_with_budget(
    plane: ControlPlane, namespace: str, node: str, *, replicas: int, min_available: int
) -> list[str]:
    """A Deployment of ``replicas`` pods on ``node`` and a PDB whose status the disruption controller set;
    returns the running pod names once the budget is current."""
    plane.apply(
        [
            objects.deployment("web", namespace, replicas=replicas, node_name=node),
            objects.pdb("web", "web", min_available=min_available),
        ],
        namespace=namespace,
    )
    want = max(0, replicas - min_available)

    def settled() -> list[str] | None:
        running = [p["metadata"]["name"] for p in plane.running_pods(namespace, "app=web")]
        status = plane.get_json("pdb", "web", "-n", namespace).get("status", {})
        ok = (
            len(running) == replicas
            and status.get("currentHealthy") == replicas
            and status.get("disruptionsAllowed") == want
            and status.get("observedGeneration") == 1
        )
        return running if ok else None

    running: list[str] = plane.wait_for("pods Running and the PDB computed", settled, timeout_s=60)
    return running


def disruptions_allowed(plane: ControlPlane, namespace: str) -> int:
    return int(plane.get_json("pdb", "web", "-n", namespace)["status"]["disruptionsAllowed"])


def events_for(plane: ControlPlane, namespace: str, pod: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events ``kubectl get events`` lists for the pod."""
    items = plane.get_json("events", "-n", namespace, "--field-selector", f"involvedObject.name={pod}")[
        "items"
    ]
    return [(e["type"], e["reason"], e["message"]) for e in items]


def test_an_eviction_the_budget_allows_removes_the_pod_and_spends_the_budget(
    control_plane: ControlPlane, namespace: str, nodes: list[str], admin_api: KubeApi, recorder: EventRecorder
) -> None:
    running = web_with_budget(control_plane, namespace, nodes[0], replicas=3, min_available=2)
    pod = live_pod(control_plane, namespace, running[0])
    outcome = evictor(admin_api, recorder).evict(pod, nodes[0], "node is hot", time.monotonic() + 10)
    assert outcome.result == "evicted", outcome.message
    control_plane.wait_for(
        "the evicted pod to be gone",
        lambda: control_plane.kubectl("get", "pod", pod.name, "-n", namespace, check=False).returncode != 0,
    )
    assert recorder.flush(10)
    assert events_for(control_plane, namespace, pod.name) == [
        ("Normal", "Descheduled", f'Pod evicted from node "{nodes[0]}" by the reason "node is hot"')
    ]
    described = control_plane.kubectl("get", "events", "-n", namespace).stdout
    assert "Descheduled" in described and f"pod/{pod.name}" in described


def test_an_eviction_the_budget_forbids_is_refused_and_the_pod_stays(
    control_plane: ControlPlane, namespace: str, nodes: list[str], admin_api: KubeApi, recorder: EventRecorder
) -> None:
    running = web_with_budget(control_plane, namespace, nodes[0], replicas=2, min_available=2)
    pod = live_pod(control_plane, namespace, running[0])
    outcome = evictor(admin_api, recorder).evict(pod, nodes[0], "node is hot", time.monotonic() + 5)
    assert outcome.result == "refused-by-pdb", outcome.message
    assert "web" in outcome.message
    assert len(control_plane.running_pods(namespace, "app=web")) == 2
    assert disruptions_allowed(control_plane, namespace) == 0
    assert recorder.flush(10)
    assert [(t, r) for t, r, _ in events_for(control_plane, namespace, pod.name)] == [
        ("Warning", "EvictionBlocked")
    ]


def test_a_server_side_dry_run_changes_nothing(
    control_plane: ControlPlane, namespace: str, nodes: list[str], admin_api: KubeApi, recorder: EventRecorder
) -> None:
    running = web_with_budget(control_plane, namespace, nodes[0], replicas=3, min_available=2)
    pod = live_pod(control_plane, namespace, running[0])
    outcome = evictor(admin_api, recorder, dry_run=True).evict(pod, nodes[0], "hot", time.monotonic() + 10)
    assert outcome.result == "would-evict", outcome.message
    time.sleep(1.0)  # long enough for the disruption controller to react if the server had evicted
    assert {p["metadata"]["uid"] for p in control_plane.running_pods(namespace, "app=web")} >= {pod.uid}
    assert disruptions_allowed(control_plane, namespace) == 1
    budget = control_plane.get_json("pdb", "web", "-n", namespace)
    assert not budget["status"].get("disruptedPods")


def test_a_dry_run_the_budget_would_refuse_says_so(
    control_plane: ControlPlane, namespace: str, nodes: list[str], admin_api: KubeApi, recorder: EventRecorder
) -> None:
    running = web_with_budget(control_plane, namespace, nodes[0], replicas=2, min_available=2)
    pod = live_pod(control_plane, namespace, running[0])
    outcome = evictor(admin_api, recorder, dry_run=True).evict(pod, nodes[0], "hot", time.monotonic() + 5)
    assert outcome.result == "dry-run-refused", outcome.message
    assert len(control_plane.running_pods(namespace, "app=web")) == 2


def test_evicting_a_pod_that_is_gone_is_not_found_and_writes_no_event(
    control_plane: ControlPlane, namespace: str, nodes: list[str], admin_api: KubeApi, recorder: EventRecorder
) -> None:
    control_plane.apply([objects.bare_pod("gone", namespace, nodes[0])], namespace=namespace)
    pod = live_pod(control_plane, namespace, "gone")
    control_plane.kubectl("delete", "pod", "gone", "-n", namespace, "--wait=true")
    outcome = evictor(admin_api, recorder).evict(pod, nodes[0], "hot", time.monotonic() + 5)
    assert outcome.result == "not-found", outcome.message
    assert recorder.flush(10)
    assert events_for(control_plane, namespace, "gone") == []


def test_a_same_named_successor_is_not_evicted_in_place_of_the_chosen_pod(
    control_plane: ControlPlane, namespace: str, nodes: list[str], admin_api: KubeApi, recorder: EventRecorder
) -> None:
    control_plane.apply([objects.bare_pod("twin", namespace, nodes[0])], namespace=namespace)
    chosen = live_pod(control_plane, namespace, "twin")
    control_plane.kubectl("delete", "pod", "twin", "-n", namespace, "--wait=true")
    control_plane.apply([objects.bare_pod("twin", namespace, nodes[0])], namespace=namespace)
    successor = live_pod(control_plane, namespace, "twin")
    assert successor.uid != chosen.uid
    outcome = evictor(admin_api, recorder).evict(chosen, nodes[0], "hot", time.monotonic() + 5)
    # The server refuses the uid precondition with 409: a changed pod, never retried (issue 37, point 7).
    assert (outcome.result, outcome.code) == ("not-verified", "verify-pod-changed"), outcome.message
    assert live_pod(control_plane, namespace, "twin").uid == successor.uid
