"""Migration-aware node usage: a node's usage follows the pods that are on it *now*.

A node's usage sample is an average over the metrics window (5 minutes with the default Prometheus
queries). Right after an eviction it still holds the evicted pod's load, and the node the replacement
landed on does not hold it yet. Deciding on the raw sample makes the planner evict again from a node it
has already cured, and pile pods onto a node that has just received some. So, per node and resource::

    share(p)   = the part of the window [T - window, T] pod p spent on the node   (T: the node's sample time)
    other      = max(0, node sample - sum over pods on the node during the window of sample(p) * share(p))
    estimate   = other + sum over pods on the node now of usage(p)
    usage(p)   = sample(p)                                   when p has its own sample
               = latest(p) * (1 - share(p))                  when it has none yet

Two figures come out, because the two uses of a node's usage err in opposite directions ("assume the
worst for safety"). ``usage`` counts every pod bound to the node, started or not: the *upper* bound, used
where a node receives pods (is it low, is there room below its high threshold), so a replacement that
was just bound there already takes its room. ``running`` leaves out the pods that have no sample and have
not started (phase not ``Running``): the *lower* bound, used where a node gives pods away (is it over),
because evicting on a projection of load that is not running yet is the unsafe direction; the node is
judged again once those pods run.

``other`` is what runs outside the pods (system daemons, kubelet, page-cache-free kernel memory). "Pods
on the node during the window" are the pods the snapshot puts there (terminating ones included) and the
pods this descheduler evicted from it (``Departure``); "pods on the node now" leave out terminating and
evicted ones, so an evicted pod leaves the figure at once. ``latest(p)`` is the most recent sample of a
pod of the same workload (an evicted predecessor included), else the pod's requests; the ``1 - share``
factor keeps a long-running pod without a sample (its load is already inside ``other``) from counting
twice, while a replacement that just started counts in full. When the pods' samples add up to more than
the node's sample (the two measures disagree), ``other`` is 0 and the estimate is the sample plus the
change since it (``sample - pods' parts + pods now``, never below 0), so an unchanged node always keeps
its sample.

Everything here is pure: ``plan`` calls it, so the live service, ``once`` and ``simulate`` agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from descheduler.cluster.types import Pod, UsageSnapshot
from descheduler.planner.index import ClusterIndex
from descheduler.planner.state import Departure


@dataclass(frozen=True, slots=True)
class PodShare:
    """One pod's part in its node's figures."""

    sample: Mapping[str, int] | None
    """Its own measured usage; None when it has no sample (yet)."""
    share: float
    """Part of the metrics window (0..1) the pod spent on the node, i.e. how much of it is in the sample."""
    current: bool
    """On the node now: not terminating, not evicted."""
    latest: Mapping[str, int] | None = None
    """For a pod without a sample: its workload's most recent sample, else its requests."""
    running: bool = True
    """Its containers have started (phase ``Running``). One that has not and has no sample counts in
    ``usage`` (the node's room is taken) but not in ``running`` (the node is not over because of it)."""


@dataclass(frozen=True, slots=True)
class NodeEstimate:
    sample: dict[str, int]
    """The node's raw usage sample."""
    other: dict[str, int]
    """Usage that belongs to no pod: the sample minus the pods' parts in it, never negative."""
    usage: dict[str, int]
    """``other`` plus the usage of every pod on the node now: the upper bound, for receiving pods."""
    running: dict[str, int] = field(default_factory=dict)
    """As ``usage`` without the pods that have neither a sample nor started: the lower bound, for judging
    whether the node is over (a source of evictions). Never above ``usage``; left empty, it is ``usage``."""

    def __post_init__(self) -> None:
        if not self.running:
            self.running.update(self.usage)


def window_share(start: float, end: float | None, sample_time: float, window: float) -> float:
    """Part of the window ``[sample_time - window, sample_time]`` inside ``[start, end)``, from 0 to 1.

    A window of 0 (an instantaneous source) is all or nothing: on the node at ``sample_time`` or not.
    """
    if window <= 0:
        return 1.0 if start <= sample_time and (end is None or end > sample_time) else 0.0
    low = max(start, sample_time - window)
    high = sample_time if end is None else min(end, sample_time)
    return max(0.0, min(1.0, (high - low) / window))


def estimate_node_usage(
    sample: Mapping[str, int], pods: Iterable[PodShare], resources: Sequence[str]
) -> NodeEstimate:
    """The node's usage this cycle from its sample and its pods' shares (formula in the module doc).

    ``pods`` (the resource) is not measured: the sample and the estimate both count the pods on the
    node now; callers set it.
    """
    names = [name for name in resources if name != "pods"]
    inside = dict.fromkeys(names, 0.0)
    now = dict.fromkeys(names, 0.0)
    pending = dict.fromkeys(names, 0.0)
    """The part of ``now`` projected for pods that have not started: in ``usage``, not in ``running``."""
    for pod in pods:
        if pod.sample is not None:
            for name in names:
                amount = pod.sample.get(name, 0)
                inside[name] += amount * pod.share
                if pod.current:
                    now[name] += amount
        elif pod.current and pod.latest is not None and pod.share < 1.0:
            for name in names:
                projected = pod.latest.get(name, 0) * (1.0 - pod.share)
                now[name] += projected
                if not pod.running:
                    pending[name] += projected
    raw = {name: int(sample.get(name, 0)) for name in names}
    other = {name: max(0, raw[name] - round(inside[name])) for name in names}
    # other + now, except when the pods' samples add up to more than the node's own (two sources that
    # disagree): then the node's sample is trusted and only the change since it is applied, so an
    # unchanged node always keeps its sample.
    usage = {name: max(0, raw[name] - round(inside[name]) + round(now[name])) for name in names}
    running = {
        name: min(usage[name], max(0, raw[name] - round(inside[name]) + round(now[name] - pending[name])))
        for name in names
    }
    return NodeEstimate(sample=raw, other=other, usage=usage, running=running)


class UsageEstimator:
    """Builds each node's ``PodShare`` list from one cycle's snapshot, usage and recent departures."""

    def __init__(
        self, usage: UsageSnapshot, index: ClusterIndex, departures: Sequence[Departure], window: float
    ) -> None:
        self.usage = usage
        self.index = index
        self.window = window
        self.departed: dict[str, list[Departure]] = {}
        self.claimed: dict[str, Departure] = {}
        """Pod keys whose sample may still be an evicted predecessor's (a StatefulSet pod keeps its name)."""
        for departure in departures:
            if departure.uid and departure.uid in index.pod_uids:
                continue  # still in the snapshot (terminating): counted as a pod of its node
            self.departed.setdefault(departure.node, []).append(departure)
            previous = self.claimed.get(departure.pod)
            if previous is None or previous.left < departure.left:
                self.claimed[departure.pod] = departure
        self._latest: dict[str, tuple[float, Mapping[str, int]]] | None = None
        self.sampled = index.nodes_holding(usage.pods) if usage.pods else set()
        """Nodes with a pod that has a sample. A cycle fetches pod usage for the few nodes
        that need it, so most nodes have none, and their estimate needs no per-pod look-up."""

    def own_sample(self, pod: Pod) -> Mapping[str, int] | None:
        claimed = self.claimed.get(pod.key)
        if claimed is not None and claimed.uid != pod.uid:
            return None
        sample = self.usage.pods.get(pod.key)
        return sample.resources if sample is not None else None

    def _latest_by_workload(self) -> dict[str, tuple[float, Mapping[str, int]]]:
        if self._latest is None:
            latest: dict[str, tuple[float, Mapping[str, int]]] = {}

            def offer(identity: str, when: float, vector: Mapping[str, int]) -> None:
                if identity and (identity not in latest or latest[identity][0] < when):
                    latest[identity] = (when, vector)

            for items in self.departed.values():
                for departure in items:
                    offer(departure.workload, departure.left, departure.usage)
            sampled = self.sampled
            # Without pod samples (classifying on node usage alone, before pod usage is fetched) no pod
            # can offer anything: the scan of every pod is skipped.
            for pod in self.index.snapshot.pods if self.usage.pods else ():
                if pod.owner is None:
                    continue
                # A pod in a node's bucket (bound, not terminal) has a sample only on a sampled node.
                bucketed = pod.node_name and pod.phase not in ("Succeeded", "Failed")
                if bucketed and pod.node_name not in sampled:
                    continue
                if pod.key not in self.usage.pods:
                    continue
                own = self.own_sample(pod)
                ref = self.index.workload_of(pod)
                if own is not None and ref is not None:
                    offer(ref.identity, self.usage.pods[pod.key].timestamp, own)
            self._latest = latest
        return self._latest

    def latest(self, pod: Pod) -> Mapping[str, int]:
        """The most recent sample of a pod of the same workload, else the pod's requests.

        A pod that took an evicted pod's name (a StatefulSet's) takes that pod's usage first."""
        predecessor = self.claimed.get(pod.key)
        if predecessor is not None and predecessor.uid != pod.uid:
            return predecessor.usage
        ref = self.index.workload_of(pod)
        if ref is not None:
            found = self._latest_by_workload().get(ref.identity)
            if found is not None:
                return found[1]
        return pod.requests

    def shares(self, node: str, pods: Sequence[Pod], sample_time: float) -> list[PodShare]:
        out: list[PodShare] = []
        for pod in pods:
            share = window_share(pod.created, None, sample_time, self.window)
            own = self.own_sample(pod)
            current = not pod.terminating
            latest = self.latest(pod) if own is None and current and share < 1.0 else None
            out.append(
                PodShare(
                    sample=own, share=share, current=current, latest=latest, running=pod.phase == "Running"
                )
            )
        for departure in self.departed.get(node, ()):
            share = window_share(departure.created, departure.left, sample_time, self.window)
            out.append(PodShare(sample=departure.usage, share=share, current=False))
        return out

    def estimate(
        self,
        node: str,
        sample: Mapping[str, int],
        sample_time: float,
        pods: Sequence[Pod],
        resources: Sequence[str],
    ) -> NodeEstimate:
        """``estimate_node_usage(sample, self.shares(...), resources)``, without a ``PodShare`` per pod.

        Every node is estimated every cycle (150,000 pods at 5,000 nodes), so the common cases take
        shortcuts: a node where every pod was there for the whole window and none left it is its sample
        when none of its pods has a sample (a cycle fetches pod usage for a few nodes), else the plain sum
        of its pods' samples; anything else takes the pass over its pods. The arithmetic is the formula's,
        term by term, so the figures are identical to the last bit (unit tests hold them together)."""
        window = self.window
        start = sample_time - window
        # window_share(created, None, sample_time, window), inlined; the same for every pod that was
        # there for the whole window (most of them).
        whole = window_share(start, None, sample_time, window)
        settled = self._settled(node, pods, sample_time, whole)
        if settled and node not in self.sampled:
            # Nothing to take out of the sample or put back: the estimate is the sample. A function of the
            # sample's figures and the pods alone, so the classification before the pod usage fetch and the
            # plan after it compute it once (kept in the index, by the node's bucket and the figures).
            memo = self.index.node_memo("unsampled estimate", tuple(resources))
            figures = tuple([sample.get(name, 0) for name in resources])
            entry = memo.get(node)
            if entry is not None and entry[0] is pods and entry[1] == figures:
                found: NodeEstimate = entry[2]
                return found
            result = self._from_parts(sample, pods, resources, None)
            if pods is self.index.pods_by_node.get(node):
                memo[node] = (pods, figures, result)
            return result
        names = [name for name in resources if name != "pods"]
        parts = None
        if settled and not self.claimed:
            parts = self._whole_window_sums(pods, names)
        if parts is None:
            parts = self._pass(node, sample_time, pods, names, start, whole)
        return self._from_parts(sample, pods, resources, parts)

    @staticmethod
    def _from_parts(
        sample: Mapping[str, int],
        pods: Sequence[Pod],
        resources: Sequence[str],
        parts: tuple[Sequence[float], Sequence[float], Sequence[float]] | None,
    ) -> NodeEstimate:
        """The figures from the pods' parts (``_pass``'s three lists; None: no part at all)."""
        names = [name for name in resources if name != "pods"]
        inside, now, pending = parts if parts is not None else ([0.0] * len(names),) * 3
        raw = {name: int(sample.get(name, 0)) for name in names}
        other: dict[str, int] = {}
        usage: dict[str, int] = {}
        running: dict[str, int] = {}
        for i, name in enumerate(names):
            taken = round(inside[i])
            other[name] = max(0, raw[name] - taken)
            usage[name] = max(0, raw[name] - taken + round(now[i]))
            running[name] = min(usage[name], max(0, raw[name] - taken + round(now[i] - pending[i])))
        return count_pods(
            NodeEstimate(sample=raw, other=other, usage=usage, running=running), pods, resources
        )

    def _pass(
        self,
        node: str,
        sample_time: float,
        pods: Sequence[Pod],
        names: Sequence[str],
        start: float,
        whole: float,
    ) -> tuple[list[float], list[float], list[float]]:
        """The pods' parts in the sample (``inside``), on the node now (``now``) and the part of ``now``
        projected for pods not started (``pending``), per resource: the formula, term by term."""
        inside = [0.0] * len(names)
        now = [0.0] * len(names)
        pending = [0.0] * len(names)
        window = self.window
        claimed = self.claimed
        samples = self.usage.pods
        for pod in pods:
            created = pod.created
            if window <= 0:
                share = 1.0 if created <= sample_time else 0.0
            elif created <= start:
                share = whole
            else:
                share = max(0.0, min(1.0, (sample_time - created) / window))
            key = f"{pod.namespace}/{pod.name}"  # pod.key, without the property call
            found = samples.get(key)
            if found is not None and claimed:
                predecessor = claimed.get(key)
                if predecessor is not None and predecessor.uid != pod.uid:
                    found = None
            if found is not None:
                own = found.resources
                i = 0
                if pod.terminating:
                    for name in names:
                        inside[i] += own.get(name, 0) * share
                        i += 1
                else:
                    for name in names:
                        amount = own.get(name, 0)
                        inside[i] += amount * share
                        now[i] += amount
                        i += 1
            elif not pod.terminating and share < 1.0:
                latest = self.latest(pod)
                started = pod.phase == "Running"
                for i, name in enumerate(names):
                    projected = latest.get(name, 0) * (1.0 - share)
                    now[i] += projected
                    if not started:
                        pending[i] += projected
        for departure in self.departed.get(node, ()):
            share = window_share(departure.created, departure.left, sample_time, window)
            for i, name in enumerate(names):
                inside[i] += departure.usage.get(name, 0) * share
        return inside, now, pending

    def _whole_window_sums(
        self, pods: Sequence[Pod], names: Sequence[str]
    ) -> tuple[list[float], list[float], list[float]] | None:
        """``_pass`` for a settled node (every share 1, no departure, no sample claimed by an evicted pod):
        the parts are plain sums of the pods' samples, ``now`` without the terminating ones. Summed as
        integers, which is what ``_pass``'s float additions give exactly while every partial sum is an
        integer below 2**53; None (do the pass) when a sample holds anything else."""
        samples = self.usage.pods
        keys = [f"{pod.namespace}/{pod.name}" for pod in pods]
        found = [
            (sample.resources, pod.terminating)
            for pod, sample in zip(pods, map(samples.get, keys), strict=True)
            if sample is not None
        ]
        leaving = any(terminating for _, terminating in found)
        inside: list[float] = []
        now: list[float] = []
        for name in names:
            amounts = [own.get(name, 0) for own, _ in found]
            total = sum(amounts)
            if type(total) is not int or total >= _EXACT or (amounts and min(amounts) < 0):
                return None
            inside.append(float(total))
            if leaving:
                total -= sum([own.get(name, 0) for own, terminating in found if terminating])
            now.append(float(total))
        return inside, now, [0.0] * len(names)

    def _settled(self, node: str, pods: Sequence[Pod], sample_time: float, whole: float) -> bool:
        """No departure from the node and every pod on it for the whole window: each pod's share is 1
        and none is projected from its workload's usage."""
        if node in self.departed:
            return False
        if pods is self.index.pods_by_node.get(node):
            youngest = self.index.youngest_on(node)
        else:
            youngest = max(map(_CREATED, pods), default=0.0)
        if self.window <= 0:
            return youngest <= sample_time
        return whole >= 1.0 and youngest <= sample_time - self.window


_EXACT = 2**53
"""Integers below this are exact as floats, and so is every sum of them that stays below it."""


_CREATED = attrgetter("created")


def count_pods(result: NodeEstimate, pods: Sequence[Pod], resources: Sequence[str]) -> NodeEstimate:
    """Set ``pods`` (the resource, when considered): counted, not measured, in every figure."""
    if "pods" in resources:
        result.sample["pods"] = len(pods)
        result.other["pods"] = 0
        result.usage["pods"] = sum(1 for pod in pods if not pod.terminating)
        result.running["pods"] = result.usage["pods"]  # a bound pod takes its slot for real
    return result
