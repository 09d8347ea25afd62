"""Eviction outcomes against the test API server over HTTP, and the Events they leave on pods."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from descheduler.cluster.parse import parse_pod
from descheduler.cluster.types import Pod
from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from descheduler.kube.events import EventRecorder
from descheduler.kube.evict import Evictor
from descheduler.kube.verify import ServerReader
from descheduler.planner.index import WorkloadRef
from tests.apiserver import ApiServer, Fault, objects
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

EvictorFactory = Callable[..., Evictor]


@pytest.fixture
def recorder(kube_api: KubeApi) -> Iterator[EventRecorder]:
    rec = EventRecorder(kube_api)
    yield rec
    rec.close()


@pytest.fixture
def make_evictor(kube_api: KubeApi, recorder: EventRecorder) -> EvictorFactory:
    def make(**kwargs: Any) -> Evictor:
        options: dict[str, Any] = {
            "evict_qps": 0,
            "evict_burst": 1,
            "dry_run": False,
            "events": recorder,
            "delete_options": None,
            "request_timeout": 2.0,
        }
        options.update(kwargs)
        return Evictor(kube_api, **options)

    return make


def put_pod(server: ApiServer, name: str = "web-1", **kwargs: Any) -> Pod:
    created = server.create(objects.pod(name, node="node-1", **kwargs))
    return parse_pod(created)


def events_on(server: ApiServer, pod: str) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for e in server.list("events", "default")
        if e["involvedObject"]["name"] == pod
    ]


@dataclass
class Case:
    id: str
    pdb_allowed: int | None
    result: str
    pod_left: bool
    requests: int
    event: tuple[str, str] | None
    policy: str = "Eviction"
    dry_run: bool = False
    faults: list[Fault] = field(default_factory=list)
    pdb_observed_behind: bool = False


CASES = [
    Case("pdb-allows", 1, "evicted", False, 1, ("Normal", "Descheduled")),
    Case("no-pdb", None, "evicted", False, 1, ("Normal", "Descheduled")),
    Case("pdb-budget-spent", 0, "refused-by-pdb", True, 1, ("Warning", "EvictionBlocked")),
    Case(
        "pdb-not-yet-observed",
        3,
        "refused-by-pdb",
        True,
        1,
        ("Warning", "EvictionBlocked"),
        pdb_observed_behind=True,
    ),
    Case(
        "server-error-500-not-applied",
        1,
        "unknown",
        True,
        1,
        ("Warning", "EvictionOutcomeUnknown"),
        faults=[Fault(subresource="eviction", status=500, message="etcdserver: request timed out")],
    ),
    Case(
        "server-unavailable-503-not-applied",
        1,
        "unknown",
        True,
        1,
        ("Warning", "EvictionOutcomeUnknown"),
        faults=[Fault(subresource="eviction", status=503)],
    ),
    Case(
        "applied-then-504",
        1,
        "unknown",
        False,
        1,
        ("Warning", "EvictionOutcomeUnknown"),
        faults=[Fault(subresource="eviction", status=504, apply_first=True)],
    ),
    Case(
        "applied-then-connection-reset",
        1,
        "unknown",
        False,
        1,
        ("Warning", "EvictionOutcomeUnknown"),
        faults=[Fault(subresource="eviction", drop=True, apply_first=True)],
    ),
    Case(
        "delete-applied-then-504",
        0,
        "unknown",
        False,
        1,
        ("Warning", "EvictionOutcomeUnknown"),
        policy="Delete",
        faults=[Fault(resource="pods", verb="delete", status=504, apply_first=True)],
    ),
    Case(
        "dry-run-server-error-is-a-failure",
        1,
        "failed",
        True,
        1,
        None,
        dry_run=True,
        faults=[Fault(subresource="eviction", status=500)],
    ),
    Case(
        "apf-429-then-ok",
        1,
        "evicted",
        False,
        2,
        ("Normal", "Descheduled"),
        faults=[Fault(subresource="eviction", status=429, retry_after=1, times=1)],
    ),
    Case("dry-run-allowed", 1, "would-evict", True, 1, None, dry_run=True),
    Case("dry-run-refused", 0, "dry-run-refused", True, 1, None, dry_run=True),
    Case("delete-policy-ignores-pdb", 0, "evicted", False, 1, ("Normal", "Descheduled"), policy="Delete"),
    Case("delete-policy-dry-run", 0, "would-evict", True, 1, None, policy="Delete", dry_run=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_eviction_outcome_matches_what_the_server_did(
    case: Case, apiserver: ApiServer, make_evictor: EvictorFactory, recorder: EventRecorder
) -> None:
    apiserver.create(objects.node("node-1"))
    if case.pdb_allowed is not None:
        budget = objects.pdb("web-pdb", disruptions_allowed=case.pdb_allowed)
        if case.pdb_observed_behind:
            budget["status"]["observedGeneration"] = 0
        apiserver.create(budget)
    pod = put_pod(apiserver)
    for fault in case.faults:
        apiserver.inject(fault)
    evictor = make_evictor(policy=case.policy, dry_run=case.dry_run)
    outcome = evictor.evict(pod, "node-1", "node is hot", time.monotonic() + 10)
    assert outcome.result == case.result, outcome.message
    assert (apiserver.get("pods", "default", "web-1") is not None) == case.pod_left
    sent = [r for r in apiserver.requests if r.resource == "pods" and r.name == "web-1"]
    assert len(sent) == case.requests
    assert all(r.verb == ("create" if case.policy == "Eviction" else "delete") for r in sent)
    assert all((r.query.get("dryRun") == "All") == case.dry_run for r in sent)
    if case.pdb_allowed is not None:
        left = apiserver.get("poddisruptionbudgets", "default", "web-pdb")
        assert left is not None
        spent = case.policy == "Eviction" and not case.pod_left
        assert left["status"]["disruptionsAllowed"] == case.pdb_allowed - (1 if spent else 0)
    assert recorder.flush(5)
    got = [(t, r) for t, r, _ in events_on(apiserver, "web-1")]
    assert got == ([case.event] if case.event else [])


def test_descheduled_event_has_the_documented_message(
    apiserver: ApiServer, make_evictor: EvictorFactory, recorder: EventRecorder
) -> None:
    pod = put_pod(apiserver)
    outcome = make_evictor().evict(pod, "node-1", "node is hot: cpu 91% > 80%", time.monotonic() + 10)
    assert outcome.evicted
    assert recorder.flush(5)
    assert events_on(apiserver, "web-1") == [
        ("Normal", "Descheduled", 'Pod evicted from node "node-1" by the reason "node is hot: cpu 91% > 80%"')
    ]
    written = apiserver.list("events", "default", group="events.k8s.io")
    assert written[0]["reportingController"] == "load-aware-descheduler"
    assert written[0]["regarding"]["uid"] == pod.uid
    assert [r.group for r in apiserver.requests_for(verb="create", resource="events")] == ["events.k8s.io"]


def test_the_budget_is_spent_by_the_first_eviction_and_refuses_the_second(
    apiserver: ApiServer, make_evictor: EvictorFactory
) -> None:
    apiserver.create(objects.pdb("web-pdb", disruptions_allowed=1))
    first, second = put_pod(apiserver, "web-1"), put_pod(apiserver, "web-2")
    evictor = make_evictor()
    assert evictor.evict(first, "node-1", "hot", time.monotonic() + 10).result == "evicted"
    refused = evictor.evict(second, "node-1", "hot", time.monotonic() + 10)
    assert refused.result == "refused-by-pdb"
    assert "disruption budget web-pdb needs 2 healthy pods" in refused.message
    budget = apiserver.get("poddisruptionbudgets", "default", "web-pdb")
    assert budget is not None and "web-1" in budget["status"]["disruptedPods"]


def test_a_pod_already_gone_is_not_found_and_gets_no_event(
    apiserver: ApiServer, make_evictor: EvictorFactory, recorder: EventRecorder
) -> None:
    pod = put_pod(apiserver)
    apiserver.delete("pods", "default", "web-1")
    outcome = make_evictor().evict(pod, "node-1", "hot", time.monotonic() + 10)
    assert outcome.result == "not-found"
    assert recorder.flush(5) and events_on(apiserver, "web-1") == []


def test_a_same_named_successor_is_not_evicted_in_place_of_the_chosen_pod(
    apiserver: ApiServer, make_evictor: EvictorFactory
) -> None:
    chosen = put_pod(apiserver)
    apiserver.delete("pods", "default", "web-1")
    successor = put_pod(apiserver)
    assert successor.uid != chosen.uid
    outcome = make_evictor().evict(chosen, "node-1", "hot", time.monotonic() + 10)
    assert (outcome.result, outcome.code) == ("not-verified", "verify-pod-changed")
    assert "Precondition failed: UID" in outcome.message
    assert apiserver.get("pods", "default", "web-1") is not None


@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied"])
def test_a_timeout_after_sending_is_of_unknown_outcome_within_the_request_timeout(
    applied: bool, apiserver: ApiServer, make_evictor: EvictorFactory, recorder: EventRecorder
) -> None:
    pod = put_pod(apiserver)
    apiserver.inject(Fault(subresource="eviction", latency=1.5, times=1, apply_first=applied))
    started = time.monotonic()
    outcome = make_evictor(request_timeout=0.3).evict(pod, "node-1", "hot", time.monotonic() + 10)
    assert outcome.result == "unknown" and "timed out" in outcome.message
    assert time.monotonic() - started < 1.2
    assert (apiserver.get("pods", "default", "web-1") is None) == applied
    assert recorder.flush(5)
    assert [r for _, r, _ in events_on(apiserver, "web-1")] == ["EvictionOutcomeUnknown"]


def test_a_request_that_could_not_connect_was_never_sent_and_is_a_failure(
    apiserver: ApiServer, recorder: EventRecorder
) -> None:
    pod = put_pod(apiserver)
    port = free_port()  # a port nobody listens on
    assert apiserver.kubeconfig_path is not None
    api = connect(str(apiserver.kubeconfig_path), qps=100, burst=10)
    api.host = f"http://127.0.0.1:{port}"
    try:
        evictor = Evictor(api, evict_qps=0, evict_burst=1, dry_run=False, events=None, request_timeout=1)
        outcome = evictor.evict(pod, "node-1", "hot", time.monotonic() + 10)
    finally:
        api.close()
    assert outcome.result == "failed" and "not sent" in outcome.message


def test_api_throttling_longer_than_the_deadline_gives_up_without_waiting(
    apiserver: ApiServer, make_evictor: EvictorFactory
) -> None:
    pod = put_pod(apiserver)
    apiserver.inject(Fault(subresource="eviction", status=429, retry_after=30))
    started = time.monotonic()
    outcome = make_evictor().evict(pod, "node-1", "hot", time.monotonic() + 5)
    assert outcome.result == "throttled" and "Retry-After 30s" in outcome.message
    assert time.monotonic() - started < 1
    assert len(apiserver.requests_for(subresource="eviction")) == 1


def test_repeated_api_throttling_is_retried_until_the_deadline(
    apiserver: ApiServer, make_evictor: EvictorFactory
) -> None:
    pod = put_pod(apiserver)
    apiserver.inject(Fault(subresource="eviction", status=429, retry_after=1))
    outcome = make_evictor().evict(pod, "node-1", "hot", time.monotonic() + 2.9)
    assert outcome.result == "throttled"
    # t=0, 1-1.2, 2-2.4 (Retry-After plus up to 20% jitter); a 4th at t>=3 is past 2.9
    assert len(apiserver.requests_for(subresource="eviction")) == 3


def test_eviction_rate_limit_spaces_evictions_and_throttles_past_the_deadline(
    apiserver: ApiServer, make_evictor: EvictorFactory
) -> None:
    pods = [put_pod(apiserver, f"web-{i}") for i in range(4)]
    evictor = make_evictor(evict_qps=5, evict_burst=1)
    started = time.monotonic()
    results = [evictor.evict(p, "node-1", "hot", time.monotonic() + 10).result for p in pods[:3]]
    assert results == ["evicted"] * 3
    assert time.monotonic() - started >= 0.35  # burst 1, then 0.2s apart
    throttled = evictor.evict(pods[3], "node-1", "hot", time.monotonic() + 0.05)
    assert throttled.result == "throttled" and "evictQPS=5" in throttled.message
    assert apiserver.get("pods", "default", "web-3") is not None
    assert len(apiserver.requests_for(subresource="eviction")) == 3


def test_client_rate_limit_applies_to_every_request(apiserver: ApiServer) -> None:
    assert apiserver.kubeconfig_path is not None
    api = connect(str(apiserver.kubeconfig_path), qps=10, burst=2)
    try:
        started = time.monotonic()
        for _ in range(7):
            api.get("/api/v1/nodes")
        elapsed = time.monotonic() - started
    finally:
        api.close()
    assert elapsed >= 0.45  # 2 at once, then 5 more at 10/s


def test_dry_run_writes_events_only_when_configured(apiserver: ApiServer, kube_api: KubeApi) -> None:
    pod = put_pod(apiserver)
    recorder = EventRecorder(kube_api, write_in_dry_run=True)
    evictor = Evictor(
        kube_api, evict_qps=0, evict_burst=1, dry_run=True, events=recorder, delete_options=None
    )
    assert evictor.evict(pod, "node-1", "hot", time.monotonic() + 10).result == "would-evict"
    assert recorder.flush(5)
    recorder.close()
    assert events_on(apiserver, "web-1") == [
        ("Normal", "Descheduled", '[dry-run] Pod would be evicted from node "node-1" by the reason "hot"')
    ]
    assert apiserver.get("pods", "default", "web-1") is not None


def test_delete_options_are_sent_with_the_eviction(
    apiserver: ApiServer, make_evictor: EvictorFactory
) -> None:
    pod = put_pod(apiserver)
    evictor = make_evictor(delete_options={"gracePeriodSeconds": 5, "propagationPolicy": "Background"})
    assert evictor.evict(pod, "node-1", "hot", time.monotonic() + 10).evicted
    body = apiserver.requests_for(subresource="eviction")[0].body
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    assert body["deleteOptions"]["gracePeriodSeconds"] == 5
    assert body["deleteOptions"]["propagationPolicy"] == "Background"
    assert body["deleteOptions"]["preconditions"] == {"uid": pod.uid}


def test_a_guard_that_says_no_stops_the_eviction_before_any_request(
    apiserver: ApiServer, make_evictor: EvictorFactory, recorder: EventRecorder
) -> None:
    pod = put_pod(apiserver)
    outcome = make_evictor(guard=lambda: False).evict(pod, "node-1", "hot", time.monotonic() + 10)
    assert outcome.result == "failed" and "leader" in outcome.message
    assert apiserver.requests_for(subresource="eviction") == []
    assert recorder.flush(5) and events_on(apiserver, "web-1") == []


def test_events_fall_back_to_core_v1_when_events_k8s_io_is_missing(
    apiserver: ApiServer, kube_api: KubeApi
) -> None:
    pod = put_pod(apiserver)
    apiserver.inject(Fault(group="events.k8s.io", resource="events", status=404))
    recorder = EventRecorder(kube_api)
    recorder.record(pod, "Warning", "EvictionFailed", "first")
    recorder.record(pod, "Normal", "Descheduled", "second")
    assert recorder.flush(5)
    recorder.close()
    assert [m for _, _, m in events_on(apiserver, "web-1")] == ["first", "second"]
    groups = [r.group for r in apiserver.requests_for(verb="create", resource="events")]
    assert groups == ["events.k8s.io", "", ""]  # the fallback is remembered
    assert recorder.written == 2 and recorder.failed == 0


def test_long_event_text_is_cut_to_the_api_limits_and_accepted(
    apiserver: ApiServer, kube_api: KubeApi
) -> None:
    pod = put_pod(apiserver)
    recorder = EventRecorder(kube_api)
    recorder.record(pod, "Warning", "R" * 300, "é" * 3000)
    assert recorder.flush(5)
    recorder.close()
    assert recorder.failed == 0
    ((_, reason, message),) = events_on(apiserver, "web-1")
    assert len(reason.encode()) <= 128 and len(message.encode()) <= 1024 and message.endswith("...")


def test_event_failures_are_counted_not_raised(apiserver: ApiServer, kube_api: KubeApi) -> None:
    pod = put_pod(apiserver)
    apiserver.inject(Fault(resource="events", status=500))
    recorder = EventRecorder(kube_api)
    recorder.record(pod, "Normal", "Descheduled", "x")
    assert recorder.flush(5)
    recorder.close()
    assert recorder.failed == 1 and recorder.written == 0


def test_a_pod_refused_again_and_again_gets_one_warning_event_per_window(
    apiserver: ApiServer, make_evictor: EvictorFactory, recorder: EventRecorder
) -> None:
    apiserver.create(objects.pdb("web-pdb", disruptions_allowed=0))
    pod = put_pod(apiserver)
    evictor = make_evictor(warning_window=300.0)
    results = [evictor.evict(pod, "node-1", "hot", time.monotonic() + 10).result for _ in range(5)]
    assert results == ["refused-by-pdb"] * 5
    assert recorder.flush(5)
    assert [r for _, r, _ in events_on(apiserver, "web-1")] == ["EvictionBlocked"]


def test_a_refusal_carries_the_servers_retry_after(
    apiserver: ApiServer, make_evictor: EvictorFactory
) -> None:
    budget = objects.pdb("web-pdb", disruptions_allowed=3)
    budget["status"]["observedGeneration"] = 0  # not processed yet: Kubernetes says Retry-After 10
    apiserver.create(budget)
    outcome = make_evictor().evict(put_pod(apiserver), "node-1", "hot", time.monotonic() + 10)
    assert outcome.result == "refused-by-pdb"
    assert outcome.retry_after == 10


# --- verify, then evict, as one step (issue 37, point 7) ------------------------------------------------


def deployment_pod(server: ApiServer) -> Pod:
    """A pod of Deployment ``web`` through its ReplicaSet, owned as the controllers own them."""
    made = server.create(objects.deployment("web", replicas=3))
    rs = objects.replicaset("web-5d4f8", replicas=3, deployment="web")
    rs["metadata"]["ownerReferences"][0]["uid"] = made["metadata"]["uid"]
    rs["metadata"]["labels"] = {"app": "web"}
    rs["spec"]["selector"] = {"matchLabels": {"app": "web"}}
    created = server.create(rs)
    pod = objects.pod("web-1", node="node-1", labels={"app": "web"}, owner=("ReplicaSet", "web-5d4f8"))
    pod["metadata"]["ownerReferences"][0]["uid"] = created["metadata"]["uid"]
    return parse_pod(server.create(pod))


@pytest.mark.parametrize(
    ("kind", "reads"),
    [("bare", 3), ("Deployment", 5)],
    ids=["a bare pod: pod, node, namespace", "a Deployment's pod: Deployment, 2 LISTs, node, namespace"],
)
def test_the_eviction_rests_on_the_read_just_made_and_a_change_since_is_refused_by_the_server(
    kind: str, reads: int, apiserver: ApiServer, kube_api: KubeApi, make_evictor: EvictorFactory
) -> None:
    """What a verification costs (``reads`` requests, then the eviction: the figure the README gives), and
    the pod's resourceVersion as read is the Eviction's precondition: an opt-out annotation added between
    the read and the request is a 409 from the server, never an eviction."""
    apiserver.create(objects.namespace("default"))
    apiserver.create(objects.node("node-1"))
    pod = deployment_pod(apiserver) if kind == "Deployment" else put_pod(apiserver, owner=None)
    reader = ServerReader(kube_api)
    hint = WorkloadRef("Deployment", "default", "web", "", 3) if kind == "Deployment" else None
    view = reader.read(pod, time.monotonic() + 10, hint)  # the cache's chain names the Deployment
    assert view.problem == "" and view.node is not None and view.namespace is not None
    assert view.requests == reads == reader.requests
    assert view.pod_version
    apiserver.patch(
        "pods", "default", "web-1", {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}
    )
    outcome = make_evictor().evict(
        pod, "node-1", "hot", time.monotonic() + 10, resource_version=lambda: view.pod_version
    )
    assert (outcome.result, outcome.code) == ("not-verified", "verify-pod-changed"), outcome.message
    assert apiserver.get("pods", "default", "web-1") is not None
    body = apiserver.requests_for(subresource="eviction")[0].body
    assert body["deleteOptions"]["preconditions"] == {"uid": pod.uid, "resourceVersion": view.pod_version}
    again = reader.read(pod, time.monotonic() + 10)
    fresh = make_evictor().evict(
        pod, "node-1", "hot", time.monotonic() + 10, resource_version=lambda: again.pod_version
    )
    assert fresh.result == "evicted", "the version just read is the server's: the precondition holds"


def test_a_workload_pod_its_workloads_list_does_not_hold_is_read_on_its_own(
    apiserver: ApiServer, kube_api: KubeApi
) -> None:
    """The LIST of the workload's pods stands for the pod's own GET; a pod it does not hold (deleted since
    the plan) is asked for by name, and the server saying it is gone is what the view says."""
    apiserver.create(objects.node("node-1"))
    pod = deployment_pod(apiserver)
    apiserver.delete("pods", "default", "web-1")
    view = ServerReader(kube_api).read(pod, time.monotonic() + 10)
    assert view.problem == "" and view.pod is None
    assert [w.kind for w in view.workloads] == ["ReplicaSet", "Deployment"]
    assert view.requests == 5, "ReplicaSet, Deployment, its ReplicaSets, its pods, then the pod by name"
