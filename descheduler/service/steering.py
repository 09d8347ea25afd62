"""Hotspot taints as the runner applies them: decide with ``planner/steer.py``, put taints on before the
cycle's evictions (so the replacements are already steered away), take them off after.

Remembers which nodes this replica tainted, so the service can clear them on shutdown and when the
Lease is lost, and treats the first cycle after a start or a takeover as a takeover (stale taints of a
previous leader are judged at once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from descheduler.cluster.types import ClusterSnapshot
from descheduler.planner import Plan
from descheduler.planner.steer import SteerDecision, SteerState, steer
from descheduler.service.edges import Tainter, TaintResult

KEPT = frozenset({"added", "unchanged"})
GONE = frozenset({"removed", "unchanged", "node-gone"})


class Steering:
    """The runner's hotspot taints (``tainter`` None: the feature is off and nothing happens)."""

    def __init__(self, tainter: Tainter | None, remove_after_cycles: int) -> None:
        self.tainter = tainter
        self.remove_after = remove_after_cycles
        self.state = SteerState()
        self.takeover = True
        """The next cycle is this replica's first as leader: stale hotspot taints are cleaned at once."""
        self.tainted_nodes: set[str] = set()
        """Nodes this replica has put the hotspot taint on (cleared on shutdown and lost leadership)."""

    def restart(self) -> None:
        """A start or a takeover: judge every taint afresh next cycle."""
        self.takeover = True
        self.state = SteerState()

    def decide(self, snapshot: ClusterSnapshot, decided: Plan, acting: bool) -> SteerDecision:
        """Which taints to add and remove; nothing when the feature is off or this replica may not act."""
        if self.tainter is None or not acting:
            return SteerDecision()
        decision = steer(
            snapshot.nodes,
            decided.node_reports,
            self.state,
            self.remove_after,
            takeover=self.takeover,
            moving=decided.moving,
        )
        self.takeover = False
        self.state = decision.state
        return decision

    def add(self, decision: SteerDecision) -> list[Mapping[str, str]]:
        return self._apply(decision, adding=True)

    def remove(self, decision: SteerDecision) -> list[Mapping[str, str]]:
        return self._apply(decision, adding=False)

    def _apply(self, decision: SteerDecision, *, adding: bool) -> list[Mapping[str, str]]:
        if self.tainter is None:
            return []
        call: Callable[[str, str], TaintResult] = self.tainter.add if adding else self.tainter.remove
        done: list[Mapping[str, str]] = []
        for change in decision.add if adding else decision.remove:
            result = call(change.node, change.message)
            if adding and result.result in KEPT:
                self.tainted_nodes.add(change.node)
            elif not adding and result.result in GONE:
                self.tainted_nodes.discard(change.node)
            done.append(result.to_dict())
        return done
