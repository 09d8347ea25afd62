"""Steering the stock scheduler: which nodes get our PreferNoSchedule taint, and when it comes off."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from descheduler.cluster.types import Node, Taint
from descheduler.kube.taints import taint_patch
from descheduler.planner import commit, evicted_from
from descheduler.planner.model import NodeReport, ResourceReport
from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY, SteerState, steer
from tests.unit.builders import NOW, World, cpu, evicted, settings

OURS = Taint(TAINT_KEY, "true", TAINT_EFFECT)
OTHER = Taint("dedicated", "gpu", "NoSchedule")


def node(name: str, *taints: Taint) -> Node:
    return Node(name=name, labels={}, allocatable={"cpu": 1000}, taints=tuple(taints))


def reports(**classes: str) -> list[NodeReport]:
    return [NodeReport(node=name, node_class=cls) for name, cls in classes.items()]


def cpu_at(name: str, node_class: str, percent: float) -> NodeReport:
    """A node of 1 core at ``percent`` cpu (the estimate's upper bound), thresholds 40/70."""
    used = round(percent * 10)
    cpu = ResourceReport("cpu", 1000, used, 400, 700, percent, 40.0, 70.0)
    return NodeReport(node=name, node_class=node_class, resources=(cpu,))


Outcome = tuple[list[str], list[str], list[str], dict[str, int]]


def run(
    nodes: Sequence[Node],
    seen: Sequence[NodeReport],
    cool: dict[str, int] | None = None,
    takeover: bool = False,
    moving: dict[str, int] | None = None,
) -> Outcome:
    decision = steer(nodes, seen, SteerState(cool or {}), 3, takeover=takeover, moving=moving)
    return (
        [c.node for c in decision.add],
        [c.node for c in decision.remove],
        list(decision.keep),
        dict(decision.state.cool),
    )


BUSY = {"cpu": 150}
"""A pod in motion using 15 % of a node."""


@pytest.mark.parametrize(
    ("case", "nodes", "seen", "cool", "takeover", "moving", "expected"),
    [
        (
            "a new hotspot is tainted",
            [node("a")],
            reports(a="hotspot"),
            {},
            False,
            None,
            (["a"], [], [], {"a": 0}),
        ),
        (
            "an over node that is not yet a hotspot is tainted too (cheap, reversible)",
            [node("a")],
            reports(a="over"),
            {},
            False,
            None,
            (["a"], [], [], {"a": 0}),
        ),
        (
            "a normal node over by the upper bound (a pod bound there, not started) is tainted",
            [node("a")],
            [cpu_at("a", "normal", 75.0)],
            {},
            False,
            None,
            (["a"], [], [], {"a": 0}),
        ),
        (
            "pods in motion: a node with less room than one of them is tainted",
            [node("a")],
            [cpu_at("a", "normal", 67.5)],
            {},
            False,
            BUSY,
            (["a"], [], [], {"a": 0}),
        ),
        (
            "... a node with room exactly enough is not",
            [node("a")],
            [cpu_at("a", "normal", 55.0)],
            {},
            False,
            BUSY,
            ([], [], [], {}),
        ),
        (
            "nothing in motion: a nearly full node is left alone",
            [node("a")],
            [cpu_at("a", "normal", 67.5)],
            {},
            False,
            None,
            ([], [], [], {}),
        ),
        (
            "a skipped node is never tainted",
            [node("a")],
            reports(a="skipped"),
            {},
            False,
            BUSY,
            ([], [], [], {}),
        ),
        (
            "a tainted hotspot keeps it",
            [node("a", OURS)],
            reports(a="hotspot"),
            {},
            False,
            None,
            ([], [], ["a"], {"a": 0}),
        ),
        (
            "a tainted node over again keeps it, count restarts",
            [node("a", OURS)],
            reports(a="over"),
            {"a": 2},
            False,
            None,
            ([], [], ["a"], {"a": 0}),
        ),
        (
            "a tainted node short of room keeps it while pods move, count restarts",
            [node("a", OURS)],
            [cpu_at("a", "normal", 67.5)],
            {"a": 2},
            False,
            BUSY,
            ([], [], ["a"], {"a": 0}),
        ),
        (
            "one cool cycle of three: kept",
            [node("a", OURS)],
            reports(a="normal"),
            {},
            False,
            None,
            ([], [], ["a"], {"a": 1}),
        ),
        (
            "the third cool cycle: removed",
            [node("a", OURS)],
            reports(a="low"),
            {"a": 2},
            False,
            None,
            ([], ["a"], [], {"a": 3}),
        ),
        (
            "the third cycle since the last pod in motion arrived: removed",
            [node("a", OURS)],
            [cpu_at("a", "normal", 67.5)],
            {"a": 2},
            False,
            None,
            ([], ["a"], [], {"a": 3}),
        ),
        (
            "skipped (usage unknown): nothing changes",
            [node("a", OURS)],
            reports(a="skipped"),
            {"a": 2},
            False,
            None,
            ([], [], ["a"], {"a": 2}),
        ),
        (
            "another key's taint is not ours",
            [node("a", OTHER)],
            reports(a="normal"),
            {},
            False,
            None,
            ([], [], [], {}),
        ),
        (
            "a new leader removes a stale taint at once",
            [node("a", OURS)],
            reports(a="normal"),
            {},
            True,
            None,
            ([], ["a"], [], {"a": 3}),
        ),
        (
            "... but not from a node still over",
            [node("a", OURS)],
            reports(a="over"),
            {},
            True,
            None,
            ([], [], ["a"], {"a": 0}),
        ),
        (
            "... nor from one short of room while pods move",
            [node("a", OURS)],
            [cpu_at("a", "normal", 67.5)],
            {},
            True,
            BUSY,
            ([], [], ["a"], {"a": 0}),
        ),
    ],
)
def test_nodes_a_replacement_should_avoid_are_tainted_and_untainted_after_cooling(
    case: str,
    nodes: list[Node],
    seen: list[NodeReport],
    cool: dict[str, int],
    takeover: bool,
    moving: dict[str, int] | None,
    expected: Outcome,
) -> None:
    assert run(nodes, seen, cool, takeover, moving) == expected, case


def test_a_node_cooling_for_the_configured_number_of_cycles_loses_the_taint_on_the_last_and_after() -> None:
    state = SteerState()
    removed_at = []
    for cycle in range(1, 6):
        decision = steer([node("a", OURS)], reports(a="normal"), state, 4)
        state = decision.state
        removed_at += [cycle for c in decision.remove]
    assert removed_at == [4, 5]  # the node still has it (the removal failed): proposed again at once


def test_the_message_says_why_the_node_is_tainted() -> None:
    over = ResourceReport("cpu", 1000, 800, 300, 650, 80.0, 30.0, 65.0)
    decision = steer(
        [node("a")], [NodeReport(node="a", node_class="hotspot", resources=(over,))], SteerState(), 3
    )
    assert decision.add[0].message.startswith("node is a hotspot (cpu usage 80.00% > 65.00%)")


# --- the patch -----------------------------------------------------------------------------------------

MINE = {"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT}
CORDON = {
    "key": "node.kubernetes.io/unschedulable",
    "effect": "NoSchedule",
    "timeAdded": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    ("case", "current", "add", "expected"),
    [
        (
            "no taints: test for none, add the list",
            None,
            True,
            [
                {"op": "test", "path": "/spec/taints", "value": None},
                {"op": "add", "path": "/spec/taints", "value": [MINE]},
            ],
        ),
        (
            "other taints: test them all, append ours",
            [CORDON],
            True,
            [
                {"op": "test", "path": "/spec/taints", "value": [CORDON]},
                {"op": "add", "path": "/spec/taints/-", "value": MINE},
            ],
        ),
        ("already ours: nothing to do", [CORDON, MINE], True, None),
        (
            "remove only our entry, after testing the whole list",
            [CORDON, MINE],
            False,
            [
                {"op": "test", "path": "/spec/taints", "value": [CORDON, MINE]},
                {"op": "remove", "path": "/spec/taints/1"},
            ],
        ),
        ("not there: nothing to remove", [CORDON], False, None),
        ("same key, other effect: not ours", [{**MINE, "effect": "NoSchedule"}], False, None),
    ],
)
def test_the_patch_touches_only_our_entry_and_applies_only_to_the_list_it_was_computed_from(
    case: str, current: list[dict[str, str]] | None, add: bool, expected: object
) -> None:
    assert taint_patch(current, add) == expected, case


@pytest.mark.parametrize(
    ("seen", "moving", "message"),
    [
        (
            cpu_at("a", "over", 75.0),
            None,
            "node is over its high threshold (not yet confirmed) (cpu usage 75.00% > 70.00%)",
        ),
        (
            cpu_at("a", "normal", 67.5),
            BUSY,
            "node has less room below its high threshold than a pod being moved uses "
            "(cpu room 2.50% < 15.00%)",
        ),
    ],
)
def test_the_message_says_which_rule_tainted_the_node(
    seen: NodeReport, moving: dict[str, int] | None, message: str
) -> None:
    decision = steer([node("a")], [seen], SteerState(), 3, moving=moving)
    assert decision.add[0].message.startswith(message + ": PreferNoSchedule taint")


# --- what is in motion (``Plan.moving``) ------------------------------------------------------------------


def test_pods_in_motion_are_this_cycles_evictions_then_those_whose_replacement_has_not_started() -> None:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4).deployment("api", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("4"))
    world.pod("q", on="hot", owner="api", usage=cpu("1"))
    config = settings(low={"cpu": 20}, high={"cpu": 50}, top={"maxNoOfPodsToEvictPerNode": 1})
    first = world.plan(config)
    assert (evicted(first), first.moving["cpu"]) == (["default/p"], 4000)
    state = commit(first.state, evicted_from(first, ["default/p"]), NOW)
    world.remove_pod("p").set_node_usage("hot", cpu("8.2"))
    world.pod("p-2", on="cool", owner="web", created=NOW + 30, phase="Pending")
    pending = world.plan(config, state, NOW + 60)
    world.objects = [o for o in world.objects if o["metadata"].get("name") != "p-2"]
    world.pod("p-2", on="cool", owner="web", created=NOW + 30)
    started = world.plan(config, state, NOW + 60)
    assert (evicted(pending), pending.moving.get("cpu"), started.moving) == ([], 4000, {})
    assert pending.to_dict()["moving"]["cpu"] == 4000 and "moving" not in started.to_dict()
