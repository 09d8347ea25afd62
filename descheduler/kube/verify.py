"""Reading from the API server what an eviction rests on, right before it is sent.

The plan is made from the watch cache; a watch that silently stopped delivering cannot know it is
stale. So right before each eviction request (after the rate limiter, the journal's intent record and
any Retry-After wait) this reads the pod, its node and namespace, its controller chain and the
workload's pods with ordinary GET and LIST requests, which kube-apiserver serves as consistent reads (no
``resourceVersion``: from etcd's latest revision, or a watch cache proven current).
``planner/verify.py`` decides over what comes back.

Requests per eviction: a bare pod 3 (pod, its node, its namespace); a StatefulSet's or
ReplicationController's pod 4 (the controller, the workload's pods with the pod among them, node,
namespace); a Deployment's pod 5 (Deployment, its ReplicaSets, its pods, node, namespace): the cache's
chain is a hint naming the Deployment, and the pod's ReplicaSet is taken from the LIST of the
Deployment's ReplicaSets, the very object a GET of it would return. Without a hint, or when the server
does not bear it out (no such Deployment; the ReplicaSet not in that LIST, or not controlled by that
Deployment), the chain is read as without one, the ReplicaSet then its owner: 6 requests, plus the
hint's one or two, which decide nothing. Plus one LIST per ResourceClaim of a pod holding DRA devices
(``read_claims``). The node and namespace are read for their pause marks and the node's autoscaler
taints (a namespace by a LIST of its name: the shipped RBAC grants list, not get). Never per
candidate: only for pods the plan chose, once per attempt (after a Retry-After wait, read again). Any
failure (an error status other than 404, a timeout, a broken connection, an object that cannot be
parsed) makes the view ``problem``: nothing is evicted on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from descheduler.cluster.dra import parse_resource_claim
from descheduler.cluster.parse import (
    ObjectError,
    parse_namespace,
    parse_node,
    parse_pod,
    parse_selector,
    parse_workload,
)
from descheduler.cluster.types import (
    LabelSelector,
    Namespace,
    Node,
    OwnerRef,
    Pod,
    ResourceClaim,
    Workload,
)
from descheduler.kube.api import KubeApi, path_segment
from descheduler.kube.errors import ApiStatusError, KubeError
from descheduler.planner.index import WorkloadRef
from descheduler.planner.verify import ServerView

_PATHS = {
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "ReplicationController": "/api/v1/namespaces/{ns}/replicationcontrollers",
}
"""The controllers whose expected replicas the planner reads (as the cache watches them)."""


@dataclass(frozen=True, slots=True)
class ClaimsView:
    """A pod's ResourceClaims as the server holds them right before its eviction."""

    claims: Mapping[str, ResourceClaim | None] = field(default_factory=dict)
    """Claim name -> the claim (None: the server has no claim of that name)."""
    problem: str = ""
    """Why a claim could not be read: nothing is evicted on it."""
    requests: int = 0


class _Unreadable(Exception):
    """A read whose answer cannot be trusted; the message says which and why."""


def selector_query(selector: LabelSelector) -> str:
    """A label selector in the ``labelSelector`` query syntax (``a=b,c in (d,e),!f``)."""
    parts = [f"{key}={value}" for key, value in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        values = ",".join(req.values)
        parts.append(
            {
                "In": f"{req.key} in ({values})",
                "NotIn": f"{req.key} notin ({values})",
                "Exists": req.key,
                "DoesNotExist": f"!{req.key}",
            }.get(req.operator, "")
        )
    return ",".join(p for p in parts if p)


class ServerReader:
    """Builds a ``ServerView`` for one pod from the server; thread-safe (only the API client is shared)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        resync: Callable[[Sequence[str]], object] = lambda names: None,
        request_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``resync``: re-list these cache resources (the cache's ``resync``), called on a disagreement."""
        self.api = api
        self.resync = resync
        self.request_timeout = request_timeout
        self._clock = clock
        self.requests = 0
        """Requests made so far (all views): the cost of verifying, exported as a metric."""

    def read(self, pod: Pod, deadline: float, hint: WorkloadRef | None = None) -> ServerView:
        """What the server holds for ``pod`` now; never raises for anything the server says. ``hint``: the
        pod's workload as the cache resolved it, which only chooses the reads (see the module's note)."""
        reads = _Reads(self, deadline)
        try:
            return reads.view(pod, hint)
        except _Unreadable as exc:
            return ServerView(pod=None, problem=str(exc), requests=reads.count)
        finally:
            self.requests += reads.count

    def read_claims(self, namespace: str, names: Sequence[str], deadline: float) -> ClaimsView:
        """The named ResourceClaims of ``namespace`` as the server holds them: one LIST each, selecting
        the name (the shipped RBAC grants list and watch on claims, not get)."""
        reads = _Reads(self, deadline)
        claims: dict[str, ResourceClaim | None] = {}
        path = f"/apis/resource.k8s.io/v1/namespaces/{path_segment(namespace)}/resourceclaims"
        try:
            for name in names:
                found = reads._list(path, f"metadata.name={name}", key="fieldSelector")
                claims[name] = None
                for raw in found[:1]:
                    parsed = reads._parse(parse_resource_claim, {"kind": "ResourceClaim", **raw})
                    assert isinstance(parsed, ResourceClaim)
                    claims[name] = parsed
        except _Unreadable as exc:
            return ClaimsView(claims, problem=str(exc), requests=reads.count)
        finally:
            self.requests += reads.count
        return ClaimsView(claims, requests=reads.count)


def _version(raw: Mapping[str, Any]) -> str:
    """An object's ``metadata.resourceVersion`` as the server sent it ("" when absent)."""
    meta = raw.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


class _Reads:
    """One view's requests, counted, each bounded by the request timeout and the cycle's deadline."""

    def __init__(self, reader: ServerReader, deadline: float) -> None:
        self.reader = reader
        self.deadline = deadline
        self.count = 0

    def view(self, pod: Pod, hint: WorkloadRef | None = None) -> ServerView:
        """A workload's pod comes from the LIST of the workload's pods (one read for both, and one
        request fewer), its chain read from the owner the cache named (the server's pod must name the
        same one, ``planner/verify.py``); a bare pod, or one that LIST does not hold, from a GET."""
        ns = path_segment(pod.namespace)
        owner = pod.owner
        if owner is None or owner.kind not in _PATHS:
            return self._alone(pod, ())
        hinted = self._hinted(pod, hint)
        chain, top_raw, sets = hinted if hinted is not None else (*self._chain(pod.namespace, owner), None)
        top = chain[-1] if chain else None
        if top is None or top_raw is None:
            return self._alone(pod, tuple(chain))
        selector = self._selector(top_raw, top)
        workloads = list(chain)
        if top.kind == "Deployment":
            known = {w.uid for w in workloads}
            for workload in sets if sets is not None else self._sets(ns, selector):
                if workload.uid not in known:
                    workloads.append(workload)
        pods: list[Pod] = []
        versions: dict[str, str] = {}
        for item in self._list(f"/api/v1/namespaces/{ns}/pods", selector):
            parsed = self._parse(parse_pod, {"kind": "Pod", **item})
            assert isinstance(parsed, Pod)
            pods.append(parsed)
            versions[parsed.name] = _version(item)
        current = next((p for p in pods if p.name == pod.name), None)
        if current is None:  # gone, or no longer selected: its own read says which
            return self._alone(pod, tuple(workloads), tuple(pods))
        base = self._places(current, versions[current.name])
        return replace(base, workloads=tuple(workloads), pods=tuple(pods), requests=self.count)

    def _alone(self, pod: Pod, workloads: tuple[Workload, ...], pods: tuple[Pod, ...] = ()) -> ServerView:
        """The pod read by a GET of its own, with its node and namespace (None: the server has none)."""
        raw = self._get(f"/api/v1/namespaces/{path_segment(pod.namespace)}/pods/{path_segment(pod.name)}")
        if raw is None:
            return ServerView(pod=None, workloads=workloads, requests=self.count)
        current = self._parse(parse_pod, raw)
        assert isinstance(current, Pod)
        base = self._places(current, _version(raw))
        return replace(base, workloads=workloads, pods=pods or (current,), requests=self.count)

    def _places(self, pod: Pod, version: str) -> ServerView:
        """The view's pod with its node (a GET) and namespace (a LIST of its name) as the server holds
        them now, for their pause marks and the node's autoscaler taints; None where the server has none."""
        node: Node | None = None
        if pod.node_name:
            found = self._get(f"/api/v1/nodes/{path_segment(pod.node_name)}")
            if found is not None:
                parsed = self._parse(parse_node, {"kind": "Node", **found})
                assert isinstance(parsed, Node)
                node = parsed
        namespace: Namespace | None = None
        named = self._list("/api/v1/namespaces", f"metadata.name={pod.namespace}", key="fieldSelector")
        for item in named[:1]:
            read = self._parse(parse_namespace, {"kind": "Namespace", **item})
            assert isinstance(read, Namespace)
            namespace = read
        return ServerView(pod=pod, node=node, namespace=namespace, pod_version=version)

    def _hinted(
        self, pod: Pod, hint: WorkloadRef | None
    ) -> tuple[list[Workload], Mapping[str, Any], list[Workload]] | None:
        """The chain (ReplicaSet, Deployment), the Deployment as read and its ReplicaSets, from the
        Deployment the cache named: the pod's ReplicaSet (the cache's, uid checked) is taken from the
        LIST, a consistent read like its GET. None (read the chain as without a hint) when there is no
        hint, or the server does not bear it out: no such Deployment, the ReplicaSet not in the LIST or
        not controlled by that Deployment (uid). Only which reads are made depends on the cache."""
        owner = pod.owner
        if hint is None or hint.kind != "Deployment" or owner is None or owner.kind != "ReplicaSet":
            return None
        if not owner.uid:  # nothing to check the listed ReplicaSet against
            return None
        path = _PATHS["Deployment"].format(ns=path_segment(pod.namespace)) + "/" + path_segment(hint.name)
        raw = self._get(path)
        if raw is None:
            return None
        deployment = self._parse(parse_workload, {"kind": "Deployment", **raw})
        assert isinstance(deployment, Workload)
        sets = self._sets(path_segment(pod.namespace), self._selector(raw, deployment))
        found = next((w for w in sets if w.name == owner.name and w.uid == owner.uid), None)
        if found is None or found.owner is None:
            return None
        control = found.owner
        if (control.kind, control.name, control.uid) != ("Deployment", deployment.name, deployment.uid):
            return None
        return [found, deployment], raw, sets

    def _sets(self, ns: str, selector: str) -> list[Workload]:
        """A Deployment's ReplicaSets as the server lists them by its selector."""
        sets: list[Workload] = []
        for item in self._list(_PATHS["ReplicaSet"].format(ns=ns), selector):
            workload = self._parse(parse_workload, {"kind": "ReplicaSet", **item})
            assert isinstance(workload, Workload)
            sets.append(workload)
        return sets

    def _chain(self, namespace: str, owner: OwnerRef) -> tuple[list[Workload], Mapping[str, Any] | None]:
        """The controller chain from the pod's owner up (a ReplicaSet and its Deployment); a controller
        the server no longer has ends it (the planner then finds the workload unknown: not moved)."""
        kind, name = owner.kind, owner.name
        chain: list[Workload] = []
        raw: Mapping[str, Any] | None = None
        while kind in _PATHS and len(chain) < 3:
            path = _PATHS[kind].format(ns=path_segment(namespace)) + "/" + path_segment(name)
            found = self._get(path)
            if found is None:
                break
            workload = self._parse(parse_workload, {"kind": kind, **found})
            assert isinstance(workload, Workload)
            chain.append(workload)
            raw = found
            if workload.owner is None or workload.owner.kind != "Deployment" or kind != "ReplicaSet":
                break
            kind, name = workload.owner.kind, workload.owner.name
        return chain, raw

    def _selector(self, raw: Mapping[str, Any], workload: Workload) -> str:
        spec = raw.get("spec")
        value = spec.get("selector") if isinstance(spec, Mapping) else None
        if workload.kind == "ReplicationController" and isinstance(value, Mapping):
            value = {"matchLabels": value}
        if not isinstance(value, Mapping):
            raise _Unreadable(f"{workload.kind} {workload.namespace}/{workload.name} has no spec.selector")
        try:
            selector = parse_selector(dict(raw), value, "spec.selector")
        except ObjectError as exc:
            raise _Unreadable(str(exc)) from None
        query = selector_query(selector)
        if not query:
            raise _Unreadable(f"{workload.kind} {workload.namespace}/{workload.name} selects every pod")
        return query

    def _timeout(self) -> float:
        left = self.deadline - self.reader._clock()
        if left <= 0:
            raise _Unreadable("the cycle's deadline passed before the reads were done")
        return min(self.reader.request_timeout, left)

    def _get(self, path: str) -> Mapping[str, Any] | None:
        """The object, or None for 404."""
        self.count += 1
        try:
            found = self.reader.api.request("GET", path, timeout=self._timeout(), deadline=self.deadline)
        except ApiStatusError as exc:
            if exc.status == 404:
                return None
            raise _Unreadable(f"GET {path}: {exc}") from None
        except KubeError as exc:
            raise _Unreadable(f"GET {path}: {exc}") from None
        if not isinstance(found, Mapping):
            raise _Unreadable(f"GET {path}: the answer is not an object")
        return found

    def _list(self, path: str, selector: str, key: str = "labelSelector") -> Sequence[Mapping[str, Any]]:
        self.count += 1
        try:
            found = self.reader.api.request(
                "GET",
                path,
                query={key: selector},
                timeout=self._timeout(),
                deadline=self.deadline,
            )
        except KubeError as exc:
            raise _Unreadable(f"LIST {path}?{key}={selector}: {exc}") from None
        items = found.get("items") if isinstance(found, Mapping) else None
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            raise _Unreadable(f"LIST {path}: the answer holds no list of objects")
        meta = found.get("metadata")
        if isinstance(meta, Mapping) and meta.get("continue"):
            raise _Unreadable(f"LIST {path}: the answer was paginated (more pods than one page)")
        return items

    @staticmethod
    def _parse(parser: Callable[[Any], object], raw: Mapping[str, Any]) -> object:
        try:
            return parser(raw)
        except (ObjectError, ValueError, TypeError) as exc:
            raise _Unreadable(f"an object the server sent cannot be understood: {exc}") from None
