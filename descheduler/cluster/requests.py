"""A pod's requests exactly as the kube-scheduler adds them up (component-helpers ``PodRequests``).

The destination check, ``maxUnavailable`` accounting and ``simulate``'s pending pods all read the one
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
from dataclasses import dataclass
from typing import Any

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


def _resources_of(item: Any) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        return {}
    resources = item.get("resources")
    return resources if isinstance(resources, Mapping) else {}


def _defaulted(requests: Amounts, limits: Amounts) -> Amounts:
    """Unset requests take the limit (API server defaulting)."""
    if not limits:
        return requests
    return {**limits, **requests}


@dataclass(frozen=True, slots=True)
class _Container:
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


def _statuses(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        items = status.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping) and isinstance(item.get("name"), str):
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


def pod_requests(spec: Mapping[str, Any], status: Mapping[str, Any], parse: Parse) -> Amounts:
    """The pod's effective requests (module docstring); ``parse`` reads and checks each resource map."""
    statuses = _statuses(status)
    infeasible = _resize_infeasible(status)
    resized = False
    apps: list[_Container] = []
    inits: list[_Container] = []
    requested_anywhere: set[str] = set()
    for key, into in (("containers", apps), ("initContainers", inits)):
        items = spec.get(key) or []
        for i, item in enumerate(items if isinstance(items, list) else []):
            res = _resources_of(item)
            base = f"spec.{key}[{i}].resources"
            spec_requests = _defaulted(
                parse(res.get("requests"), f"{base}.requests"), parse(res.get("limits"), f"{base}.limits")
            )
            requested_anywhere.update(spec_requests)
            name = str(item.get("name", "")) if isinstance(item, Mapping) else ""
            allocated: Amounts | None = None
            actuated: Amounts | None = None
            cs = statuses.get(name)
            if cs is not None:
                kind = "initContainerStatuses" if key == "initContainers" else "containerStatuses"
                where = f"status.{kind}[{name}]"
                if isinstance(cs.get("allocatedResources"), Mapping):
                    allocated = parse(cs["allocatedResources"], f"{where}.allocatedResources")
                cs_res = cs.get("resources")
                if isinstance(cs_res, Mapping) and isinstance(cs_res.get("requests"), Mapping):
                    actuated = parse(cs_res["requests"], f"{where}.resources.requests")
                resized = resized or allocated is not None or actuated is not None
            sidecar = (
                key == "initContainers"
                and isinstance(item, Mapping)
                and item.get("restartPolicy") == "Always"
            )
            into.append(_Container(spec_requests, allocated, actuated, sidecar))
    total = _aggregate(apps, inits, lambda c: c.spec)
    if resized:
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
    pod_level = _resources_of(spec)
    if pod_level:
        pod_requests_ = parse(pod_level.get("requests"), "spec.resources.requests")
        pod_limits = parse(pod_level.get("limits"), "spec.resources.limits")
        for name, limit in pod_limits.items():
            if pod_level_resource(name) and name not in pod_requests_ and name not in requested_anywhere:
                pod_requests_[name] = limit
        for name, amount in pod_requests_.items():
            if pod_level_resource(name):
                total[name] = amount
    _add(total, parse(spec.get("overhead"), "spec.overhead"))
    return total
