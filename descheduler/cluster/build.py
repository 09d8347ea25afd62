"""A snapshot from a stream of Kubernetes objects (``simulate``'s dumps, tests): each kind to its parser.

Apart from ``parse.py`` because the DRA parsers (``dra.py``) build on ``parse.py``'s helpers and both
kinds of objects meet here."""

from __future__ import annotations

from collections.abc import Iterable

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
from descheduler.cluster.types import (
    ClusterSnapshot,
    DeviceClass,
    Namespace,
    Node,
    Pod,
    PodDisruptionBudget,
    ResourceClaim,
    ResourceSlice,
    Workload,
)

__all__ = ["build_snapshot"]


def build_snapshot(objects: Iterable[Obj], problems: list[str] | None = None) -> ClusterSnapshot:
    """Build a snapshot from Kubernetes objects; kinds the planner does not use are ignored.

    With a ``problems`` list, each bad object adds its line there and is left out (so a file's mistakes
    are all reported at once); without one the first bad object raises ``ObjectError``."""
    nodes: list[Node] = []
    pods: list[Pod] = []
    pdbs: list[PodDisruptionBudget] = []
    workloads: list[Workload] = []
    namespaces: list[Namespace] = []
    slices: list[ResourceSlice] = []
    claims: list[ResourceClaim] = []
    classes: list[DeviceClass] = []
    for obj in objects:
        kind = obj.get("kind")
        try:
            if kind == "Node":
                nodes.append(parse_node(obj))
            elif kind == "Pod":
                pods.append(parse_pod(obj))
            elif kind == "PodDisruptionBudget":
                pdbs.append(parse_pdb(obj))
            elif kind in WORKLOAD_KINDS:
                workloads.append(parse_workload(obj))
            elif kind == "Namespace":
                namespaces.append(parse_namespace(obj))
            elif kind == "ResourceSlice":
                slices.append(parse_resource_slice(obj))
            elif kind == "ResourceClaim":
                claims.append(parse_resource_claim(obj))
            elif kind == "DeviceClass":
                classes.append(parse_device_class(obj))
        except ObjectError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
    return ClusterSnapshot(
        nodes=tuple(nodes),
        pods=tuple(pods),
        pdbs=tuple(pdbs),
        workloads=tuple(workloads),
        namespaces=tuple(namespaces),
        resource_slices=tuple(slices),
        resource_claims=tuple(claims),
        device_classes=tuple(classes),
    )
