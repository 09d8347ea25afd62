"""Steering the stock scheduler: which nodes get our PreferNoSchedule taint, and when it comes off."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from descheduler.cluster.types import Node, Taint
from descheduler.kube.taints import taint_patch
from descheduler.planner.model import NodeReport
from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY, SteerState, steer

OURS = Taint(TAINT_KEY, "true", TAINT_EFFECT)
OTHER = Taint("dedicated", "gpu", "NoSchedule")


def node(name: str, *taints: Taint) -> Node:
    return Node(name=name, labels={}, allocatable={"cpu": 1000}, taints=tuple(taints))


def reports(**classes: str) -> list[NodeReport]:
    return [NodeReport(node=name, node_class=cls) for name, cls in classes.items()]


def run(
    nodes: Sequence[Node], classes: dict[str, str], cool: dict[str, int] | None = None, takeover: bool = False
) -> tuple[list[str], list[str], list[str], dict[str, int]]:
    decision = steer(nodes, reports(**classes), SteerState(cool or {}), 3, takeover=takeover)
    return (
        [c.node for c in decision.add],
        [c.node for c in decision.remove],
        list(decision.keep),
        dict(decision.state.cool),
    )


@pytest.mark.parametrize(
    ("case", "nodes", "classes", "cool", "takeover", "expected"),
    [
        ("a new hotspot is tainted", [node("a")], {"a": "hotspot"}, {}, False, (["a"], [], [], {"a": 0})),
        (
            "an over node that is not yet a hotspot is not",
            [node("a")],
            {"a": "over"},
            {},
            False,
            ([], [], [], {}),
        ),
        (
            "a tainted hotspot keeps it",
            [node("a", OURS)],
            {"a": "hotspot"},
            {},
            False,
            ([], [], ["a"], {"a": 0}),
        ),
        (
            "a tainted node over again keeps it, count restarts",
            [node("a", OURS)],
            {"a": "over"},
            {"a": 2},
            False,
            ([], [], ["a"], {"a": 0}),
        ),
        (
            "one cool cycle of three: kept",
            [node("a", OURS)],
            {"a": "normal"},
            {},
            False,
            ([], [], ["a"], {"a": 1}),
        ),
        (
            "the third cool cycle: removed",
            [node("a", OURS)],
            {"a": "low"},
            {"a": 2},
            False,
            ([], ["a"], [], {"a": 3}),
        ),
        (
            "skipped (usage unknown): nothing changes",
            [node("a", OURS)],
            {"a": "skipped"},
            {"a": 2},
            False,
            ([], [], ["a"], {"a": 2}),
        ),
        ("another key's taint is not ours", [node("a", OTHER)], {"a": "normal"}, {}, False, ([], [], [], {})),
        (
            "a new leader removes a stale taint at once",
            [node("a", OURS)],
            {"a": "normal"},
            {},
            True,
            ([], ["a"], [], {"a": 3}),
        ),
        (
            "... but not from a node still over",
            [node("a", OURS)],
            {"a": "over"},
            {},
            True,
            ([], [], ["a"], {"a": 0}),
        ),
    ],
)
def test_hotspots_are_tainted_and_untainted_after_cooling(
    case: str,
    nodes: list[Node],
    classes: dict[str, str],
    cool: dict[str, int],
    takeover: bool,
    expected: tuple[list[str], list[str], list[str], dict[str, int]],
) -> None:
    assert run(nodes, classes, cool, takeover) == expected, case


def test_a_node_cooling_for_the_configured_number_of_cycles_loses_the_taint_on_the_last_and_after() -> None:
    state = SteerState()
    removed_at = []
    for cycle in range(1, 6):
        decision = steer([node("a", OURS)], reports(a="normal"), state, 4)
        state = decision.state
        removed_at += [cycle for c in decision.remove]
    assert removed_at == [4, 5]  # the node still has it (the removal failed): proposed again at once


def test_the_message_says_why_the_node_is_tainted() -> None:
    from descheduler.planner.model import ResourceReport

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
