"""Conversions between the stored form and the served API version, and server-side validation.

Events are stored once in their core v1 shape and served both as ``v1`` and ``events.k8s.io/v1``, as
kube-apiserver does, so an event written through one API is listed by the other (``kubectl get events``
reads core v1).
"""

from __future__ import annotations

import re
from typing import Any

from tests.apiserver import errors
from tests.apiserver.resources import ResourceType

Obj = dict[str, Any]

# events.k8s.io/v1 field -> core v1 field
_EVENT_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_EVENT_SAME = ("related", "reason", "type", "eventTime", "series", "action", "reportingInstance")
NOTE_LENGTH_LIMIT = 1024
CONFIGMAP_DATA_LIMIT = 1024 * 1024
"""kube-apiserver's limit on a ConfigMap's data (keys and values together)."""
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == "" or value == 0


def to_storage(res: ResourceType, obj: Obj) -> Obj:
    if res.storage_key == "events" and res.group == "events.k8s.io":
        out: Obj = {"apiVersion": "v1", "kind": "Event", "metadata": obj.get("metadata") or {}}
        for new, old in _EVENT_FIELDS.items():
            if not _empty(obj.get(new)):
                out[old] = obj[new]
        for name in _EVENT_SAME:
            if not _empty(obj.get(name)):
                out[name] = obj[name]
        return out
    return {**obj, "apiVersion": res.api_version, "kind": res.kind}


def from_storage(res: ResourceType, obj: Obj) -> Obj:
    if res.storage_key == "events" and res.group == "events.k8s.io":
        out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": obj.get("metadata") or {}}
        for new, old in _EVENT_FIELDS.items():
            if not _empty(obj.get(old)):
                out[new] = obj[old]
        for name in _EVENT_SAME:
            if not _empty(obj.get(name)):
                out[name] = obj[name]
        return out
    if res.storage_key == "events":
        return {
            "apiVersion": "v1",
            "kind": "Event",
            **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")},
        }
    return obj


def validate(res: ResourceType, obj: Obj) -> None:
    """The server-side validation our clients can trip over (stored shape)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    if res.kind == "Pod":
        containers = (obj.get("spec") or {}).get("containers")
        if not containers:
            raise errors.invalid(res, name, [("spec.containers", "", "Required value")])
        for i, container in enumerate(containers):
            if not isinstance(container, dict) or not container.get("name"):
                raise errors.invalid(res, name, [(f"spec.containers[{i}].name", "", "Required value")])
            if not container.get("image"):
                raise errors.invalid(res, name, [(f"spec.containers[{i}].image", "", "Required value")])
    if res.storage_key == "events":
        _validate_event(res, obj, name, str(meta.get("namespace", "")))
    if res.kind == "ConfigMap":
        data = obj.get("data") or {}
        size = sum(len(str(k)) + len(str(v).encode()) for k, v in data.items())
        if size > CONFIGMAP_DATA_LIMIT:
            raise errors.invalid(
                res, name, [("[]", "", f"Too long: must have at most {CONFIGMAP_DATA_LIMIT} bytes")]
            )


def _validate_event(res: ResourceType, obj: Obj, name: str, namespace: str) -> None:
    causes: list[tuple[str, str, str]] = []
    new_api = res.group == "events.k8s.io"

    def field(core: str) -> str:
        if not new_api:
            return core
        return next((n for n, o in _EVENT_FIELDS.items() if o == core), core)

    involved = obj.get("involvedObject") or {}
    if involved.get("namespace") and involved["namespace"] != namespace:
        causes.append(
            (
                f"{field('involvedObject')}.namespace",
                str(involved["namespace"]),
                "does not match event.namespace",
            )
        )
    if obj.get("eventTime"):
        # New-style events (written through events.k8s.io/v1 or with eventTime) are validated strictly.
        controller = str(obj.get("reportingComponent") or "")
        if not controller:
            causes.append((field("reportingComponent"), "", "Required value"))
        elif not _QUALIFIED_NAME.match(controller) or len(controller) > 128:
            causes.append((field("reportingComponent"), controller, "must be a qualified name"))
        for key in ("reportingInstance", "action", "reason"):
            value = str(obj.get(key) or "")
            if not value:
                causes.append((key, "", "Required value"))
            elif len(value.encode()) > 128:
                causes.append((key, "", "can have at most 128 characters"))
        if obj.get("type") not in ("Normal", "Warning"):
            causes.append(("type", str(obj.get("type") or ""), 'supported values: "Normal", "Warning"'))
        note = str(obj.get("message") or "")
        if len(note.encode()) > NOTE_LENGTH_LIMIT:
            causes.append((field("message"), "", f"can have at most {NOTE_LENGTH_LIMIT} characters"))
    elif new_api:
        causes.append(("eventTime", "", "Required value"))
    if causes:
        raise errors.invalid(res, name, causes)
