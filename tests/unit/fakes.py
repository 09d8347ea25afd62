"""The stand-ins the service tests give a ``CycleRunner``, each written once.

A cluster cache that hands out one snapshot (which a test may change between cycles), a usage source
read from a ``World`` or from the seed scenario, an evictor that runs the hooks in the real evictor's
order, and a tainter. They record what the runner asked of them so a test asserts on the calls.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from descheduler.cluster.build import build_snapshot
from descheduler.cluster.parse import iter_objects
from descheduler.cluster.types import ClusterSnapshot, Namespace, Node, Pod, UsageSample, UsageSnapshot
from descheduler.config.load import EffectiveConfig, load_config_document
from descheduler.planner.journal import Detectors, Entry
from descheduler.planner.verify import ServerView
from descheduler.service.cycle import CycleRunner
from descheduler.units import resource_amount
from tests.unit.builders import NOW, World, cpu, cycle_runner

SEED = Path(__file__).resolve().parents[1] / "scenarios" / "seed-stress-demo"
SEED_NOW = 1_800_000_000.0
"""The wall clock of the seed scenario's usage samples."""

Hook = Callable[[], "str | None"]


def hot_world(cool: Sequence[str] = ("cool", "cool-2")) -> World:
    """One hot node with four pods of one six-replica Deployment, ``cool`` nodes with room for them."""
    world = World()
    world.node("hot", cpu="10", usage=cpu("8"))
    for name in cool:
        world.node(name, cpu="10", usage=cpu("1"))
    world.deployment("web", replicas=6)
    for i in range(1, 5):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("2"))
    return world


def server_view(snapshot: ClusterSnapshot, key: str, **fields: Any) -> ServerView:
    """What the API server answers for pod ``key`` when it holds ``snapshot``: the pod, every workload and
    pod, the pod's node and its namespace (one of that name when the snapshot lists none), version "7"."""
    pod = next((p for p in snapshot.pods if p.key == key), None)
    namespace = pod.namespace if pod is not None else key.partition("/")[0]
    view = ServerView(
        pod,
        snapshot.workloads,
        snapshot.pods,
        node=next((n for n in snapshot.nodes if pod is not None and n.name == pod.node_name), None),
        namespace=next((n for n in snapshot.namespaces if n.name == namespace), Namespace(namespace)),
        pod_version="7",
    )
    return replace(view, **fields)


@dataclass
class Cluster:
    """A cache that hands out one snapshot; a test may delete, replace or mark pods between cycles."""

    value: ClusterSnapshot

    def snapshot(self) -> ClusterSnapshot:
        return self.value

    def change_pod(self, key: str, **changes: Any) -> None:
        pods = tuple(replace(p, **changes) if p.key == key else p for p in self.value.pods)
        self.value = replace(self.value, pods=pods)

    def remove_pod(self, key: str) -> None:
        self.value = replace(self.value, pods=tuple(p for p in self.value.pods if p.key != key))


@dataclass
class Usage:
    """Usage read from a ``World``, always fresh: sampled at ``NOW``, or at the test's clock when given
    one (cycles that run for minutes or hours)."""

    world: World
    clock: list[float] | None = None

    def fetch_nodes(self, nodes: Any) -> Any:
        return self.world.usage(NOW if self.clock is None else self.clock[0])

    def fetch_pods(self, wanted: Any, nodes: Any, pods: Any) -> Any:
        return self.fetch_nodes(nodes).pods


@dataclass
class Outcome:
    result: str
    message: str = ""
    retry_after: float | None = None
    code: str = ""


@dataclass
class FakeEvictor:
    """Runs the hooks in the real evictor's order (``before_send``, then ``verify``, then the request) and
    answers each request sent with the next of ``results`` (``evicted`` once they run out)."""

    results: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    """Every pod the runner asked to evict, whether or not the request left."""
    on_call: Callable[[], object] | None = None
    """Called as each request leaves, to look at the world at that moment."""
    log_resolutions: bool = False
    """Also put ``resolved <pod>: <result>`` in ``calls``, to see resolutions in order with requests."""

    sent: list[str] = field(default_factory=list)
    """Requests that left (``verify`` and ``before_send`` allowed them)."""
    order: list[str] = field(default_factory=list)
    """The hooks run, in order."""
    reported: list[tuple[str, str]] = field(default_factory=list)
    restarts: list[tuple[str, str, str]] = field(default_factory=list)

    def evict(
        self,
        pod: Pod,
        node: str,
        reason: str,
        deadline: float,
        before_send: Hook | None = None,
        verify: Hook | None = None,
        resource_version: Callable[[], str] | None = None,
    ) -> Outcome:
        self.calls.append(pod.key)
        for name, hook, result in (("intent", before_send, "failed"), ("verify", verify, "not-verified")):
            if hook is None:
                continue
            self.order.append(name)
            refusal = hook()
            if refusal:
                return Outcome(result, refusal)
        self.sent.append(pod.key)
        if self.on_call:
            self.on_call()
        return Outcome(self.results.pop(0) if self.results else "evicted")

    def report_resolved(self, pod: Pod, node: str, reason: str, result: str, message: str) -> None:
        self.reported.append((pod.key, result))
        if self.log_resolutions:
            self.calls.append(f"resolved {pod.key}: {result}")

    def restart(
        self,
        pod: Pod,
        node: str,
        reason: str,
        deadline: float,
        deployment: str,
        before_send: Hook | None = None,
        verify: Hook | None = None,
        resource_version: Callable[[], str] | None = None,
    ) -> Outcome:
        """As ``evict``, answering ``restarted`` once ``results`` run out; ``restarts`` records
        ``(pod, deployment, resourceVersion sent)``."""
        if not self.results:
            self.results.append("restarted")
        outcome = self.evict(pod, node, reason, deadline, before_send, verify)
        if outcome.result not in ("not-verified", "failed") or pod.key in self.sent:
            version = resource_version() if resource_version is not None else ""
            self.restarts.append((pod.key, deployment, version))
        return outcome

    def report_restart(self, pod: Pod, deployment: str, type_: str, reason: str, message: str) -> None:
        self.reported.append((pod.key, reason))


@dataclass
class FakeJournal:
    """The ConfigMap: what was saved, in order; errors to raise on the next loads or saves."""

    entries: tuple[Entry, ...] = ()
    saves: list[tuple[Entry, ...]] = field(default_factory=list)
    load_errors: list[Exception] = field(default_factory=list)
    save_errors: list[Exception] = field(default_factory=list)
    written_meanwhile: tuple[Entry, ...] = ()
    """What another writer saved, found in place when a save fails."""
    loads: int = 0

    @property
    def where(self) -> str:
        return "ConfigMap test/records"

    stored: Detectors = field(default_factory=Detectors)
    """The anomaly detectors in the ConfigMap."""
    detector_saves: list[Detectors] = field(default_factory=list)

    def load(self) -> tuple[Entry, ...]:
        self.loads += 1
        if self.load_errors:
            raise self.load_errors.pop(0)
        return self.entries

    def detectors(self) -> Detectors:
        return self.stored

    def save(self, entries: Sequence[Entry], detectors: Detectors | None = None) -> None:
        if self.save_errors:
            self.entries = self.written_meanwhile or self.entries
            raise self.save_errors.pop(0)
        self.stored = detectors if detectors is not None else self.stored
        self.entries = tuple(entries)
        self.saves.append(self.entries)
        self.detector_saves.append(self.stored)


@dataclass
class _TaintOutcome:
    node: str
    result: str
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "node": self.node,
            "result": self.result,
            **({"message": self.message} if self.message else {}),
        }


@dataclass
class FakeTainter:
    """Adds and removes the hotspot taint, logging ``taint <node>`` / ``untaint <node>`` in ``calls``; while
    ``forbidden`` says so, every change is refused as the API server would (403) and each Warning Event is
    logged as ``refused <node>``."""

    calls: list[str]
    forbidden: Callable[[], bool] = lambda: False

    def add(self, node: str, message: str) -> Any:
        self.calls.append(f"taint {node}")
        return self._answer(node, "added")

    def remove(self, node: str, message: str) -> Any:
        self.calls.append(f"untaint {node}")
        return self._answer(node, "removed")

    def report_refused(self, node: str, message: str) -> None:
        self.calls.append(f"refused {node}")

    def _answer(self, node: str, done: str) -> Any:
        if self.forbidden():
            return _TaintOutcome(node, "forbidden", "HTTP 403 Forbidden: denied by the admission policy")
        return _TaintOutcome(node, done)


# --- the seed scenario (tests/scenarios/seed-stress-demo) as a live cluster ------------------------------


def seed_config(**lnl: Any) -> EffectiveConfig:
    """The seed scenario's configuration with ``lnl`` merged into its LowNodeLoad args."""
    doc = yaml.safe_load((SEED / "config.yaml").read_text())
    doc["profiles"][0]["pluginConfig"][0]["args"].update(lnl)
    return load_config_document(doc)


def seed_cluster() -> Cluster:
    return Cluster(build_snapshot(iter_objects(yaml.safe_load_all((SEED / "cluster.yaml").read_text()))))


def _sample(values: dict[str, str]) -> UsageSample:
    return UsageSample({k: resource_amount(k, v) for k, v in values.items()}, SEED_NOW)


class SeedUsage:
    """The seed scenario's measured usage, fresh at every fetch."""

    def __init__(self, broken: bool = False) -> None:
        self.raw = yaml.safe_load((SEED / "usage.yaml").read_text())
        self.broken = broken
        self.pod_requests: list[list[str] | None] = []
        """The nodes each cycle asked pod usage for."""

    def fetch_nodes(self, nodes: Sequence[Node]) -> UsageSnapshot:
        if self.broken:
            return UsageSnapshot(node_errors={n.name: "prometheus unreachable" for n in nodes})
        return UsageSnapshot(nodes={name: _sample(v) for name, v in self.raw["nodes"].items()})

    def fetch_pods(
        self, wanted: Collection[str] | None, nodes: Sequence[Node], pods: Sequence[Pod]
    ) -> dict[str, UsageSample]:
        self.pod_requests.append(None if wanted is None else sorted(wanted))
        on = {p.key for p in pods if wanted is None or p.node_name in wanted}
        return {key: _sample(v) for key, v in self.raw["pods"].items() if key in on}


def seed_runner(
    evictor: FakeEvictor, *, config: EffectiveConfig | None = None, **options: Any
) -> CycleRunner:
    """A runner on the seed cluster, a hotspot confirmed in one cycle unless ``config`` says otherwise."""
    return cycle_runner(
        config or seed_config(anomalyCondition={"consecutiveAbnormalities": 1}),
        seed_cluster(),
        options.pop("usage", SeedUsage()),
        evictor,
        wall_clock=options.pop("wall_clock", lambda: SEED_NOW),
        **options,
    )
