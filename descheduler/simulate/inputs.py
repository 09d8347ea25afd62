"""Read ``simulate``'s CLUSTER and USAGE files, checking every reference, into snapshot values.

USAGE is YAML: ``nodes: {NODE: SAMPLE or [SAMPLE per cycle]}`` and ``pods: {NAMESPACE/NAME: SAMPLE or
[...]}`` where a SAMPLE is ``{cpu: QUANTITY, memory: QUANTITY, age: DURATION?}`` (other resource names
may be added as quantities). A list's last entry repeats for later cycles. Every problem raises
``InputError`` whose message names the file, the entry and the field.

Both files are read through ``cluster.dump`` (bounded size, gzip ratio and nesting; YAML strict:
duplicate keys and aliases refused). A usage amount must lie within +-(2^63-1) in its unit (negative
ones are then refused by the live sources' trust rule, with its reason), a quantity text within
``parse.MAX_QUANTITY_CHARS`` characters.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from descheduler.cluster import dump
from descheduler.cluster.build import build_snapshot
from descheduler.cluster.parse import (
    INT64_MAX,
    MAX_QUANTITY_CHARS,
    ObjectError,
    iter_objects,
    show,
)
from descheduler.cluster.types import ClusterSnapshot
from descheduler.units import parse_duration, resource_amount


class InputError(ValueError):
    """CLUSTER or USAGE files that cannot be used; each of ``problems`` is one line meant for the user."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


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


def load_cluster(path: str | Path) -> ClusterSnapshot:
    """Kubernetes objects as ``kubectl get nodes,pods,pdb,rs,deploy,sts -A -o json`` (or ``-o yaml``) prints
    them, gzipped or not; multi-document and ``kind: List`` both work. With ``evictResourceClaimPods``,
    add ``resourceslices,resourceclaims,deviceclasses``: DRA-holding pods then move only where a matching
    device is free.

    JSON is read item by item (``cluster.dump``), so a dump of a large cluster needs little more memory
    than its snapshot. Every bad object, duplicate and dangling reference is reported at once in one
    ``InputError``."""
    problems: list[str] = []
    kinds: set[str] = set()

    def objects() -> Iterator[Mapping[str, Any]]:
        for doc in dump.load_documents(path, "cluster"):
            try:
                for obj in iter_objects([doc]):
                    kinds.add(str(obj.get("kind")))
                    yield obj
            except ObjectError as exc:
                problems.append(str(exc))

    # The snapshot's values live for the whole run: the collector would only walk them again and again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        snapshot = build_snapshot(objects(), problems)
    except dump.DumpError as exc:
        raise InputError(str(exc)) from None
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    problems += _cluster_problems(snapshot)
    if not snapshot.nodes and not problems:
        found = f"found {', '.join(sorted(kinds))}" if kinds else "the file is empty"
        problems.append(f"no Node objects ({found}); give what `kubectl get nodes,pods,... -o json` prints")
    if problems:
        raise InputError([f"{path}: {p}" for p in problems])
    return snapshot


def _cluster_problems(snapshot: ClusterSnapshot) -> list[str]:
    problems: list[str] = []
    nodes: set[str] = set()
    for node in snapshot.nodes:
        if node.name in nodes:
            problems.append(f"Node {node.name} appears twice")
        nodes.add(node.name)
    pods: set[str] = set()
    for pod in snapshot.pods:
        if pod.key in pods:
            problems.append(f"Pod {pod.key} appears twice")
        pods.add(pod.key)
        if pod.node_name and pod.node_name not in nodes:
            problems.append(f"Pod {pod.key}: spec.nodeName {pod.node_name!r} is not a Node in this file")
    return problems


def _sample(where: str, value: Any, problems: list[str]) -> Sample | None:
    """The sample's syntax only; whether its amounts can be trusted is decided when it is used, by the
    same rule the live usage sources apply (``descheduler.usage.samples``)."""
    if not isinstance(value, Mapping):
        problems.append(f"{where}: a sample must be a mapping like {{cpu: 500m, memory: 1Gi}}")
        return None
    resources: dict[str, int] = {}
    age = 0.0
    before = len(problems)
    for key, raw in value.items():
        name = str(key)
        if name == "age":
            try:
                age = parse_duration(raw if isinstance(raw, str) else show(raw))
            except ValueError as exc:
                problems.append(f"{where}.age: {exc}")
                continue
            if age < 0:
                problems.append(f"{where}.age: must not be negative")
            continue
        try:
            resources[name] = _usage_amount(name, raw)
        except ValueError as exc:
            problems.append(f"{where}.{name}: {exc}")
    for required in ("cpu", "memory"):
        if required not in value:
            problems.append(f"{where}: {required} is required in a sample")
    return Sample(resources, age) if len(problems) == before else None


def _usage_amount(name: str, raw: Any) -> int:
    if isinstance(raw, str) and len(raw) > MAX_QUANTITY_CHARS:
        raise ValueError(f"{show(raw)} is longer than any quantity ({MAX_QUANTITY_CHARS} characters)")
    amount = resource_amount(name, raw)
    if -INT64_MAX <= amount <= INT64_MAX:
        return amount
    raise ValueError(f"{show(raw)} is out of range: beyond +-(2^63-1)")


def _samples(where: str, value: Any, problems: list[str]) -> tuple[Sample, ...]:
    if isinstance(value, list):
        if not value:
            problems.append(f"{where}: a list of samples must not be empty")
            return ()
        parsed = [_sample(f"{where}[{i}]", item, problems) for i, item in enumerate(value)]
        return tuple(s for s in parsed if s is not None)
    single = _sample(where, value, problems)
    return (single,) if single is not None else ()


def load_usage(path: str | Path, snapshot: ClusterSnapshot) -> UsageSeries:
    """Parse USAGE and check that every node and pod it names exists in ``snapshot``.

    An empty file (or one without an entry for a node and its pods) is allowed: those nodes have no
    usage, and are skipped as the live service skips nodes its usage source has no sample for."""
    try:
        text = dump.read_text(path, "usage")
        documents = [d for d in dump.iter_documents(path, text) if d is not None]
    except dump.DumpError as exc:
        raise InputError(str(exc)) from None
    if len(documents) > 1:
        raise InputError(f"{path}: expected one YAML document with nodes and pods, found {len(documents)}")
    doc = documents[0] if documents else {}
    if not isinstance(doc, Mapping):
        raise InputError(f"{path}: expected a mapping with the keys nodes and pods")
    if "kind" in doc:
        raise InputError(
            f"{path}: this is a {str(doc['kind'])!r}, not a usage file (a mapping with nodes: and pods:)"
        )
    problems: list[str] = [
        f"unknown key {str(k)!r}; the keys are nodes and pods" for k in doc if k not in ("nodes", "pods")
    ]
    node_names = {n.name for n in snapshot.nodes}
    pod_keys = {p.key for p in snapshot.pods}

    def node_problem(name: str) -> str:
        return "" if name in node_names else f"there is no Node named {name!r} in the cluster file"

    def pod_problem(key: str) -> str:
        if key.count("/") != 1 or not all(key.split("/")):
            return "pod keys are written NAMESPACE/NAME"
        return "" if key in pod_keys else f"there is no Pod {key} in the cluster file"

    nodes = _series(doc, "nodes", "node name", node_problem, problems)
    pods = _series(doc, "pods", "NAMESPACE/NAME", pod_problem, problems)
    if problems:
        raise InputError([f"{path}: {p}" for p in problems])
    return UsageSeries(nodes=nodes, pods=pods)


def _series(
    doc: Mapping[str, Any], part: str, keyed_by: str, problem: Callable[[str], str], problems: list[str]
) -> dict[str, tuple[Sample, ...]]:
    """The samples under ``doc[part]`` by key; a key ``problem`` finds fault with is reported, not kept."""
    raw = doc.get(part) or {}
    if not isinstance(raw, Mapping):
        problems.append(f"{part} must be a mapping of {keyed_by} to sample")
        return {}
    out: dict[str, tuple[Sample, ...]] = {}
    for key, value in raw.items():
        wrong = problem(str(key))
        if wrong:
            problems.append(f"{part}.{key}: {wrong}")
        else:
            out[str(key)] = _samples(f"{part}.{key}", value, problems)
    return out
