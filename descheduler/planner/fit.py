"""Destination check: a pod moves only if some low node can take it without going over.

A destination must accept the pod as the scheduler would (``nodeSelector`` and required node affinity,
NoSchedule/NoExecute taints, requests within allocatable minus the requests already there, and the
pod-to-pod checks of ``placement.py``) unless ``nodeFit`` is false, and, always, its measured usage
plus what this cycle already reserved there plus the pod's usage must stay at or below its high
threshold on every resource (and, for prod pods, at or below its prod high threshold). This is what
keeps an eviction from creating the next hotspot.
Among the nodes that fit, the coolest (weighted usage) is chosen and the pod's usage reserved there;
reservations live on the node's ``NodeView`` so both passes of a cycle see them.

Why the search stays near-linear in the cluster's size whatever its shape (a hotspot cycle can have tens
of thousands of candidates and thousands of low nodes; checking every pair is quadratic):

- Pods alike in what the scheduling checks read (node selector, required affinity, and tolerations when
  some low node is tainted) form a *group*; which low nodes a group may run on is decided once.
- Per group, an upper bound of what any of its nodes has left (unrequested allocatable per resource,
  pod slots, room below high per resource) rejects a pod that exceeds it without a scan. Reservations
  only shrink what nodes have left, so a bound stays valid for the rest of the cycle; a failed scan,
  which visits every node of the group anyway, makes it exact again.
- Every check is monotone in what the pod asks for, so a pod asking at least as much as one that fitted
  nowhere (on every request, usage and prod usage) fits nowhere either: a small cache of such failures
  per group answers without a scan.
- ``no_slots`` tells the planner when no low node has a pod slot left, so it stops at once.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Mapping, Sequence

from descheduler.cluster.selectors import pod_node_affinity_matches, untolerated_taint
from descheduler.cluster.types import Pod
from descheduler.planner.classify import Levels, NodeView, weighted_score
from descheduler.planner.devices import DeviceIndex
from descheduler.planner.placement import REASONS as PLACEMENT_REASONS
from descheduler.planner.placement import Neighbours
from descheduler.planner.reasons import format_amount

AFFINITY = "fail nodeSelector/affinity"
TAINT = "have an untolerated taint"
REQUESTS = "lack allocatable for its requests"
LOAD = "would go over their high threshold"
PROD_LOAD = "would go over their prod high threshold"
DEVICES = "lack free devices matching its resource claims"

MAX_FAILURES = 16
"""Failed demands remembered per group: enough for the few pod shapes that miss, cheap to compare."""

Dim = tuple[str, str]
"""One thing a pod asks of a node: ("request", cpu), ("slot", ""), ("usage", memory), ("prod", cpu)."""

_SLOT: Dim = ("slot", "")


class _Lane:
    """For pods of one group asking for the same requests and slot: the nodes that still have some of
    each, coolest first, an upper bound of what those nodes have left, and demands that fitted nowhere."""

    __slots__ = ("bound", "failures", "order")

    def __init__(self, order: list[tuple[float, str]]) -> None:
        self.order = order
        self.bound: dict[Dim, float] = {}
        """Per dimension, at least the most any node of ``order`` has left (filled on first use)."""
        self.failures: list[tuple[dict[Dim, int], str]] = []


class _Group:
    """Pods that the scheduling checks treat alike, and the low nodes they may run on."""

    __slots__ = ("eligible", "lanes", "static_failures")

    def __init__(self, eligible: set[str], static_failures: dict[str, int]) -> None:
        self.eligible = eligible
        self.static_failures = static_failures
        self.lanes: dict[tuple[Dim, ...], _Lane] = {}


class DestinationSet:
    """The low nodes of a pool (for the prod pass: the nodes low on both counts), coolest first."""

    def __init__(
        self,
        views: Sequence[NodeView],
        weights: Mapping[str, int],
        node_fit: bool,
        prod: bool,
        devices: DeviceIndex | None = None,
        neighbours: Neighbours | None = None,
    ) -> None:
        self.weights = weights
        self.devices = devices
        """The cycle's DRA devices (``evictResourceClaimPods``): a device-holding pod needs free ones."""
        self.neighbours = neighbours or Neighbours([v.node for v in views], {v.name: v.pods for v in views})
        """Every node's pods, for the pod-to-pod checks (``placement.py``); without it, the views'."""
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
        # Tolerations matter only if some destination has a taint that repels pods.
        self._tainted = node_fit and any(
            t.effect in ("NoSchedule", "NoExecute") for v in views for t in v.node.taints
        )
        self._groups: dict[Hashable, _Group] = {}
        self._with_slots = sum(1 for v in views if self._slots_left(v) > 0) if node_fit else len(views)

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

    def no_slots(self) -> bool:
        """True when no destination has a pod slot left (only with nodeFit): nothing can move any more."""
        return self.node_fit and self._with_slots == 0

    @staticmethod
    def _slots_left(view: NodeView) -> float:
        allocatable = view.node.allocatable
        if "pods" not in allocatable:
            return math.inf
        return allocatable["pods"] - len(view.pods) - view.reserved_pods

    def _reject(
        self,
        view: NodeView,
        pod: Pod,
        usage: Mapping[str, int],
        prod_usage: Mapping[str, int] | None,
        scheduling_checked: bool = False,
    ) -> str:
        """Why ``view`` cannot take the pod now ("" if it can). ``scheduling_checked``: affinity and
        taints are known to pass (the pod's group may run there)."""
        node = view.node
        if self.node_fit:
            if not scheduling_checked:
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
            if self.neighbours.matters(pod):
                problem = self.neighbours.problem(pod, node)
                if problem:
                    return problem
        levels = view.levels
        for name, used in levels.usage.items():
            if used + usage.get(name, 0) > levels.high[name]:
                return LOAD
        if prod_usage is not None and view.prod is not None:
            prod = view.prod
            for name, used in prod.usage.items():
                if used + prod_usage.get(name, 0) > prod.high[name]:
                    return PROD_LOAD
        if self.devices is not None and pod.resource_claims and not self.devices.fits(pod, node):
            return DEVICES
        return ""

    # --- groups, bounds and remembered failures -------------------------------------------------------

    def _group(self, pod: Pod) -> _Group:
        if not self.node_fit:
            key: Hashable = None
        else:
            key = (
                tuple(sorted(pod.node_selector.items())) if pod.node_selector else (),
                pod.required_node_terms,
                pod.tolerations if self._tainted else (),
            )
        group = self._groups.get(key)
        if group is None:
            eligible: set[str] = set()
            failures: dict[str, int] = {}
            for name, view in self.views.items():
                problem = ""
                if self.node_fit:
                    if not pod_node_affinity_matches(pod, view.node):
                        problem = AFFINITY
                    elif untolerated_taint(pod, view.node) is not None:
                        problem = TAINT
                if problem:
                    failures[problem] = failures.get(problem, 0) + 1
                else:
                    eligible.add(name)
            group = self._groups[key] = _Group(eligible, failures)
        return group

    def _demand(
        self, pod: Pod, usage: Mapping[str, int], prod_usage: Mapping[str, int] | None
    ) -> dict[Dim, int]:
        """What the pod asks of a node, per dimension; every check rejects more as any of these grows."""
        demand: dict[Dim, int] = {}
        if self.node_fit:
            for name, amount in pod.requests.items():
                if amount > 0:
                    demand["request", name] = amount
            demand[_SLOT] = 1
        for name, amount in usage.items():
            demand["usage", name] = amount
        if prod_usage is not None:
            for name, amount in prod_usage.items():
                demand["prod", name] = amount
        return demand

    def _lefts(self, view: NodeView, dims: Sequence[Dim]) -> list[float]:
        """What ``view`` has left in each of ``dims`` (infinite where the check does not apply to it)."""
        allocatable = view.node.allocatable
        requested = view.requested_now()
        levels, prod = view.levels, view.prod
        out: list[float] = []
        for kind, name in dims:
            if kind == "request":
                out.append(allocatable.get(name, 0) - requested.get(name, 0))
            elif kind == "slot":
                out.append(self._slots_left(view))
            else:
                chosen = levels if kind == "usage" else prod
                if chosen is None or name not in chosen.usage:
                    out.append(math.inf)
                else:
                    out.append(chosen.high[name] - chosen.usage[name])
        return out

    def _left_of(self, dim: Dim) -> Callable[[NodeView], float]:
        """``_lefts`` of one dimension, as a function of the node (for maxima over many nodes)."""
        kind, name = dim
        if kind == "request":

            def unrequested(view: NodeView) -> float:
                return view.node.allocatable.get(name, 0) - view.requested_now().get(name, 0)

            return unrequested
        if kind == "slot":
            return self._slots_left
        prod = kind != "usage"

        def room(view: NodeView) -> float:
            chosen = view.prod if prod else view.levels
            if chosen is None or name not in chosen.usage:
                return math.inf
            return chosen.high[name] - chosen.usage[name]

        return room

    def _bound(self, lane: _Lane, dim: Dim) -> float:
        found = lane.bound.get(dim)
        if found is None:
            views = self.views
            found = max(map(self._left_of(dim), [views[n] for _, n in lane.order]), default=-math.inf)
            lane.bound[dim] = found
        return found

    def _refresh(self, lane: _Lane, dims: Sequence[Dim]) -> None:
        """Make the lane's bounds exact for ``dims`` (after a scan found no node: they only shrank)."""
        views = self.views
        # One pass per node (``_lefts``), then each dimension's maximum over the nodes.
        lefts = [self._lefts(views[name], dims) for _, name in lane.order]
        columns = zip(*lefts, strict=True) if lefts else [()] * len(dims)
        for dim, column in zip(dims, columns, strict=True):
            lane.bound[dim] = max(column, default=-math.inf)

    def _beyond_bound(self, group: _Group, lane: _Lane, demand: Mapping[Dim, int]) -> str:
        bounds = lane.bound
        for dim, amount in demand.items():
            bound = bounds.get(dim)
            if bound is None:
                bound = self._bound(lane, dim)
            if amount <= bound:
                continue
            qualifier = "low node it may run on" if group.static_failures else "low node"
            kind, name = dim
            if kind == "request":
                return (
                    f"its {name} request ({format_amount(name, amount)}) is more than any {qualifier} "
                    "has unrequested"
                )
            if kind == "slot":
                return f"no {qualifier} has a free pod slot"
            what = "prod usage" if kind == "prod" else "usage"
            where = "its prod high threshold" if kind == "prod" else "its high threshold"
            return (
                f"its {name} {what} ({format_amount(name, amount)}) is more than any {qualifier} has left "
                f"below {where}"
            )
        return ""

    @staticmethod
    def _remember(lane: _Lane, demand: dict[Dim, int], message: str) -> None:
        """Keep only the least demanding failures: one asking at least as much as another adds nothing."""
        kept = [(d, m) for d, m in lane.failures if not _covers(d, demand)]
        kept.append((demand, message))
        lane.failures = kept[-MAX_FAILURES:]

    # --- the search -----------------------------------------------------------------------------------

    def _message(self, failures: Mapping[str, int]) -> str:
        detail = ", ".join(
            f"{count} {what}" for what, count in sorted(failures.items(), key=lambda i: (-i[1], i[0]))
        )
        return f"no low node fits ({len(self.views)} checked): {detail}"

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
        group = self._group(pod)
        if not group.eligible:
            return None, self._message(group.static_failures)
        demand = self._demand(pod, usage, prod_usage)
        needs = tuple(sorted(d for d in demand if d[0] in ("request", "slot")))
        lane = group.lanes.get(needs)
        if lane is None:
            lane = group.lanes[needs] = _Lane(
                [
                    (score, name)
                    for score, name in self.order
                    if name in group.eligible and self._has_room(self.views[name], needs)
                ]
            )
        if lane.order:
            beyond = self._beyond_bound(group, lane, demand)
            if beyond:
                return None, beyond
            for failed, message in lane.failures:
                if _covers(demand, failed):
                    return None, message
        failures = dict(group.static_failures)
        full = len(group.eligible) - len(lane.order)
        if full:
            failures[REQUESTS] = failures.get(REQUESTS, 0) + full
        if not lane.order:
            return None, self._message(failures)
        for _, name in lane.order:
            view = self.views[name]
            problem = self._reject(view, pod, usage, prod_usage, True)
            if not problem:
                return view, ""
            failures[problem] = failures.get(problem, 0) + 1
        message = self._message(failures)
        # Reservations only make destinations fuller: a pod asking at least this much fails for the rest of
        # the cycle, and what the lane's nodes have left is now known exactly. Not after a device-holding
        # pod, nor after a refusal for the pod's neighbours: it may have failed on devices, labels or
        # neighbours alone, which another pod need not share.
        if not (self.devices is not None and pod.resource_claims) and PLACEMENT_REASONS.isdisjoint(failures):
            self._remember(lane, demand, message)
        self._refresh(lane, list(demand))
        return None, message

    def reserve(
        self, view: NodeView, pod: Pod, usage: Mapping[str, int], prod_usage: Mapping[str, int] | None
    ) -> None:
        """Count the pod's usage, requests and slot on ``view`` for the rest of the cycle."""
        old = (self._score(view), view.name)
        had_slot = self._slots_left(view) > 0
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
        self.neighbours.add(pod, view.name)
        if self.devices is not None and pod.resource_claims:
            self.devices.take(pod, view.node)
        if view.name in self.views:
            if self.node_fit and had_slot and self._slots_left(view) <= 0:
                self._with_slots -= 1
            new = (self._score(view), view.name)
            _move(self.order, old, new)
            for group in self._groups.values():
                if view.name not in group.eligible:
                    continue
                for needs, lane in group.lanes.items():
                    _move(lane.order, old, new if self._has_room(view, needs) else None)

    def _has_room(self, view: NodeView, needs: Sequence[Dim]) -> bool:
        return all(left > 0 for left in self._lefts(view, needs))


def _move(order: list[tuple[float, str]], old: tuple[float, str], new: tuple[float, str] | None) -> None:
    """Re-place one node in a coolest-first order (``new`` None: drop it)."""
    index = bisect.bisect_left(order, old)
    if index < len(order) and order[index] == old:
        del order[index]
    if new is not None:
        bisect.insort(order, new)


def _covers(demand: Mapping[Dim, int], failed: Mapping[Dim, int]) -> bool:
    """Whether ``demand`` asks at least as much as ``failed`` on every dimension ``failed`` asked for."""
    asked = demand.get
    for dim, amount in failed.items():  # noqa: SIM110 (a loop: all() over a generator costs twice this)
        if asked(dim, 0) < amount:
            return False
    return True
