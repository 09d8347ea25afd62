"""The fast path of ``parse.py``: LIST pages and watch events decoded straight into slim structs.

Why: at 150,000 pods the initial sync spent most of its time building every object's full dict tree
(``json.loads``) and then walking it (``parse_pod``). Here msgspec decodes each page into small
``Struct`` types that hold only the fields ``parse.py`` reads (everything else is skipped by the C
decoder without building it; the structs are not tracked by the garbage collector), and ``convert_*``
turns them into the same snapshot values.

One source of truth: ``parse.py`` stays the definition. The fast path is typed strictly (a label value
that is not a string, a ``null`` where ``parse.py`` would write ``"None"``, a non-object container...
fails the typed decode), and ``convert_*`` raises ``Unhandled`` for anything it does not reproduce
exactly (an unknown operator, a bad quantity, a missing name, Koordinator's raw-allocatable annotation,
a pod without ``status.qosClass``). Either way the caller decodes that page or event with ``json.loads``
and runs ``parse.py`` on the object, which produces the value or the error naming the object and field
exactly as before. ``tests/unit/test_fastparse.py`` checks, over generated and hand-written objects
(real-cluster shapes and odd inputs), that the fast path never yields a value ``parse.py`` would not.

Requests go through the very same ``requests.pod_requests`` (fed small dicts of the fields it reads, so
the typed guard of ``fields.py`` refuses a wrong type there exactly as for ``parse.py``), timestamps
through ``parse.timestamp_seconds``. A field of the wrong type either fails the typed decode or raises in
the converter; both hand the object to ``parse.py``, which names it (``test_hostile_cluster_data``'s
every-field test checks both parsers on every field of realistic objects).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import msgspec
from msgspec import UNSET, Struct

from descheduler.cluster.parse import (
    INT32_MAX,
    INT32_MIN,
    KEPT_POD_ANNOTATIONS,
    MAX_POD_CLAIMS,
    RAW_ALLOCATABLE_ANNOTATION,
    ObjectError,
    claim_refs,
    pause_value,
    pod_placement,
    resource_value,
    rollout_of,
    timestamp_seconds,
)
from descheduler.cluster.requests import pod_requests
from descheduler.cluster.types import (
    LabelSelectorRequirement,
    Node,
    NodeSelectorTerm,
    OwnerRef,
    Placement,
    Pod,
    PodClaimRef,
    Taint,
    Toleration,
    Workload,
)

__all__ = [
    "FAST_KINDS",
    "FastKind",
    "Sharer",
    "Unhandled",
]

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
T = TypeVar("T")


class Unhandled(Exception):
    """The fast path does not reproduce this object exactly: run ``parse.py`` on its dict instead."""


class Sharer(Protocol):
    """The cache's interner: equal maps and owner references shared between objects."""

    def share(self, value: Mapping[str, Any]) -> Mapping[str, Any]: ...

    def owner(self, owner: OwnerRef | None) -> OwnerRef | None: ...

    def text(self, value: str) -> str: ...

    def shared(self, key: Hashable, build: Callable[[], T]) -> T: ...


_NULL = msgspec.Raw(b"null")
"""Resource maps are kept as their JSON text (``msgspec.Raw``): the pods of a workload ask alike, so
their requests are computed once per distinct text (``_requests``) and most maps are never decoded."""


class _S(Struct, gc=False, rename="camel"):
    """Base of the slim structs: camelCase names as in the API, unknown fields skipped, GC-untracked."""


# -- metadata -------------------------------------------------------------------------------------------
class _OwnerReference(_S):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class _Meta(_S):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: Any = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[_OwnerReference] | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: Any = None


class _Condition(_S):
    type: Any = None
    status: Any = None
    reason: Any = None


# -- pods -----------------------------------------------------------------------------------------------
class _Toleration(Struct, gc=False, rename="camel", frozen=True):
    """Frozen, so hashable: the pods of a workload share one tuple of ``Toleration`` values."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class _Volume(_S):
    host_path: Any = UNSET
    empty_dir: Any = UNSET
    persistent_volume_claim: Any = UNSET
    ephemeral: Any = UNSET


class _Container(_S):
    name: str = ""
    resources: msgspec.Raw = _NULL
    restart_policy: Any = None
    ports: Any = None


class _Requirement(_S):
    key: str
    operator: str
    values: list[str] | None = None


class _NodeSelectorTerm(_S):
    match_expressions: list[_Requirement] | None = None
    match_fields: list[_Requirement] | None = None


class _NodeSelector(_S):
    node_selector_terms: list[_NodeSelectorTerm] | None = None


class _NodeAffinity(_S, rename={"required": "requiredDuringSchedulingIgnoredDuringExecution"}):
    required: _NodeSelector | None = None


class _Affinity(_S):
    node_affinity: _NodeAffinity | None = None
    pod_affinity: Any = None
    pod_anti_affinity: Any = None


class _PodResourceClaim(_S):
    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class _PodResourceClaimStatus(_S):
    name: str
    resource_claim_name: str | None = None


class _PodSpec(_S):
    node_name: str | None = None
    priority: int | None = None
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[_Toleration] | None = None
    volumes: list[_Volume] | None = None
    resource_claims: list[_PodResourceClaim] | None = None
    containers: list[_Container] | None = None
    init_containers: list[_Container] | None = None
    overhead: msgspec.Raw = _NULL
    resources: msgspec.Raw = _NULL
    affinity: _Affinity | None = None
    topology_spread_constraints: Any = None


class _ContainerStatus(_S):
    name: Any = None
    allocated_resources: msgspec.Raw = _NULL
    resources: msgspec.Raw = _NULL


class _PodStatus(_S):
    phase: str | None = None
    qos_class: str | None = None
    conditions: list[_Condition] | None = None
    container_statuses: list[_ContainerStatus] | None = None
    init_container_statuses: list[_ContainerStatus] | None = None
    resource_claim_statuses: list[_PodResourceClaimStatus] | None = None


class _Pod(_S):
    kind: Any = UNSET
    metadata: _Meta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


# -- nodes ----------------------------------------------------------------------------------------------
class _Taint(_S):
    key: str
    value: str = ""
    effect: str = ""


class _NodeSpec(_S):
    unschedulable: Any = False
    taints: list[_Taint] | None = None


class _NodeStatus(_S):
    allocatable: Any = None
    conditions: list[_Condition] | None = None


class _Node(_S):
    kind: Any = UNSET
    metadata: _Meta | None = None
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


# -- workloads ------------------------------------------------------------------------------------------
class _Template(_S):
    """A Deployment's ``spec.template``: its metadata only (``parse.rollout_of`` reads one annotation)."""

    metadata: Any = None


class _WorkloadSpec(_S):
    replicas: int = 1
    strategy: Any = None
    paused: Any = None
    progress_deadline_seconds: Any = None
    min_ready_seconds: Any = None
    template: _Template | None = None


class _WorkloadStatus(_S):
    """The rollout status of a Deployment (``parse.rollout_of`` reads it; other kinds ignore it)."""

    observed_generation: Any = None
    replicas: Any = None
    updated_replicas: Any = None
    ready_replicas: Any = None
    available_replicas: Any = None
    conditions: Any = None


class _Workload(_S):
    kind: Any = UNSET
    metadata: _Meta | None = None
    spec: _WorkloadSpec | None = None
    status: _WorkloadStatus | None = None


# -- lists and events -----------------------------------------------------------------------------------
class _ListMeta(_S, rename={"continue_": "continue", "resource_version": "resourceVersion"}):
    resource_version: str | None = None
    continue_: str | None = None


class _List(_S, Generic[T]):
    items: list[T]
    metadata: _ListMeta | None = None


class _Event(_S, Generic[T]):
    type: str
    object: T


def _meta(obj: Any) -> _Meta:
    meta: _Meta | None = obj.metadata
    if meta is None or not meta.name:
        raise Unhandled("metadata.name is required")
    return meta


def _amounts(value: Any, path: str) -> dict[str, int]:
    """``parse._resources`` for values that are fine; anything else goes to the exact parser."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise Unhandled(path)
    return {name: resource_value(name, quantity) for name, quantity in value.items()}


def _owner(meta: _Meta, sharer: Sharer) -> OwnerRef | None:
    for ref in meta.owner_references or ():
        if ref.controller:
            return sharer.owner(OwnerRef(ref.kind, ref.name, ref.uid, ref.api_version))
    return None


def _requirements(items: list[_Requirement] | None) -> tuple[LabelSelectorRequirement, ...]:
    out = []
    for expr in items or ():
        if expr.operator not in _OPERATORS:
            raise Unhandled("operator")
        out.append(LabelSelectorRequirement(expr.key, expr.operator, tuple(expr.values or ())))
    return tuple(out)


def _node_terms(spec: _PodSpec) -> tuple[NodeSelectorTerm, ...]:
    affinity = spec.affinity
    node_affinity = affinity.node_affinity if affinity is not None else None
    required = node_affinity.required if node_affinity is not None else None
    if required is None:
        return ()
    return tuple(
        NodeSelectorTerm(_requirements(term.match_expressions), _requirements(term.match_fields))
        for term in required.node_selector_terms or ()
    )


def _tolerations(items: list[_Toleration], sharer: Sharer) -> tuple[Toleration, ...]:
    """One tuple per distinct list (the pods of a workload tolerate alike): built once, shared."""
    return sharer.shared(
        ("tolerations", *items),
        lambda: tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in items),
    )


_RequestsKey = tuple[Any, ...]


def _requests_key(spec: _PodSpec, status: _PodStatus | None) -> _RequestsKey:
    """Everything ``pod_requests`` reads, as hashable JSON texts. Container statuses that report neither
    allocated nor applied resources change nothing (``pod_requests`` compares those with the spec), so
    they are left out, as on clusters before 1.33, and the pods of a workload share one key."""
    statuses = None
    if status is not None and (status.container_statuses or status.init_container_statuses):
        apps = tuple(
            (s.name, bytes(s.allocated_resources), bytes(s.resources))
            for s in status.container_statuses or ()
        )
        inits = tuple(
            (s.name, bytes(s.allocated_resources), bytes(s.resources))
            for s in status.init_container_statuses or ()
        )
        if any(allocated != b"null" or applied != b"null" for _, allocated, applied in (*apps, *inits)):
            resize = tuple(
                (c.type, c.reason) for c in status.conditions or () if c.type == "PodResizePending"
            )
            statuses = (apps, inits, resize)
    return (
        "requests",
        tuple((c.name, bytes(c.resources), c.restart_policy) for c in spec.containers or ()),
        tuple((c.name, bytes(c.resources), c.restart_policy) for c in spec.init_containers or ()),
        bytes(spec.resources),
        bytes(spec.overhead),
        statuses,
    )


def _requests_of(key: _RequestsKey) -> dict[str, int]:
    """``requests.pod_requests`` over small dicts holding just the fields it reads."""
    _, containers, inits, pod_level, overhead, statuses = key
    decode = msgspec.json.decode
    spec_map: dict[str, Any] = {}
    for name, items in (("containers", containers), ("initContainers", inits)):
        if items:
            spec_map[name] = [
                {"name": n, "resources": decode(r), "restartPolicy": policy} for n, r, policy in items
            ]
    if pod_level != b"null":
        spec_map["resources"] = decode(pod_level)
    if overhead != b"null":
        spec_map["overhead"] = decode(overhead)
    status_map: dict[str, Any] = {}
    if statuses is not None:
        apps, init_statuses, resize = statuses
        for name, items in (("containerStatuses", apps), ("initContainerStatuses", init_statuses)):
            if items:
                status_map[name] = [
                    {"name": n, "allocatedResources": decode(a), "resources": decode(r)} for n, a, r in items
                ]
        status_map["conditions"] = [{"type": t, "reason": r} for t, r in resize]
    return pod_requests(spec_map, status_map, _amounts)


def _requests(spec: _PodSpec, status: _PodStatus | None, sharer: Sharer) -> Mapping[str, Any]:
    key = _requests_key(spec, status)
    return sharer.shared(key, lambda: sharer.share(_requests_of(key)))


_EMPTY_SPEC = _PodSpec()


def convert_pod(obj: _Pod, sharer: Sharer) -> Pod:
    """``parse.parse_pod`` of the object ``obj`` was decoded from (or ``Unhandled``)."""
    meta = _meta(obj)
    spec = obj.spec if obj.spec is not None else _EMPTY_SPEC
    status = obj.status
    raw_namespace = meta.namespace or ""
    annotations = meta.annotations or {}
    kept = {k: v for k, v in annotations.items() if k in KEPT_POD_ANNOTATIONS} if annotations else {}
    local_storage = pvc = False
    for volume in spec.volumes or ():
        if volume.host_path is not UNSET or volume.empty_dir is not UNSET:
            local_storage = True
        if volume.persistent_volume_claim is not UNSET or volume.ephemeral is not UNSET:
            pvc = True
    phase = (status.phase if status is not None else None) or "Pending"
    ready: bool | None = None
    for cond in (status.conditions if status is not None else None) or ():
        if cond.type == "Ready":
            ready = cond.status == "True"
            break
    if ready is None:
        ready = phase == "Running"
    qos = status.qos_class if status is not None else None
    if not qos:
        raise Unhandled("status.qosClass")  # derived from the containers by parse.py
    if spec.priority is not None and not INT32_MIN <= spec.priority <= INT32_MAX:
        raise Unhandled("spec.priority")
    text = sharer.text
    return Pod(
        namespace=text(raw_namespace or "default"),
        name=meta.name,
        uid=meta.uid or f"{raw_namespace}/{meta.name}",
        node_name=text(spec.node_name or ""),
        labels=sharer.share(meta.labels or {}),
        annotations=sharer.share(kept),
        phase=text(phase),
        ready=ready,
        terminating=meta.deletion_timestamp is not None,
        created=timestamp_seconds(meta.creation_timestamp),
        priority=spec.priority,
        priority_class_name=text(spec.priority_class_name or ""),
        qos_class=text(qos),
        requests=_requests(spec, status, sharer),
        owner=_owner(meta, sharer),
        node_selector=sharer.share(spec.node_selector or {}),
        required_node_terms=_node_terms(spec),
        tolerations=_tolerations(spec.tolerations, sharer) if spec.tolerations else (),
        has_local_storage=local_storage,
        has_pvc=pvc,
        is_mirror="kubernetes.io/config.mirror" in annotations,
        is_static=annotations.get("kubernetes.io/config.source", "api") != "api",
        has_resource_claims=bool(spec.resource_claims),
        scheduler_name=text(spec.scheduler_name or "default-scheduler"),
        resource_claims=_claims(spec, status),
        placement=_placement(meta, spec),
    )


def _placement(meta: _Meta, spec: _PodSpec) -> Placement | None:
    """``parse.pod_placement`` on the few fields it reads (only when one is set)."""
    affinity = spec.affinity
    pod_terms = affinity is not None and (
        affinity.pod_affinity is not None or affinity.pod_anti_affinity is not None
    )
    inits, apps = spec.init_containers or [], spec.containers or []
    ports = any(c.ports is not None for c in apps) or any(c.ports is not None for c in inits)
    if not pod_terms and not ports and spec.topology_spread_constraints is None:
        return None
    fields: dict[str, Any] = {
        "containers": [{"ports": c.ports} for c in apps],
        "initContainers": [{"ports": c.ports} for c in inits],
        "topologySpreadConstraints": spec.topology_spread_constraints,
    }
    if affinity is not None:
        fields["affinity"] = {
            "podAffinity": affinity.pod_affinity,
            "podAntiAffinity": affinity.pod_anti_affinity,
        }
    try:
        return pod_placement({"kind": "Pod", "metadata": {"name": meta.name}, "spec": fields}, fields)
    except ObjectError:
        raise Unhandled("spec placement") from None


def _claims(spec: _PodSpec, status: _PodStatus | None) -> tuple[PodClaimRef, ...]:
    """``parse._pod_claims``: the same join (``claim_refs``); odd entries go to the exact parser."""
    claims = spec.resource_claims or []
    statuses = (status.resource_claim_statuses if status is not None else None) or []
    if not claims and not statuses:
        return ()
    if len(claims) > MAX_POD_CLAIMS or len(statuses) > MAX_POD_CLAIMS:
        raise Unhandled("spec.resourceClaims")
    if any(not c.name for c in claims) or any(not s.name for s in statuses):
        raise Unhandled("spec.resourceClaims[].name")
    return claim_refs(
        ((c.name, c.resource_claim_name or "", c.resource_claim_template_name or "") for c in claims),
        ((s.name, s.resource_claim_name or "") for s in statuses),
    )


def convert_node(obj: _Node, sharer: Sharer) -> Node:
    """``parse.parse_node`` of the object ``obj`` was decoded from (or ``Unhandled``)."""
    meta = _meta(obj)
    if meta.annotations and RAW_ALLOCATABLE_ANNOTATION in meta.annotations:
        raise Unhandled(RAW_ALLOCATABLE_ANNOTATION)
    spec = obj.spec
    status = obj.status
    ready = False
    for cond in (status.conditions if status is not None else None) or ():
        if cond.type == "Ready":
            ready = cond.status == "True"  # the last Ready condition counts, as in parse.py
    return Node(
        name=meta.name,
        labels=sharer.share(meta.labels or {}),
        allocatable=_amounts(status.allocatable if status is not None else None, "status.allocatable"),
        unschedulable=bool(spec.unschedulable) if spec is not None else False,
        ready=ready,
        taints=tuple(
            Taint(t.key, t.value, t.effect) for t in (spec.taints if spec is not None else None) or ()
        ),
        raw_allocatable=None,
        pause=pause_value(meta.annotations),
    )


def workload_converter(default_kind: str) -> Callable[[_Workload, Sharer], Workload]:
    def convert(obj: _Workload, sharer: Sharer) -> Workload:
        """``parse.parse_workload`` of the object ``obj`` was decoded from (or ``Unhandled``)."""
        meta = _meta(obj)
        kind = default_kind if obj.kind is UNSET else obj.kind
        if not isinstance(kind, str):
            raise Unhandled("kind")
        replicas = obj.spec.replicas if obj.spec is not None else 1
        if not 0 <= replicas <= INT32_MAX:
            raise Unhandled("spec.replicas")
        raw_namespace = meta.namespace or ""
        rollout = None
        if kind == "Deployment":
            spec = obj.spec
            status = obj.status
            rollout = rollout_of(
                spec.strategy if spec is not None else None,
                spec.paused if spec is not None else None,
                meta.generation,
                _status_dict(status) if status is not None else None,
                meta.resource_version,
                progress=(spec.progress_deadline_seconds, spec.min_ready_seconds) if spec else (None, None),
                template={"metadata": spec.template.metadata} if spec and spec.template else None,
            )
        return Workload(
            kind=kind,
            namespace=raw_namespace or "default",
            name=meta.name,
            uid=meta.uid or f"{kind}/{raw_namespace}/{meta.name}",
            replicas=replicas,
            owner=_owner(meta, sharer),
            pause=pause_value(meta.annotations),
            rollout=rollout,
        )

    return convert


def _status_dict(status: _WorkloadStatus) -> dict[str, Any]:
    """The status fields ``rollout_of`` reads, as the dict ``parse.py`` would hand it (absent: None)."""
    return {
        "observedGeneration": status.observed_generation,
        "replicas": status.replicas,
        "updatedReplicas": status.updated_replicas,
        "readyReplicas": status.ready_replicas,
        "availableReplicas": status.available_replicas,
        "conditions": status.conditions,
    }


class FastKind:
    """The fast path for one resource kind: page and event decoders and the converter."""

    def __init__(self, kind: str, struct: type[Any], convert: Callable[[Any, Sharer], Any]) -> None:
        self.kind = kind
        self.convert = convert
        self._page = msgspec.json.Decoder(_List[struct])  # type: ignore[valid-type]
        self._event = msgspec.json.Decoder(_Event[struct])  # type: ignore[valid-type]

    def decode_page(self, body: bytes) -> tuple[list[Any], str, str] | None:
        """(items, continue token, resourceVersion), or None when the page needs the exact decoder."""
        try:
            page = self._page.decode(body)
        except msgspec.MsgspecError:
            return None
        meta = page.metadata
        if meta is None:
            return page.items, "", ""
        return page.items, meta.continue_ or "", meta.resource_version or ""

    def decode_event(self, line: bytes) -> tuple[str, Any] | None:
        """(type, object) of an ADDED, MODIFIED, DELETED or BOOKMARK event; None for anything else
        (ERROR events, odd shapes), which the exact decoder handles."""
        try:
            event = self._event.decode(line)
        except msgspec.MsgspecError:
            return None
        if event.type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            return None
        return event.type, event.object

    def try_convert(self, struct: Any, sharer: Sharer) -> Any | None:
        """The converted object, or None: the exact path (``parse.py`` on the item's JSON) must see it, for
        a shape the converter does not reproduce (``Unhandled``) or a value ``parse.py`` rejects with its
        own message. The live cache and ``descheduler snapshot`` fall back alike."""
        try:
            return self.convert(struct, sharer)
        except Exception:  # Unhandled, or a quantity or time parse.py rejects with its own message
            return None


FAST_KINDS: dict[str, FastKind] = {
    "Pod": FastKind("Pod", _Pod, convert_pod),
    "Node": FastKind("Node", _Node, convert_node),
    **{
        kind: FastKind(kind, _Workload, workload_converter(kind))
        for kind in ("ReplicaSet", "Deployment", "StatefulSet", "ReplicationController")
    },
}
"""Kinds decoded by the fast path; the others (PDBs, namespaces: few and small) use ``parse.py`` alone."""


def exact_item(item: Any, kind: str) -> Any:
    """A list's item as the exact parser reads it: list items may lack ``kind``, the list names it."""
    if isinstance(item, dict):
        item.setdefault("kind", kind)
    return item


def key_of(obj: Any, namespaced: bool) -> str | None:
    """The cache key ``_Reflector._key`` would give the object's dict (None: no name)."""
    meta = obj.metadata
    if meta is None or not meta.name:
        return None
    if namespaced:
        return f"{meta.namespace or 'default'}/{meta.name}"
    return str(meta.name)


def resource_version_of(obj: Any) -> str:
    meta = obj.metadata
    return (meta.resource_version or "") if meta is not None else ""
