"""The scheduler's pod-to-pod checks of a destination: host ports, required pod anti-affinity (the pod's
and, symmetrically, that of the pods already there), required pod affinity and hard topology spread.

Found by the real kube-scheduler judging our destination check (``tests/controlplane/judge.py``): without
these, a pod was evicted towards a node the scheduler then refused (the replacement stayed Pending).
Where the scheduler's answer depends on what this module cannot know for sure, it answers no:

- a namespace selector of an anti-affinity term matches every namespace (of an affinity term: none but
  the listed ones, unless it is empty);
- a topology spread skew is counted against an emptiest domain of 0 pods (what is left in the other
  domains after this cycle's evictions is not tracked), counting terminating pods and pods on nodes the
  scheduler would leave out (``nodeAffinityPolicy``): a domain's count is never below the scheduler's;
- a pod leaving its node still counts there (the scheduler sees it until it is gone), and pods reserved
  on a node this cycle count there too;
- required pod affinity needs a matching pod in the domain (the scheduler's exception for the first pod
  of a group that matches its own term is not taken).

Pure, no I/O. ``Neighbours`` holds every node's pods (not only the destinations'): a topology domain
spans nodes of any class.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from descheduler.cluster.selectors import selector_matches
from descheduler.cluster.types import HostPort, LabelSelector, Node, Pod, PodTerm

PORTS = "have a host port it needs in use"
ANTI_AFFINITY = "run pods its anti-affinity excludes"
THEIR_ANTI_AFFINITY = "run pods whose anti-affinity excludes it"
POD_AFFINITY = "lack pods its pod affinity needs"
SPREAD = "would break its topology spread"
REASONS = frozenset({PORTS, ANTI_AFFINITY, THEIR_ANTI_AFFINITY, POD_AFFINITY, SPREAD})
"""Answers that depend on the pod's labels and neighbours, not only on what it asks for."""

_ANY_IP = ("", "0.0.0.0")


def _ports_clash(a: HostPort, b: HostPort) -> bool:
    return (
        a.port == b.port and a.protocol == b.protocol and (a.ip in _ANY_IP or b.ip in _ANY_IP or a.ip == b.ip)
    )


def _may_select(term: PodTerm, owner: str, namespace: str) -> bool:
    """Whether an anti-affinity term of a pod in ``owner`` may cover ``namespace`` (when unsure: yes)."""
    if term.namespace_selector is not None:
        return True
    return namespace in term.namespaces if term.namespaces else namespace == owner


def _surely_selects(term: PodTerm, owner: str, namespace: str) -> bool:
    """Whether an affinity term of a pod in ``owner`` surely covers ``namespace`` (when unsure: no)."""
    selector = term.namespace_selector
    if selector is not None and not selector.match_labels and not selector.match_expressions:
        return True
    if term.namespaces:
        return namespace in term.namespaces
    return selector is None and namespace == owner


class Neighbours:
    """Every node's pods, and those reserved on a node this cycle, by topology domain."""

    def __init__(self, nodes: Iterable[Node], pods_by_node: Mapping[str, Sequence[Pod]]) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.pods_by_node = pods_by_node
        self.reserved: dict[str, list[Pod]] = {}
        self._domains: dict[str, dict[str, list[str]]] = {}
        self._counts: dict[tuple[object, ...], int] = {}
        self._guards: dict[str, dict[str, list[tuple[Pod, PodTerm]]]] | None = None
        """Required anti-affinity terms of the pods there, by topology key and the domain they guard:
        checked against every pod placed in that domain."""

    def add(self, pod: Pod, node: str) -> None:
        """``pod`` is to land on ``node`` (a reservation of this cycle)."""
        self.reserved.setdefault(node, []).append(pod)
        self._counts.clear()
        if self._guards is not None:
            self._guard(pod, node, self._guards)

    def matters(self, pod: Pod) -> bool:
        """Whether ``problem`` can refuse ``pod`` anywhere."""
        return pod.placement is not None or bool(self._guarding())

    def _guard(self, pod: Pod, node: str, guards: dict[str, dict[str, list[tuple[Pod, PodTerm]]]]) -> None:
        if pod.placement is None or node not in self.nodes:
            return
        labels = self.nodes[node].labels
        for term in pod.placement.anti_affinity:
            value = labels.get(term.topology_key)
            if value is not None:
                guards.setdefault(term.topology_key, {}).setdefault(value, []).append((pod, term))

    def _guarding(self) -> dict[str, dict[str, list[tuple[Pod, PodTerm]]]]:
        if self._guards is None:
            guards: dict[str, dict[str, list[tuple[Pod, PodTerm]]]] = {}
            for node, pods in (*self.pods_by_node.items(), *self.reserved.items()):
                for pod in pods:
                    if pod.placement is not None and pod.placement.anti_affinity:
                        self._guard(pod, node, guards)
            self._guards = guards
        return self._guards

    def _on(self, node: str) -> Iterator[Pod]:
        yield from self.pods_by_node.get(node, ())
        yield from self.reserved.get(node, ())

    def _domain(self, key: str, node: Node) -> Iterator[Pod]:
        """The pods of every node sharing ``node``'s value of label ``key`` (none if it has no such label)."""
        value = node.labels.get(key)
        if value is None:
            return
        by_value = self._domains.get(key)
        if by_value is None:
            by_value = self._domains[key] = {}
            for name, other in self.nodes.items():
                if key in other.labels:
                    by_value.setdefault(other.labels[key], []).append(name)
        for name in by_value.get(value, [node.name]):
            yield from self._on(name)

    def _count(self, key: str, node: Node, namespace: str, selector: LabelSelector | None) -> int:
        """Pods of ``namespace`` matching ``selector`` in ``node``'s domain of ``key``; remembered until the
        next reservation (the replicas of a workload spread alike: one count serves them all)."""
        if selector is None:
            return 0
        labels = tuple(sorted(selector.match_labels.items()))
        memo = (key, node.labels.get(key), namespace, labels, selector.match_expressions)
        found = self._counts.get(memo)
        if found is None:
            found = sum(
                1
                for other in self._domain(key, node)
                if other.namespace == namespace and selector_matches(selector, other.labels)
            )
            self._counts[memo] = found
        return found

    def problem(self, pod: Pod, node: Node) -> str:
        """Why the scheduler would (or might) refuse ``pod`` on ``node`` for its neighbours ("" if not)."""
        for key, by_value in self._guarding().items():
            value = node.labels.get(key)
            for other, term in by_value.get(value, ()) if value is not None else ():
                if _may_select(term, other.namespace, pod.namespace) and selector_matches(
                    term.selector, pod.labels
                ):
                    return THEIR_ANTI_AFFINITY
        placement = pod.placement
        if placement is None:
            return ""
        if placement.host_ports:
            for other in self._on(node.name):
                if other.placement is not None and any(
                    _ports_clash(mine, theirs)
                    for mine in placement.host_ports
                    for theirs in other.placement.host_ports
                ):
                    return PORTS
        for term in placement.anti_affinity:
            for other in self._domain(term.topology_key, node):
                if _may_select(term, pod.namespace, other.namespace) and selector_matches(
                    term.selector, other.labels
                ):
                    return ANTI_AFFINITY
        for term in placement.affinity:
            if not any(
                _surely_selects(term, pod.namespace, other.namespace)
                and selector_matches(term.selector, other.labels)
                for other in self._domain(term.topology_key, node)
            ):
                return POD_AFFINITY
        for constraint in placement.spread:
            if constraint.topology_key not in node.labels:
                return SPREAD
            count = self._count(constraint.topology_key, node, pod.namespace, constraint.selector)
            if count + selector_matches(constraint.selector, pod.labels) > constraint.max_skew:
                return SPREAD
        return ""
