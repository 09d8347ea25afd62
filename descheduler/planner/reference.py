"""The planner's reference parts: every shortcut of the fast planner (``parts.FAST``) undone.

This is the one place the straightforward versions live; nothing in the product uses them. Tests plan
with ``plan(..., parts=REFERENCE)`` and compare, field for field, with the plan the fast parts make: the
shortcuts are for speed only and may never change which pods move, in which order, where to, or why the
others stay.

- ``FullSortRanking`` instead of ``order.Ranking``: every candidate sorted by the full
  ``order.sort_key`` (usage score from ``order.usage_score``, static key computed afresh, not the
  remembered ``rank_key``), the rest sorted again after each eviction;
- ``EveryPodFilter`` instead of ``candidates.PodFilter``: every check decided again for every pod (no
  per-workload verdict, no per-pod verdict kept in the ``ClusterIndex``);
- ``ScanningPdbTracker`` instead of ``limits.PdbTracker``: every budget of the pod's namespace tried;
- ``ShareByShareEstimator`` instead of ``estimate.UsageEstimator``: every ``PodShare`` built and
  ``estimate_node_usage`` called, a workload's latest sample found over every pod;
- ``Exhaustive`` instead of ``fit.DestinationSet``: every low node, coolest first, no bound, no cache
  (``REFERENCE_BOUNDED`` keeps the bounded search, whose no-destination messages say more);
- ``requested_afresh`` instead of ``ClusterIndex.requested_on``: the node's pods' requests summed again
  at every call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from descheduler.cluster.selectors import selector_matches
from descheduler.cluster.types import Pod, PodDisruptionBudget
from descheduler.planner.candidates import PodFilter, Rejection
from descheduler.planner.classify import NodeView
from descheduler.planner.estimate import NodeEstimate, UsageEstimator, count_pods, estimate_node_usage
from descheduler.planner.fit import DestinationSet
from descheduler.planner.index import ClusterIndex
from descheduler.planner.limits import PdbTracker
from descheduler.planner.order import Candidate, Ranking, RankKey, rank_key, sort_key, usage_score
from descheduler.planner.parts import Parts


class FullSortRanking(Ranking):
    """All candidates sorted by the full key at the current excess, re-sorted after each eviction."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        resources: Sequence[str],
        weights: Mapping[str, int],
        excess: Callable[[], Mapping[str, int]],
        keys: Callable[[Pod], RankKey] = rank_key,
    ) -> None:
        del keys  # the remembered rank keys: not used, every key is built afresh
        self.items = list(candidates)
        self.resources = resources
        self.weights = weights
        self.excess = excess
        self._sort(0)

    def _sort(self, start: int) -> None:
        excess = self.excess()

        def key(item: Candidate) -> tuple[int, int, int, int, int, int, float, float, str, str]:
            pod, vector = item
            scored = {name: vector.get(name, 0) for name in self.resources}
            return sort_key(pod, usage_score(scored, excess, self.weights))

        self.items[start:] = sorted(self.items[start:], key=key)
        self.position = start

    def rerank(self) -> None:
        self._sort(self.position)

    def __iter__(self) -> Iterator[Candidate]:
        while self.position < len(self.items):
            self.position += 1
            yield self.items[self.position - 1]


class EveryPodFilter(PodFilter):
    """Decides every pod on its own: nothing remembered, neither per workload nor per pod."""

    def check(self, pod: Pod) -> Rejection | None:
        return self.decide(pod)


class ScanningPdbTracker(PdbTracker):
    """Tries every budget of the pod's namespace, in snapshot order."""

    def __init__(
        self,
        pdbs: Sequence[PodDisruptionBudget],
        refusals: Mapping[str, float] | None = None,
        memo: object = None,
    ):
        super().__init__(pdbs, refusals)  # no memo: every budget is tried for every pod
        self.all = list(pdbs)

    def matching(self, pod: Pod) -> list[PodDisruptionBudget]:
        return [
            p for p in self.all if p.namespace == pod.namespace and selector_matches(p.selector, pod.labels)
        ]


class ShareByShareEstimator(UsageEstimator):
    """The formula as written: one ``PodShare`` per pod and departure, then ``estimate_node_usage``."""

    def estimate(
        self,
        node: str,
        sample: Mapping[str, int],
        sample_time: float,
        pods: Sequence[Pod],
        resources: Sequence[str],
    ) -> NodeEstimate:
        return count_pods(
            estimate_node_usage(sample, self.shares(node, pods, sample_time), resources), pods, resources
        )

    def _latest_by_workload(self) -> dict[str, tuple[float, Mapping[str, int]]]:
        """Every departure and every pod of the snapshot offered in turn, none skipped as unsampled."""
        latest: dict[str, tuple[float, Mapping[str, int]]] = {}
        offers = [(d.workload, d.left, d.usage) for items in self.departed.values() for d in items]
        for pod in self.index.snapshot.pods:
            own, ref = self.own_sample(pod), self.index.workload_of(pod)
            if own is not None and ref is not None:
                offers.append((ref.identity, self.usage.pods[pod.key].timestamp, own))
        for identity, when, vector in offers:
            if identity and (identity not in latest or latest[identity][0] < when):
                latest[identity] = (when, vector)
        return latest


class Exhaustive(DestinationSet):
    """The reference search: every low node, coolest first, no bound and no cache."""

    def find(
        self, pod: Pod, usage: Mapping[str, int], prod_usage: Mapping[str, int] | None
    ) -> tuple[NodeView | None, str]:
        for _, name in self.order:
            if not self._reject(self.views[name], pod, usage, prod_usage):
                return self.views[name], ""
        return None, "no low node fits"


def requested_afresh(index: ClusterIndex, node: str) -> dict[str, int]:
    """The node's pods' summed requests, summed now."""
    total: dict[str, int] = {}
    for pod in index.pods_on(node):
        for name, amount in pod.requests.items():
            total[name] = total.get(name, 0) + amount
    return total


REFERENCE = Parts(
    ranking=FullSortRanking,
    pod_filter=EveryPodFilter,
    pdb_tracker=ScanningPdbTracker,
    estimator=ShareByShareEstimator,
    destinations=Exhaustive,
    requested=requested_afresh,
)
"""Every part the straightforward way."""

REFERENCE_BOUNDED = replace(REFERENCE, destinations=DestinationSet)
"""The reference, but with the bounded destination search (its no-destination messages say more than the
exhaustive one's, so whole plans compare equal)."""
