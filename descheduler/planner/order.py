"""Which pod on a hotspot goes first, as Koordinator orders them, and Koordinator's class derivations.

Each key ascending: Koordinator priority class (free, batch, mid, prod, none), ``spec.priority``,
Kubernetes QoS, Koordinator QoS, ``pod-deletion-cost``, ``eviction-cost``; then the usage score
descending (the pod whose usage best covers the node's excess); then newest first; then namespace/name
so the order is total and the plan reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from descheduler.cluster.types import Pod

PRIORITY_CLASS_LABEL = "koordinator.sh/priority-class"
QOS_LABEL = "koordinator.sh/qosClass"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
EVICTION_COST = "scheduling.koordinator.sh/eviction-cost"
INT32_MAX = 2**31 - 1

PROD = "koord-prod"
MID = "koord-mid"
BATCH = "koord-batch"
FREE = "koord-free"
NONE = ""

# spec.priority bands of Koordinator's priority classes.
_BANDS = ((9000, 9999, PROD), (7000, 7999, MID), (5000, 5999, BATCH), (3000, 3999, FREE))
_PRIORITY_CLASS_ORDER = {FREE: 1, BATCH: 2, MID: 3, PROD: 4, NONE: 5}
_KOORD_QOS = ("LSE", "LSR", "LS", "BE", "SYSTEM")
_KOORD_QOS_ORDER = {"BE": 1, "LS": 2, "LSR": 3, "LSE": 4, "SYSTEM": 4, "": 5}
_KUBE_QOS_ORDER = {"BestEffort": 1, "Burstable": 2, "Guaranteed": 3}
_QOS_FROM_KUBE = {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}


def koord_qos(pod: Pod) -> str:
    """Koordinator QoS: a known ``koordinator.sh/qosClass`` label, else derived from the Kubernetes QoS
    class. An empty or unknown label counts as no label, as Koordinator's ``GetPodQoSClassWithDefault``
    reads it: such a pod still sorts and counts as prod by its Kubernetes QoS."""
    label = pod.labels.get(QOS_LABEL)
    if label in _KOORD_QOS:
        return label
    return _QOS_FROM_KUBE.get(pod.qos_class, NONE)


def koord_priority_class(pod: Pod, qos: str | None = None) -> str:
    """Koordinator priority class: label, else ``spec.priority`` band, else derived from Koordinator QoS
    (``qos``: the pod's ``koord_qos`` when the caller has it already)."""
    label = pod.labels.get(PRIORITY_CLASS_LABEL)
    raw = NONE
    if label is not None:
        raw = label if label in _PRIORITY_CLASS_ORDER and label != NONE else NONE
    elif pod.priority is not None:
        for low, high, name in _BANDS:
            if low <= pod.priority <= high:
                raw = name
                break
    if raw != NONE:
        return raw
    if qos is None:
        qos = koord_qos(pod)
    if qos in ("SYSTEM", "LSE", "LSR", "LS"):
        return PROD
    if qos == "BE":
        return BATCH
    return NONE


def is_prod(pod: Pod) -> bool:
    return koord_priority_class(pod) == PROD


def annotation_int32(pod: Pod, key: str) -> int:
    """An int32 annotation; absent or invalid counts as 0, as Kubernetes and Koordinator read them."""
    text = pod.annotations.get(key)
    if text is None:
        return 0
    try:
        value = int(text.strip(), 10)
    except ValueError:
        return 0
    if not -(2**31) <= value <= INT32_MAX:
        return 0
    return value


def _fit_score(ratio: float) -> float:
    """Koordinator's piecewise score: covering the excess exactly scores best (2), overshoot a bit less."""
    return 1.0 / ratio + 1.0 if ratio >= 1.0 else ratio


def weighted_mean(
    amounts: Mapping[str, int],
    against: Mapping[str, int],
    weights: Mapping[str, int],
    term: Callable[[float], float],
) -> float:
    """Weighted mean over resources of ``term(amount / against)``; nothing to compare with counts 0."""
    total = 0.0
    weight_sum = 0
    for name, amount in amounts.items():
        weight = weights.get(name, 0)
        if weight <= 0:
            continue
        weight_sum += weight
        reference = against.get(name, 0)
        if reference > 0:
            total += weight * term(amount / reference)
    return total / weight_sum if weight_sum else 0.0


def usage_score(usage: Mapping[str, int], excess: Mapping[str, int], weights: Mapping[str, int]) -> float:
    """How well a pod's usage covers the node's excess over its high threshold, weighted per resource."""
    return weighted_mean(usage, excess, weights, _fit_score)


class UsageScorer:
    """``usage_score`` of many pods against one excess, with the per-resource terms resolved once.

    The arithmetic is ``weighted_mean``'s, term by term in the same order, so the scores are identical
    to the last bit (the order of pods with close scores depends on it)."""

    __slots__ = ("terms", "weight_sum")

    def __init__(self, resources: Sequence[str], weights: Mapping[str, int]) -> None:
        self.terms = [(name, weights.get(name, 0)) for name in dict.fromkeys(resources)]
        self.terms = [(name, weight) for name, weight in self.terms if weight > 0]
        self.weight_sum = sum(weight for _, weight in self.terms)

    def against(self, excess: Mapping[str, int]) -> Callable[[Mapping[str, int]], float]:
        """The score function for this excess (resources not in excess add nothing but keep their weight)."""
        active = [(name, weight, excess[name]) for name, weight in self.terms if excess.get(name, 0) > 0]
        weight_sum = self.weight_sum

        def score(usage: Mapping[str, int]) -> float:
            if not weight_sum:
                return 0.0
            total = 0.0
            for name, weight, reference in active:
                ratio = usage.get(name, 0) / reference
                total += weight * (1.0 / ratio + 1.0 if ratio >= 1.0 else ratio)
            return total / weight_sum

        return score


StaticKey = tuple[int, int, int, int, int, int]
"""The part of a pod's sort key that does not depend on the node's excess."""


def static_key(pod: Pod) -> StaticKey:
    """Koordinator's keys before the usage score: priority class, ``spec.priority``, QoS (Kubernetes,
    then Koordinator), deletion cost, eviction cost. Computed once per pod and cycle, then reused by
    every re-ranking (only the score changes as the node's excess shrinks)."""
    qos = koord_qos(pod)
    return (
        _PRIORITY_CLASS_ORDER[koord_priority_class(pod, qos)],
        pod.priority or 0,
        _KUBE_QOS_ORDER.get(pod.qos_class, 0),
        _KOORD_QOS_ORDER[qos],
        annotation_int32(pod, DELETION_COST),
        annotation_int32(pod, EVICTION_COST),
    )


def tie_key(pod: Pod, score: float) -> tuple[float, float, str, str]:
    """The rest of the sort key: usage score descending, newest first, then namespace/name."""
    return (-score, -pod.created, pod.namespace, pod.name)


def sort_key(pod: Pod, score: float) -> tuple[int, int, int, int, int, int, float, float, str, str]:
    """Ascending key: the first pod in this order is evicted first."""
    return static_key(pod) + tie_key(pod, score)


RankKey = tuple[StaticKey, float, str, str]
"""``sort_key`` without the usage score: the static key, then newest first, then namespace/name."""


def rank_key(pod: Pod) -> RankKey:
    """What orders a pod among others before (static key) and after (the rest) the usage score. It reads
    the pod alone, so the planner keeps it from cycle to cycle (``ClusterIndex.pod_memo``)."""
    return (static_key(pod), -pod.created, pod.namespace, pod.name)


Candidate = tuple[Pod, dict[str, int]]
"""A pod that passed the filters and its usage over the pool's resources."""


class Ranking:
    """One hotspot's candidates in ``sort_key`` order, re-ranked after each eviction (``rerank``).

    Iterating yields the best candidate first. The static part of the key splits the candidates into
    tiers taken in turn; only the tier being worked on is ranked by usage score, at the excess of that
    moment, and ranked again on the next step after ``rerank`` (the excess shrank, so the pod that now
    best covers what is left may be another). That is exactly the order of sorting every candidate by
    the full key and re-sorting the rest after each eviction, without scoring the tiers never reached
    (a hotspot is usually cured by its first pods).

    Within a tier the candidates are kept in the order of the key's parts after the score (newest first,
    then namespace/name: ``rank_key``); a ranking is a stable sort of those not yet yielded, in that
    order, by score descending, which is the full key's order without building a key per pod. ``keys``
    gives each pod's ``rank_key`` (the planner's is remembered across cycles)."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        resources: Sequence[str],
        weights: Mapping[str, int],
        excess: Callable[[], Mapping[str, int]],
        keys: Callable[[Pod], RankKey] = rank_key,
    ) -> None:
        keyed = sorted(((keys(pod), (pod, vector)) for pod, vector in candidates), key=_first)
        tiers: list[list[tuple[int, Candidate]]] = []
        tier: list[tuple[int, Candidate]] = []
        last: StaticKey | None = None
        for position, (key, item) in enumerate(keyed):
            if key[0] != last:
                last = key[0]
                tier = []
                tiers.append(tier)
            tier.append((position, item))
        self._tiers = tiers
        self._scorer = UsageScorer(resources, weights)
        self._excess = excess
        self._stale = True

    def rerank(self) -> None:
        """The node's excess changed: rank the candidates not yet yielded again before the next one."""
        self._stale = True

    def __iter__(self) -> Iterator[Candidate]:
        for tier in self._tiers:
            self._stale = True
            position = 0
            ranked = False
            while position < len(tier):
                if self._stale:
                    self._stale = False
                    if len(tier) - position > 1:
                        rest = tier[position:]
                        if ranked:
                            rest.sort(key=_first_int)  # back to rank-key order: the ties' order
                        score = self._scorer.against(self._excess())
                        rest.sort(key=lambda entry: score(entry[1][1]), reverse=True)
                        tier[position:] = rest
                        ranked = True
                yield tier[position][1]
                position += 1


def _first(pair: tuple[RankKey, Candidate]) -> RankKey:
    return pair[0]


def _first_int(pair: tuple[int, Candidate]) -> int:
    return pair[0]
