"""Turn Kubernetes objects (decoded JSON/YAML dicts) into snapshot values.

One parser serves the watch cache and the ``simulate`` loader. It reads plain dicts instead of the
official client's models because model deserialization is several times slower and keeps every field.
Bad objects raise ``ObjectError`` naming the object and field; nothing is guessed (every nested field is
read through the typed guard of ``fields.py``: a wrong type is refused, never crashes, never read as
unset). Nothing else escapes, whatever the object holds (wrong types, values nested hundreds deep, absurd
numbers), and the work done on one object is bounded by its size: a watched object written by anyone who
may update it (a kubelet, koordlet) must never stop the loop.

Bounds (what Kubernetes itself accepts, or a stated sane maximum):

- a resource amount lies in ``0 .. 2^63-1`` in its planning unit (millicores for cpu, as ``MilliValue``;
  bytes or units otherwise, as ``Value``): Kubernetes rejects negative requests and allocatable, and
  Koordinator reads both as int64; a quantity's text is at most ``MAX_QUANTITY_CHARS`` long (the API
  server stores quantities in canonical form, a few characters);
- ``spec.priority``, ``spec.replicas`` and ``status.disruptionsAllowed`` are int32, as in the API;
- ``metadata.creationTimestamp`` lies in the years ``MIN_YEAR`` to ``MAX_YEAR``: the API server stamps
  it from its clock, and what comes later (ages, a replay's clock, dates printed) stays representable;
- Koordinator's ``node.koordinator.sh/raw-allocatable`` annotation that cannot be read (not JSON, not a
  map of quantities, an amount out of range, longer than ``MAX_RAW_ALLOCATABLE_CHARS``) is ignored as a
  whole: the node keeps ``status.allocatable`` (Koordinator's own fallback) and carries the reason in
  ``Node.warnings``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from descheduler.cluster.fields import (
    ObjectError as ObjectError,
)
from descheduler.cluster.fields import (
    describe,
    field_bool,
    field_list,
    field_map,
    field_text,
    item_map,
    name_text,
    scalar_text,
)
from descheduler.cluster.fields import (
    show as show,
)
from descheduler.cluster.requests import pod_requests
from descheduler.cluster.types import (
    HostPort,
    LabelSelector,
    LabelSelectorRequirement,
    Namespace,
    Node,
    NodeSelectorTerm,
    OwnerRef,
    Placement,
    Pod,
    PodClaimRef,
    PodDisruptionBudget,
    PodTerm,
    Rollout,
    SpreadConstraint,
    Taint,
    Toleration,
    Workload,
)
from descheduler.config.migration import KNOWN_OPT_OUT_ANNOTATIONS, PAUSE_ANNOTATION
from descheduler.units import resource_amount

RAW_ALLOCATABLE_ANNOTATION = "node.koordinator.sh/raw-allocatable"
KEPT_POD_ANNOTATIONS = (
    KNOWN_OPT_OUT_ANNOTATIONS
    | {PAUSE_ANNOTATION}
    | frozenset(
        {
            "controller.kubernetes.io/pod-deletion-cost",
            "scheduling.koordinator.sh/eviction-cost",
            "descheduler.alpha.kubernetes.io/evict",
            "kubernetes.io/config.mirror",
            "kubernetes.io/config.source",
            "scheduling.koordinator.sh/soft-eviction",
        }
    )
)
WORKLOAD_KINDS = ("ReplicaSet", "Deployment", "StatefulSet", "ReplicationController")

Obj = Mapping[str, Any]
_T = TypeVar("_T")

INT64_MAX = 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_QUANTITY_CHARS = 64
"""Longer quantity texts are refused before any conversion (canonical quantities are a few characters)."""
MAX_RAW_ALLOCATABLE_CHARS = 16 * 1024
"""A raw-allocatable annotation lists a few resources; anything longer is not decoded."""
MAX_EXPONENT = 64
"""``1e999999999`` is refused before ``10**999999999`` is computed (minutes of CPU holding the GIL): an
amount within int64 never needs an exponent beyond this, whatever its mantissa (64 characters at most)."""
_EXPONENT = re.compile(r"[eE]([+-]?\d+)\s*$")
MIN_YEAR, MAX_YEAR = 1970, 2999
MAX_TIMESTAMP_CHARS = 64
_describe = describe  # the names dra.py and older callers import from here
_name_text = name_text


def _guarded(parse: Callable[[Obj], _T]) -> Callable[[Obj], _T]:
    """``ObjectError`` for an object nested too deeply to walk (``RecursionError`` in a ``str`` of a
    nested value), so a parser raises nothing else."""

    @functools.wraps(parse)
    def guarded(obj: Obj) -> _T:
        try:
            return parse(obj)
        except RecursionError:
            raise ObjectError(f"{_describe(obj)}: nested too deeply to read") from None

    return guarded


def resource_value(name: str, quantity: Any) -> int:
    """One resource's amount in its planning unit, within Kubernetes' bounds (module docstring).

    ``ValueError`` otherwise; the fast decoder (``fastparse``) calls this too, so both refuse alike."""
    if type(quantity) is str:
        return _string_value(name, quantity)
    return _in_range(name, quantity, resource_amount(name, quantity))


@functools.lru_cache(maxsize=8192)
def _string_value(name: str, quantity: str) -> int:
    """Memoised like ``units``' own: the pods of a cluster repeat a few request texts. Only texts within
    ``MAX_QUANTITY_CHARS`` are ever kept (a refusal raises, and is not cached)."""
    if len(quantity) > MAX_QUANTITY_CHARS:
        raise ValueError(f"{show(quantity)} is longer than any quantity ({MAX_QUANTITY_CHARS} chars)")
    if "e" in quantity or "E" in quantity:
        exponent = _EXPONENT.search(quantity)
        if exponent is not None and abs(int(exponent.group(1))) > MAX_EXPONENT:
            raise ValueError(f"{show(quantity)}: exponent beyond +-{MAX_EXPONENT}, out of range")
    return _in_range(name, quantity, resource_amount(name, quantity))


def _in_range(name: str, quantity: Any, amount: int) -> int:
    if 0 <= amount <= INT64_MAX:
        return amount
    if amount < 0:
        raise ValueError(f"must not be negative, got {show(quantity)}")
    unit = "millicores" if name == "cpu" else "units"
    raise ValueError(f"{show(quantity)} is out of range: beyond 2^63-1 {unit}")


def _map(obj: Obj, path: str) -> Mapping[str, Any]:
    value: Any = obj
    for part in path.split("."):
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ObjectError(f"{_describe(obj)}: {path} must be an object")
        value = value.get(part)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(f"{_describe(obj)}: {path} must be an object, got {show(value)}")
    return value


_list = field_list


def _str_map(obj: Obj, value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(f"{_describe(obj)}: {path} must be a map of strings")
    return {
        k if type(k) is str else str(k): v if type(v) is str else _scalar_text(obj, path, k, v)
        for k, v in value.items()
    }


def _scalar_text(obj: Obj, path: str, key: Any, value: Any) -> str:
    """A scalar label or annotation value as text (``fields.scalar_text``; the path is built only for
    a value that is not a string, the rare case)."""
    return scalar_text(obj, value, f"{path}.{_name_text(str(key))}", "None" if value is None else "")


def _resources(obj: Obj, value: Any, path: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(f"{_describe(obj)}: {path} must be a map of quantities")
    out: dict[str, int] = {}
    for name, quantity in value.items():
        try:
            out[str(name)] = resource_value(str(name), quantity)
        except ValueError as exc:
            raise ObjectError(f"{_describe(obj)}: {path}.{_name_text(str(name))}: {exc}") from None
    return out


class TimestampRangeError(ValueError):
    """A well-formed time outside ``MIN_YEAR`` .. ``MAX_YEAR``."""


def timestamp_seconds(value: Any) -> float:
    """An RFC 3339 time (or a YAML datetime) as seconds since the epoch; 0.0 when unset.

    Raises ``ValueError`` for anything else, ``TimestampRangeError`` for a year out of bounds (shared
    with the fast path, ``fastparse``)."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, datetime):  # YAML loaders turn unquoted timestamps into datetimes
        parsed = value
    elif isinstance(value, str) and len(value) <= MAX_TIMESTAMP_CHARS:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    else:
        raise ValueError("not an RFC 3339 time")
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise TimestampRangeError(f"year {parsed.year} is outside {MIN_YEAR}..{MAX_YEAR}")
    return parsed.timestamp()


def _timestamp(obj: Obj, value: Any, path: str) -> float:
    try:
        return timestamp_seconds(value)
    except TimestampRangeError as exc:
        raise ObjectError(f"{_describe(obj)}: {path}: {show(value)}: {exc}") from None
    except (ValueError, OverflowError, OSError):
        raise ObjectError(f"{_describe(obj)}: {path}: {show(value)} is not an RFC 3339 time") from None


def _metadata(obj: Obj) -> tuple[str, str, Mapping[str, Any]]:
    meta = _map(obj, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError(f"{_describe(obj)}: metadata.name is required")
    return name, field_text(obj, meta, "namespace", "metadata.namespace"), meta


def parse_selector(obj: Obj, value: Any, path: str) -> LabelSelector:
    if not isinstance(value, Mapping):
        raise ObjectError(f"{_describe(obj)}: {path} must be a label selector object")
    expressions = []
    for i, expr in enumerate(_list(obj, value, "matchExpressions", f"{path}.matchExpressions")):
        expressions.append(_requirement(obj, expr, f"{path}.matchExpressions[{i}]"))
    return LabelSelector(
        match_labels=_str_map(obj, value.get("matchLabels"), f"{path}.matchLabels"),
        match_expressions=tuple(expressions),
    )


def _requirement(obj: Obj, expr: Any, path: str) -> LabelSelectorRequirement:
    if not isinstance(expr, Mapping) or "key" not in expr or "operator" not in expr:
        raise ObjectError(f"{_describe(obj)}: {path} needs key and operator")
    operator = field_text(obj, expr, "operator", f"{path}.operator")
    if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        raise ObjectError(f"{_describe(obj)}: {path}.operator: unknown operator {show(operator)}")
    values = expr.get("values") or []
    if not isinstance(values, list):
        raise ObjectError(f"{_describe(obj)}: {path}.values must be a list")
    key = scalar_text(obj, expr["key"], f"{path}.key", "None")
    texts = tuple(scalar_text(obj, v, f"{path}.values[{i}]", "None") for i, v in enumerate(values))
    return LabelSelectorRequirement(key, operator, texts)


def _owner(obj: Obj, meta: Mapping[str, Any]) -> OwnerRef | None:
    for i, ref in enumerate(_list(obj, meta, "ownerReferences", "metadata.ownerReferences")):
        path = f"metadata.ownerReferences[{i}]"
        ref = item_map(obj, ref, path)
        if field_bool(obj, ref, "controller", f"{path}.controller"):
            return OwnerRef(
                kind=field_text(obj, ref, "kind", f"{path}.kind"),
                name=field_text(obj, ref, "name", f"{path}.name"),
                uid=field_text(obj, ref, "uid", f"{path}.uid"),
                api_version=field_text(obj, ref, "apiVersion", f"{path}.apiVersion"),
            )
    return None


def _raw_allocatable(obj: Obj, text: str) -> tuple[dict[str, int] | None, str]:
    """Koordinator's raw-allocatable amounts, or (None, why they are ignored)."""
    where = f"{_describe(obj)}: annotation {RAW_ALLOCATABLE_ANNOTATION}"
    fallback = "ignored, thresholds use status.allocatable"
    if len(text) > MAX_RAW_ALLOCATABLE_CHARS:
        return None, f"{where} is longer than {MAX_RAW_ALLOCATABLE_CHARS} characters; {fallback}"
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return None, f"{where} is not JSON ({show(text)}); {fallback}"
    if not isinstance(decoded, Mapping):
        return None, f"{where} must be a JSON object of quantities, got {show(decoded)}; {fallback}"
    amounts: dict[str, int] = {}
    for name, quantity in decoded.items():
        try:
            amounts[name] = resource_value(name, quantity)
        except ValueError as exc:
            return None, f"{where}: {_name_text(name)}: {exc}; {fallback}"
    return amounts, ""


def pause_value(annotations: Mapping[str, Any] | None) -> str:
    """What pauses an object: the pause annotation's value unless it is empty or ``false`` (any other text
    pauses, so an operator can write why: ``"INC-2211, until Friday"``). Bounded for the audit."""
    if not annotations:
        return ""
    value = annotations.get(PAUSE_ANNOTATION)
    if not isinstance(value, str):
        return ""
    value = value.strip()
    if not value or value.lower() == "false":
        return ""
    return value[:128]


@_guarded
def parse_node(obj: Obj) -> Node:
    name, _, meta = _metadata(obj)
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    ready = False
    for i, item in enumerate(_list(obj, status, "conditions", "status.conditions")):
        cond = item_map(obj, item, f"status.conditions[{i}]")
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = []
    for i, taint in enumerate(_list(obj, spec, "taints", "spec.taints")):
        path = f"spec.taints[{i}]"
        if not isinstance(taint, Mapping) or "key" not in taint:
            raise ObjectError(f"{_describe(obj)}: {path} needs a key")
        taints.append(
            Taint(
                scalar_text(obj, taint["key"], f"{path}.key", "None"),
                field_text(obj, taint, "value", f"{path}.value"),
                field_text(obj, taint, "effect", f"{path}.effect"),
            )
        )
    annotations = _str_map(obj, meta.get("annotations"), "metadata.annotations")
    raw_allocatable = None
    warnings: tuple[str, ...] = ()
    if RAW_ALLOCATABLE_ANNOTATION in annotations:
        raw_allocatable, why = _raw_allocatable(obj, annotations[RAW_ALLOCATABLE_ANNOTATION])
        warnings = (why,) if why else ()
    return Node(
        name=name,
        labels=_str_map(obj, meta.get("labels"), "metadata.labels"),
        allocatable=_resources(obj, status.get("allocatable"), "status.allocatable"),
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=ready,
        taints=tuple(taints),
        raw_allocatable=raw_allocatable,
        warnings=warnings,
        pause=pause_value(annotations),
    )


def _pod_requests(obj: Obj, spec: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests as the scheduler adds them up (``requests.pod_requests``)."""
    return pod_requests(spec, status, lambda value, path: _resources(obj, value, path), obj)


def _required_node_terms(obj: Obj, spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = _map(obj, path)
    return tuple(
        node_selector_term(obj, term, f"{path}.nodeSelectorTerms[{i}]")
        for i, term in enumerate(_list(obj, affinity, "nodeSelectorTerms", "nodeSelectorTerms"))
    )


def node_selector_term(obj: Obj, term: Any, base: str) -> NodeSelectorTerm:
    """One core/v1 NodeSelectorTerm at ``base`` (a pod's required affinity, a ResourceSlice's selector)."""
    if not isinstance(term, Mapping):
        raise ObjectError(f"{_describe(obj)}: {base} must be an object")
    exprs = tuple(
        _requirement(obj, e, f"{base}.matchExpressions[{j}]")
        for j, e in enumerate(_list(obj, term, "matchExpressions", f"{base}.matchExpressions"))
    )
    fields = tuple(
        _requirement(obj, e, f"{base}.matchFields[{j}]")
        for j, e in enumerate(_list(obj, term, "matchFields", f"{base}.matchFields"))
    )
    return NodeSelectorTerm(exprs, fields)


def _host_ports(obj: Obj, spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Every container's host ports, init containers included (a port the scheduler might count is
    counted: more conflicts, never fewer)."""
    found: list[HostPort] = []
    for key in ("initContainers", "containers"):
        for i, item in enumerate(_list(obj, spec, key, f"spec.{key}")):
            container = item_map(obj, item, f"spec.{key}[{i}]")
            for j, entry in enumerate(_list(obj, container, "ports", f"spec.{key}[{i}].ports")):
                path = f"spec.{key}[{i}].ports[{j}]"
                port = item_map(obj, entry, path).get("hostPort")
                if port is None or port == 0:
                    continue
                if type(port) is not int or not 0 < port < 65536:
                    raise ObjectError(
                        f"{_describe(obj)}: {path}.hostPort must be a port number, got {show(port)}"
                    )
                found.append(
                    HostPort(
                        port,
                        field_text(obj, entry, "protocol", f"{path}.protocol", "TCP"),
                        field_text(obj, entry, "hostIP", f"{path}.hostIP"),
                    )
                )
    return tuple(found)


def _pod_terms(obj: Obj, affinity: Mapping[str, Any], kind: str) -> tuple[PodTerm, ...]:
    """``spec.affinity.<kind>.requiredDuringSchedulingIgnoredDuringExecution`` (preferred terms only
    score nodes)."""
    base = f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
    terms = []
    section = field_map(obj, affinity, kind, f"spec.affinity.{kind}")
    for i, item in enumerate(_list(obj, section, "requiredDuringSchedulingIgnoredDuringExecution", base)):
        path = f"{base}[{i}]"
        term = item_map(obj, item, path)
        key = field_text(obj, term, "topologyKey", f"{path}.topologyKey")
        if not key:
            raise ObjectError(f"{_describe(obj)}: {path}.topologyKey is required")
        selector, namespaces = term.get("labelSelector"), term.get("namespaceSelector")
        terms.append(
            PodTerm(
                None if selector is None else parse_selector(obj, selector, f"{path}.labelSelector"),
                key,
                tuple(
                    scalar_text(obj, n, f"{path}.namespaces[{j}]")
                    for j, n in enumerate(_list(obj, term, "namespaces", f"{path}.namespaces"))
                ),
                None if namespaces is None else parse_selector(obj, namespaces, f"{path}.namespaceSelector"),
            )
        )
    return tuple(terms)


def _spread(obj: Obj, spec: Mapping[str, Any]) -> tuple[SpreadConstraint, ...]:
    found = []
    for i, item in enumerate(_list(obj, spec, "topologySpreadConstraints", "spec.topologySpreadConstraints")):
        path = f"spec.topologySpreadConstraints[{i}]"
        entry = item_map(obj, item, path)
        if field_text(obj, entry, "whenUnsatisfiable", f"{path}.whenUnsatisfiable") != "DoNotSchedule":
            continue
        skew, key = entry.get("maxSkew"), field_text(obj, entry, "topologyKey", f"{path}.topologyKey")
        if type(skew) is not int or skew < 1 or not key:
            raise ObjectError(f"{_describe(obj)}: {path} needs a topologyKey and a maxSkew of at least 1")
        selector = entry.get("labelSelector")
        parsed = None if selector is None else parse_selector(obj, selector, f"{path}.labelSelector")
        found.append(SpreadConstraint(skew, key, parsed))
    return tuple(found)


def pod_placement(obj: Obj, spec: Mapping[str, Any]) -> Placement | None:
    """What the scheduler checks of the pod against other pods (``Placement``), None when nothing."""
    affinity = _map(obj, "spec.affinity")
    placement = Placement(
        _host_ports(obj, spec),
        _pod_terms(obj, affinity, "podAffinity"),
        _pod_terms(obj, affinity, "podAntiAffinity"),
        _spread(obj, spec),
    )
    return placement if placement != _NO_PLACEMENT else None


_NO_PLACEMENT = Placement()


@_guarded
def parse_pod(obj: Obj) -> Pod:
    name, namespace, meta = _metadata(obj)
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    annotations = _str_map(obj, meta.get("annotations"), "metadata.annotations")
    tolerations = []
    for i, tol in enumerate(_list(obj, spec, "tolerations", "spec.tolerations")):
        path = f"spec.tolerations[{i}]"
        tol = item_map(obj, tol, path)
        tolerations.append(
            Toleration(
                key=field_text(obj, tol, "key", f"{path}.key"),
                operator=field_text(obj, tol, "operator", f"{path}.operator", "Equal"),
                value=field_text(obj, tol, "value", f"{path}.value"),
                effect=field_text(obj, tol, "effect", f"{path}.effect"),
            )
        )
    local_storage = False
    pvc = False
    for i, volume in enumerate(_list(obj, spec, "volumes", "spec.volumes")):
        volume = item_map(obj, volume, f"spec.volumes[{i}]")
        if "hostPath" in volume or "emptyDir" in volume:
            local_storage = True
        if "persistentVolumeClaim" in volume or "ephemeral" in volume:
            pvc = True
    priority = spec.get("priority")
    if priority is not None and (
        not isinstance(priority, int) or isinstance(priority, bool) or not INT32_MIN <= priority <= INT32_MAX
    ):
        raise ObjectError(f"{_describe(obj)}: spec.priority must be an integer (int32), got {show(priority)}")
    source = annotations.get("kubernetes.io/config.source", "api")
    return Pod(
        namespace=namespace or "default",
        name=name,
        uid=field_text(obj, meta, "uid", "metadata.uid", f"{namespace}/{name}"),
        node_name=field_text(obj, spec, "nodeName", "spec.nodeName"),
        labels=_str_map(obj, meta.get("labels"), "metadata.labels"),
        annotations={k: v for k, v in annotations.items() if k in KEPT_POD_ANNOTATIONS},
        phase=field_text(obj, status, "phase", "status.phase", "Pending"),
        ready=_pod_ready(obj, status),
        terminating=meta.get("deletionTimestamp") is not None,
        created=_timestamp(obj, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        priority=priority,
        priority_class_name=field_text(obj, spec, "priorityClassName", "spec.priorityClassName"),
        qos_class=field_text(obj, status, "qosClass", "status.qosClass") or _derive_qos(obj, spec),
        requests=_pod_requests(obj, spec, status),
        owner=_owner(obj, meta),
        node_selector=_str_map(obj, spec.get("nodeSelector"), "spec.nodeSelector"),
        required_node_terms=_required_node_terms(obj, spec),
        tolerations=tuple(tolerations),
        has_local_storage=local_storage,
        has_pvc=pvc,
        is_mirror="kubernetes.io/config.mirror" in annotations,
        is_static=source != "api",
        has_resource_claims=bool(spec.get("resourceClaims")),
        scheduler_name=field_text(obj, spec, "schedulerName", "spec.schedulerName", "default-scheduler"),
        resource_claims=_pod_claims(obj, spec, status),
        placement=pod_placement(obj, spec),
    )


MAX_POD_CLAIMS = 128
"""``spec.resourceClaims`` holds at most 128 entries (the API's limit)."""


def claim_refs(
    claims: Iterable[tuple[str, str, str]], statuses: Iterable[tuple[str, str]]
) -> tuple[PodClaimRef, ...]:
    """``spec.resourceClaims`` (name, claim, template) joined by name with ``status.resourceClaimStatuses``
    (name, generated claim; the first status of a name counts). Both parsers call this, so they agree."""
    generated: dict[str, str] = {}
    for name, claim in statuses:
        generated.setdefault(name, claim)
    return tuple(
        PodClaimRef(name, claim, template, generated.get(name, "") if template else "")
        for name, claim, template in claims
    )


def _claim_field(obj: Obj, entry: Mapping[str, Any], key: str, path: str) -> str:
    value = entry.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ObjectError(f"{_describe(obj)}: {path}.{key} must be a string, got {show(value)}")
    return value


def _pod_claims(obj: Obj, spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[PodClaimRef, ...]:
    claims = []
    entries = _list(obj, spec, "resourceClaims", "spec.resourceClaims")
    if len(entries) > MAX_POD_CLAIMS:
        raise ObjectError(f"{_describe(obj)}: spec.resourceClaims has more than {MAX_POD_CLAIMS} entries")
    for i, entry in enumerate(entries):
        path = f"spec.resourceClaims[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ObjectError(f"{_describe(obj)}: {path} needs a name")
        claims.append(
            (
                entry["name"],
                _claim_field(obj, entry, "resourceClaimName", path),
                _claim_field(obj, entry, "resourceClaimTemplateName", path),
            )
        )
    statuses = []
    entries = _list(obj, status, "resourceClaimStatuses", "status.resourceClaimStatuses")
    if len(entries) > MAX_POD_CLAIMS:
        raise ObjectError(
            f"{_describe(obj)}: status.resourceClaimStatuses has more than {MAX_POD_CLAIMS} entries"
        )
    for i, entry in enumerate(entries):
        path = f"status.resourceClaimStatuses[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ObjectError(f"{_describe(obj)}: {path} needs a name")
        statuses.append((entry["name"], _claim_field(obj, entry, "resourceClaimName", path)))
    return claim_refs(claims, statuses)


def _pod_ready(obj: Obj, status: Mapping[str, Any]) -> bool:
    """The Ready condition; objects written by hand without conditions count as ready when Running."""
    for i, item in enumerate(_list(obj, status, "conditions", "status.conditions")):
        cond = item_map(obj, item, f"status.conditions[{i}]")
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return status.get("phase") == "Running"


def _derive_qos(obj: Obj, spec: Mapping[str, Any]) -> str:
    """QoS class when status.qosClass is absent (objects written by hand for simulate)."""
    requests_seen = False
    guaranteed = True
    for i, container in enumerate(_list(obj, spec, "containers", "spec.containers")):
        path = f"spec.containers[{i}]"
        res = field_map(obj, item_map(obj, container, path), "resources", f"{path}.resources")
        requests = _resources(obj, res.get("requests"), f"{path}.resources.requests")
        limits = _resources(obj, res.get("limits"), f"{path}.resources.limits")
        effective = {**limits, **requests} if limits else requests
        if requests or limits:
            requests_seen = True
        for resource in ("cpu", "memory"):
            if resource not in limits or effective.get(resource) != limits.get(resource):
                guaranteed = False
    if not requests_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


@_guarded
def parse_pdb(obj: Obj) -> PodDisruptionBudget:
    name, namespace, _ = _metadata(obj)
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    selector = spec.get("selector")
    allowed = status.get("disruptionsAllowed", 0)
    if not isinstance(allowed, int) or isinstance(allowed, bool) or not INT32_MIN <= allowed <= INT32_MAX:
        raise ObjectError(
            f"{_describe(obj)}: status.disruptionsAllowed must be an integer (int32), got {show(allowed)}"
        )
    return PodDisruptionBudget(
        namespace=namespace or "default",
        name=name,
        selector=None if selector is None else parse_selector(obj, selector, "spec.selector"),
        disruptions_allowed=allowed,
    )


@_guarded
def parse_workload(obj: Obj) -> Workload:
    name, namespace, meta = _metadata(obj)
    spec = _map(obj, "spec")
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 0 <= replicas <= INT32_MAX:
        raise ObjectError(
            f"{_describe(obj)}: spec.replicas must be a non-negative integer (int32), got {show(replicas)}"
        )
    kind = field_text(obj, obj, "kind", "kind", "None")
    rollout = None
    if kind == "Deployment":
        rollout = rollout_of(
            spec.get("strategy"),
            spec.get("paused"),
            meta.get("generation"),
            obj.get("status"),
            meta.get("resourceVersion"),
            progress=(spec.get("progressDeadlineSeconds"), spec.get("minReadySeconds")),
            template=spec.get("template"),
        )
    return Workload(
        kind=kind,
        namespace=namespace or "default",
        name=name,
        uid=field_text(obj, meta, "uid", "metadata.uid", f"{kind}/{namespace}/{name}"),
        replicas=replicas,
        owner=_owner(obj, meta),
        pause=pause_value(_str_map(obj, meta.get("annotations"), "metadata.annotations")),
        rollout=rollout,
    )


_PERCENT = re.compile(r"^[0-9]{1,10}%$")
DEFAULT_ROLLING = "25%"
"""Kubernetes' default maxSurge and maxUnavailable."""


def _int_or_percent(value: Any, field: str) -> tuple[int | str, str]:
    """An IntOrString as Kubernetes accepts it (a non-negative int32, or digits and ``%``), else a problem."""
    if value is None:
        return DEFAULT_ROLLING, ""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT32_MAX:
        return value, ""
    if isinstance(value, str) and _PERCENT.match(value):
        return value, ""
    return DEFAULT_ROLLING, f"{field} must be a non-negative integer or a percent, got {show(value)}"


def _count(value: Any, field: str, limit: int = INT32_MAX) -> tuple[int, str]:
    if value is None:
        return 0, ""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit:
        return value, ""
    return 0, f"{field} must be a non-negative integer, got {show(value)}"


def rollout_of(
    strategy: Any,
    paused: Any,
    generation: Any,
    status: Any,
    resource_version: Any,
    *,
    progress: tuple[Any, Any] = (None, None),
    template: Any = None,
) -> Rollout:
    """A Deployment's ``Rollout`` from its raw fields (both parsers call this, so they agree). Never
    raises: a field it cannot read is named in ``problem`` and the Deployment is never restarted.
    ``progress`` is (``progressDeadlineSeconds``, ``minReadySeconds``), ``template`` ``spec.template``."""
    problems: list[str] = []
    kind = "RollingUpdate"
    surge: int | str = DEFAULT_ROLLING
    unavailable: int | str = DEFAULT_ROLLING
    if strategy is not None and not isinstance(strategy, Mapping):
        problems.append(f"spec.strategy must be an object, got {show(strategy)}")
    elif strategy is not None:
        given = strategy.get("type")
        if given is not None and given not in ("RollingUpdate", "Recreate"):
            problems.append(f"spec.strategy.type must be RollingUpdate or Recreate, got {show(given)}")
        elif given is not None:
            kind = given
        rolling = strategy.get("rollingUpdate")
        if rolling is not None and not isinstance(rolling, Mapping):
            problems.append(f"spec.strategy.rollingUpdate must be an object, got {show(rolling)}")
        elif rolling is not None:
            surge, problem = _int_or_percent(rolling.get("maxSurge"), "spec.strategy.rollingUpdate.maxSurge")
            problems.append(problem)
            unavailable, problem = _int_or_percent(
                rolling.get("maxUnavailable"), "spec.strategy.rollingUpdate.maxUnavailable"
            )
            problems.append(problem)
    if paused is not None and not isinstance(paused, bool):
        problems.append(f"spec.paused must be a boolean, got {show(paused)}")
    generation_value, problem = _count(generation, "metadata.generation", 2**63 - 1)
    problems.append(problem)
    counts: dict[str, int] = {}
    if status is not None and not isinstance(status, Mapping):
        problems.append(f"status must be an object, got {show(status)}")
    elif status is not None:
        for key, limit in (
            ("observedGeneration", 2**63 - 1),
            ("replicas", INT32_MAX),
            ("updatedReplicas", INT32_MAX),
            ("readyReplicas", INT32_MAX),
            ("availableReplicas", INT32_MAX),
        ):
            counts[key], problem = _count(status.get(key), f"status.{key}", limit)
            problems.append(problem)
    deadline, problem = _count(progress[0], "spec.progressDeadlineSeconds")
    problems.append(problem)
    min_ready, problem = _count(progress[1], "spec.minReadySeconds")
    problems.append(problem)
    return Rollout(
        strategy=kind,
        max_surge=surge,
        max_unavailable=unavailable,
        paused=paused is True,
        generation=generation_value,
        observed_generation=counts.get("observedGeneration", 0),
        replicas=counts.get("replicas", 0),
        updated_replicas=counts.get("updatedReplicas", 0),
        ready_replicas=counts.get("readyReplicas", 0),
        available_replicas=counts.get("availableReplicas", 0),
        progress_deadline=deadline if progress[0] is not None else DEFAULT_PROGRESS_DEADLINE,
        min_ready=min_ready,
        deadline_exceeded=_deadline_exceeded(status),
        restarted_at=_restarted_at(template),
        resource_version=resource_version if isinstance(resource_version, str) else "",
        problem="; ".join(p for p in problems if p),
    )


DEFAULT_PROGRESS_DEADLINE = 600
"""Kubernetes' default ``spec.progressDeadlineSeconds`` of a Deployment."""
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
"""The pod-template annotation ``kubectl rollout restart`` sets, and our restarts too (``kube/evict.py``)."""


def _deadline_exceeded(status: Any) -> bool:
    """Whether the Deployment reports condition Progressing=False, reason ProgressDeadlineExceeded."""
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping)
        and c.get("type") == "Progressing"
        and c.get("status") == "False"
        and c.get("reason") == "ProgressDeadlineExceeded"
        for c in conditions
    )


def _restarted_at(template: Any) -> float:
    """The pod template's ``restartedAt`` annotation as seconds since the epoch (0.0: none, or unreadable:
    an annotation is free text, so it is never a problem of the Deployment)."""
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = annotations.get(RESTARTED_AT) if isinstance(annotations, Mapping) else None
    try:
        return timestamp_seconds(value) if isinstance(value, str) else 0.0
    except (ValueError, OverflowError, OSError):
        return 0.0


@_guarded
def parse_namespace(obj: Obj) -> Namespace:
    name, _, meta = _metadata(obj)
    return Namespace(
        name=name,
        labels=_str_map(obj, meta.get("labels"), "metadata.labels"),
        pause=pause_value(_str_map(obj, meta.get("annotations"), "metadata.annotations")),
    )


def iter_objects(documents: Iterable[Any]) -> Iterable[Obj]:
    """Flatten YAML documents and ``kind: List`` (or ``*List``) into single objects."""
    for doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise ObjectError(f"expected a Kubernetes object, got {type(doc).__name__}")
        list_kind = doc.get("kind", "List")
        if "items" in doc and isinstance(list_kind, str) and list_kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ObjectError(f"{_name_text(list_kind)}: items must be a list")
            item_kind = list_kind[: -len("List")]
            for item in items:
                if isinstance(item, Mapping) and "kind" not in item and item_kind:
                    item = {**item, "kind": item_kind}
                yield from iter_objects([item])
        else:
            yield doc
