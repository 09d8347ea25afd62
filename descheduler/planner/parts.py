"""The planner's exchangeable parts: the fast ones it ships with, chosen by ``plan(..., parts=)``.

Each fast part takes shortcuts for a large cluster (tiered ranking, verdicts kept per workload and per pod,
budgets looked up by label, a one-pass usage estimate, a bounded destination search, requested sums kept
in the index). ``reference.py`` holds a straightforward version of each; a plan made with those must equal
the plan made with these, field for field. Tests choose them by passing ``REFERENCE``; nothing swaps them
behind the planner's back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from descheduler.planner.candidates import PodFilter
from descheduler.planner.estimate import UsageEstimator
from descheduler.planner.fit import DestinationSet
from descheduler.planner.index import ClusterIndex
from descheduler.planner.limits import PdbTracker
from descheduler.planner.order import Ranking


@dataclass(frozen=True, slots=True)
class Parts:
    """Which class (or function) does each optimised step of a cycle."""

    ranking: type[Ranking] = Ranking
    """Orders one hotspot's candidates, re-ranked after each eviction."""
    pod_filter: type[PodFilter] = PodFilter
    """Decides which pods may move at all."""
    pdb_tracker: type[PdbTracker] = PdbTracker
    """Finds each pod's disruption budgets and counts this cycle's disruptions against them."""
    estimator: type[UsageEstimator] = UsageEstimator
    """Estimates each node's usage from its sample, its pods and recent departures."""
    destinations: type[DestinationSet] = DestinationSet
    """Finds the low node each evicted pod is expected to land on."""
    requested: Callable[[ClusterIndex, str], dict[str, int]] = ClusterIndex.requested_on
    """A node's summed pod requests (shared: the planner copies it)."""


FAST = Parts()
"""What the planner uses unless told otherwise."""
