"""Destination check: a pod moves only if some low node can take it without going over.

A destination must accept the pod as the scheduler would (``nodeSelector`` and required node affinity,
NoSchedule/NoExecute taints, requests within allocatable minus the requests already there) unless
``nodeFit`` is false, and, always, its measured usage plus what this cycle already reserved there plus
the pod's usage must stay at or below its high threshold on every resource (and, for prod pods, at or
below its prod high threshold). This is what keeps an eviction from creating the next hotspot.
Among the nodes that fit, the coolest (weighted usage) is chosen and the pod's usage reserved there;
reservations live on the node's ``NodeView`` so both passes of a cycle see them.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping, Sequence

from descheduler.cluster.selectors import pod_node_affinity_matches, untolerated_taint
from descheduler.cluster.types import Pod
from descheduler.planner.classify import Levels, NodeView, weighted_score
from descheduler.planner.reasons import format_amount

AFFINITY = "fail nodeSelector/affinity"
TAINT = "have an untolerated taint"
REQUESTS = "lack allocatable for its requests"
LOAD = "would go over their high threshold"
PROD_LOAD = "would go over their prod high threshold"


class DestinationSet:
    """The low nodes of a pool (for the prod pass: the nodes low on both counts), coolest first."""

    def __init__(
        self, views: Sequence[NodeView], weights: Mapping[str, int], node_fit: bool, prod: bool
    ) -> None:
        self.weights = weights
        self.node_fit = node_fit
        self.prod = prod
        self.views = {v.name: v for v in views}
        self.order: list[tuple[float, str]] = sorted((self._score(v), v.name) for v in views)
        # An upper bound of any node's room per resource: reservations only shrink room, so a pod
        # larger than this bound fits nowhere without a scan.
        self.upper: dict[str, int] = {}
        for view in views:
            for name, room in self._levels(view).headroom().items():
                self.upper[name] = max(self.upper.get(name, room), room)
        self._no_fit: dict[Hashable, str] = {}

    def __len__(self) -> int:
        return len(self.views)

    def _levels(self, view: NodeView) -> Levels:
        if self.prod and view.prod is not None:
            return view.prod
        return view.levels

    def _score(self, view: NodeView) -> float:
        return weighted_score(view.levels.usage, view.levels.base, self.weights)

    def headroom(self) -> dict[str, int]:
        """Summed room below the high threshold (prod high in the prod pass), per resource."""
        total: dict[str, int] = {}
        for view in self.views.values():
            for name, room in self._levels(view).headroom().items():
                total[name] = total.get(name, 0) + room
        return total

    def _reject(
        self, view: NodeView, pod: Pod, usage: Mapping[str, int], prod_usage: Mapping[str, int] | None
    ) -> str:
        node = view.node
        if self.node_fit:
            if not pod_node_affinity_matches(pod, node):
                return AFFINITY
            if untolerated_taint(pod, node) is not None:
                return TAINT
            requested = view.requested_now()
            allocatable = node.allocatable
            for name, amount in pod.requests.items():
                if amount > 0 and amount > allocatable.get(name, 0) - requested.get(name, 0):
                    return REQUESTS
            if "pods" in allocatable and len(view.pods) + view.reserved_pods + 1 > allocatable["pods"]:
                return REQUESTS
        levels = view.levels
        for name, used in levels.usage.items():
            if used + usage.get(name, 0) > levels.high[name]:
                return LOAD
        if prod_usage is not None and view.prod is not None:
            prod = view.prod
            for name, used in prod.usage.items():
                if used + prod_usage.get(name, 0) > prod.high[name]:
                    return PROD_LOAD
        return ""

    def find(
        self, pod: Pod, usage: Mapping[str, int], prod_usage: Mapping[str, int] | None
    ) -> tuple[NodeView | None, str]:
        """The coolest destination that fits, or None and a message saying why none does."""
        if not self.views:
            return None, "there is no low node to move it to"
        room_usage = prod_usage if self.prod and prod_usage is not None else usage
        for name, amount in room_usage.items():
            if name in self.upper and amount > self.upper[name]:
                return None, (
                    f"its {name} usage ({format_amount(name, amount)}) is more than any low node has left "
                    "below its high threshold"
                )
        key = (
            tuple(sorted(pod.node_selector.items())),
            pod.required_node_terms,
            pod.tolerations,
            tuple(sorted(pod.requests.items())),
            tuple(sorted(usage.items())),
            tuple(sorted(prod_usage.items())) if prod_usage is not None else None,
        )
        cached = self._no_fit.get(key)
        if cached is not None:
            return None, cached
        failures: dict[str, int] = {}
        for _, name in self.order:
            view = self.views[name]
            problem = self._reject(view, pod, usage, prod_usage)
            if not problem:
                return view, ""
            failures[problem] = failures.get(problem, 0) + 1
        detail = ", ".join(
            f"{count} {what}" for what, count in sorted(failures.items(), key=lambda i: (-i[1], i[0]))
        )
        message = f"no low node fits ({len(self.views)} checked): {detail}"
        # Reservations only make destinations fuller, so the same pod shape fails for the rest of the cycle.
        self._no_fit[key] = message
        return None, message

    def reserve(
        self, view: NodeView, pod: Pod, usage: Mapping[str, int], prod_usage: Mapping[str, int] | None
    ) -> None:
        """Count the pod's usage, requests and slot on ``view`` for the rest of the cycle."""
        old = (self._score(view), view.name)
        for name, amount in usage.items():
            if name in view.levels.usage:
                view.levels.usage[name] += amount
        if prod_usage is not None and view.prod is not None:
            for name, amount in prod_usage.items():
                if name in view.prod.usage:
                    view.prod.usage[name] += amount
        requested = view.requested_now()
        for name, amount in pod.requests.items():
            requested[name] = requested.get(name, 0) + amount
        view.reserved_pods += 1
        if view.name in self.views:
            index = bisect.bisect_left(self.order, old)
            if index < len(self.order) and self.order[index] == old:
                del self.order[index]
            bisect.insort(self.order, (self._score(view), view.name))
