"""The hotspot taint against the test API server: only our entry changes, concurrent changes survive."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.events import EventRecorder
from descheduler.kube.taints import NodeTainter
from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY
from tests.apiserver import ApiServer, objects

pytestmark = pytest.mark.integration

GPU = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
OURS = {"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT}


@pytest.fixture
def recorder(kube_api: KubeApi) -> Iterator[EventRecorder]:
    rec = EventRecorder(kube_api)
    yield rec
    rec.close()


def taints(server: ApiServer, node: str) -> list[dict[str, Any]]:
    found = server.get("nodes", "", node)
    assert found is not None
    return list(found["spec"].get("taints") or [])


def node_events(server: ApiServer, node: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["note"])
        for e in server.list("events", "default", group="events.k8s.io")
        if e["regarding"]["kind"] == "Node" and e["regarding"]["name"] == node
    ]


def test_adding_appends_our_taint_after_the_others_and_says_so_on_the_node(
    apiserver: ApiServer, kube_api: KubeApi, recorder: EventRecorder
) -> None:
    apiserver.create(objects.node("hot", taints=[GPU]))
    outcome = NodeTainter(kube_api, recorder, dry_run=False).add("hot", "node is a hotspot")
    recorder.flush()
    assert outcome.result == "added"
    assert taints(apiserver, "hot") == [GPU, OURS]
    assert node_events(apiserver, "hot") == [("HotspotTainted", "node is a hotspot")]


def test_a_node_without_taints_gets_a_list_with_ours_alone(apiserver: ApiServer, kube_api: KubeApi) -> None:
    apiserver.create(objects.node("hot"))
    assert NodeTainter(kube_api, None, dry_run=False).add("hot", "hot").result == "added"
    assert taints(apiserver, "hot") == [OURS]


def test_removing_takes_off_our_entry_only(
    apiserver: ApiServer, kube_api: KubeApi, recorder: EventRecorder
) -> None:
    apiserver.create(objects.node("cooled", taints=[GPU, OURS, {"key": "x", "effect": "PreferNoSchedule"}]))
    outcome = NodeTainter(kube_api, recorder, dry_run=False).remove("cooled", "node is normal")
    recorder.flush()
    assert outcome.result == "removed"
    assert taints(apiserver, "cooled") == [GPU, {"key": "x", "effect": "PreferNoSchedule"}]
    assert node_events(apiserver, "cooled") == [("HotspotUntainted", "node is normal")]


def test_a_taint_added_by_someone_else_between_our_read_and_our_patch_is_kept(
    apiserver: ApiServer, kube_api: KubeApi
) -> None:
    apiserver.create(objects.node("hot", taints=[GPU]))
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    original = kube_api.request
    raced: list[int] = []

    def racing_request(method: str, path: str, **kwargs: Any) -> Any:
        if method == "PATCH" and not raced:  # someone cordons the node just before our first patch lands
            raced.append(1)
            apiserver.patch("nodes", "", "hot", {"spec": {"taints": [GPU, cordon]}})
        return original(method, path, **kwargs)

    kube_api.request = racing_request  # type: ignore[method-assign]
    outcome = NodeTainter(kube_api, None, dry_run=False).add("hot", "hot")
    assert outcome.result == "added"
    assert taints(apiserver, "hot") == [GPU, cordon, OURS]
    patches = [r for r in apiserver.requests if r.verb == "patch" and r.resource == "nodes"]
    assert [p.status for p in patches] == [422, 200]  # the stale patch was refused, not applied


def test_dry_run_sends_nothing_and_says_what_it_would_do(apiserver: ApiServer, kube_api: KubeApi) -> None:
    apiserver.create(objects.node("hot", taints=[GPU]))
    before = len(apiserver.requests)
    tainter = NodeTainter(kube_api, None, dry_run=True)
    assert [tainter.add("hot", "x").result, tainter.remove("hot", "x").result] == [
        "would-add",
        "would-remove",
    ]
    assert len(apiserver.requests) == before
    assert taints(apiserver, "hot") == [GPU]


@pytest.mark.parametrize(("action", "result"), [("add", "unchanged"), ("remove", "unchanged")])
def test_nothing_is_written_when_the_node_already_is_as_wanted(
    apiserver: ApiServer, kube_api: KubeApi, action: str, result: str
) -> None:
    apiserver.create(objects.node("n", taints=[GPU, OURS] if action == "add" else [GPU]))
    tainter = NodeTainter(kube_api, None, dry_run=False)
    outcome = tainter.add("n", "x") if action == "add" else tainter.remove("n", "x")
    assert outcome.result == result
    assert not [r for r in apiserver.requests if r.verb == "patch"]


def test_a_node_that_is_gone_is_reported_not_failed(apiserver: ApiServer, kube_api: KubeApi) -> None:
    assert NodeTainter(kube_api, None, dry_run=False).remove("gone", "x").result == "node-gone"


def test_only_the_leader_adds(apiserver: ApiServer, kube_api: KubeApi) -> None:
    apiserver.create(objects.node("hot"))
    outcome = NodeTainter(kube_api, None, dry_run=False, guard=lambda: False).add("hot", "x")
    assert outcome.result == "failed"
    assert taints(apiserver, "hot") == []
