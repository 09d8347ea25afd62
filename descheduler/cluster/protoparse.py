"""Pods and nodes read from Kubernetes' protobuf into ``fastparse``'s slim structs, in pure Python.

Why: a sync in JSON costs kube-apiserver about three times the CPU of client-go's protobuf sync (issue 40:
most of it is Go's ``encoding/json``). Asking for ``application/vnd.kubernetes.protobuf`` removes that, but
the product stays pure Python without the ``protobuf`` package, so this module reads the wire format by
hand: only the fields ``fastparse``'s structs hold are decoded; every other field (managed fields, images,
probes, environment...) is stepped over by its length without being built.

One source of truth, as for ``fastparse``: the structs built here are those the JSON decoder would build
from the same object (time fields as the RFC 3339 text the server writes in JSON, resource maps as their
JSON text, empty strings where JSON omits them turned into the absent value), so ``fastparse.convert_*``
is reused unchanged. Anything not reproduced exactly (a field with an unexpected wire type, a truncated
message, text that is not UTF-8, a time outside years 1-9999, another envelope, an ERROR event) raises
``Unhandled``: the caller reads that page or event again as JSON.

Layout (Kubernetes' ``runtime.protobufSerializer``): 4 magic bytes ``k8s\\x00``, then a ``runtime.Unknown``
(typeMeta=1, raw=2, contentEncoding=3, contentType=4) whose ``raw`` is the object, e.g. a PodList
(metadata=1, items=2). A watch frame is a ``metav1.WatchEvent`` (type=1, object=2 RawExtension{raw=1})
whose ``raw`` is again such an envelope. Field numbers are those of k8s.io/api core/v1 generated.proto.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET

from descheduler.cluster.fastparse import (
    Unhandled,
    _Affinity,
    _Condition,
    _Container,
    _ContainerStatus,
    _Meta,
    _Node,
    _NodeAffinity,
    _NodeSelector,
    _NodeSelectorTerm,
    _NodeSpec,
    _NodeStatus,
    _OwnerReference,
    _Pod,
    _PodResourceClaim,
    _PodResourceClaimStatus,
    _PodSpec,
    _PodStatus,
    _Requirement,
    _Taint,
    _Toleration,
    _Volume,
)

__all__ = ["MAGIC", "PROTO_KINDS", "ProtoKind", "error_event_status", "status_of"]

MAGIC = b"k8s\x00"
_ZERO_TIME = -62135596800
"""Go's zero ``time.Time`` (year 1) in Unix seconds: JSON writes it as absent (``omitzero``) or null."""
_NULL = msgspec.Raw(b"null")
_EMPTY_RESOURCES = msgspec.Raw(b"{}")
_PRESENT: dict[str, Any] = {}
"""What a volume source the structs only test for presence holds (``fastparse`` reads ``is not UNSET``)."""
_CACHE_LIMIT = 4096
_encode = msgspec.json.encode

Buf = bytes


# -- wire primitives -------------------------------------------------------------------------------------
def _more(buf: Buf, pos: int, first: int) -> tuple[int, int]:
    """The rest of a varint whose first byte ``first`` (already read) had its high bit set."""
    result = first & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Unhandled("varint longer than 10 bytes")


def _varint(buf: Buf, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return _more(buf, pos + 1, b)


def _signed(value: int) -> int:
    """An int32/int64 field: negative numbers are sent as 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _flag(value: int) -> bool:
    return value != 0


def _skip(buf: Buf, pos: int, wire: int) -> int:
    """Step over a field that is neither length-delimited nor a varint."""
    if wire == 1:
        return pos + 8
    if wire == 5:
        return pos + 4
    raise Unhandled(f"wire type {wire}")


Read = Callable[[Buf, int, int], Any]
Table = dict[int, tuple[int, Any, bool]]
"""A message's fields: tag (field number << 3 | wire type) -> (slot, reader, repeated). The reader of a
length-delimited field takes (buf, start, stop) (None: the field is a string, decoded inline); that of a
varint field takes the number."""


def _scan(buf: Buf, pos: int, end: int, table: Table, size: int) -> list[Any]:
    """One message's fields named in ``table``, by slot (a repeated field: a list, None when absent);
    every other field is stepped over by its length. The hot loop: 1- and 2-byte varints inline."""
    slots: list[Any] = [None] * size
    get = table.get
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            b = buf[pos + 1]
            if b < 0x80:
                tag = (tag & 0x7F) | b << 7
                pos += 2
            else:
                tag, pos = _more(buf, pos + 1, tag)
        wire = tag & 7
        if wire == 2:
            n = buf[pos]
            if n < 0x80:
                pos += 1
            else:
                b = buf[pos + 1]
                if b < 0x80:
                    n = (n & 0x7F) | b << 7
                    pos += 2
                else:
                    n, pos = _more(buf, pos + 1, n)
            stop = pos + n
            entry = get(tag)
            if entry is not None:
                slot, read, repeated = entry
                value = buf[pos:stop].decode() if read is None else read(buf, pos, stop)
                if repeated:
                    found = slots[slot]
                    if found is None:
                        slots[slot] = [value]
                    else:
                        found.append(value)
                else:
                    slots[slot] = value
            pos = stop
        elif wire == 0:
            entry = get(tag)
            if entry is None:
                while buf[pos] > 0x7F:
                    pos += 1
                pos += 1
            else:
                value = buf[pos]
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = _more(buf, pos + 1, value)
                slots[entry[0]] = entry[1](value)
        else:
            pos = _skip(buf, pos, wire)
    if pos != end:
        raise Unhandled("a message overruns its field")
    return slots


def _table(
    fields: dict[int, tuple[int, Any, bool]], varints: dict[int, tuple[int, Any]] | None = None
) -> Table:
    """``_scan``'s table from field numbers: length-delimited fields, then varint fields."""
    table: Table = {number << 3 | 2: entry for number, entry in fields.items()}
    for number, (slot, convert) in (varints or {}).items():
        table[number << 3] = (slot, convert, False)
    return table


_STR = None
"""The reader of a string field: ``_scan`` decodes it inline (a call per field costs as much again)."""


def _opt(buf: Buf, pos: int, stop: int) -> str | None:
    """A string JSON omits when empty (``omitempty``): the server's protobuf sends it anyway."""
    return buf[pos:stop].decode() or None


def _cached(read: Read) -> Read:
    """``read`` once per distinct message: the pods of a workload send the same containers, tolerations
    and owners byte for byte, and what is read from them is never changed afterwards."""
    cache: dict[bytes, Any] = {}

    def cached(buf: Buf, pos: int, stop: int) -> Any:
        key = buf[pos:stop]
        found = cache.get(key)
        if found is None:
            found = read(buf, pos, stop)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[key] = found
        return found

    return cached


_PAIR = _table({1: (0, _STR, False), 2: (1, _STR, False)})


def _pair(buf: Buf, pos: int, stop: int) -> tuple[str, str]:
    """A ``map<string, string>`` entry (key=1, value=2); short key and value in that order (labels,
    annotations) read without the general loop."""
    if buf[pos] == 0x0A and (n := buf[pos + 1]) < 0x80:
        middle = pos + 2 + n
        if (
            middle + 2 <= stop
            and buf[middle] == 0x12
            and (m := buf[middle + 1]) < 0x80
            and middle + 2 + m == stop
        ):
            return buf[pos + 2 : middle].decode(), buf[middle + 2 : stop].decode()
    key, value = _scan(buf, pos, stop, _PAIR, 2)
    return key or "", value or ""


_QUANTITY = _table({1: (0, _STR, False)})
_QPAIR = _table({1: (0, _STR, False), 2: (1, lambda b, p, s: _scan(b, p, s, _QUANTITY, 1)[0] or "", False)})


def _qpair(buf: Buf, pos: int, stop: int) -> tuple[str, str]:
    """A ``map<string, resource.Quantity>`` entry: the Quantity is a message of one string (1), the text
    JSON writes."""
    key, value = _scan(buf, pos, stop, _QPAIR, 2)
    return key or "", value or ""


_TIME = _table({}, {1: (0, _signed), 2: (1, _signed)})
_times: dict[int, str | None] = {_ZERO_TIME: None}


def _time(buf: Buf, pos: int, stop: int) -> str | None:
    """A ``metav1.Time`` as JSON writes it: RFC 3339 in UTC, whole seconds (the server sends nanos 0;
    JSON drops them). Go's zero time, which JSON leaves out, is sent as an empty message (or as year 1)."""
    seconds = _scan(buf, pos, stop, _TIME, 2)[0]
    if seconds is None:
        return None
    if seconds in _times:
        return _times[seconds]
    try:
        t = time.gmtime(seconds)
    except (OverflowError, OSError, ValueError):
        raise Unhandled("time out of range") from None
    if not 1 <= t.tm_year <= 9999:
        raise Unhandled("time out of range")
    text = "%04d-%02d-%02dT%02d:%02d:%02dZ" % t[:6]  # noqa: UP031 (the fastest)
    if len(_times) >= _CACHE_LIMIT:
        _times.clear()
        _times[_ZERO_TIME] = None
    _times[seconds] = text
    return text


# -- metadata -------------------------------------------------------------------------------------------
_OWNER = _table(
    {1: (0, _STR, False), 3: (1, _STR, False), 4: (2, _STR, False), 5: (3, _STR, False)}, {6: (4, _flag)}
)


@_cached
def _owner(buf: Buf, pos: int, stop: int) -> _OwnerReference:
    kind, name, uid, api_version, controller = _scan(buf, pos, stop, _OWNER, 5)
    return _OwnerReference(
        api_version=api_version or "", kind=kind or "", name=name or "", uid=uid or "", controller=controller
    )


_META = _table(
    {
        1: (0, _STR, False),
        3: (1, _opt, False),
        5: (2, _opt, False),
        6: (3, _opt, False),
        8: (4, _time, False),
        9: (5, _time, False),
        11: (6, _pair, True),
        12: (7, _pair, True),
        13: (8, _owner, True),
    },
    {7: (9, lambda v: _signed(v) or None)},
)


def _meta(buf: Buf, pos: int, stop: int) -> _Meta:
    """``ObjectMeta``; a deletionTimestamp is kept as its text, as JSON has it (only its presence counts)."""
    name, namespace, uid, version, created, deleted, labels, annotations, owners, generation = _scan(
        buf, pos, stop, _META, 10
    )
    return _Meta(
        name=name or "",
        namespace=namespace,
        uid=uid,
        resource_version=version,
        generation=generation,
        labels=dict(labels) if labels else None,
        annotations=dict(annotations) if annotations else None,
        owner_references=owners,
        creation_timestamp=created,
        deletion_timestamp=deleted,
    )


_CONDITION = _table({1: (0, _STR, False), 2: (1, _STR, False), 5: (2, _opt, False)})


def _condition(buf: Buf, pos: int, stop: int) -> _Condition:
    """Pod and node conditions alike: type=1, status=2 (always in JSON), reason=5 (omitted when empty).
    A running pod has five, most of its fields: those made only of short length-delimited fields (the
    usual case) are read by a loop of their own, any other by ``_scan``."""
    ctype = status = ""
    reason = None
    p = pos
    while p < stop:
        tag = buf[p]
        n = buf[p + 1]
        if tag == 0x38 and n < 0x80:  # observedGeneration, one byte
            p += 2
            continue
        if tag > 0x7F or n > 0x7F or tag & 7 != 2:
            ctype, status, reason = _scan(buf, pos, stop, _CONDITION, 3)
            return _Condition(type=ctype or "", status=status or "", reason=reason)
        p += 2
        if tag == 0x0A:
            ctype = buf[p : p + n].decode()
        elif tag == 0x12:
            status = buf[p : p + n].decode()
        elif tag == 0x2A:
            reason = buf[p : p + n].decode() or None
        p += n
    if p != stop:
        raise Unhandled("a condition overruns its field")
    return _Condition(type=ctype, status=status, reason=reason)


# -- resources ------------------------------------------------------------------------------------------
def _quantities(pairs: list[tuple[str, str]] | None) -> dict[str, str] | None:
    """A ``ResourceList`` in the order Go's JSON writes a map (sorted keys); None when empty."""
    return dict(sorted(pairs)) if pairs else None


def _resource_list(pairs: list[tuple[str, str]] | None) -> msgspec.Raw:
    """A ``ResourceList`` as its JSON text (``fastparse`` keeps resource maps as text); null when empty,
    as JSON omits it."""
    found = _quantities(pairs)
    return _NULL if found is None else msgspec.Raw(_encode(found))


_CLAIM_REF = _table({1: (0, _STR, False), 2: (1, _opt, False)})


def _claim_ref(buf: Buf, pos: int, stop: int) -> dict[str, str]:
    name, request = _scan(buf, pos, stop, _CLAIM_REF, 2)
    return {"name": name or ""} if request is None else {"name": name or "", "request": request}


_REQUIREMENTS = _table({1: (0, _qpair, True), 2: (1, _qpair, True), 3: (2, _claim_ref, True)})


@_cached
def _requirements(buf: Buf, pos: int, stop: int) -> msgspec.Raw:
    """A ``ResourceRequirements`` (limits=1, requests=2, claims=3) as the JSON text the server writes."""
    limits, requests, claims = _scan(buf, pos, stop, _REQUIREMENTS, 3)
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = _quantities(limits)
    if requests:
        out["requests"] = _quantities(requests)
    if claims:
        out["claims"] = claims
    return msgspec.Raw(_encode(out))


# -- scheduling terms (as the JSON objects ``parse.pod_placement`` reads) --------------------------------
_EXPRESSION = _table({1: (0, _STR, False), 2: (1, _STR, False), 3: (2, _STR, True)})


def _expression(buf: Buf, pos: int, stop: int) -> dict[str, Any]:
    key, operator, values = _scan(buf, pos, stop, _EXPRESSION, 3)
    out: dict[str, Any] = {"key": key or "", "operator": operator or ""}
    if values:
        out["values"] = values
    return out


_SELECTOR = _table({1: (0, _pair, True), 2: (1, _expression, True)})


def _selector(buf: Buf, pos: int, stop: int) -> dict[str, Any]:
    """A ``metav1.LabelSelector`` (matchLabels=1, matchExpressions=2)."""
    labels, exprs = _scan(buf, pos, stop, _SELECTOR, 2)
    out: dict[str, Any] = {}
    if labels:
        out["matchLabels"] = dict(labels)
    if exprs:
        out["matchExpressions"] = exprs
    return out


_TERM = _table(
    {
        1: (0, _selector, False),
        2: (1, _STR, True),
        3: (2, _STR, False),
        4: (3, _selector, False),
        5: (4, _STR, True),
        6: (5, _STR, True),
    }
)
_TERM_NAMES = (
    "labelSelector",
    "namespaces",
    "topologyKey",
    "namespaceSelector",
    "matchLabelKeys",
    "mismatchLabelKeys",
)


def _term(buf: Buf, pos: int, stop: int) -> dict[str, Any]:
    """A ``PodAffinityTerm``; topologyKey is always in JSON, the others only when set."""
    slots = _scan(buf, pos, stop, _TERM, 6)
    slots[2] = slots[2] or ""
    return {name: value for name, value in zip(_TERM_NAMES, slots, strict=True) if value is not None}


_WEIGHTED = _table({2: (1, _term, False)}, {1: (0, _signed)})


def _weighted(buf: Buf, pos: int, stop: int) -> dict[str, Any]:
    weight, term = _scan(buf, pos, stop, _WEIGHTED, 2)
    return {"weight": weight or 0, "podAffinityTerm": term if term is not None else {"topologyKey": ""}}


_POD_AFFINITY = _table({1: (0, _term, True), 2: (1, _weighted, True)})


def _pod_affinity(buf: Buf, pos: int, stop: int) -> dict[str, Any]:
    """A ``PodAffinity`` or ``PodAntiAffinity`` (required=1, preferred=2)."""
    required, preferred = _scan(buf, pos, stop, _POD_AFFINITY, 2)
    out: dict[str, Any] = {}
    if required:
        out["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if preferred:
        out["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return out


def _requirement(buf: Buf, pos: int, stop: int) -> _Requirement:
    key, operator, values = _scan(buf, pos, stop, _EXPRESSION, 3)
    return _Requirement(key=key or "", operator=operator or "", values=values)


_NODE_TERM = _table({1: (0, _requirement, True), 2: (1, _requirement, True)})
_NODE_SELECTOR = _table({1: (0, lambda b, p, s: _NodeSelectorTerm(*_scan(b, p, s, _NODE_TERM, 2)), True)})
_NODE_AFFINITY = _table({1: (0, lambda b, p, s: _NodeSelector(*_scan(b, p, s, _NODE_SELECTOR, 1)), False)})
_AFFINITY = _table(
    {
        1: (0, lambda b, p, s: _NodeAffinity(*_scan(b, p, s, _NODE_AFFINITY, 1)), False),
        2: (1, _pod_affinity, False),
        3: (2, _pod_affinity, False),
    }
)


def _affinity(buf: Buf, pos: int, stop: int) -> _Affinity:
    return _Affinity(*_scan(buf, pos, stop, _AFFINITY, 3))


_SPREAD = _table(
    {
        2: (1, _STR, False),
        3: (2, _STR, False),
        4: (3, _selector, False),
        6: (5, _STR, False),
        7: (6, _STR, False),
        8: (7, _STR, True),
    },
    {1: (0, _signed), 5: (4, _signed)},
)
_SPREAD_NAMES = (
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "labelSelector",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "matchLabelKeys",
)


def _spread(buf: Buf, pos: int, stop: int) -> dict[str, Any]:
    """A ``TopologySpreadConstraint``: maxSkew, topologyKey and whenUnsatisfiable always in JSON."""
    slots = _scan(buf, pos, stop, _SPREAD, 8)
    slots[0] = slots[0] or 0
    slots[1] = slots[1] or ""
    slots[2] = slots[2] or ""
    return {name: value for name, value in zip(_SPREAD_NAMES, slots, strict=True) if value is not None}


_PORT = _table(
    {1: (0, _opt, False), 4: (3, _opt, False), 5: (4, _opt, False)}, {2: (1, _signed), 3: (2, _signed)}
)
_PORT_NAMES = ("name", "hostPort", "containerPort", "protocol", "hostIP")


def _port(buf: Buf, pos: int, stop: int) -> dict[str, Any]:
    """A ``ContainerPort``: containerPort always in JSON, the others only when not empty."""
    slots = _scan(buf, pos, stop, _PORT, 5)
    slots[1] = slots[1] or None
    slots[2] = slots[2] or 0
    return {name: value for name, value in zip(_PORT_NAMES, slots, strict=True) if value is not None}


# -- pods -----------------------------------------------------------------------------------------------
_CONTAINER = _table(
    {1: (0, _STR, False), 6: (1, _port, True), 8: (2, _requirements, False), 24: (3, _STR, False)}
)


@_cached
def _container(buf: Buf, pos: int, stop: int) -> _Container:
    """restartPolicy (24) is a pointer: sent only when set, as JSON."""
    name, ports, resources, restart_policy = _scan(buf, pos, stop, _CONTAINER, 4)
    return _Container(
        name=name or "",
        resources=_EMPTY_RESOURCES if resources is None else resources,
        restart_policy=restart_policy,
        ports=ports,
    )


_TOLERATION = _table({1: (0, _STR, False), 2: (1, _STR, False), 3: (2, _STR, False), 4: (3, _STR, False)})


@_cached
def _toleration(buf: Buf, pos: int, stop: int) -> _Toleration:
    """JSON omits every empty field of a toleration, and an absent operator reads as ``Equal``."""
    key, operator, value, effect = _scan(buf, pos, stop, _TOLERATION, 4)
    return _Toleration(key=key or "", operator=operator or "Equal", value=value or "", effect=effect or "")


_SOURCE = _table(
    {number: (slot, lambda b, p, s: _PRESENT, False) for slot, number in enumerate((1, 2, 10, 29))}
)
_VOLUME = _table({2: (0, lambda b, p, s: _scan(b, p, s, _SOURCE, 4), False)})


def _volume(buf: Buf, pos: int, stop: int) -> _Volume:
    """Only which kinds of source the volume has (``fastparse`` tests their presence)."""
    sources = _scan(buf, pos, stop, _VOLUME, 1)[0] or (None, None, None, None)
    host_path, empty_dir, claim, ephemeral = (UNSET if s is None else s for s in sources)
    return _Volume(
        host_path=host_path, empty_dir=empty_dir, persistent_volume_claim=claim, ephemeral=ephemeral
    )


_CLAIM = _table({1: (0, _STR, False), 3: (1, _STR, False), 4: (2, _STR, False)})
_CLAIM_STATUS = _table({1: (0, _STR, False), 2: (1, _STR, False)})


def _claim(buf: Buf, pos: int, stop: int) -> _PodResourceClaim:
    """resourceClaimName and resourceClaimTemplateName are pointers: sent only when set, as JSON."""
    name, claim, template = _scan(buf, pos, stop, _CLAIM, 3)
    return _PodResourceClaim(
        name=name or "", resource_claim_name=claim, resource_claim_template_name=template
    )


def _claim_status(buf: Buf, pos: int, stop: int) -> _PodResourceClaimStatus:
    name, claim = _scan(buf, pos, stop, _CLAIM_STATUS, 2)
    return _PodResourceClaimStatus(name=name or "", resource_claim_name=claim)


_POD_SPEC = _table(
    {
        10: (0, _opt, False),
        24: (2, _opt, False),
        19: (3, _opt, False),
        7: (4, _pair, True),
        22: (5, _toleration, True),
        1: (6, _volume, True),
        39: (7, _claim, True),
        2: (8, _container, True),
        20: (9, _container, True),
        32: (10, _qpair, True),
        40: (11, _requirements, False),
        18: (12, _affinity, False),
        33: (13, _spread, True),
    },
    {25: (1, _signed)},
)


def _pod_spec(buf: Buf, pos: int, stop: int) -> _PodSpec:
    """priority (25) and resources (40) are pointers: sent only when set, as JSON."""
    slots = _scan(buf, pos, stop, _POD_SPEC, 14)
    selector = slots[4]
    return _PodSpec(
        node_name=slots[0],
        priority=slots[1],
        priority_class_name=slots[2],
        scheduler_name=slots[3],
        node_selector=dict(selector) if selector else None,
        tolerations=slots[5],
        volumes=slots[6],
        resource_claims=slots[7],
        containers=slots[8],
        init_containers=slots[9],
        overhead=_resource_list(slots[10]),
        resources=_NULL if slots[11] is None else slots[11],
        affinity=slots[12],
        topology_spread_constraints=slots[13],
    )


_CONTAINER_STATUS = _table({1: (0, _STR, False), 10: (1, _qpair, True), 11: (2, _requirements, False)})


def _container_status(buf: Buf, pos: int, stop: int) -> _ContainerStatus:
    """resources (11) is a pointer: sent only when set, as JSON."""
    name, allocated, resources = _scan(buf, pos, stop, _CONTAINER_STATUS, 3)
    return _ContainerStatus(
        name=name or "",
        allocated_resources=_resource_list(allocated),
        resources=_NULL if resources is None else resources,
    )


_POD_STATUS = _table(
    {
        1: (0, _opt, False),
        9: (1, _opt, False),
        2: (2, _condition, True),
        8: (3, _container_status, True),
        10: (4, _container_status, True),
        15: (5, _claim_status, True),
    }
)


def _pod_status(buf: Buf, pos: int, stop: int) -> _PodStatus:
    return _PodStatus(*_scan(buf, pos, stop, _POD_STATUS, 6))


_POD = _table({1: (0, _meta, False), 2: (1, _pod_spec, False), 3: (2, _pod_status, False)})


def _pod(buf: Buf, pos: int, stop: int, kind: Any = UNSET) -> _Pod:
    meta, spec, status = _scan(buf, pos, stop, _POD, 3)
    return _Pod(kind=kind, metadata=meta, spec=spec, status=status)


# -- nodes ----------------------------------------------------------------------------------------------
_TAINT = _table({1: (0, _STR, False), 2: (1, _STR, False), 3: (2, _STR, False)})


def _taint(buf: Buf, pos: int, stop: int) -> _Taint:
    key, value, effect = _scan(buf, pos, stop, _TAINT, 3)
    return _Taint(key=key or "", value=value or "", effect=effect or "")


_NODE_SPEC = _table({5: (1, _taint, True)}, {4: (0, _flag)})
_NODE_STATUS = _table({2: (0, _qpair, True), 4: (1, _condition, True)})


def _node_spec(buf: Buf, pos: int, stop: int) -> _NodeSpec:
    unschedulable, taints = _scan(buf, pos, stop, _NODE_SPEC, 2)
    return _NodeSpec(unschedulable=bool(unschedulable), taints=taints)


def _node_status(buf: Buf, pos: int, stop: int) -> _NodeStatus:
    """allocatable as the dict of quantity texts JSON gives (``fastparse`` parses it)."""
    allocatable, conditions = _scan(buf, pos, stop, _NODE_STATUS, 2)
    return _NodeStatus(allocatable=dict(allocatable) if allocatable else None, conditions=conditions)


_NODE = _table({1: (0, _meta, False), 2: (1, _node_spec, False), 3: (2, _node_status, False)})


def _node(buf: Buf, pos: int, stop: int, kind: Any = UNSET) -> _Node:
    meta, spec, status = _scan(buf, pos, stop, _NODE, 3)
    return _Node(kind=kind, metadata=meta, spec=spec, status=status)


# -- envelopes ------------------------------------------------------------------------------------------
_TYPE_META = _table({1: (0, _STR, False), 2: (1, _STR, False)})
_UNKNOWN = _table(
    {
        1: (0, lambda b, p, s: _scan(b, p, s, _TYPE_META, 2)[1], False),
        2: (1, lambda b, p, s: (p, s), False),
        3: (2, _STR, False),
        4: (3, _STR, False),
    }
)
_LIST_META = _table({2: (0, _STR, False), 3: (1, _STR, False)})
_LIST = _table(
    {1: (0, lambda b, p, s: _scan(b, p, s, _LIST_META, 2), False), 2: (1, lambda b, p, s: (p, s), True)}
)
_RAW_EXTENSION = _table({1: (0, lambda b, p, s: (p, s), False)})
_EVENT = _table({1: (0, _STR, False), 2: (1, lambda b, p, s: _scan(b, p, s, _RAW_EXTENSION, 1)[0], False)})


def _unknown(buf: Buf, pos: int, stop: int) -> tuple[str, int, int]:
    """The ``runtime.Unknown`` after the magic bytes: (kind, start, stop of raw)."""
    if buf[pos : pos + 4] != MAGIC:
        raise Unhandled("not a Kubernetes protobuf envelope")
    kind, raw, encoding, content_type = _scan(buf, pos + 4, stop, _UNKNOWN, 4)
    if encoding or content_type:
        raise Unhandled("an envelope with a content encoding or type")
    if raw is None:
        raise Unhandled("an envelope without raw")
    return kind or "", raw[0], raw[1]


_DETAILS = _table({}, {5: (0, _signed)})
_STATUS = _table(
    {
        2: (0, _STR, False),
        3: (1, _STR, False),
        4: (2, _STR, False),
        5: (3, lambda b, p, s: _scan(b, p, s, _DETAILS, 1)[0], False),
    },
    {6: (4, _signed)},
)


def status_of(body: bytes) -> dict[str, Any] | None:
    """A ``metav1.Status`` sent in protobuf (an error answer, a watch's ERROR event) as the fields of its
    JSON form our error handling reads; None when ``body`` is not one."""
    try:
        kind, pos, stop = _unknown(body, 0, len(body))
        if kind != "Status":
            return None
        status, message, reason, retry_after, code = _scan(body, pos, stop, _STATUS, 5)
    except (Unhandled, IndexError, UnicodeDecodeError):
        return None
    out: dict[str, Any] = {"kind": "Status", "status": status or "", "message": message or ""}
    out.update({"reason": reason or "", "code": code or 0})
    if retry_after:
        out["details"] = {"retryAfterSeconds": retry_after}
    return out


def error_event_status(frame: bytes) -> dict[str, Any] | None:
    """The Status of a protobuf watch frame that is an ERROR event; None for any other frame."""
    try:
        etype, raw = _scan(frame, 0, len(frame), _EVENT, 2)
    except (Unhandled, IndexError, UnicodeDecodeError):
        return None
    if etype != "ERROR" or raw is None:
        return None
    return status_of(frame[raw[0] : raw[1]])


Reader = Callable[[Buf, int, int, Any], Any]


class ProtoKind:
    """The protobuf reader for one kind: list pages and watch frames into ``fastparse``'s structs."""

    def __init__(self, kind: str, read: Reader) -> None:
        self.kind = kind
        self.list_kind = kind + "List"
        self._read = read

    def decode_page(self, body: bytes) -> tuple[list[Any], str, str]:
        """(items, continue token, resourceVersion) of a list page; ``Unhandled`` when not reproduced."""
        try:
            kind, pos, stop = _unknown(body, 0, len(body))
            if kind != self.list_kind:
                raise Unhandled(f"a {kind or 'nameless'} envelope, not {self.list_kind}")
            meta, spans = _scan(body, pos, stop, _LIST, 2)
            read = self._read
            items = [read(body, a, b, UNSET) for a, b in spans or ()]
            version, token = meta if meta is not None else (None, None)
            return items, token or "", version or ""
        except (IndexError, UnicodeDecodeError, ValueError, TypeError):
            raise Unhandled(f"a {self.list_kind} page that does not decode") from None

    def decode_event(self, frame: bytes) -> tuple[str, Any]:
        """(type, object) of a watch frame (without its length prefix): ADDED, MODIFIED, DELETED or
        BOOKMARK; ``Unhandled`` for anything else (an ERROR event's Status, another kind)."""
        try:
            etype, raw = _scan(frame, 0, len(frame), _EVENT, 2)
            if etype not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") or raw is None:
                raise Unhandled(f"a {etype or 'typeless'} watch event")
            kind, pos, stop = _unknown(frame, raw[0], raw[1])
            if kind != self.kind:
                raise Unhandled(f"a watch event of a {kind or 'nameless'} object, not {self.kind}")
            return etype, self._read(frame, pos, stop, kind)
        except (IndexError, UnicodeDecodeError, ValueError, TypeError):
            raise Unhandled(f"a {self.kind} watch event that does not decode") from None


PROTO_KINDS: dict[str, ProtoKind] = {"Pod": ProtoKind("Pod", _pod), "Node": ProtoKind("Node", _node)}
"""Kinds read from protobuf: the two that are most of a sync's bytes. The others stay in JSON."""
