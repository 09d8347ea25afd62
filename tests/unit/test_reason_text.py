"""Eviction reasons read exactly as Koordinator writes them: operators grep and alert on these strings.

Koordinator's format strings are quoted below as data with their source line (koordinator-sh/koordinator
a7a1b76b, ``pkg/descheduler/framework/plugins/loadaware/low_node_load.go``, ``overUtilizedEvictionReason``).
Go's ``%s``, ``%.2f`` and ``%%`` mean what Python's ``%`` operator makes of them, so the expected text is
rendered from Koordinator's own strings, not written by hand.
"""

from __future__ import annotations

import pytest

from descheduler.planner.reasons import overutilized_reason

# low_node_load.go:476 - one entry per resource over, `reason` being "node" (:468) or "prod" (:463).
KOORD_ENTRY = "%s %s usage(%.2f%%)>threshold(%.2f%%)"
# low_node_load.go:479 - the entries joined by ", ".
KOORD_REASON = "node is overutilized, %s"
KOORD_JOIN = ", "
KOORD_SCOPE = {False: "node", True: "prod"}


def koordinator_text(over: dict[str, tuple[float, float]], prod: bool) -> str:
    """What Koordinator prints; resources in name order (it sorts ``getResourceNames(highThresholds)``)."""
    entries = [KOORD_ENTRY % (KOORD_SCOPE[prod], name, *over[name]) for name in sorted(over)]
    return KOORD_REASON % KOORD_JOIN.join(entries)


SHAPES = [
    ("node, cpu", {"cpu": (68.53, 50.0)}, False),
    ("node, memory", {"memory": (76.98, 70.0)}, False),
    ("node, pods", {"pods": (91.0, 90.0)}, False),
    ("node, ephemeral-storage", {"ephemeral-storage": (81.25, 80.0)}, False),
    ("node, an extended resource", {"nvidia.com/gpu": (100.0, 75.0)}, False),
    ("node, cpu and memory", {"memory": (90.0, 70.0), "cpu": (88.888, 65.0)}, False),
    ("node, three resources", {"pods": (95.0, 90.0), "cpu": (70.005, 65.0), "memory": (71.0, 70.0)}, False),
    ("prod, cpu", {"cpu": (45.0, 40.0)}, True),
    ("prod, memory", {"memory": (61.126, 60.0)}, True),
    ("prod, cpu and memory", {"cpu": (55.5, 40.0), "memory": (66.666, 60.0)}, True),
]


@pytest.mark.parametrize(("shape", "over", "prod"), SHAPES, ids=[shape for shape, _, _ in SHAPES])
def test_reason_text_is_koordinators(shape: str, over: dict[str, tuple[float, float]], prod: bool) -> None:
    usage = {name: used for name, (used, _) in over.items()}
    thresholds = {name: limit for name, (_, limit) in over.items()}
    assert overutilized_reason(over, usage, thresholds, prod=prod) == koordinator_text(over, prod)


def test_only_resources_over_are_named_even_when_others_are_reported() -> None:
    usage = {"cpu": 80.0, "memory": 40.0}
    thresholds = {"cpu": 65.0, "memory": 70.0}
    assert overutilized_reason(["cpu"], usage, thresholds) == koordinator_text({"cpu": (80.0, 65.0)}, False)


def test_the_prod_pass_is_told_apart_by_the_entry_not_the_head() -> None:
    # Koordinator's head is the same for both passes; only the entry's first word differs.
    node = overutilized_reason(["cpu"], {"cpu": 45.0}, {"cpu": 40.0})
    prod = overutilized_reason(["cpu"], {"cpu": 45.0}, {"cpu": 40.0}, prod=True)
    assert node.startswith("node is overutilized, node cpu ")
    assert prod.startswith("node is overutilized, prod cpu ")
