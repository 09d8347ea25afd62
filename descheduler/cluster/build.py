"""A snapshot from a stream of Kubernetes objects (``simulate``'s dumps, tests): each kind to its parser.

Apart from ``parse.py`` because the DRA parsers (``dra.py``) build on ``parse.py``'s helpers and both
kinds of objects meet here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from descheduler.cluster.dra import parse_device_class, parse_resource_claim, parse_resource_slice
from descheduler.cluster.parse import (
    WORKLOAD_KINDS,
    Obj,
    ObjectError,
    parse_namespace,
    parse_node,
    parse_pdb,
    parse_pod,
    parse_workload,
)
from descheduler.cluster.types import ClusterSnapshot

__all__ = ["KINDS", "build_snapshot", "parser_of"]

_PARSERS: dict[str, tuple[str, Callable[[Obj], Any]]] = {
    "Node": ("nodes", parse_node),
    "Pod": ("pods", parse_pod),
    "PodDisruptionBudget": ("pdbs", parse_pdb),
    **{kind: ("workloads", parse_workload) for kind in WORKLOAD_KINDS},
    "Namespace": ("namespaces", parse_namespace),
    "ResourceSlice": ("resource_slices", parse_resource_slice),
    "ResourceClaim": ("resource_claims", parse_resource_claim),
    "DeviceClass": ("device_classes", parse_device_class),
}
"""Each kind the planner uses: the snapshot field it goes to and its parser."""
KINDS = tuple(_PARSERS)
"""The kinds a cluster file may hold (``simulate --help`` names them all); others are ignored."""


def parser_of(kind: str) -> Callable[[Obj], Any]:
    """The parser of ``kind``: one table for the cluster file and the watch cache, so both read alike."""
    return _PARSERS[kind][1]


def build_snapshot(objects: Iterable[Obj], problems: list[str] | None = None) -> ClusterSnapshot:
    """Build a snapshot from Kubernetes objects; kinds the planner does not use are ignored.

    With a ``problems`` list, each bad object adds its line there and is left out (so a file's mistakes
    are all reported at once); without one the first bad object raises ``ObjectError``."""
    fields: dict[str, list[Any]] = {field: [] for field, _ in _PARSERS.values()}
    for obj in objects:
        kind = obj.get("kind")
        if not isinstance(kind, str) or kind not in _PARSERS:
            continue
        field, parse = _PARSERS[kind]
        try:
            fields[field].append(parse(obj))
        except ObjectError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
    return ClusterSnapshot(**{field: tuple(values) for field, values in fields.items()})
