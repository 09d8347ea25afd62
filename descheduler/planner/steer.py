"""Steering the stock kube-scheduler off hotspots with a ``PreferNoSchedule`` taint of our own key.

The kube-scheduler scores nodes by requests, not usage: a node hot by usage often has the most free
requests, so the replacement of a pod evicted from it lands right back on it. With
``LowNodeLoadArgs.hotspotTaint.enabled`` each hotspot gets the taint below (``PreferNoSchedule``: the
scheduler avoids the node when it can, nothing is ever evicted or refused because of it), and loses it
after ``removeAfterCycles`` consecutive normal or low cycles.

Pure: which nodes to taint and untaint is decided here from the cycle's node reports and the nodes'
current taints; the service applies it (``kube/taints.py``), dry-run only reports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from descheduler.cluster.types import Node
from descheduler.planner.model import HOTSPOT, LOW, NORMAL, OVER, NodeReport

TAINT_KEY = "load-aware-descheduler.io/hotspot"
TAINT_VALUE = "true"
TAINT_EFFECT = "PreferNoSchedule"


def has_our_taint(node: Node) -> bool:
    return any(t.key == TAINT_KEY and t.effect == TAINT_EFFECT for t in node.taints)


@dataclass(frozen=True, slots=True)
class TaintChange:
    node: str
    message: str
    """Why, for the node's Event and the audit."""

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "message": self.message}


@dataclass(frozen=True)
class SteerState:
    """Consecutive normal-or-low cycles of each tainted node; ``PlannerState``-like, carried by the caller."""

    cool: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SteerDecision:
    add: tuple[TaintChange, ...] = ()
    remove: tuple[TaintChange, ...] = ()
    keep: tuple[str, ...] = ()
    """Tainted nodes that stay tainted this cycle."""
    state: SteerState = field(default_factory=SteerState)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": TAINT_KEY,
            "effect": TAINT_EFFECT,
            "add": [c.to_dict() for c in self.add],
            "remove": [c.to_dict() for c in self.remove],
            "keep": list(self.keep),
        }


def _hot_message(report: NodeReport) -> str:
    over = [r for r in report.resources if r.over]
    detail = ", ".join(f"{r.resource} usage {r.usage_percent:.2f}% > {r.high_percent:.2f}%" for r in over)
    return (
        f"node is a hotspot ({detail or 'over its high threshold'}): {TAINT_EFFECT} taint {TAINT_KEY} "
        "added so the scheduler places new pods elsewhere when it can"
    )


def steer(
    nodes: Sequence[Node],
    reports: Sequence[NodeReport],
    state: SteerState,
    remove_after: int,
    *,
    takeover: bool = False,
) -> SteerDecision:
    """Taint new hotspots; untaint nodes normal or low for ``remove_after`` cycles in a row.

    An over node (not yet a hotspot) keeps its taint and restarts the count; a skipped node keeps
    everything as it was (its usage is unknown). With ``takeover`` (the first cycle of a new leader, which
    knows nothing of the old one's counts) a tainted node that is normal or low now is untainted at once:
    the taint is stale.
    """
    tainted = {node.name for node in nodes if has_our_taint(node)}
    cool: dict[str, int] = {}
    add: list[TaintChange] = []
    remove: list[TaintChange] = []
    keep: list[str] = []
    for report in sorted(reports, key=lambda r: r.node):
        name = report.node
        if report.node_class == HOTSPOT:
            if name in tainted:
                keep.append(name)
            else:
                add.append(TaintChange(name, _hot_message(report)))
            cool[name] = 0
            continue
        if name not in tainted:
            continue
        if report.node_class == OVER:
            keep.append(name)
            cool[name] = 0
        elif report.node_class in (NORMAL, LOW):
            count = remove_after if takeover else state.cool.get(name, 0) + 1
            if count >= remove_after:
                cool[name] = count  # kept: a removal that fails is proposed again next cycle
                why = "stale, left by a previous leader" if takeover else f"for {count} cycle(s)"
                remove.append(
                    TaintChange(
                        name,
                        f"node is {report.node_class} ({why}): {TAINT_EFFECT} taint {TAINT_KEY} removed",
                    )
                )
            else:
                keep.append(name)
                cool[name] = count
        else:  # skipped: usage unknown, change nothing
            keep.append(name)
            if name in state.cool:
                cool[name] = state.cool[name]
    return SteerDecision(add=tuple(add), remove=tuple(remove), keep=tuple(keep), state=SteerState(cool))
