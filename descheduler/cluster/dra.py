"""Dynamic Resource Allocation objects (resource.k8s.io/v1) as snapshot values.

Strict like ``parse.py``: a field the API server would not accept raises ``ObjectError`` naming the
object and the field, and the work on one object is bounded by the API's own limits (stated below), so a
slice written by a buggy driver can never stall the cache.

- A device's attribute and capacity names are qualified: an unqualified ``model`` of driver
  ``gpu.example.com`` becomes ``gpu.example.com/model`` (as the scheduler's CEL environment sees it).
- Capacity quantities stay exact (a ``Fraction``; ``500m`` is 1/2): CEL compares them as
  ``resource.Quantity`` does, so rounding ``500m`` up to 1 would make ``isGreaterThan(quantity('600m'))``
  hold here and not in the scheduler. Only precision below a nano is rounded up, as ``Quantity`` does.
- Partitionable devices keep what they consume (``consumesCounters``), and a pool's counter sets come
  from its slices' ``sharedCounters`` (in resource.k8s.io/v1 of 1.35 a slice holds counters or devices,
  never both); counter values are exact quantities like capacities. Device taints and the tolerations of
  requests are kept for the planner (``DRADeviceTaints``); so are the ``matchAttribute`` and
  ``distinctAttribute`` constraints of a claim.
- Devices the planner cannot reason about (devices allocatable to several claims, binding conditions,
  per-device node selection) are kept with ``Device.unsupported`` saying why; they are never counted as
  free. A constraint of a kind not known here is kept with an empty kind: its pod stays in place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from descheduler.cluster.parse import (
    INT64_MAX,
    Obj,
    ObjectError,
    _describe,
    _guarded,
    _list,
    _map,
    _metadata,
    _owner,
    node_selector_term,
    show,
)
from descheduler.cluster.types import (
    AllocatedDevice,
    AttributeValue,
    Device,
    DeviceClass,
    DeviceRequest,
    NodeSelectorTerm,
    ResourceClaim,
    ResourceSlice,
    Taint,
    Toleration,
)
from descheduler.units import parse_quantity

__all__ = [
    "MAX_CEL_CHARS",
    "SEMVER",
    "parse_device_class",
    "parse_resource_claim",
    "parse_resource_slice",
    "qualified",
]

MAX_DEVICES = 128
"""``ResourceSliceMaxDevices``."""
MAX_ATTRIBUTES = 32
"""``ResourceSliceMaxAttributesAndCapacitiesPerDevice``: attributes and capacities together."""
MAX_ATTRIBUTE_TEXT = 64
"""``DeviceAttributeMaxValueLength``: string and version attribute values."""
MAX_SELECTORS = 32
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_CONSTRAINTS = 32
MAX_RESULTS = 32
"""``AllocationResultsMaxSize``."""
MAX_RESERVED_FOR = 256
MAX_NODE_TERMS = 32
MAX_CEL_CHARS = 10 * 1024
"""``CELSelectorExpressionMaxLength``."""
MAX_COUNT = 2**31 - 1
MAX_COUNTER_SETS = 8
"""``ResourceSliceMaxCounterSets``."""
MAX_COUNTERS = 32
"""``ResourceSliceMaxCountersPerCounterSet`` (and per device counter consumption)."""
MAX_CONSUMPTIONS = 2
"""``ResourceSliceMaxDeviceCounterConsumptionsPerDevice``."""
MAX_TAINTS = 16
"""``DeviceTaintsMaxLength``, and ``DeviceTolerationsMaxLength`` for a request's tolerations."""
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")

SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
"""Semantic Versioning 2.0.0, as the API server validates ``version`` attributes."""
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_UNSUPPORTED_FIELDS = (
    ("allowMultipleAllocations", "shareable device (allowMultipleAllocations)"),
    ("bindingConditions", "device with binding conditions"),
    ("bindsToNode", "device that binds to a node"),
    ("nodeName", "per-device node selection"),
    ("allNodes", "per-device node selection"),
    ("nodeSelector", "per-device node selection"),
)


def _fail(obj: Obj, path: str, what: str) -> ObjectError:
    return ObjectError(f"{_describe(obj)}: {path} {what}")


def _obj_at(obj: Obj, value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(obj, path, f"must be an object, got {show(value)}")
    return value


def _bounded_list(obj: Obj, container: Mapping[str, Any], key: str, path: str, limit: int) -> list[Any]:
    items = _list(obj, container, key, path)
    if len(items) > limit:
        raise _fail(obj, path, f"has {len(items)} entries, at most {limit} allowed")
    return items


def _text(obj: Obj, value: Any, path: str, *, required: bool = True, limit: int = 253) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise _fail(obj, path, f"must be a non-empty string, got {show(value)}")
    if len(value) > limit:
        raise _fail(obj, path, f"is longer than {limit} characters")
    return value


def _int(obj: Obj, value: Any, path: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _fail(obj, path, f"must be an integer in {low}..{high}, got {show(value)}")
    return value


def _bool(obj: Obj, value: Any, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _fail(obj, path, f"must be a boolean, got {show(value)}")
    return value


def qualified(driver: str, name: str) -> str:
    """An attribute or capacity name with its domain: the driver's when the name has none."""
    return name if "/" in name else f"{driver}/{name}"


def _qualified_name(obj: Obj, driver: str, name: Any, path: str) -> str:
    if not isinstance(name, str):
        raise _fail(obj, path, f"must be a qualified name, got {show(name)}")
    domain, _, identifier = name.rpartition("/")
    if not _IDENTIFIER.match(identifier) or (domain and (len(domain) > 63 or not _DOMAIN.match(domain))):
        raise _fail(obj, path, f"{show(name)} is not a valid attribute name (domain/identifier)")
    return qualified(driver, name)


def _attribute(obj: Obj, value: Any, path: str) -> tuple[AttributeValue, bool]:
    """(value, is a version) of one DeviceAttribute: exactly one of bool, int, string, version."""
    if not isinstance(value, Mapping):
        raise _fail(obj, path, f"must be an object, got {show(value)}")
    given = [k for k in ("bool", "int", "string", "version") if value.get(k) is not None]
    if len(given) != 1:
        raise _fail(obj, path, "must have exactly one of bool, int, string, version")
    kind = given[0]
    raw = value[kind]
    where = f"{path}.{kind}"
    if kind == "bool":
        return _bool(obj, raw, where), False
    if kind == "int":
        return _int(obj, raw, where, -INT64_MAX - 1, INT64_MAX), False
    text = _text(obj, raw, where, required=False, limit=MAX_ATTRIBUTE_TEXT)
    if kind == "version" and not SEMVER.match(text):
        raise _fail(obj, where, f"{show(text)} is not a semantic version")
    return text, kind == "version"


_NANO = 10**9


def _capacity(obj: Obj, value: Any, path: str) -> Fraction:
    """An exact, non-negative quantity (module docstring); below a nano rounded up as ``Quantity``."""
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        raise _fail(obj, path, str(exc)) from None
    if amount < 0:
        raise _fail(obj, path, f"must not be negative, got {show(value)}")
    return Fraction(math.ceil(amount * _NANO), _NANO)


def _label(obj: Obj, value: Any, path: str) -> str:
    if not isinstance(value, str) or not _LABEL.match(value):
        raise _fail(obj, path, f"must be a DNS label, got {show(value)}")
    return value


def _counters(obj: Obj, value: Any, path: str) -> dict[str, Fraction]:
    """A ``counters`` map: counter name -> ``{value: quantity}``, at least one."""
    counters = _obj_at(obj, value, path)
    if not counters:
        raise _fail(obj, path, "is required")
    if len(counters) > MAX_COUNTERS:
        raise _fail(obj, path, f"has {len(counters)} entries, at most {MAX_COUNTERS} allowed")
    out: dict[str, Fraction] = {}
    for name, counter in counters.items():
        where = f"{path}.{_label(obj, name, f'{path} key')}"
        entry = _obj_at(obj, counter, where)
        if entry.get("value") is None:
            raise _fail(obj, f"{where}.value", "is required")
        out[name] = _capacity(obj, entry["value"], f"{where}.value")
    return out


def _named_counters(
    obj: Obj, container: Mapping[str, Any], key: str, name_key: str, path: str, limit: int
) -> tuple[tuple[str, dict[str, Fraction]], ...]:
    """``sharedCounters`` (``name``) or ``consumesCounters`` (``counterSet``): unique names."""
    out: dict[str, dict[str, Fraction]] = {}
    for i, item in enumerate(_bounded_list(obj, container, key, f"{path}.{key}", limit)):
        where = f"{path}.{key}[{i}]"
        entry = _obj_at(obj, item, where)
        name = _label(obj, entry.get(name_key), f"{where}.{name_key}")
        if name in out:
            raise _fail(obj, f"{where}.{name_key}", f"{show(name)} is duplicated")
        out[name] = _counters(obj, entry.get("counters"), f"{where}.counters")
    return tuple(out.items())


def _taints(obj: Obj, device: Mapping[str, Any], path: str) -> tuple[Taint, ...]:
    out = []
    for i, item in enumerate(_bounded_list(obj, device, "taints", f"{path}.taints", MAX_TAINTS)):
        where = f"{path}.taints[{i}]"
        taint = _obj_at(obj, item, where)
        effect = taint.get("effect")
        if effect not in TAINT_EFFECTS:
            raise _fail(
                obj, f"{where}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}, got {show(effect)}"
            )
        key = _text(obj, taint.get("key"), f"{where}.key", limit=317)
        out.append(Taint(key, _text(obj, taint.get("value"), f"{where}.value", required=False), effect))
    return tuple(out)


def _tolerations(obj: Obj, body: Mapping[str, Any], path: str) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(_bounded_list(obj, body, "tolerations", f"{path}.tolerations", MAX_TAINTS)):
        where = f"{path}.tolerations[{i}]"
        toleration = _obj_at(obj, item, where)
        operator = toleration.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise _fail(obj, f"{where}.operator", f"must be Equal or Exists, got {show(operator)}")
        effect = toleration.get("effect") or ""
        if effect and effect not in TAINT_EFFECTS:
            raise _fail(
                obj, f"{where}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}, got {show(effect)}"
            )
        key = _text(obj, toleration.get("key"), f"{where}.key", required=False, limit=317)
        value = _text(obj, toleration.get("value"), f"{where}.value", required=False)
        if operator == "Exists" and value:
            raise _fail(obj, f"{where}.value", "must be empty for operator Exists")
        if not key and operator != "Exists":
            raise _fail(obj, f"{where}.operator", "must be Exists when the key is empty")
        out.append(Toleration(key, operator, value, effect))
    return tuple(out)


def _device(obj: Obj, driver: str, value: Any, path: str, slice_unsupported: str) -> Device:
    if not isinstance(value, Mapping):
        raise _fail(obj, path, f"must be an object, got {show(value)}")
    name = _text(obj, value.get("name"), f"{path}.name", limit=63)
    attributes_in = _obj_at(obj, value.get("attributes"), f"{path}.attributes")
    capacity_in = _obj_at(obj, value.get("capacity"), f"{path}.capacity")
    if len(attributes_in) + len(capacity_in) > MAX_ATTRIBUTES:
        raise _fail(obj, path, f"has more than {MAX_ATTRIBUTES} attributes and capacities")
    attributes: dict[str, AttributeValue] = {}
    versions: set[str] = set()
    for key, attribute in attributes_in.items():
        where = f"{path}.attributes.{show(key)}"
        full = _qualified_name(obj, driver, key, where)
        attributes[full], is_version = _attribute(obj, attribute, where)
        if is_version:
            versions.add(full)
    capacity: dict[str, Fraction] = {}
    for key, amount in capacity_in.items():
        where = f"{path}.capacity.{show(key)}"
        full = _qualified_name(obj, driver, key, where)
        entry = _obj_at(obj, amount, where)
        if entry.get("value") is None:
            raise _fail(obj, f"{where}.value", "is required")
        capacity[full] = _capacity(obj, entry["value"], f"{where}.value")
    unsupported = [why for field, why in _UNSUPPORTED_FIELDS if value.get(field) not in (None, False, [], {})]
    if slice_unsupported:
        unsupported.insert(0, slice_unsupported)
    return Device(
        name=name,
        attributes=attributes,
        versions=frozenset(versions),
        capacity=capacity,
        unsupported="; ".join(dict.fromkeys(unsupported)),
        consumes=_named_counters(obj, value, "consumesCounters", "counterSet", path, MAX_CONSUMPTIONS),
        taints=_taints(obj, value, path),
    )


def node_terms(obj: Obj, value: Any, path: str) -> tuple[NodeSelectorTerm, ...]:
    """A core/v1 NodeSelector's terms (ORed)."""
    selector = _obj_at(obj, value, path)
    terms = _bounded_list(obj, selector, "nodeSelectorTerms", f"{path}.nodeSelectorTerms", MAX_NODE_TERMS)
    return tuple(node_selector_term(obj, t, f"{path}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms))


@_guarded
def parse_resource_slice(obj: Obj) -> ResourceSlice:
    name, _, _ = _metadata(obj)
    spec = _map(obj, "spec")
    driver = _text(obj, spec.get("driver"), "spec.driver", limit=63)
    if not _DOMAIN.match(driver):
        raise _fail(obj, "spec.driver", f"{show(driver)} is not a DNS subdomain")
    pool = _map(obj, "spec.pool")
    pool_name = _text(obj, pool.get("name"), "spec.pool.name")
    generation = _int(obj, pool.get("generation", 0), "spec.pool.generation", 0, INT64_MAX)
    slice_count = _int(obj, pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", 1, MAX_COUNT)
    node_name = _text(obj, spec.get("nodeName"), "spec.nodeName", required=False)
    all_nodes = _bool(obj, spec.get("allNodes"), "spec.allNodes")
    per_device = _bool(obj, spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection")
    terms = node_terms(obj, spec.get("nodeSelector"), "spec.nodeSelector")
    chosen = sum((bool(node_name), all_nodes, spec.get("nodeSelector") is not None, per_device))
    if chosen != 1:
        raise _fail(
            obj, "spec", "must set exactly one of nodeName, allNodes, nodeSelector, perDeviceNodeSelection"
        )
    slice_unsupported = "per-device node selection" if per_device else ""
    devices = tuple(
        _device(obj, driver, device, f"spec.devices[{i}]", slice_unsupported)
        for i, device in enumerate(_bounded_list(obj, spec, "devices", "spec.devices", MAX_DEVICES))
    )
    if len({d.name for d in devices}) != len(devices):
        raise _fail(obj, "spec.devices", "has duplicate device names")
    counter_sets = _named_counters(obj, spec, "sharedCounters", "name", "spec", MAX_COUNTER_SETS)
    if counter_sets and devices:
        raise _fail(obj, "spec", "must not have both sharedCounters and devices")
    return ResourceSlice(
        name=name,
        driver=driver,
        pool=pool_name,
        pool_generation=generation,
        slice_count=slice_count,
        node_name=node_name,
        all_nodes=all_nodes,
        node_selector=terms,
        devices=devices,
        counter_sets=dict(counter_sets),
    )


def _selectors(obj: Obj, container: Mapping[str, Any], path: str) -> tuple[str, ...]:
    out = []
    for i, selector in enumerate(_bounded_list(obj, container, "selectors", path, MAX_SELECTORS)):
        where = f"{path}[{i}]"
        cel = _obj_at(obj, selector, where).get("cel")
        if cel is None:
            raise _fail(obj, f"{where}.cel", "is required")
        expression = _obj_at(obj, cel, f"{where}.cel").get("expression")
        out.append(_text(obj, expression, f"{where}.cel.expression", limit=MAX_CEL_CHARS))
    return tuple(out)


@_guarded
def parse_device_class(obj: Obj) -> DeviceClass:
    name, _, _ = _metadata(obj)
    spec = _map(obj, "spec")
    return DeviceClass(name=name, selectors=_selectors(obj, spec, "spec.selectors"))


def _request_body(obj: Obj, name: str, body: Mapping[str, Any], path: str) -> DeviceRequest:
    """The fields an ``exactly`` request and a ``firstAvailable`` subrequest share."""
    device_class = _text(obj, body.get("deviceClassName"), f"{path}.deviceClassName")
    mode = body.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise _fail(obj, f"{path}.allocationMode", f"must be ExactCount or All, got {show(mode)}")
    count = 1
    if mode == "ExactCount" and body.get("count") is not None:
        count = _int(obj, body.get("count"), f"{path}.count", 1, MAX_COUNT)
    return DeviceRequest(
        name=name,
        device_class=device_class,
        selectors=_selectors(obj, body, f"{path}.selectors"),
        allocation_mode=mode,
        count=count,
        admin_access=_bool(obj, body.get("adminAccess"), f"{path}.adminAccess"),
        tolerations=_tolerations(obj, body, path),
    )


def _request(obj: Obj, value: Any, path: str) -> DeviceRequest:
    request = _obj_at(obj, value, path)
    name = _text(obj, request.get("name"), f"{path}.name", limit=63)
    exactly = request.get("exactly")
    subrequests = _bounded_list(obj, request, "firstAvailable", f"{path}.firstAvailable", MAX_SUBREQUESTS)
    if (exactly is None) == (not subrequests):
        raise _fail(obj, path, "must have exactly one of exactly, firstAvailable")
    if exactly is not None:
        return _request_body(obj, name, _obj_at(obj, exactly, f"{path}.exactly"), f"{path}.exactly")
    first = []
    for i, sub in enumerate(subrequests):
        where = f"{path}.firstAvailable[{i}]"
        body = _obj_at(obj, sub, where)
        first.append(_request_body(obj, _text(obj, body.get("name"), f"{where}.name", limit=63), body, where))
    return DeviceRequest(name=name, first_available=tuple(first))


def _constraint(obj: Obj, value: Any, path: str) -> tuple[str, str, tuple[str, ...]]:
    constraint = _obj_at(obj, value, path)
    requests = tuple(
        _text(obj, r, f"{path}.requests[{i}]")
        for i, r in enumerate(_bounded_list(obj, constraint, "requests", f"{path}.requests", MAX_REQUESTS))
    )
    kinds = [k for k in ("matchAttribute", "distinctAttribute") if constraint.get(k) is not None]
    if len(kinds) > 1:
        raise _fail(obj, path, "must have only one of matchAttribute, distinctAttribute")
    if not kinds:
        return "", "", requests  # a newer kind: not implemented (module docstring)
    return kinds[0], _text(obj, constraint[kinds[0]], f"{path}.{kinds[0]}"), requests


def _allocated_node(terms: tuple[NodeSelectorTerm, ...]) -> str:
    """The node of an allocation whose selector is the scheduler's ``metadata.name In [node]``."""
    if len(terms) != 1 or terms[0].match_expressions or len(terms[0].match_fields) != 1:
        return ""
    field = terms[0].match_fields[0]
    if field.key == "metadata.name" and field.operator == "In" and len(field.values) == 1:
        return field.values[0]
    return ""


def _result(obj: Obj, value: Any, path: str) -> AllocatedDevice:
    result = _obj_at(obj, value, path)
    return AllocatedDevice(
        request=_text(obj, result.get("request"), f"{path}.request"),
        driver=_text(obj, result.get("driver"), f"{path}.driver"),
        pool=_text(obj, result.get("pool"), f"{path}.pool"),
        device=_text(obj, result.get("device"), f"{path}.device"),
        admin_access=_bool(obj, result.get("adminAccess"), f"{path}.adminAccess"),
    )


@_guarded
def parse_resource_claim(obj: Obj) -> ResourceClaim:
    name, namespace, meta = _metadata(obj)
    if obj.get("spec") is None:  # the API requires it; read as "asks for nothing", its pod would move
        raise _fail(obj, "spec", "is required")
    devices = _map(obj, "spec.devices")
    requests = tuple(
        _request(obj, r, f"spec.devices.requests[{i}]")
        for i, r in enumerate(_bounded_list(obj, devices, "requests", "spec.devices.requests", MAX_REQUESTS))
    )
    constraints = tuple(
        _constraint(obj, c, f"spec.devices.constraints[{i}]")
        for i, c in enumerate(
            _bounded_list(obj, devices, "constraints", "spec.devices.constraints", MAX_CONSTRAINTS)
        )
    )
    status = _map(obj, "status")
    allocation = status.get("allocation")
    results: tuple[AllocatedDevice, ...] = ()
    node_name = ""
    if allocation is not None:
        allocation = _obj_at(obj, allocation, "status.allocation")
        allocated_devices = _obj_at(obj, allocation.get("devices"), "status.allocation.devices")
        results = tuple(
            _result(obj, r, f"status.allocation.devices.results[{i}]")
            for i, r in enumerate(
                _bounded_list(
                    obj, allocated_devices, "results", "status.allocation.devices.results", MAX_RESULTS
                )
            )
        )
        node_name = _allocated_node(
            node_terms(obj, allocation.get("nodeSelector"), "status.allocation.nodeSelector")
        )
    reserved = []  # every consumer counts: a claim reserved for anything else is shared
    for i, consumer in enumerate(
        _bounded_list(obj, status, "reservedFor", "status.reservedFor", MAX_RESERVED_FOR)
    ):
        where = f"status.reservedFor[{i}]"
        reserved.append(_text(obj, _obj_at(obj, consumer, where).get("uid"), f"{where}.uid"))
    return ResourceClaim(
        namespace=namespace or "default",
        name=name,
        uid=str(meta.get("uid") or f"{namespace}/{name}"),
        requests=requests,
        constraints=constraints,
        allocated=allocation is not None,
        node_name=node_name,
        results=results,
        reserved_for=tuple(reserved),
        owner=_owner(obj, meta),
    )
