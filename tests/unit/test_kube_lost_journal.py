"""A deleted migration journal told from a first start (the marker on the leader Lease), and the records
rebuilt from the Events the descheduler wrote on the pods it moved."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from descheduler.kube.errors import ApiStatusError, ApiTimeoutError
from descheduler.kube.journal import ConfigMapJournal
from descheduler.planner import journal as records
from descheduler.planner.journal import JournalUnreadable

NS = "load-aware-descheduler"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/lad"
CONFIGMAP = f"/api/v1/namespaces/{NS}/configmaps/lad-migrations"
MARKED = {"descheduler.load-aware.io/migration-journal": "lad-migrations"}
NODE = "ip-10-123-45-67.eu-west-1.compute.internal"


def event(
    reason: str, note: str, *, pod: str = "web-7d9f8b6c5d-x2v9k", by: str = "load-aware-descheduler"
) -> Any:
    return {
        "reason": reason,
        "message": note,
        "reportingComponent": by,
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": pod, "uid": f"uid-{pod}"},
        "eventTime": "2026-11-28T10:00:00.000000Z",
    }


EVICTED = event("Descheduled", f'Pod evicted from node "{NODE}" by the reason "node is overutilized"')
UNKNOWN = event(
    "EvictionOutcomeUnknown",
    f'Eviction from node "{NODE}" (reason "hot") may have happened: timeout',
    pod="api-5c8d7b9f4-q7w2e",
)
RESTARTED = event(
    "Descheduled",
    f'Pod is moved off node "{NODE}" by a surge-first rollout restart of Deployment solo by the reason "hot"',
    pod="solo-6b7c8d9e5-zzzzz",
)
NOT_EVIDENCE = [
    event("Descheduled", f'[dry-run] Pod would be evicted from node "{NODE}" by the reason "hot"', pod="a"),
    event(
        "Descheduled", f'Pod evicted from node "{NODE}" by the reason "hot"', pod="b", by="other-descheduler"
    ),
]


@dataclass
class Api:
    """The API server as the journal sees it: a Lease (or none), no ConfigMap, and some Events."""

    lease: dict[str, Any] | None
    events: list[Any] = field(default_factory=list)
    events_fail: bool = False
    sent: list[tuple[str, str, Any]] = field(default_factory=list)

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        self.sent.append((method, path, body))
        if path == CONFIGMAP and method == "GET":
            raise ApiStatusError(404, "configmaps not found")
        if path.startswith(f"/api/v1/namespaces/{NS}/configmaps") and method == "POST":
            return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        if path == LEASE:
            if self.lease is None:
                raise ApiStatusError(404, "leases not found")
            if method == "PUT":
                self.lease = body
            return self.lease
        if path.startswith("/api/v1/events?"):
            if self.events_fail:
                raise ApiTimeoutError("events: timed out")
            reason = path.split("reason%3D", 1)[1].split("&", 1)[0]
            return {"items": [e for e in self.events if e["reason"] == reason], "metadata": {}}
        raise AssertionError(f"unexpected {method} {path}")


def lease(annotations: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "lad", "namespace": NS, "resourceVersion": "7"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": {}}


def journal(api: Api) -> ConfigMapJournal:
    return ConfigMapJournal(api, namespace=NS, name="lad-migrations", writer="me")  # type: ignore[arg-type]


FIRST_STARTS = [
    ("no Lease yet", None),
    ("a Lease that never saw a journal", lease(None)),
    ("a Lease with other annotations", lease({"owner": "team-a"})),
]  # fmt: skip


@pytest.mark.parametrize("held", [c[1] for c in FIRST_STARTS], ids=[c[0] for c in FIRST_STARTS])
def test_a_missing_journal_is_a_first_start_while_the_lease_has_no_marker(
    held: dict[str, Any] | None,
) -> None:
    api = Api(held, events=[EVICTED])
    assert journal(api).load() == ()
    assert not any(path.startswith("/api/v1/events") for _, path, _ in api.sent), "no Event read needed"


def test_a_missing_journal_the_lease_marks_is_lost_and_rebuilt_from_our_events() -> None:
    api = Api(lease(MARKED), events=[EVICTED, UNKNOWN, RESTARTED, *NOT_EVIDENCE])
    store = journal(api)
    with pytest.raises(JournalUnreadable) as caught:
        store.load()
    lost = caught.value
    assert lost.reason == "lost"
    assert "ConfigMap load-aware-descheduler/lad-migrations" in str(lost) and "deleted" in str(lost)
    rebuilt = sorted(lost.entries, key=lambda e: e.pod)  # type: ignore[attr-defined]
    assert [(e.pod, e.uid, e.node, e.status, e.action) for e in rebuilt] == [
        ("shop/api-5c8d7b9f4-q7w2e", "uid-api-5c8d7b9f4-q7w2e", NODE, records.UNKNOWN, "evict"),
        ("shop/solo-6b7c8d9e5-zzzzz", "uid-solo-6b7c8d9e5-zzzzz", NODE, records.EVICTED, "restart"),
        ("shop/web-7d9f8b6c5d-x2v9k", "uid-web-7d9f8b6c5d-x2v9k", NODE, records.EVICTED, "evict"),
    ]
    assert rebuilt[0].reason == "hot", "kept for the Event that settles it"
    assert rebuilt[1].workload_name == "solo"
    store.save(rebuilt)  # the next write recreates it
    assert [m for m, path, _ in api.sent if "configmaps" in path][-1] == "POST"


def test_a_lost_journal_whose_events_cannot_be_read_rebuilds_nothing_and_says_so() -> None:
    api = Api(lease(MARKED), events=[EVICTED], events_fail=True)
    with pytest.raises(JournalUnreadable) as caught:
        journal(api).load()
    assert caught.value.reason == "lost"
    assert caught.value.entries is None  # type: ignore[attr-defined]


def test_the_first_write_of_a_journal_marks_the_lease_and_keeps_its_other_annotations() -> None:
    api = Api(lease({"owner": "team-a"}))
    store = journal(api)
    assert store.load() == ()
    store.save([])
    assert api.lease is not None
    assert api.lease["metadata"]["annotations"] == {"owner": "team-a", **MARKED}
    assert api.lease["metadata"]["resourceVersion"] == "7", "written over the version read: no blind write"
    with pytest.raises(JournalUnreadable) as caught:
        journal(api).load()
    assert caught.value.reason == "lost", "deleted after that, it is lost"


def test_a_dry_run_never_touches_the_lease_and_reads_a_missing_journal_as_empty() -> None:
    api = Api(lease(MARKED), events=[EVICTED])
    store = ConfigMapJournal(api, namespace=NS, name="lad-migrations", writer="me", dry_run=True)  # type: ignore[arg-type]
    assert store.load() == ()
    assert [path for _, path, _ in api.sent] == [CONFIGMAP]
