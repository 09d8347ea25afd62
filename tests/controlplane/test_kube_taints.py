"""The hotspot taint on the real API server: only our entry changes, a concurrent change survives (the real
JSON-patch ``test`` refuses the stale patch), and the Events land where ``kubectl describe node`` shows them.

The tainter runs as an audited identity, so the server's own record says which patches it sent and what it
answered to each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from descheduler.kube.events import EventRecorder
from descheduler.kube.taints import NodeTainter
from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.move43a_fixtures import AuditedIdentity, audited_identities

pytestmark = pytest.mark.controlplane

GPU = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
OURS = {"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT}
SOFT = {"key": "x", "effect": "PreferNoSchedule"}


@dataclass
class Tainting:
    plane: ControlPlane
    namespace: str
    identity: AuditedIdentity
    api: KubeApi
    recorder: EventRecorder

    def node(self, suffix: str, taints: list[dict[str, Any]] | None = None) -> str:
        """A node of the test's group, with ``taints`` (none: the field is left out, as kubectl does)."""
        name = f"{self.namespace}-{suffix}"
        body = objects.node(name, self.namespace)
        if taints is not None:
            body["spec"]["taints"] = taints
        self.plane.apply([body])
        return name

    def taints(self, node: str) -> list[dict[str, Any]]:
        return list(self.plane.get_json("node", node)["spec"].get("taints") or [])

    def node_events(self, node: str) -> list[tuple[str, str]]:
        items = self.plane.get_json("events.events.k8s.io", "-n", "default")["items"]
        return [
            (e["reason"], e["note"])
            for e in items
            if e["regarding"]["kind"] == "Node" and e["regarding"]["name"] == node
        ]

    def patches(self, node: str) -> list[int]:
        """The status the server answered to each of our PATCHes of ``node``, in order."""
        requests = self.identity.flush()
        return [r.code for r in requests if r.verb == "patch" and r.resource == "nodes" and r.name == node]


@pytest.fixture(scope="module")
def identity(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AuditedIdentity]:
    """One audited identity for the module (each test's nodes have names of their own)."""
    with audited_identities(control_plane, tmp_path_factory.mktemp("tainter")) as audited:
        yield audited("tainter")


@pytest.fixture
def tainting(control_plane: ControlPlane, namespace: str, identity: AuditedIdentity) -> Iterator[Tainting]:
    api = connect(str(identity.kubeconfig), qps=1000, burst=1000)
    recorder = EventRecorder(api)
    try:
        yield Tainting(control_plane, namespace, identity, api, recorder)
    finally:
        recorder.close()
        api.close()


def test_adding_appends_our_taint_after_the_others_and_says_so_on_the_node(tainting: Tainting) -> None:
    hot = tainting.node("hot", [GPU])
    outcome = NodeTainter(tainting.api, tainting.recorder, dry_run=False).add(hot, "node is a hotspot")
    assert tainting.recorder.flush(10)
    assert outcome.result == "added"
    assert tainting.taints(hot) == [GPU, OURS]
    assert tainting.node_events(hot) == [("HotspotTainted", "node is a hotspot")]


def test_a_node_without_taints_gets_a_list_with_ours_alone(tainting: Tainting) -> None:
    hot = tainting.node("hot")
    assert NodeTainter(tainting.api, None, dry_run=False).add(hot, "hot").result == "added"
    assert tainting.taints(hot) == [OURS]


def test_removing_takes_off_our_entry_only(tainting: Tainting) -> None:
    cooled = tainting.node("cooled", [GPU, OURS, SOFT])
    outcome = NodeTainter(tainting.api, tainting.recorder, dry_run=False).remove(cooled, "node is normal")
    assert tainting.recorder.flush(10)
    assert outcome.result == "removed"
    assert tainting.taints(cooled) == [GPU, SOFT]
    assert tainting.node_events(cooled) == [("HotspotUntainted", "node is normal")]


def test_a_taint_added_by_someone_else_between_our_read_and_our_patch_is_kept(tainting: Tainting) -> None:
    hot = tainting.node("hot", [GPU])
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    original = tainting.api.request
    raced: list[int] = []

    def racing_request(method: str, path: str, **kwargs: Any) -> Any:
        if method == "PATCH" and not raced:  # someone taints the node just before our first patch lands
            raced.append(1)
            patch = json.dumps({"spec": {"taints": [GPU, cordon]}})
            tainting.plane.kubectl("patch", "node", hot, "--type=merge", "-p", patch)
        return original(method, path, **kwargs)

    tainting.api.request = racing_request  # type: ignore[method-assign]
    outcome = NodeTainter(tainting.api, None, dry_run=False).add(hot, "hot")
    assert outcome.result == "added"
    assert tainting.taints(hot) == [GPU, cordon, OURS]
    assert tainting.patches(hot) == [422, 200]  # the stale patch was refused by the server, not applied


def test_dry_run_sends_nothing_and_says_what_it_would_do(tainting: Tainting) -> None:
    hot = tainting.node("hot", [GPU])
    before = len(tainting.identity.flush())
    tainter = NodeTainter(tainting.api, None, dry_run=True)
    assert [tainter.add(hot, "x").result, tainter.remove(hot, "x").result] == ["would-add", "would-remove"]
    assert len(tainting.identity.flush()) == before
    assert tainting.taints(hot) == [GPU]


@pytest.mark.parametrize(("action", "result"), [("add", "unchanged"), ("remove", "unchanged")])
def test_nothing_is_written_when_the_node_already_is_as_wanted(
    tainting: Tainting, action: str, result: str
) -> None:
    node = tainting.node("n", [GPU, OURS] if action == "add" else [GPU])
    tainter = NodeTainter(tainting.api, None, dry_run=False)
    outcome = tainter.add(node, "x") if action == "add" else tainter.remove(node, "x")
    assert outcome.result == result
    assert tainting.patches(node) == []


def test_a_node_that_is_gone_is_reported_not_failed(tainting: Tainting) -> None:
    gone = f"{tainting.namespace}-gone"
    assert NodeTainter(tainting.api, None, dry_run=False).remove(gone, "x").result == "node-gone"


def test_only_the_leader_adds(tainting: Tainting) -> None:
    hot = tainting.node("hot")
    outcome = NodeTainter(tainting.api, None, dry_run=False, guard=lambda: False).add(hot, "x")
    assert outcome.result == "failed"
    assert tainting.taints(hot) == []
    assert tainting.patches(hot) == []
