"""Hotspot taints as the runner applies them: decide with ``planner/steer.py``, put taints on before the
cycle's evictions (so the replacements are already steered away), take them off after.

Remembers which nodes this replica tainted, so the service can clear them on shutdown and when the
Lease is lost, and treats the first cycle after a start or a takeover as a takeover (stale taints of a
previous leader are judged at once).

A taint the API server refuses (403: RBAC without node ``patch``, or the admission policy) turns steering
off: said once (a warning log line, a Warning Event on the node, ``problem()`` for /readyz and the cycle
record, hence ``descheduler_steering_active``), no taint is touched until ``retry_seconds`` have passed, then
one is tried again. Evictions go on meanwhile, unsteered, with the ping-pong guard; nothing crashes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from descheduler.cluster.types import ClusterSnapshot
from descheduler.planner import Plan
from descheduler.planner.steer import SteerDecision, SteerState, steer
from descheduler.service.edges import Tainter, TaintResult

log = structlog.get_logger("descheduler.steering")

KEPT = frozenset({"added", "unchanged"})
GONE = frozenset({"removed", "unchanged", "node-gone"})
FORBIDDEN = "forbidden"
"""A ``TaintResult.result``: the API server refused the patch (403)."""
DONE = frozenset({"added", "removed"})
"""Results that prove the server lets us write our taint again."""
RETRY_SECONDS = 300.0
"""Seconds steering stays off after a refusal before a taint is tried again (RBAC or a policy may change)."""


@dataclass(frozen=True)
class Refusal:
    """Why steering is off: the node whose taint the server refused, its answer, and when to try again."""

    node: str
    message: str
    retry_at: float


class Steering:
    """The runner's hotspot taints (``tainter`` None: the feature is off and nothing happens)."""

    def __init__(
        self,
        tainter: Tainter | None,
        remove_after_cycles: int,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.tainter = tainter
        self.remove_after = remove_after_cycles
        self.monotonic = monotonic
        self.retry_seconds = retry_seconds
        self.refusal: Refusal | None = None
        """Set while the API server refuses our taint (steering off); None while steering works."""
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
        if self.tainter is None or not acting or self._paused():
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
            if self._paused():
                break  # refused earlier in this cycle: the other nodes would be refused the same way
            result = call(change.node, change.message)
            if adding and result.result in KEPT:
                self.tainted_nodes.add(change.node)
            elif not adding and result.result in GONE:
                self.tainted_nodes.discard(change.node)
            done.append(result.to_dict())
            if result.result == FORBIDDEN:
                self._refused(change.node, result.to_dict().get("message", ""))
            elif result.result in DONE and self.refusal is not None:
                log.info("steering_restored", node=change.node, refused_before=self.refusal.message)
                self.refusal = None
        return done

    def _paused(self) -> bool:
        return self.refusal is not None and self.monotonic() < self.refusal.retry_at

    def _refused(self, node: str, message: str) -> None:
        """Steering off until ``retry_seconds`` from now; said once, when it turns off (not on each retry)."""
        first = self.refusal is None
        self.refusal = Refusal(node, message, self.monotonic() + self.retry_seconds)
        if not first or self.tainter is None:
            return
        why = (
            f"the API server refused the hotspot taint on node {node} ({message}); working on without "
            f"steering (the ping-pong guard still backs off workloads), trying again every "
            f"{self.retry_seconds:.0f}s"
        )
        log.warning("steering_refused", node=node, error=message, retry_seconds=self.retry_seconds)
        self.tainter.report_refused(node, why)

    def problem(self) -> str:
        """Why steering is off, for /readyz and the cycle record; ``""`` while it works (or is not on)."""
        if self.refusal is None:
            return ""
        left = max(0.0, self.refusal.retry_at - self.monotonic())
        return (
            f"steering off: the API server refused the hotspot taint on node {self.refusal.node} "
            f"({self.refusal.message}); next try in {left:.0f}s"
        )
