"""Builders for planner and simulate tests: real Kubernetes objects and real configuration documents.

Everything goes through the product's own parsers (``build_snapshot``, ``load_config_document``), so a
test exercises the same path as ``simulate`` and the service. A typical test reads::

    world = World()
    world.node("hot", cpu="10", usage=cpu("8"))
    world.node("cool", cpu="10", usage=cpu("1"))
    world.deployment("web", replicas=4)
    world.pod("web-1", on="hot", owner="web", usage=cpu("3"))
    result = world.plan(settings(low={"cpu": 20}, high={"cpu": 50}))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from descheduler.cluster.build import build_snapshot
from descheduler.cluster.parse import iter_objects
from descheduler.cluster.types import ClusterSnapshot, UsageSample, UsageSnapshot
from descheduler.config.load import EffectiveConfig, load_config_document
from descheduler.planner import Plan, PlannerState, commit, plan
from descheduler.planner.parts import FAST, Parts
from descheduler.service.cycle import CycleRunner
from descheduler.service.edges import Clocks, Edges, Signals, Timing
from descheduler.units import resource_amount

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()
"""The clock of every test cycle unless a test moves it."""

Obj = dict[str, Any]
DRA_API = "resource.k8s.io/v1"
GPU_DRIVER = "gpu.example.com"


def cpu(cores: str, memory: str = "1Gi") -> dict[str, str]:
    """A usage sample with ``cores`` of cpu (and a little memory)."""
    return {"cpu": cores, "memory": memory}


def mem(amount: str, cores: str = "100m") -> dict[str, str]:
    """A usage sample with ``amount`` of memory (and a little cpu)."""
    return {"cpu": cores, "memory": amount}


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(kind: str, namespace: str, name: str) -> str:
    return f"uid-{kind.lower()}-{namespace}-{name}"


def owner_ref(kind: str, name: str, namespace: str = "default", api_version: str = "apps/v1") -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": _uid(kind, namespace, name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def settings(
    low: Mapping[str, float] | None = None,
    high: Mapping[str, float] | None = None,
    *,
    consecutive: int = 1,
    args: Mapping[str, Any] | None = None,
    migration: Mapping[str, Any] | None = None,
    top: Mapping[str, Any] | None = None,
    product_defaults: bool = False,
) -> EffectiveConfig:
    """A DeschedulerConfiguration with LowNodeLoad, validated by the real loader.

    Defaults differ from the product's in two ways unless ``product_defaults``: hotspots are confirmed
    at once (``consecutive=1``) and ``maxMigratingPerNode`` is unlimited, so tests state what they exercise.
    """
    lnl: dict[str, Any] = {
        "lowThresholds": dict(low if low is not None else {"cpu": 20}),
        "highThresholds": dict(high if high is not None else {"cpu": 50}),
    }
    if not product_defaults:
        lnl["anomalyCondition"] = {"consecutiveAbnormalities": consecutive}
    lnl.update(args or {})
    mc: dict[str, Any] = {} if product_defaults else {"maxMigratingPerNode": 0}
    mc.update(migration or {})
    doc: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "profiles": [
            {
                "name": "test",
                "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                "pluginConfig": [
                    {"name": "LowNodeLoad", "args": lnl},
                    {"name": "MigrationController", "args": mc},
                ],
            }
        ],
    }
    doc.update(top or {})
    return load_config_document(doc, "<test>")


@dataclass
class World:
    """A cluster under construction plus the usage each node and pod shows."""

    objects: list[Obj] = field(default_factory=list)
    node_usage: dict[str, dict[str, str]] = field(default_factory=dict)
    node_age: dict[str, float] = field(default_factory=dict)
    pod_usage: dict[str, dict[str, str]] = field(default_factory=dict)
    pod_age: dict[str, float] = field(default_factory=dict)
    node_errors: dict[str, str] = field(default_factory=dict)
    _clock: int = 0

    # --- nodes ------------------------------------------------------------------------------------

    def node(
        self,
        name: str,
        *,
        cpu: str = "10",
        memory: str = "40Gi",
        pods: int = 110,
        usage: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
        unschedulable: bool = False,
        ready: bool = True,
        raw_allocatable: Mapping[str, str] | None = None,
        usage_age: float = 0.0,
        extended: Mapping[str, str] | None = None,
    ) -> World:
        """A node; ``usage`` (a sample) is what the metrics say, None means "sum of its pods".
        ``extended`` adds allocatable resources (``{"example.com/gpu": "4"}``)."""
        allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extended or {})}
        meta: Obj = {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
        if raw_allocatable is not None:
            import json

            meta["annotations"] = {"node.koordinator.sh/raw-allocatable": json.dumps(dict(raw_allocatable))}
        spec: Obj = {}
        if unschedulable:
            spec["unschedulable"] = True
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        self.objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": meta,
                "spec": spec,
                "status": {
                    "capacity": allocatable,
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }
        )
        if usage is not None:
            self.node_usage[name] = dict(usage)
            self.node_age[name] = usage_age
        return self

    # --- workloads --------------------------------------------------------------------------------

    def deployment(
        self,
        name: str,
        replicas: int,
        namespace: str = "default",
        *,
        strategy: Mapping[str, Any] | None = None,
        paused: bool | None = None,
        rolled_out: bool = False,
        status: Mapping[str, Any] | None = None,
        spec_extra: Mapping[str, Any] | None = None,
    ) -> World:
        """A Deployment and its ReplicaSet (named ``<name>-rs``); pods use ``owner=name``.

        ``strategy`` is its ``spec.strategy`` (unset: Kubernetes' default, RollingUpdate 25%/25%);
        ``rolled_out`` gives it the status of a complete rollout (generation 1 observed, every replica
        updated and ready), ``status`` a status of its own; without either it has no status.
        ``spec_extra`` adds Deployment spec fields (``progressDeadlineSeconds``, ``template``...)."""
        dep_meta: Obj = {"name": name, "namespace": namespace, "uid": _uid("Deployment", namespace, name)}
        spec: Obj = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}}
        deployment_spec = dict(spec)
        if strategy is not None:
            deployment_spec["strategy"] = dict(strategy)
        if paused is not None:
            deployment_spec["paused"] = paused
        deployment_spec.update(spec_extra or {})
        obj: Obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": dep_meta,
            "spec": deployment_spec,
        }
        if rolled_out:
            dep_meta["generation"] = 1
            obj["status"] = {
                "observedGeneration": 1,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
            }
        if status is not None:
            obj["status"] = dict(status)
        self.objects.append(obj)
        rs_meta = {
            "name": f"{name}-rs",
            "namespace": namespace,
            "uid": _uid("ReplicaSet", namespace, f"{name}-rs"),
            "ownerReferences": [owner_ref("Deployment", name, namespace)],
        }
        self.objects.append(
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": rs_meta, "spec": dict(spec)}
        )
        return self

    def statefulset(self, name: str, replicas: int, namespace: str = "default") -> World:
        meta = {"name": name, "namespace": namespace, "uid": _uid("StatefulSet", namespace, name)}
        self.objects.append(
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": {"replicas": replicas}}
        )
        return self

    def pdb(self, name: str, app: str, allowed: int, namespace: str = "default") -> World:
        self.objects.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed},
            }
        )
        return self

    # --- pods -------------------------------------------------------------------------------------

    def pod(
        self,
        name: str,
        *,
        on: str,
        owner: str | None = None,
        owner_kind: str = "ReplicaSet",
        namespace: str = "default",
        usage: Mapping[str, str] | None = None,
        requests: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        priority: int | None = None,
        qos: str | None = None,
        phase: str = "Running",
        ready: bool = True,
        terminating: bool = False,
        created: float | None = None,
        volumes: Iterable[Mapping[str, Any]] = (),
        node_selector: Mapping[str, str] | None = None,
        tolerations: Iterable[Mapping[str, str]] = (),
        resource_claims: bool = False,
        usage_age: float = 0.0,
        affinity_in: tuple[str, Iterable[str]] | None = None,
        spec_extra: Mapping[str, Any] | None = None,
        claim_statuses: Mapping[str, str] | None = None,
    ) -> World:
        """A running pod on node ``on``. ``owner`` names a Deployment (its ReplicaSet owns the pod)
        unless ``owner_kind`` says otherwise (``StatefulSet``, ``DaemonSet``, ``Job``...).
        Pods are created one minute apart in declaration order unless ``created`` is given.
        ``affinity_in=(key, values)`` adds a required node affinity term ``key In values``.
        ``spec_extra`` adds or replaces pod spec fields (``initContainers``, ``overhead``, ``resources``)."""
        self._clock += 1
        meta: Obj = {
            "name": name,
            "namespace": namespace,
            "uid": _uid("Pod", namespace, name),
            "creationTimestamp": iso(created if created is not None else NOW - 86400 + 60 * self._clock),
            "labels": {"app": owner or name, **(labels or {})},
        }
        if annotations:
            meta["annotations"] = dict(annotations)
        if terminating:
            meta["deletionTimestamp"] = iso(NOW)
        if owner is not None:
            ref_name = f"{owner}-rs" if owner_kind == "ReplicaSet" else owner
            meta["ownerReferences"] = [owner_ref(owner_kind, ref_name, namespace)]
        spec: Obj = {
            "nodeName": on,
            "containers": [
                {
                    "name": "main",
                    "image": "app:1",
                    "resources": {"requests": dict(requests or {"cpu": "100m"})},
                }
            ],
        }
        if priority is not None:
            spec["priority"] = priority
        if volumes:
            spec["volumes"] = [dict(v) for v in volumes]
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        if tolerations:
            spec["tolerations"] = [dict(t) for t in tolerations]
        if affinity_in is not None:
            key, values = affinity_in
            term = {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            }
        spec.update(spec_extra or {})
        if resource_claims:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
        status: Obj = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        if qos is not None:
            status["qosClass"] = qos
        if claim_statuses:
            status["resourceClaimStatuses"] = [
                {"name": k, "resourceClaimName": v} for k, v in claim_statuses.items()
            ]
        self.objects.append(
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
        )
        if usage is not None:
            key = f"{namespace}/{name}"
            self.pod_usage[key] = dict(usage)
            self.pod_age[key] = usage_age
        return self

    # --- DRA ----------------------------------------------------------------------------------------

    def device_class(self, name: str, *selectors: str) -> World:
        """A DeviceClass whose devices satisfy every CEL ``selectors``."""
        spec = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
        self.objects.append(
            {"apiVersion": DRA_API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}
        )
        return self

    def resource_slice(
        self,
        name: str,
        devices: Iterable[Mapping[str, Any]],
        *,
        node: str | None = None,
        all_nodes: bool = False,
        node_labels: Mapping[str, str] | None = None,
        driver: str = GPU_DRIVER,
        pool: str | None = None,
        generation: int = 1,
        count: int = 1,
        shared_counters: Mapping[str, Mapping[str, str]] | None = None,
    ) -> World:
        """A ResourceSlice of ``driver``: for one ``node``, for all nodes, or for the nodes carrying
        ``node_labels``. ``devices`` are API device objects (``gpu(...)`` builds one);
        ``shared_counters`` (counter set -> counter -> quantity) makes it a slice of counters instead."""
        spec: Obj = {
            "driver": driver,
            "pool": {"name": pool or node or name, "generation": generation, "resourceSliceCount": count},
            "devices": [dict(d) for d in devices],
        }
        if shared_counters is not None:
            del spec["devices"]
            spec["sharedCounters"] = [
                {"name": n, "counters": {c: {"value": v} for c, v in counters.items()}}
                for n, counters in shared_counters.items()
            ]
        if node is not None:
            spec["nodeName"] = node
        elif all_nodes:
            spec["allNodes"] = True
        else:
            exprs = [{"key": k, "operator": "In", "values": [v]} for k, v in (node_labels or {}).items()]
            spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": exprs}]}
        self.objects.append(
            {"apiVersion": DRA_API, "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}
        )
        return self

    def device_pod(
        self,
        name: str,
        *,
        on: str,
        requests: Iterable[Mapping[str, Any]],
        allocated: Iterable[str] = (),
        owner: str | None = "gpu-app",
        namespace: str = "default",
        usage: Mapping[str, str] | None = None,
        reserved_for: Iterable[str] | None = None,
        constraints: Iterable[Mapping[str, Any]] = (),
        claim: str | None = None,
        slice_pool: str | None = None,
        **pod: Any,
    ) -> World:
        """A pod whose one claim ``gpu`` comes from a template; its generated claim ``<name>-gpu`` holds
        ``requests`` (``spec.devices.requests``), is allocated to the devices named in ``allocated``
        (of the pool ``slice_pool``, default the node's) and reserved for the pod (or ``reserved_for``,
        pod uids). ``claim=""`` leaves the claim out (not generated yet)."""
        claim_name = f"{name}-gpu" if claim is None else claim
        pod_uid = _uid("Pod", namespace, name)
        self.pod(
            name,
            on=on,
            owner=owner,
            namespace=namespace,
            usage=usage if usage is not None else cpu("2"),
            spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]},
            claim_statuses={"gpu": claim_name} if claim_name else None,
            **pod,
        )
        if not claim_name:
            return self
        obj: Obj = {
            "apiVersion": DRA_API,
            "kind": "ResourceClaim",
            "metadata": {
                "name": claim_name,
                "namespace": namespace,
                "uid": _uid("ResourceClaim", namespace, claim_name),
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod_uid, "controller": True}
                ],
            },
            "spec": {"devices": {"requests": [dict(r) for r in requests], "constraints": list(constraints)}},
        }
        devices = list(allocated)
        if devices:
            results = [
                {"request": "gpu", "driver": GPU_DRIVER, "pool": slice_pool or on, "device": d}
                for d in devices
            ]
            selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [on]}]}
            obj["status"] = {
                "allocation": {
                    "devices": {"results": results},
                    "nodeSelector": {"nodeSelectorTerms": [selector]},
                },
                "reservedFor": [
                    {"resource": "pods", "name": name, "uid": uid}
                    for uid in (reserved_for if reserved_for is not None else [pod_uid])
                ],
            }
        self.objects.append(obj)
        return self

    def remove_pod(self, name: str, namespace: str = "default") -> World:
        """The pod is gone from the cluster (evicted and deleted); its usage sample goes with it."""
        self.objects = [
            o
            for o in self.objects
            if not (
                o["kind"] == "Pod"
                and o["metadata"]["name"] == name
                and o["metadata"]["namespace"] == namespace
            )
        ]
        self.pod_usage.pop(f"{namespace}/{name}", None)
        return self

    def edit(self, kind: str, name: str, namespace: str | None = "default") -> Obj:
        """The object itself, to change in place: a later state of the cluster (a rollout's status)."""
        return next(
            o
            for o in self.objects
            if o["kind"] == kind
            and o["metadata"]["name"] == name
            and o["metadata"].get("namespace") == namespace
        )

    def set_node_usage(self, name: str, usage: Mapping[str, str]) -> World:
        """A new sample of the node (what the metrics say in a later cycle)."""
        self.node_usage[name] = dict(usage)
        return self

    # --- building ---------------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        return build_snapshot(iter_objects(self.objects))

    def usage(self, now: float = NOW) -> UsageSnapshot:
        def sample(values: Mapping[str, str], age: float) -> UsageSample:
            return UsageSample({k: resource_amount(k, v) for k, v in values.items()}, now - age)

        return UsageSnapshot(
            nodes={k: sample(v, self.node_age[k]) for k, v in self.node_usage.items()},
            pods={k: sample(v, self.pod_age[k]) for k, v in self.pod_usage.items()},
            node_errors=dict(self.node_errors),
        )

    def plan(
        self,
        config: EffectiveConfig,
        state: PlannerState | None = None,
        now: float = NOW,
        *,
        parts: Parts = FAST,
    ) -> Plan:
        return plan(self.snapshot(), self.usage(now), config, state or PlannerState(), now, parts=parts)

    def cycles(
        self, config: EffectiveConfig, count: int, interval: float = 60.0, *, parts: Parts = FAST
    ) -> list[Plan]:
        """``count`` cycles on an unchanging cluster, committing every planned eviction as done."""
        state = PlannerState()
        plans = []
        for i in range(count):
            now = NOW + i * interval
            result = self.plan(config, state, now, parts=parts)
            state = commit(result.state, result.evictions, now)
            plans.append(result)
        return plans


def gpu(name: str, model: str = "a100", memory: str = "40Gi", **extra: Any) -> Obj:
    """A ResourceSlice device of ``GPU_DRIVER`` with a ``model`` attribute and a ``memory`` capacity;
    ``extra`` adds API fields (``consumesCounters``...)."""
    return {
        "name": name,
        "attributes": {"model": {"string": model}},
        "capacity": {"memory": {"value": memory}},
        **extra,
    }


def exactly(device_class: str = "gpu", *selectors: str, count: int = 1, mode: str = "ExactCount") -> Obj:
    """A claim request named ``gpu`` for ``count`` devices of ``device_class`` (``mode="All"``: all)."""
    body: Obj = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": "gpu", "exactly": body}


def evicted(result: Plan) -> list[str]:
    return [e.pod.key for e in result.evictions]


def skip_codes(result: Plan) -> dict[str, str]:
    return {s.pod: s.code for s in result.pod_skips}


def node_classes(result: Plan) -> dict[str, str]:
    return {r.node: r.node_class for r in result.node_reports}


def report(result: Plan, node: str) -> Any:
    return next(r for r in result.node_reports if r.node == node)


# --- the cycle runner ------------------------------------------------------------------------------------

_EDGE_OPTIONS = ("tainter", "journal", "verifier", "events")
_CLOCK_OPTIONS = {"wall_clock": "wall", "monotonic": "monotonic"}
_SIGNAL_OPTIONS = ("is_leader", "cache_ages", "refresh", "untrusted_nodes", "on_record")
_TIMING_OPTIONS = (
    "budget_seconds",
    "max_cache_age",
    "act_cache_age",
    "pdb_retry_seconds",
    "unknown_settle_seconds",
    "restart_deadline_seconds",
    "startup_quiet_seconds",
    "fallback_quiet_seconds",
)


def cycle_runner(
    config: EffectiveConfig, cluster: Any, usage: Any, evictor: Any, **options: Any
) -> CycleRunner:
    """A ``CycleRunner`` with each option put in its group (``Edges``, ``Clocks``, ``Signals``, ``Timing``),
    so a test names only what it exercises: ``cycle_runner(..., wall_clock=..., max_cache_age=30)``."""
    unknown = set(options) - {*_EDGE_OPTIONS, *_CLOCK_OPTIONS, *_SIGNAL_OPTIONS, *_TIMING_OPTIONS}
    if unknown:
        raise TypeError(f"cycle_runner: unknown options {sorted(unknown)}")
    edges = Edges(cluster, usage, evictor, **{k: options[k] for k in _EDGE_OPTIONS if k in options})
    clocks = Clocks(**{field: options[k] for k, field in _CLOCK_OPTIONS.items() if k in options})
    signals = Signals(**{k: options[k] for k in _SIGNAL_OPTIONS if k in options})
    timing = Timing(**{k: options[k] for k in _TIMING_OPTIONS if k in options})
    return CycleRunner(config, edges, clocks=clocks, signals=signals, timing=timing)
