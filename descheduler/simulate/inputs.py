"""Read ``simulate``'s CLUSTER and USAGE files, checking every reference, into snapshot values.

USAGE is YAML: ``nodes: {NODE: SAMPLE or [SAMPLE per cycle]}`` and ``pods: {NAMESPACE/NAME: SAMPLE or
[...]}`` where a SAMPLE is ``{cpu: QUANTITY, memory: QUANTITY, age: DURATION?}`` (other resource names
may be added as quantities). A list's last entry repeats for later cycles. Every problem raises
``InputError`` whose message names the file, the entry and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from descheduler.cluster.parse import ObjectError, build_snapshot, iter_objects
from descheduler.cluster.types import ClusterSnapshot
from descheduler.units import parse_duration, resource_amount


class InputError(ValueError):
    """A CLUSTER or USAGE file that cannot be used; the message is meant for the user as is."""


@dataclass(frozen=True, slots=True)
class Sample:
    resources: Mapping[str, int]
    age: float = 0.0


@dataclass(frozen=True)
class UsageSeries:
    """Samples per cycle for nodes and pods (the last one repeats)."""

    nodes: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)
    pods: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)

    @staticmethod
    def at(samples: tuple[Sample, ...], cycle: int) -> Sample:
        """The sample for 1-based ``cycle``."""
        return samples[min(cycle, len(samples)) - 1]


def _read(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None


def _yaml_error(path: str | Path, exc: yaml.YAMLError) -> InputError:
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return InputError(f"{path}: not valid YAML{where}: {problem}")


def load_cluster(path: str | Path) -> ClusterSnapshot:
    """Kubernetes objects as ``kubectl get -o yaml`` prints them (multi-document and/or ``kind: List``)."""
    text = _read(path, "cluster")
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    try:
        snapshot = build_snapshot(iter_objects(documents))
    except ObjectError as exc:
        raise InputError(f"{path}: {exc}") from None
    _check_cluster(path, snapshot)
    return snapshot


def _check_cluster(path: str | Path, snapshot: ClusterSnapshot) -> None:
    nodes: set[str] = set()
    for node in snapshot.nodes:
        if node.name in nodes:
            raise InputError(f"{path}: Node {node.name} appears twice")
        nodes.add(node.name)
    pods: set[str] = set()
    for pod in snapshot.pods:
        if pod.key in pods:
            raise InputError(f"{path}: Pod {pod.key} appears twice")
        pods.add(pod.key)
        if pod.node_name and pod.node_name not in nodes:
            raise InputError(
                f"{path}: Pod {pod.key}: spec.nodeName {pod.node_name!r} is not a Node in this file"
            )


def _sample(path: str | Path, where: str, value: Any) -> Sample:
    if not isinstance(value, Mapping):
        raise InputError(f"{path}: {where}: a sample must be a mapping like {{cpu: 500m, memory: 1Gi}}")
    resources: dict[str, int] = {}
    age = 0.0
    for key, raw in value.items():
        name = str(key)
        if name == "age":
            try:
                age = parse_duration(raw if isinstance(raw, str) else str(raw))
            except ValueError as exc:
                raise InputError(f"{path}: {where}.age: {exc}") from None
            if age < 0:
                raise InputError(f"{path}: {where}.age: must not be negative")
            continue
        try:
            amount = resource_amount(name, raw)
        except ValueError as exc:
            raise InputError(f"{path}: {where}.{name}: {exc}") from None
        if amount < 0:
            raise InputError(f"{path}: {where}.{name}: usage must not be negative, got {raw!r}")
        resources[name] = amount
    for required in ("cpu", "memory"):
        if required not in resources:
            raise InputError(f"{path}: {where}: {required} is required in a sample")
    return Sample(resources, age)


def _samples(path: str | Path, where: str, value: Any) -> tuple[Sample, ...]:
    if isinstance(value, list):
        if not value:
            raise InputError(f"{path}: {where}: a list of samples must not be empty")
        return tuple(_sample(path, f"{where}[{i}]", item) for i, item in enumerate(value))
    return (_sample(path, where, value),)


def load_usage(path: str | Path, snapshot: ClusterSnapshot) -> UsageSeries:
    """Parse USAGE and check that every node and pod it names exists in ``snapshot``."""
    text = _read(path, "usage")
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    if len(documents) > 1:
        raise InputError(f"{path}: expected one YAML document with nodes and pods, found {len(documents)}")
    doc = documents[0] if documents else {}
    if not isinstance(doc, Mapping):
        raise InputError(f"{path}: expected a mapping with the keys nodes and pods")
    unknown = sorted(str(k) for k in doc if k not in ("nodes", "pods"))
    if unknown:
        raise InputError(f"{path}: unknown key {unknown[0]!r}; the keys are nodes and pods")
    node_names = {n.name for n in snapshot.nodes}
    pod_keys = {p.key for p in snapshot.pods}
    nodes: dict[str, tuple[Sample, ...]] = {}
    raw_nodes = doc.get("nodes") or {}
    if not isinstance(raw_nodes, Mapping):
        raise InputError(f"{path}: nodes must be a mapping of node name to sample")
    for name, value in raw_nodes.items():
        if str(name) not in node_names:
            raise InputError(
                f"{path}: nodes.{name}: there is no Node named {str(name)!r} in the cluster file"
            )
        nodes[str(name)] = _samples(path, f"nodes.{name}", value)
    pods: dict[str, tuple[Sample, ...]] = {}
    raw_pods = doc.get("pods") or {}
    if not isinstance(raw_pods, Mapping):
        raise InputError(f"{path}: pods must be a mapping of NAMESPACE/NAME to sample")
    for key, value in raw_pods.items():
        text_key = str(key)
        if text_key.count("/") != 1 or not all(text_key.split("/")):
            raise InputError(f"{path}: pods.{key}: pod keys are written NAMESPACE/NAME")
        if text_key not in pod_keys:
            raise InputError(f"{path}: pods.{key}: there is no Pod {text_key} in the cluster file")
        pods[text_key] = _samples(path, f"pods.{key}", value)
    return UsageSeries(nodes=nodes, pods=pods)
