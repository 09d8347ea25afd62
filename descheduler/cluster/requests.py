"""A pod's requests exactly as the kube-scheduler adds them up (component-helpers ``PodRequests``).

The destination check, the reservations it makes and ``simulate``'s rescheduling all read the one
number computed here, so they cannot disagree with the scheduler about whether a pod fits:

1. Each container's requests, with unset requests defaulted to its limits (the API server does this on
   create; objects written by hand for ``simulate`` have not been through it).
2. While the pod runs: the app containers plus every native sidecar (an init container with
   ``restartPolicy: Always``), which runs for the pod's whole life.
3. While init container *i* runs: its requests plus those of the sidecars started before it (a sidecar's
   own step is the sum of the sidecars up to and including it).
4. Per resource, the larger of 2 and the largest step of 3.
5. With an in-place resize under way, the larger of what the spec asks and what the kubelet allocated or
   applied (``status.containerStatuses[].allocatedResources`` / ``.resources.requests``); a resize
   marked Infeasible leaves the spec out, as the scheduler does.
6. Pod-level ``spec.resources.requests`` replace the sum for the resources pods may set at pod level
   (cpu, memory, hugepages-*); pod-level limits without requests default the requests as the API server
   does (to the limit when no container requests that resource).
7. Plus ``spec.overhead``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from descheduler.cluster.fields import Obj, field_list, field_map, item_map

Amounts = dict[str, int]
Parse = Callable[[Any, str], Amounts]
"""Turns a YAML resource map into amounts, raising ``ObjectError`` naming ``path`` when it is bad."""

POD_LEVEL_RESOURCES = ("cpu", "memory")
HUGEPAGES_PREFIX = "hugepages-"


def pod_level_resource(name: str) -> bool:
    return name in POD_LEVEL_RESOURCES or name.startswith(HUGEPAGES_PREFIX)


def _add(into: Amounts, amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0) + amount


def _max(into: Amounts, amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        if name not in into or amount > into[name]:
            into[name] = amount


_EMPTY: Mapping[str, Any] = {}


def _resources_of(obj: Obj, item: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """``item.resources``: a container whose resources are not an object is refused, never counted as
    asking for nothing (it would seem to fit anywhere)."""
    resources = item.get("resources")
    if resources is None:
        return _EMPTY
    return resources if type(resources) is dict else field_map(obj, item, "resources", path)


def _defaulted(requests: Amounts, limits: Amounts) -> Amounts:
    """Unset requests take the limit (API server defaulting)."""
    if not limits:
        return requests
    return {**limits, **requests}


class _Container(NamedTuple):
    spec: Amounts
    allocated: Amounts | None
    """``status.*ContainerStatuses[].allocatedResources`` (what the kubelet admitted), if reported."""
    actuated: Amounts | None
    """``status.*ContainerStatuses[].resources.requests`` (what the runtime applied), if reported."""
    sidecar: bool


def _aggregate(
    apps: list[_Container], inits: list[_Container], pick: Callable[[_Container], Amounts | None]
) -> Amounts:
    """Steps 2-4 over one view of the containers' requests (spec, allocated or actuated)."""
    running: Amounts = {}
    for container in apps:
        _add(running, pick(container) or {})
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for container in inits:
        own = pick(container) or {}
        if container.sidecar:
            _add(running, own)
            _add(sidecars, own)
            step = dict(sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(running, init_peak)
    return running


def _statuses(obj: Obj, status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for i, item in enumerate(field_list(obj, status, key, f"status.{key}")):
            item = item_map(obj, item, f"status.{key}[{i}]")
            if isinstance(item.get("name"), str):
                found.setdefault(item["name"], item)
    return found


def _resize_infeasible(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return False
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == "PodResizePending":
            return condition.get("reason") == "Infeasible"
    return False


def _status_view(
    obj: Obj, cs: Mapping[str, Any], raw_requests: Any, spec_requests: Amounts, where: str, parse: Parse
) -> tuple[Amounts | None, Amounts | None]:
    """What the kubelet allocated and applied for one container, or (None, None) when both match the
    spec (the usual case: compared as written first, so most pods are not parsed twice)."""
    raw_allocated = cs.get("allocatedResources")
    raw_actuated = _resources_of(obj, cs, f"{where}.resources").get("requests")
    if (raw_allocated is None or raw_allocated == raw_requests) and (
        raw_actuated is None or raw_actuated == raw_requests
    ):
        return None, None
    allocated = parse(raw_allocated, f"{where}.allocatedResources") if raw_allocated is not None else None
    actuated = parse(raw_actuated, f"{where}.resources.requests") if raw_actuated is not None else None
    if allocated in (None, spec_requests) and actuated in (None, spec_requests):
        return None, None
    return allocated, actuated


def pod_requests(
    spec: Mapping[str, Any], status: Mapping[str, Any], parse: Parse, obj: Obj | None = None
) -> Amounts:
    """The pod's effective requests (module docstring); ``parse`` reads and checks each resource map.
    A field of the wrong type raises ``ObjectError`` naming ``obj`` (the pod) and the field."""
    obj = spec if obj is None else obj
    statuses = (
        _statuses(obj, status)
        if status.get("containerStatuses") is not None or status.get("initContainerStatuses") is not None
        else {}
    )
    resized = False
    apps: list[_Container] = []
    inits: list[_Container] = []
    for key, into in (("containers", apps), ("initContainers", inits)):
        for i, item in enumerate(field_list(obj, spec, key, f"spec.{key}")):
            item = item_map(obj, item, f"spec.{key}[{i}]")
            base = f"spec.{key}[{i}].resources"
            res = _resources_of(obj, item, base)
            raw_requests = res.get("requests")
            spec_requests = parse(raw_requests, f"{base}.requests")
            if res.get("limits"):
                spec_requests = _defaulted(spec_requests, parse(res.get("limits"), f"{base}.limits"))
            allocated: Amounts | None = None
            actuated: Amounts | None = None
            if statuses:
                name = item.get("name", "")
                cs = statuses.get(name) if isinstance(name, str) else None
                if cs is not None:
                    kind = "initContainerStatuses" if key == "initContainers" else "containerStatuses"
                    where = f"status.{kind}[{name}]"
                    allocated, actuated = _status_view(obj, cs, raw_requests, spec_requests, where, parse)
                    resized = resized or allocated is not None or actuated is not None
            sidecar = key == "initContainers" and item.get("restartPolicy") == "Always"
            into.append(_Container(spec_requests, allocated, actuated, sidecar))
    if not inits and not resized:
        total: Amounts = {}
        for container in apps:
            _add(total, container.spec)
    else:
        total = _aggregate(apps, inits, lambda c: c.spec)
    if resized:
        infeasible = _resize_infeasible(status)
        allocated_total = _aggregate(
            apps,
            inits,
            lambda c: c.allocated if c.allocated is not None else (None if infeasible else c.spec),
        )
        actuated_total = _aggregate(
            apps,
            inits,
            lambda c: (
                c.actuated
                if c.actuated is not None
                else (c.allocated if c.allocated is not None else (None if infeasible else c.spec))
            ),
        )
        total = {} if infeasible else total
        _max(total, allocated_total)
        _max(total, actuated_total)
    pod_level = _resources_of(obj, spec, "spec.resources")
    if pod_level:
        requested_anywhere = {name for c in (*apps, *inits) for name in c.spec}
        pod_requests_ = parse(pod_level.get("requests"), "spec.resources.requests")
        pod_limits = parse(pod_level.get("limits"), "spec.resources.limits")
        for name, limit in pod_limits.items():
            if pod_level_resource(name) and name not in pod_requests_ and name not in requested_anywhere:
                pod_requests_[name] = limit
        for name, amount in pod_requests_.items():
            if pod_level_resource(name):
                total[name] = amount
    overhead = spec.get("overhead")
    if overhead:
        _add(total, parse(overhead, "spec.overhead"))
    return total
