"""Adding and removing our own ``PreferNoSchedule`` taint on nodes, without ever losing anyone else's.

Each change is one JSON patch (RFC 6902) on the node that first *tests* ``/spec/taints`` against the list
just read, then adds or removes only our entry. If anything changed the taints in between (a cordon, an
operator's ``kubectl taint``, the node controller), the test fails (HTTP 422), nothing is written, and
the change is retried on a fresh read. So no concurrent change is ever overwritten, and no other taint
is ever touched. Every change is an Event on the node. Needs node ``get`` (granted by the base
ClusterRole) and ``patch`` (``manifests/components/hotspot-taint``, which the base includes; the admission
policy of ``components/admission-policy`` lets it change nothing but this taint). A refusal (403) is the
result ``forbidden``: ``service/steering.py`` turns steering off for a while and says so once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from descheduler.kube.api import KubeApi, path_segment
from descheduler.kube.errors import ApiStatusError, KubeError
from descheduler.kube.events import EventRecorder
from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY, TAINT_VALUE

log = structlog.get_logger("descheduler.kube.taints")

JSON_PATCH = "application/json-patch+json"
ATTEMPTS = 3
"""Reads and patches per change; a node whose taints keep changing under us is left for the next cycle."""

ADDED_REASON = "HotspotTainted"
REMOVED_REASON = "HotspotUntainted"
REFUSED_REASON = "HotspotTaintRefused"
FORBIDDEN = 403
"""RBAC without node ``patch``, or the admission policy: the result ``forbidden``, for ``Steering``."""


@dataclass(frozen=True, slots=True)
class TaintOutcome:
    node: str
    action: str
    """``add`` or ``remove``."""
    result: str
    """``added``, ``removed``, ``unchanged`` (already so), ``would-add``/``would-remove`` (dry-run),
    ``node-gone``, ``conflict`` (taints kept changing), ``forbidden`` (403: RBAC or an admission policy),
    ``failed``."""
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {"node": self.node, "action": self.action, "result": self.result}
        if self.message:
            out["message"] = self.message
        return out


def _ours(taint: Any) -> bool:
    return isinstance(taint, dict) and taint.get("key") == TAINT_KEY and taint.get("effect") == TAINT_EFFECT


def taint_patch(current: list[Any] | None, add: bool) -> list[dict[str, Any]] | None:
    """The JSON patch that adds or removes our taint given the taints just read; None if nothing to do.

    The first operation tests the whole list (``null`` when the node has none), so the patch applies
    only to exactly the list it was computed from.
    """
    taints = list(current or [])
    test: dict[str, Any] = {"op": "test", "path": "/spec/taints", "value": current}
    if add:
        if any(_ours(t) for t in taints):
            return None
        ours = {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": TAINT_EFFECT}
        if current is None:
            return [test, {"op": "add", "path": "/spec/taints", "value": [ours]}]
        return [test, {"op": "add", "path": "/spec/taints/-", "value": ours}]
    positions = [i for i, t in enumerate(taints) if _ours(t)]
    if not positions:
        return None
    # Highest index first, so the earlier indexes stay valid while the operations apply.
    return [test, *({"op": "remove", "path": f"/spec/taints/{i}"} for i in reversed(positions))]


class NodeTainter:
    """Applies ``SteerDecision``s. In dry-run it reads nothing, writes nothing and says what it would do."""

    def __init__(
        self,
        api: KubeApi,
        events: EventRecorder | None,
        *,
        dry_run: bool,
        request_timeout: float = 10.0,
        guard: Callable[[], bool] = lambda: True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.events = events
        self.dry_run = dry_run
        self.timeout = request_timeout
        self.guard = guard
        """Checked before adding a taint: only the leader adds. Removing is always allowed (clean-up)."""
        self.monotonic = monotonic

    def add(self, node: str, message: str) -> TaintOutcome:
        if self.dry_run:
            return TaintOutcome(node, "add", "would-add", message)
        if not self.guard():
            return TaintOutcome(node, "add", "failed", "not leader (or stopping): taint not added")
        return self._change(node, True, message)

    def remove(self, node: str, message: str) -> TaintOutcome:
        if self.dry_run:
            return TaintOutcome(node, "remove", "would-remove", message)
        return self._change(node, False, message)

    def report_refused(self, node: str, message: str) -> None:
        """A Warning Event on ``node``: the server refused our taint there, and steering is off for now."""
        if self.events is not None:
            self.events.record_node(node, "", "Warning", REFUSED_REASON, message, action="Taint")

    def remove_all(self, nodes: Iterable[str], message: str) -> list[TaintOutcome]:
        """Shutdown and lost leadership: our taint off every listed node (best effort, one pass)."""
        return [self.remove(node, message) for node in sorted(set(nodes))]

    def _change(self, node: str, add: bool, message: str) -> TaintOutcome:
        action = "add" if add else "remove"
        path = f"/api/v1/nodes/{path_segment(node)}"
        last = ""
        for _ in range(ATTEMPTS):
            try:
                obj = self.api.request("GET", path, timeout=self.timeout)
            except ApiStatusError as exc:
                if exc.status == 404:
                    return TaintOutcome(node, action, "node-gone")
                return self._failed(node, action, str(exc), exc.status)
            except KubeError as exc:
                return self._failed(node, action, str(exc))
            spec = obj.get("spec") if isinstance(obj, dict) else None
            current = spec.get("taints") if isinstance(spec, dict) else None
            patch = taint_patch(current if isinstance(current, list) else None, add)
            if patch is None:
                return TaintOutcome(node, action, "unchanged")
            try:
                self.api.request("PATCH", path, body=patch, timeout=self.timeout, content_type=JSON_PATCH)
            except ApiStatusError as exc:
                if exc.status in (409, 422):  # the taints changed since our read: read again
                    last = exc.message
                    continue
                if exc.status == 404:
                    return TaintOutcome(node, action, "node-gone")
                return self._failed(node, action, str(exc), exc.status)
            except KubeError as exc:
                return self._failed(node, action, str(exc))
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            if self.events is not None:
                self.events.record_node(
                    node, uid, "Normal", ADDED_REASON if add else REMOVED_REASON, message, action="Taint"
                )
            log.info("node_taint", node=node, action=action, key=TAINT_KEY, message=message)
            return TaintOutcome(node, action, "added" if add else "removed", message)
        log.warning("node_taint_conflict", node=node, action=action, attempts=ATTEMPTS, error=last)
        return TaintOutcome(node, action, "conflict", f"taints kept changing ({ATTEMPTS} attempts): {last}")

    @staticmethod
    def _failed(node: str, action: str, error: str, status: int = 0) -> TaintOutcome:
        """A refusal (403) is ``forbidden`` and logged by ``Steering`` once; anything else is logged here."""
        if status == FORBIDDEN:
            log.debug("node_taint_forbidden", node=node, action=action, error=error)
            return TaintOutcome(node, action, "forbidden", error)
        log.warning("node_taint_failed", node=node, action=action, error=error)
        return TaintOutcome(node, action, "failed", error)
