"""The watch cache against the test API server over HTTP: sync, updates, deletes, broken watches, 410."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.cache import DEFAULT_RESOURCES, ClusterCache, digest_rows
from tests.apiserver import ApiServer, Fault, objects
from tests.apiserver.waiting import eventually

pytestmark = pytest.mark.integration


def seed(server: ApiServer, *, pods: int = 23) -> None:
    server.create(objects.namespace("default"))
    server.create(objects.namespace("team-a", labels={"tier": "gold"}))
    for i in range(3):
        server.create(objects.node(f"node-{i}", labels={"pool": "general" if i < 2 else "gpu"}))
    for i in range(pods):
        server.create(objects.pod(f"web-{i:02d}", node=f"node-{i % 3}", cpu="250m", memory="256Mi"))
    server.create(objects.pod("finished-job", node="node-0", phase="Succeeded", owner=("Job", "batch")))
    server.create(objects.pod("team-a-api", namespace="team-a", node="node-1", labels={"app": "api"}))
    server.create(objects.pdb("web-pdb", disruptions_allowed=2))
    server.create(objects.deployment("web"))
    server.create(objects.replicaset("web-rs", deployment="web"))
    server.create(objects.statefulset("db", replicas=2))
    server.create(objects.replicationcontroller("legacy"))


CacheFactory = Callable[..., ClusterCache]


@pytest.fixture
def cache(kube_api: KubeApi) -> Iterator[CacheFactory]:
    """Build caches with fast backoff; all are stopped after the test."""
    made: list[ClusterCache] = []

    def make(*, page_size: int = 5, **kwargs: Any) -> ClusterCache:
        options: dict[str, Any] = {"watch_timeout": 30, "backoff_initial": 0.2, "backoff_max": 1.0}
        options.update(kwargs)
        c = ClusterCache(kube_api, page_size=page_size, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def pod_names(c: ClusterCache) -> set[str]:
    return {p.key for p in c.snapshot().pods}


def synced(
    apiserver: ApiServer, cache: CacheFactory, *, pods: int | None = None, **options: Any
) -> ClusterCache:
    """A started cache (made with ``options``) over a seeded server (``pods`` pods, or seed's), synced."""
    if pods is None:
        seed(apiserver)
    else:
        seed(apiserver, pods=pods)
    c = cache(**options)
    c.start()
    assert c.wait_synced(10)
    return c


def synced_and_watching_pods(
    apiserver: ApiServer, cache: CacheFactory, *, pods: int, **options: Any
) -> ClusterCache:
    """``synced``, and with its pods watch open: where the watch-fault tests begin."""
    c = synced(apiserver, cache, pods=pods, **options)
    eventually(lambda: apiserver.open_watches("pods") == 1, what="the pods watch to be open")
    return c


def test_initial_sync_lists_every_resource_in_pages_and_parses_the_snapshot(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced(apiserver, cache, page_size=5, resources=[*DEFAULT_RESOURCES, "namespaces"])
    snap = c.snapshot()
    assert [n.name for n in snap.nodes] == ["node-0", "node-1", "node-2"]
    assert len(snap.pods) == 24  # 23 web pods + team-a-api; the Succeeded pod is not cached
    assert "default/finished-job" not in {p.key for p in snap.pods}
    web = next(p for p in snap.pods if p.name == "web-07")
    assert web.node_name == "node-1" and web.requests == {"cpu": 250, "memory": 256 * 2**20}
    assert web.owner is not None and (web.owner.kind, web.owner.name) == ("ReplicaSet", "web-rs")
    assert [(p.name, p.disruptions_allowed) for p in snap.pdbs] == [("web-pdb", 2)]
    assert sorted((w.kind, w.name, w.replicas) for w in snap.workloads) == [
        ("Deployment", "web", 3),
        ("ReplicaSet", "web-rs", 3),
        ("ReplicationController", "legacy", 2),
        ("StatefulSet", "db", 2),
    ]
    assert {n.name: dict(n.labels) for n in snap.namespaces}["team-a"] == {"tier": "gold"}
    pod_lists = apiserver.requests_for(verb="list", resource="pods")
    assert len(pod_lists) == 5  # 24 pods in pages of 5
    assert all(r.query.get("limit") == "5" for r in pod_lists)
    assert [bool(r.query.get("continue")) for r in pod_lists] == [False, True, True, True, True]
    assert pod_lists[0].query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    assert c.synced and c.last_update_age(time.time()) < 5


def test_creates_updates_and_deletes_reach_the_snapshot_through_the_watch(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced(apiserver, cache, pods=4)
    apiserver.create(objects.pod("late", node="node-2"))
    apiserver.patch("pods", "default", "web-01", {"metadata": {"labels": {"app": "web", "canary": "true"}}})
    apiserver.delete("pods", "default", "web-02")
    apiserver.patch(
        "poddisruptionbudgets", "default", "web-pdb", {"status": {"disruptionsAllowed": 0}}, group="policy"
    )
    apiserver.patch("nodes", "", "node-0", {"spec": {"unschedulable": True}})
    eventually(
        lambda: "default/late" in pod_names(c) and "default/web-02" not in pod_names(c), what="pod churn"
    )
    eventually(lambda: c.snapshot().pdbs[0].disruptions_allowed == 0, what="pdb update")
    assert next(p for p in c.snapshot().pods if p.name == "web-01").labels["canary"] == "true"
    eventually(lambda: c.snapshot().nodes[0].unschedulable, what="node update")


def server_pod_digest(api: KubeApi, field_selector: str) -> tuple[int, str]:
    """What ``ClusterCache.digest`` must say of the pods, computed from a fresh LIST's JSON."""
    items = api.get(f"/api/v1/pods?fieldSelector={field_selector}")["items"]
    rows = [
        (
            f"{p['metadata']['namespace']}/{p['metadata']['name']}",
            p["metadata"]["uid"],
            p["spec"].get("nodeName", ""),
            p["status"].get("phase", "Running"),
            "terminating" if p["metadata"].get("deletionTimestamp") else "",
        )
        for p in items
    ]
    return len(rows), digest_rows(rows)


def test_the_digest_equals_one_computed_from_a_fresh_list_and_follows_a_missed_field(
    apiserver: ApiServer, cache: CacheFactory, kube_api: KubeApi
) -> None:
    c = synced(apiserver, cache, pods=5)
    first = c.digest()
    selector = first["pods"]["fieldSelector"]
    assert (first["pods"]["count"], first["pods"]["digest"]) == server_pod_digest(kube_api, selector)
    assert first["nodes"]["count"] == 3 and first["interner"]["count"] > 0
    apiserver.patch("pods", "default", "web-01", {"status": {"phase": "Pending"}})
    eventually(lambda: c.digest()["pods"]["digest"] != first["pods"]["digest"], what="a phase change")
    assert (c.digest()["pods"]["count"], c.digest()["pods"]["digest"]) == server_pod_digest(
        kube_api, selector
    )


def test_a_pod_that_finishes_leaves_the_cache_like_a_delete(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced(apiserver, cache, pods=2)
    apiserver.patch("pods", "default", "web-00", {"status": {"phase": "Succeeded"}})
    eventually(lambda: "default/web-00" not in pod_names(c), what="terminal pod to drop out")


def test_steady_state_sends_only_watches_no_list_or_get(apiserver: ApiServer, cache: CacheFactory) -> None:
    c = synced(apiserver, cache, pods=6)
    eventually(lambda: apiserver.open_watches() == len(DEFAULT_RESOURCES), what="every reflector watching")
    apiserver.clear_requests()
    for i in range(3):
        apiserver.create(objects.pod(f"more-{i}", node="node-0"))
    eventually(lambda: {"default/more-0", "default/more-2"} <= pod_names(c), what="new pods")
    for _ in range(200):
        c.snapshot()
    apiserver.send_bookmarks()
    eventually(lambda: c.stats()["pods"]["bookmarks"] >= 1, what="a bookmark on the open pod watch")
    assert [r.describe() for r in apiserver.requests] == []  # no LIST, no GET, not even a re-watch


def test_a_dropped_watch_resumes_from_the_last_resource_version_without_relisting(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced_and_watching_pods(apiserver, cache, pods=3)
    assert apiserver.drop_watches("pods") == 1
    apiserver.create(objects.pod("during-outage", node="node-1"))
    eventually(lambda: "default/during-outage" in pod_names(c), what="pod created while the watch was down")
    pods = apiserver.requests_for(resource="pods")
    assert [r.verb for r in pods if r.verb == "list"] == ["list"]  # the initial list only
    watches = [r for r in pods if r.verb == "watch"]
    assert len(watches) >= 2
    assert int(watches[1].query["resourceVersion"]) >= int(watches[0].query["resourceVersion"])
    assert c.stats()["pods"]["relists"] == 0


def test_gone_resource_version_after_compaction_triggers_a_relist(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced_and_watching_pods(apiserver, cache, pods=3)
    apiserver.send_bookmarks()
    # While the pods watch is down (reconnect waits a backoff), history moves on and is compacted away.
    assert apiserver.drop_watches("pods") == 1
    apiserver.create(objects.pod("after-compaction", node="node-1"))
    apiserver.delete("pods", "default", "web-00")
    apiserver.compact()
    eventually(lambda: c.stats()["pods"]["relists"] >= 1, what="a relist")
    eventually(
        lambda: "default/after-compaction" in pod_names(c) and "default/web-00" not in pod_names(c),
        what="state after relist",
    )
    assert len(apiserver.requests_for(verb="list", resource="pods")) >= 2


def test_watch_failures_back_off_and_recover(apiserver: ApiServer, cache: CacheFactory) -> None:
    c = synced_and_watching_pods(apiserver, cache, pods=2)
    fault = apiserver.inject(Fault(verb="watch", resource="pods", status=503, times=3))
    assert apiserver.drop_watches("pods") == 1
    apiserver.create(objects.pod("after-errors", node="node-0"))
    eventually(lambda: "default/after-errors" in pod_names(c), timeout=10, what="recovery after 503s")
    assert fault.hits == 3
    assert c.stats()["pods"]["errors"] >= 3


def test_a_silently_stalled_watch_is_replaced_within_its_timeout_and_the_age_shows_it(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced_and_watching_pods(apiserver, cache, pods=2, watch_timeout=2)
    assert apiserver.stall_watches("pods") == 1
    stalled = time.monotonic()
    apiserver.create(objects.pod("while-stalled", node="node-0"))
    eventually(lambda: c.last_update_age(time.time()) > 2, timeout=5, what="the pods cache to age")
    eventually(
        lambda: "default/while-stalled" in pod_names(c), timeout=10, what="the stalled watch to be replaced"
    )
    # within timeoutSeconds (2 s, +25% jitter) plus the read grace (5 s), not the old 330-630 s
    assert time.monotonic() - stalled < 2 * 1.25 + 5 + 1
    assert c.ages(time.time())["pods"] < 2, (c.ages(time.time()), c.stats()["pods"])


def test_a_refresh_reopens_a_stalled_watch_at_once_without_a_list_and_brings_what_it_missed(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    """A long watch (300 s) stalls: the refresh before acting re-opens it from its resourceVersion, the
    server answers, and the pod created meanwhile arrives; no LIST is sent again."""
    c = synced_and_watching_pods(apiserver, cache, pods=2, watch_timeout=300)
    assert apiserver.stall_watches("pods") == 1
    apiserver.create(objects.pod("while-stalled", node="node-0"))
    time.sleep(0.5)
    assert "default/while-stalled" not in pod_names(c), "the stalled watch cannot have delivered it"
    refreshed_at = time.time()
    assert c.refresh(["pods", "not-watched"], timeout=5) == []
    assert c.ages(time.time())["pods"] <= time.time() - refreshed_at
    eventually(lambda: "default/while-stalled" in pod_names(c), timeout=2, what="the replayed event")
    assert c.stats()["pods"]["lists"] == 1 and c.stats()["pods"]["relists"] == 0


def test_a_refresh_the_server_does_not_answer_names_the_resource(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced_and_watching_pods(apiserver, cache, pods=2, watch_timeout=300)
    apiserver.inject(Fault(verb="watch", resource="pods", status=503))
    assert c.refresh(["pods"], timeout=1) == ["pods"]


def _count_while(requests: Callable[[], int], seconds: float) -> int:
    before = requests()
    time.sleep(seconds)
    return requests() - before


def test_reconnects_back_off_exponentially_even_after_a_watch_that_received_events(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced_and_watching_pods(apiserver, cache, pods=2, backoff_initial=0.2, backoff_max=2.0)
    apiserver.create(objects.pod("an-event", node="node-0"))
    eventually(lambda: "default/an-event" in pod_names(c), what="the watch to deliver an event")
    apiserver.inject(Fault(verb="watch", resource="pods", status=503))
    assert apiserver.drop_watches("pods") == 1
    attempts = _count_while(lambda: len(apiserver.requests_for(verb="watch", resource="pods")), 4.0)
    # 0.2, 0.4, 0.8, 1.6, 2 s (+-20%): about five attempts in 4 s; stuck at 0.2 s it would be ~20
    assert 2 <= attempts <= 7, attempts


def test_a_410_loop_relists_through_the_backoff_not_at_once(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced_and_watching_pods(apiserver, cache, pods=2, backoff_initial=0.2, backoff_max=2.0)
    apiserver.inject(Fault(verb="watch", resource="pods", status=410, message="too old resource version"))
    assert apiserver.drop_watches("pods") == 1
    lists = _count_while(lambda: len(apiserver.requests_for(verb="list", resource="pods")), 4.0)
    assert 2 <= lists <= 7, lists
    assert c.stats()["pods"]["relists"] >= 2


def test_expired_continue_token_restarts_the_list(apiserver: ApiServer, cache: CacheFactory) -> None:
    seed(apiserver, pods=12)
    fault = apiserver.inject(
        Fault(verb="list", resource="pods", status=410, times=1, when=lambda r: bool(r.query.get("continue")))
    )
    c = cache(page_size=5)
    c.start()
    assert c.wait_synced(10)
    assert fault.hits == 1
    assert len(c.snapshot().pods) == 13
    first_pages = [
        r for r in apiserver.requests_for(verb="list", resource="pods") if not r.query.get("continue")
    ]
    assert len(first_pages) == 2


def test_node_selector_keeps_only_the_pool_and_its_pods(apiserver: ApiServer, cache: CacheFactory) -> None:
    c = synced(apiserver, cache, pods=6, node_selector="pool=general")
    snap = c.snapshot()
    assert [n.name for n in snap.nodes] == ["node-0", "node-1"]
    assert {p.node_name for p in snap.pods} == {"node-0", "node-1"}
    assert apiserver.requests_for(verb="list", resource="nodes")[0].query["labelSelector"] == "pool=general"
    apiserver.patch("nodes", "", "node-1", {"metadata": {"labels": {"pool": "gpu"}}})
    eventually(lambda: [n.name for n in c.snapshot().nodes] == ["node-0"], what="node leaving the pool")
    assert {p.node_name for p in c.snapshot().pods} == {"node-0"}


def test_unparseable_objects_are_reported_and_their_node_is_flagged(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    seed(apiserver, pods=2)
    broken = objects.pod("broken", node="node-2", cpu="lots")
    apiserver.create(broken)
    c = cache()
    c.start()
    assert c.wait_synced(10)
    assert "default/broken" not in pod_names(c)
    errors = c.object_errors
    assert list(errors) == ["Pod default/broken"]
    assert "cpu" in errors["Pod default/broken"]
    assert c.nodes_with_unparsed_pods == frozenset({"node-2"})
    apiserver.patch(
        "pods",
        "default",
        "broken",
        {
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.example/app:1",
                        "resources": {"requests": {"cpu": "1"}},
                    }
                ]
            }
        },
    )
    eventually(lambda: "default/broken" in pod_names(c), what="fixed pod")
    assert c.object_errors == {} and c.nodes_with_unparsed_pods == frozenset()


def test_bookmarks_advance_the_resource_version_the_cache_resumes_from(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced(apiserver, cache, pods=1, resources=["pods", "nodes"])
    before = int(c.resource_version("pods"))
    eventually(lambda: apiserver.open_watches() == 2, what="both reflectors watching")
    for i in range(3):
        apiserver.create(objects.node(f"extra-{i}"))  # moves the global revision; no pod changes

    def advanced() -> bool:
        # A bookmark sent while a watch is being reopened reaches nobody: send one on every poll.
        apiserver.send_bookmarks()
        return int(c.resource_version("pods")) >= before + 3

    eventually(advanced, timeout=15.0, interval=0.2, what="bookmark resourceVersion")


def test_stop_ends_all_reflector_threads_promptly(apiserver: ApiServer, cache: CacheFactory) -> None:
    c = synced(apiserver, cache, pods=1)
    started = time.monotonic()
    c.stop()
    assert time.monotonic() - started < 3
    eventually(lambda: apiserver.open_watches() == 0, what="watches closed")


def test_by_default_the_cache_watches_only_what_the_shipped_rbac_grants(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    c = synced(apiserver, cache, pods=1)
    listed = {(r.group, r.resource) for r in apiserver.requests if r.verb in ("list", "watch")}
    assert listed == {
        ("", "nodes"),
        ("", "pods"),
        ("", "replicationcontrollers"),
        ("apps", "replicasets"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("policy", "poddisruptionbudgets"),
        ("", "namespaces"),  # list and watch only: their pause annotation
    }
    assert "default" in [ns.name for ns in c.snapshot().namespaces]


def test_a_forbidden_resource_keeps_the_cache_unsynced_instead_of_serving_a_partial_view(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    seed(apiserver, pods=1)
    apiserver.inject(
        Fault(
            verb="list",
            resource="poddisruptionbudgets",
            status=403,
            message='poddisruptionbudgets.policy is forbidden: User "x" cannot list resource',
        )
    )
    c = cache()
    c.start()
    assert not c.wait_synced(1.0)
    assert not c.synced
    assert c.stats()["poddisruptionbudgets"]["errors"] >= 1
    apiserver.clear_faults()
    assert c.wait_synced(5)


def test_the_first_sync_waits_as_long_as_list_pages_keep_arriving(
    apiserver: ApiServer, cache: CacheFactory
) -> None:
    seed(apiserver)
    # Generous bounds: on a loaded machine another reflector's LIST may take a second of scheduling.
    apiserver.inject(Fault(verb="list", resource="pods", latency=0.8))
    c = cache(page_size=5)
    c.start()
    started = time.monotonic()
    assert c.wait_listed(stall=2.0) == []
    assert c.synced
    assert time.monotonic() - started > 2.0, "the pods' five slow pages together outlast the stall bound"
    assert len(pod_names(c)) == 24  # 23 web pods and team-a's; the finished job is not cached


@pytest.mark.parametrize(
    ("fault", "stalled"),
    [
        (Fault(verb="list", resource="pods", latency=4.0), ["pods"]),
        (
            Fault(verb="list", resource="poddisruptionbudgets", status=403, message="forbidden"),
            ["poddisruptionbudgets"],
        ),
    ],
    ids=["a page that never comes", "a resource that cannot be listed"],
)
def test_the_first_sync_gives_up_on_a_resource_whose_list_makes_no_progress(
    apiserver: ApiServer, cache: CacheFactory, fault: Fault, stalled: list[str]
) -> None:
    seed(apiserver, pods=1)
    apiserver.inject(fault)
    c = cache()
    c.start()
    started = time.monotonic()
    assert c.wait_listed(stall=1.0) == stalled
    assert not c.synced
    assert time.monotonic() - started < 3.0
