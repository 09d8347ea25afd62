"""Steering the stock kube-scheduler off hot nodes with a ``PreferNoSchedule`` taint of our own key.

The kube-scheduler scores nodes by requests, not usage: a node hot by usage often has the most free
requests, so the replacement of a pod evicted from it lands right back on it, or on a node that earlier
replacements have just filled. With ``LowNodeLoadArgs.hotspotTaint.enabled`` a node gets the taint below
(``PreferNoSchedule``: the scheduler's TaintToleration score avoids the node when it can; nothing is ever
evicted or refused because of it) when it would be a bad place for a pod in motion:

- it is a hotspot, or over its high threshold by the usage estimate (the upper bound, with the pods bound
  to it that have not started), confirmed or not: a taint is cheap and reversible, an eviction is not;
- pods are in motion (this cycle's evictions, or earlier ones whose replacement has not started:
  ``Plan.moving``) and its room below the high threshold (upper bound) is smaller, on some resource, than
  what one of those pods uses, so a replacement placed there would make it hot.

It loses the taint after ``removeAfterCycles`` consecutive cycles with neither (and normal or low).

Pure: which nodes to taint and untaint is decided here from the cycle's node reports, the pods in motion
and the nodes' current taints; the service applies it (``kube/taints.py``), dry-run only reports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from descheduler.cluster.types import Node
from descheduler.planner import reasons
from descheduler.planner.model import HOTSPOT, LOW, NORMAL, OVER, SKIPPED, NodeReport

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


def steer_reason(report: NodeReport, moving: Mapping[str, int]) -> str:
    """Why the node should carry the taint this cycle, or ``""``: a hotspot, over by the estimate, or too
    little room below its high threshold for a pod in motion."""
    if report.node_class == SKIPPED:
        return ""
    over = [r for r in report.resources if r.usage > r.high]
    if report.node_class == HOTSPOT or over:
        detail = ", ".join(f"{r.resource} usage {r.usage_percent:.2f}% > {r.high_percent:.2f}%" for r in over)
        what = "a hotspot" if report.node_class == HOTSPOT else "over its high threshold (not yet confirmed)"
        return f"node is {what} ({detail or 'over its high threshold'})"
    if report.node_class == OVER:
        return "node is over its high threshold (not yet confirmed)"
    short = [r for r in report.resources if moving.get(r.resource, 0) > max(0, r.high - r.usage)]
    if short:
        detail = ", ".join(
            f"{r.resource} room {reasons.percent(max(0, r.high - r.usage), r.base):.2f}% < "
            f"{reasons.percent(moving[r.resource], r.base):.2f}%"
            for r in short
        )
        return f"node has less room below its high threshold than a pod being moved uses ({detail})"
    return ""


def steer(
    nodes: Sequence[Node],
    reports: Sequence[NodeReport],
    state: SteerState,
    remove_after: int,
    *,
    takeover: bool = False,
    moving: Mapping[str, int] | None = None,
) -> SteerDecision:
    """Taint nodes a replacement should avoid (``steer_reason``); untaint nodes that had no reason for
    ``remove_after`` cycles in a row and are normal or low.

    A tainted node with a reason keeps the taint and restarts its count; a skipped node keeps everything
    as it was (its usage is unknown). With ``takeover`` (the first cycle of a new leader, which knows
    nothing of the old one's counts) a tainted node without a reason that is normal or low now is
    untainted at once: the taint is stale. ``moving``: ``Plan.moving`` (None: nothing in motion).
    """
    in_motion = moving or {}
    tainted = {node.name for node in nodes if has_our_taint(node)}
    cool: dict[str, int] = {}
    add: list[TaintChange] = []
    remove: list[TaintChange] = []
    keep: list[str] = []
    for report in sorted(reports, key=lambda r: r.node):
        name = report.node
        why = steer_reason(report, in_motion)
        if why:
            if name in tainted:
                keep.append(name)
            else:
                message = (
                    f"{why}: {TAINT_EFFECT} taint {TAINT_KEY} added so the scheduler places new pods "
                    "elsewhere when it can"
                )
                add.append(TaintChange(name, message))
            cool[name] = 0
            continue
        if name not in tainted:
            continue
        if report.node_class in (NORMAL, LOW):
            count = remove_after if takeover else state.cool.get(name, 0) + 1
            if count >= remove_after:
                cool[name] = count  # kept: a removal that fails is proposed again next cycle
                since = "stale, left by a previous leader" if takeover else f"for {count} cycle(s)"
                remove.append(
                    TaintChange(
                        name,
                        f"node is {report.node_class} with room for the pods in motion ({since}): "
                        f"{TAINT_EFFECT} taint {TAINT_KEY} removed",
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
