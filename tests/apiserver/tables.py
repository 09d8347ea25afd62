"""Server-side printing (``meta.k8s.io/v1`` Table), which ``kubectl get`` asks for and prints as columns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
TABLE_RESOURCES = frozenset({"pods", "nodes", "events"})


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    seconds = max(0, int((datetime.now(UTC) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _column(name: str, type_: str = "string", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": type_, "format": fmt, "description": name, "priority": priority}


COLUMNS = {
    "pods": [
        _column("Name", fmt="name"),
        _column("Ready"),
        _column("Status"),
        _column("Restarts", "string"),
        _column("Age"),
        _column("IP", priority=1),
        _column("Node", priority=1),
    ],
    "nodes": [
        _column("Name", fmt="name"),
        _column("Status"),
        _column("Roles"),
        _column("Age"),
        _column("Version"),
    ],
    "events": [
        _column("Last Seen"),
        _column("Type"),
        _column("Reason"),
        _column("Object"),
        _column("Message"),
    ],
}


def _pod_cells(pod: Obj) -> list[Any]:
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    phase = status.get("phase", "Unknown")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        phase = "Terminating"
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(containers)}",
        phase,
        str(restarts),
        _age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP", "<none>"),
        (pod.get("spec") or {}).get("nodeName", "<none>"),
    ]


def _node_cells(node: Obj) -> list[Any]:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "Unknown")
    status = "Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [
        node["metadata"]["name"],
        status,
        ",".join(roles) or "<none>",
        _age(node["metadata"].get("creationTimestamp")),
        version,
    ]


def _event_cells(event: Obj) -> list[Any]:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    return [
        _age(last),
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        event.get("message") or event.get("note") or "",
    ]


CELLS = {"pods": _pod_cells, "nodes": _node_cells, "events": _event_cells}


def to_table(resource: str, obj: Obj) -> Obj:
    """A list (or a single object) as a Table with PartialObjectMetadata rows."""
    items = obj.get("items", [obj])
    rows = [
        {
            "cells": CELLS[resource](item),
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": item.get("metadata") or {},
            },
        }
        for item in items
    ]
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k in ("resourceVersion", "continue")}
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": COLUMNS[resource],
        "rows": rows,
    }
