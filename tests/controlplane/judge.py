"""The real kube-scheduler as the judge of our destination check (issue 42): a differential harness.

For each seeded random *shape* (a few kwok nodes with allocatable, labels and taints, pods already bound
to them, and one pod to place), both sides answer, per node, "could this pod land here?":

- **ours**: the pure destination check (``planner.fit.DestinationSet`` with ``nodeFit``, the node as the
  only destination, no usage thresholds in the way), on a snapshot parsed by our own parser from the
  objects read back from the API server (defaults and admission applied: the RuntimeClass's overhead, a
  gated copy of the pod as the server stored it);
- **the scheduler**: a probe copy of the pod, restricted to that node by a required node affinity on
  ``metadata.name`` added only for the probe, created in the shape's namespace; it binds, or its
  ``PodScheduled`` condition says ``Unschedulable`` and why. Its topology spread constraints get
  ``nodeAffinityPolicy: Ignore`` (the probe's own restriction must not shrink the domains; the shape's
  spread keys are labels only its own nodes carry, so the domains are the shape's nodes as for the pod).

Probes run in rounds: round ``r`` probes node ``r`` of every shape of a batch at once (a probe that binds
must not change another probe's answer: one per shape at a time), then deletes them.

``"we say fits, scheduler refuses"`` is a defect (an eviction whose replacement stays Pending); ``"we say
no, scheduler places"`` is counted and classified by our reason (conservative by design).
"""

from __future__ import annotations

import json
import random
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from descheduler.cluster.build import build_snapshot
from descheduler.cluster.types import ClusterSnapshot, Pod
from descheduler.planner.classify import Levels, NodeView
from descheduler.planner.devices import DeviceIndex
from descheduler.planner.fit import DestinationSet
from descheduler.planner.placement import Neighbours
from descheduler.planner.settings import PoolSettings
from tests.controlplane import judge_dra, objects
from tests.controlplane.cluster import ControlPlane

Obj = dict[str, Any]
RUNTIME_CLASS = "judge-overhead"
PROBE_LABEL = "judge.test/probe"
GATE = "judge.test/hold"
ZONE = "judge.test/zone"
DISK = "judge.test/disk"
GEN = "judge.test/gen"
APPS = ("web", "db", "cache")
CLUSTER_KINDS = ("DeviceClass", "ResourceSlice")
TAINTS = (
    {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
    {"key": "maintenance", "value": "soon", "effect": "NoExecute"},
    {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
)
POOL = PoolSettings(
    name="judge", selector=None, use_deviation=False, resources=("cpu", "memory"), low={}, high={},
    prod_resources=(), prod_low={}, prod_high={}, weights={"cpu": 1, "memory": 1},
    consecutive_abnormalities=1, consecutive_normalities=3, anomaly_timeout=60.0,
)  # fmt: skip


def runtime_class() -> Obj:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS},
        "handler": "runc",
        "overhead": {"podFixed": {"cpu": "150m", "memory": "64Mi"}},
    }


# --- shapes -----------------------------------------------------------------------------------------------


@dataclass
class Shape:
    seed: int
    namespace: str
    nodes: list[Obj]
    existing: list[Obj]
    pod: Obj
    features: list[str]
    dra: list[Obj] = field(default_factory=list)
    """DeviceClasses, ResourceSlices, claim templates and claims (``judge_dra.py``), in creation order."""

    @property
    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]


def _keys(namespace: str) -> tuple[str, str]:
    """Per-shape spread keys (host, zone): labels no other shape's nodes carry."""
    tail = namespace[-20:]
    return f"judge.test/h-{tail}", f"judge.test/z-{tail}"


def _container(rng: random.Random, name: str, **extra: Any) -> Obj:
    cpu = rng.choice(["50m", "100m", "250m", "400m", "700m", "1", "1500m"])
    memory = rng.choice(["32Mi", "128Mi", "256Mi", "700Mi", "1Gi"])
    out: Obj = {"name": name, "image": f"registry.invalid/{name}:1"}
    out["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    out.update(extra)
    return out


def _selector_term(rng: random.Random) -> Obj:
    expressions = []
    for _ in range(rng.choice([1, 1, 2])):
        op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])
        if op in ("Gt", "Lt"):
            expressions.append({"key": GEN, "operator": op, "values": [str(rng.randint(1, 5))]})
        elif op in ("Exists", "DoesNotExist"):
            expressions.append({"key": rng.choice([DISK, ZONE]), "operator": op})
        else:
            key = rng.choice([DISK, ZONE])
            pool = ["ssd", "hdd"] if key == DISK else ["a", "b", "c"]
            expressions.append({"key": key, "operator": op, "values": rng.sample(pool, rng.randint(1, 2))})
    return {"matchExpressions": expressions}


def _anti(app: str) -> Obj:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }


def _ports(rng: random.Random) -> list[Obj]:
    port: Obj = {
        "containerPort": 80,
        "hostPort": rng.choice([8080, 8081]),
        "protocol": rng.choice(["TCP", "UDP"]),
    }
    if rng.random() < 0.3:
        port["hostIP"] = rng.choice(["127.0.0.1", "10.0.0.1"])
    return [port]


def random_shape(seed: int, run: str, dra: bool = False) -> Shape:
    """A small cluster and a pod, seeded; ``run`` keeps namespaces of separate runs apart. With ``dra``
    the pod holds device claims and the nodes have devices (``judge_dra.py``)."""
    rng = random.Random(seed)
    namespace = f"judge-{run}-{seed}"
    host_key, zone_key = _keys(namespace)
    nodes: list[Obj] = []
    for i in range(rng.randint(3, 6)):
        name = f"{namespace}-n{i}"
        node = objects.node(
            name, namespace, cpu=rng.choice(["1", "2", "4", "8"]), memory=rng.choice(["2Gi", "4Gi", "8Gi"]),
            pods=rng.choice(["110", "110", "3"]),
        )  # fmt: skip
        zone = rng.choice("abc")
        labels = node["metadata"]["labels"]
        labels.update({ZONE: zone, GEN: str(rng.randint(1, 5)), host_key: name, zone_key: zone})
        if rng.random() < 0.6:
            labels[DISK] = rng.choice(["ssd", "hdd"])
        taints = [t for t in TAINTS if rng.random() < 0.15]
        if taints:
            node["spec"]["taints"] = taints
        nodes.append(node)
    existing: list[Obj] = []
    for node in nodes:
        for j in range(rng.randint(0, 3)):
            app = rng.choice(APPS)
            container = _container(rng, "app")
            if rng.random() < 0.15:
                container["ports"] = _ports(rng)
            spec: Obj = {
                "nodeName": node["metadata"]["name"], "terminationGracePeriodSeconds": 0,
                "containers": [container],
                "tolerations": [{"operator": "Exists"}],
            }  # fmt: skip
            if rng.random() < 0.1:
                spec["affinity"] = _anti(rng.choice(APPS))
            existing.append(
                {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{node['metadata']['name'][-2:]}-{j}", "labels": {"app": app}},
                    "spec": spec,
                }
            )  # fmt: skip
    features: list[str] = []
    app = rng.choice(APPS)
    containers = [_container(rng, "main")]
    spec = {"nodeSelector": {objects.GROUP_LABEL: namespace}, "terminationGracePeriodSeconds": 0}
    if rng.random() < 0.3:
        containers.append(_container(rng, "second"))
    inits = []
    if rng.random() < 0.3:
        inits.append(_container(rng, "init"))
        features.append("init")
    if rng.random() < 0.3:
        inits.insert(rng.randint(0, len(inits)), _container(rng, "sidecar", restartPolicy="Always"))
        features.append("sidecar")
    if inits:
        spec["initContainers"] = inits
    if rng.random() < 0.3:
        spec["runtimeClassName"] = RUNTIME_CLASS
        features.append("overhead")
    if rng.random() < 0.25:
        spec["nodeSelector"][DISK] = rng.choice(["ssd", "hdd"])
        features.append("nodeSelector")
    affinity: Obj = {}
    if rng.random() < 0.35:
        terms = [_selector_term(rng) for _ in range(rng.randint(1, 2))]
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
        features.append("nodeAffinity")
    if rng.random() < 0.7:
        tolerations = []
        for taint in TAINTS:
            if rng.random() < 0.6:
                tol: Obj = {"key": taint["key"], "operator": "Equal", "value": taint["value"]}
                tol["effect"] = taint["effect"]
                if taint["effect"] == "NoExecute" and rng.random() < 0.5:
                    tol["tolerationSeconds"] = 30
                tolerations.append(tol)
        if tolerations:
            spec["tolerations"] = tolerations
            features.append("tolerations")
    if rng.random() < 0.3:
        affinity.update(_anti(rng.choice([app, *APPS])))
        features.append("podAntiAffinity")
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": rng.randint(1, 2), "topologyKey": rng.choice([host_key, zone_key]),
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}},
            }
        ]  # fmt: skip
        features.append("topologySpread")
    if rng.random() < 0.2:
        containers[0]["ports"] = _ports(rng)
        features.append("hostPort")
    spec["containers"] = containers
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "subject", "labels": {"app": app}},
        "spec": spec,
    }
    shape = Shape(seed, namespace, nodes, existing, pod, features)
    if dra:
        made = judge_dra.add_dra(rng, namespace, nodes, pod, features)
        existing += [o for o in made if o["kind"] == "Pod"]
        shape.dra = [o for o in made if o["kind"] != "Pod"]
        shape.features = sorted(set(features), key=features.index)
    return shape


# --- the two judges -----------------------------------------------------------------------------------------


@dataclass
class Verdict:
    seed: int
    node: str
    ours: str
    """"" when our check says the pod fits, else its reason."""
    placed: bool
    theirs: str
    """The scheduler's reason when it did not place the probe."""
    features: list[str] = field(default_factory=list)


def our_answers(snapshot: ClusterSnapshot, pod: Pod) -> dict[str, str]:
    """Per node of ``snapshot``, our destination check's answer for ``pod`` ("" when it fits)."""
    by_node: dict[str, list[Pod]] = {}
    for other in snapshot.pods:
        if other.node_name and not other.is_terminal and other.uid != pod.uid:
            by_node.setdefault(other.node_name, []).append(other)
    devices = DeviceIndex(snapshot) if pod.resource_claims else None
    problem = devices.check(pod) if devices is not None else None
    if problem is not None:  # the planner keeps such a pod where it is (plan.py)
        return {node.name: f"{problem.code}: {problem.message}" for node in snapshot.nodes}
    neighbours = Neighbours(snapshot.nodes, by_node)  # as the planner: every node's pods, not only the view's
    answers: dict[str, str] = {}
    for node in snapshot.nodes:
        view = NodeView(
            node=node, pool=POOL, pods=by_node.get(node.name, []), levels=Levels({}, {}), measured={}
        )
        check = DestinationSet([view], POOL.weights, True, False, devices=devices, neighbours=neighbours)
        found, why = check.find(pod, {}, None)
        answers[node.name] = "" if found is not None else why
    return answers


def probe(shape: Shape, index: int) -> Obj:
    """The pod, restricted to node ``index`` for the scheduler's answer only."""
    body = json.loads(json.dumps(shape.pod))
    labels = {**body["metadata"]["labels"], PROBE_LABEL: "1"}
    body["metadata"] = {"name": f"probe-{index}", "namespace": shape.namespace, "labels": labels}
    spec = body["spec"]
    pin = {"key": "metadata.name", "operator": "In", "values": [shape.node_names[index]]}
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]}
    )
    for term in required["nodeSelectorTerms"]:
        term["matchFields"] = [pin]
    for constraint in spec.get("topologySpreadConstraints", []):
        constraint["nodeAffinityPolicy"] = "Ignore"
    return body


def _list(plane: ControlPlane, *args: str) -> list[Obj]:
    items: list[Obj] = plane.get_json(*args)["items"]
    return items


def setup(plane: ControlPlane, shapes: Sequence[Shape]) -> None:
    """Namespaces, nodes, existing pods and a gated copy of each pod; waits until kwok runs them all."""
    plane.apply([runtime_class()])
    plane.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}} for s in shapes]
    )
    plane.apply([n for s in shapes for n in s.nodes])
    names = {n for s in shapes for n in s.node_names}
    plane.wait_for(
        f"{len(names)} nodes Ready",
        lambda: names <= {i["metadata"]["name"] for i in _list(plane, "nodes") if _ready(i)},
        timeout_s=120,
    )
    spaces = {s.namespace for s in shapes}
    plane.wait_for(
        "a default ServiceAccount in every shape's namespace",
        lambda: (
            spaces
            <= {
                a["metadata"]["namespace"]
                for a in _list(plane, "sa", "-A", "--field-selector=metadata.name=default")
            }
        ),
    )
    if any(s.dra for s in shapes):
        plane.apply([o for s in shapes for o in s.dra if o["kind"] in CLUSTER_KINDS])
        plane.apply(
            [
                {**o, "metadata": {**o["metadata"], "namespace": s.namespace}}
                for s in shapes
                for o in s.dra
                if o["kind"] not in CLUSTER_KINDS
            ]
        )
    pods: list[Obj] = []
    for shape in shapes:
        gated = json.loads(json.dumps(shape.pod))
        gated["spec"]["schedulingGates"] = [{"name": GATE}]
        for pod in (*shape.existing, gated):
            pods.append({**pod, "metadata": {**pod["metadata"], "namespace": shape.namespace}})
    plane.apply(pods)
    want = sum(len(s.existing) for s in shapes)

    def running() -> int:
        listed = _list(plane, "pods", "-A", "-l", f"!{PROBE_LABEL}")
        return sum(
            1
            for p in listed
            if p["metadata"]["namespace"] in spaces and p["status"].get("phase") == "Running"
        )

    plane.wait_for(f"{want} existing pods Running", lambda: running() >= want, timeout_s=180)


def _ready(node: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


def read_back(plane: ControlPlane, shapes: Sequence[Shape]) -> list[tuple[ClusterSnapshot, Pod]]:
    """Per shape: the shape as the API server holds it, through our parser; and the gated pod under test.
    One LIST per kind for every shape (a kubectl call costs about 0.3 s; 40 shapes used to make 80)."""
    group = objects.GROUP_LABEL
    nodes = _by(_list(plane, "nodes", "-l", group), lambda o: o["metadata"]["labels"][group])
    pods = _by(_list(plane, "pods", "-A"), lambda o: o["metadata"]["namespace"])
    dra = _dra_lists(plane) if any(s.dra for s in shapes) else {}
    out = []
    for shape in shapes:
        items = [
            *({**n, "kind": "Node"} for n in nodes.get(shape.namespace, [])),
            *({**p, "kind": "Pod"} for p in pods.get(shape.namespace, [])),
        ]
        if shape.dra:
            items += _dra_back(shape, items, dra)
        snapshot = build_snapshot(items)
        (subject,) = [p for p in snapshot.pods if p.name == "subject"]
        out.append((snapshot, subject))
    return out


def _by(items: Iterable[Obj], key: Callable[[Obj], str]) -> dict[str, list[Obj]]:
    grouped: dict[str, list[Obj]] = {}
    for item in items:
        grouped.setdefault(key(item), []).append(item)
    return grouped


def _dra_lists(plane: ControlPlane) -> dict[str, dict[str, list[Obj]]]:
    """The DRA objects of every shape, by kind, then by the shape's namespace ("" for device classes)."""
    group = objects.GROUP_LABEL
    namespace: Callable[[Obj], str] = lambda o: o["metadata"]["namespace"]  # noqa: E731
    slices = _list(plane, "resourceslices", "-l", group)
    return {
        "ResourceSlice": _by(slices, lambda o: o["metadata"]["labels"][group]),
        "DeviceClass": {"": _list(plane, "deviceclasses")},
        "ResourceClaim": _by(_list(plane, "resourceclaims", "-A"), namespace),
        "ResourceClaimTemplate": _by(_list(plane, "resourceclaimtemplates", "-A"), namespace),
    }


def _dra_back(shape: Shape, items: list[Obj], listed: dict[str, dict[str, list[Obj]]]) -> list[Obj]:
    """The shape's DRA objects as stored, the probes' leftover claims left out; the subject rewritten
    to hold an allocated claim of its template, as a device pod the planner could move."""
    kind = {"apiVersion": objects.DRA_API}
    classes = [o["metadata"]["name"] for o in shape.dra if o["kind"] == "DeviceClass"]
    ns = shape.namespace
    found = [{**o, **kind, "kind": "ResourceSlice"} for o in listed["ResourceSlice"].get(ns, [])]
    found += [
        {**o, **kind, "kind": "DeviceClass"}
        for o in listed["DeviceClass"][""]
        if o["metadata"]["name"] in classes
    ]
    found += [
        {**o, **kind, "kind": "ResourceClaim"}
        for o in listed["ResourceClaim"].get(ns, [])
        if not any(r["name"].startswith("probe-") for r in o["metadata"].get("ownerReferences", []))
    ]
    (subject,) = [p for p in items if p["kind"] == "Pod" and p["metadata"]["name"] == "subject"]
    return found + judge_dra.holding(subject, listed["ResourceClaimTemplate"].get(ns, []))


def _outcome(pod: Obj) -> tuple[bool, str] | None:
    if pod["spec"].get("nodeName"):
        return True, ""
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return False, scheduler_reason(condition.get("message") or condition.get("reason", ""))
    return None


def scheduler_reason(message: str) -> str:
    """What the scheduler said of the probe's own node: its FailedScheduling message without the other
    nodes (refused by the probe's pin) and the preemption part."""
    head = message.split(". ", 1)[0]
    parts = head.split(": ", 1)[-1].split(", ")
    own = [p for p in parts if "[NodeAffinity]" not in p]
    return ", ".join(own) or head


PROBES = ("pods", "-A", "-l", PROBE_LABEL)


def scheduler_answers(
    plane: ControlPlane, shapes: Sequence[Shape], timeout_s: float = 60.0
) -> dict[tuple[str, str], tuple[bool, str]]:
    """Per (namespace, node): whether the real scheduler placed the probe there, and why not."""
    answers: dict[tuple[str, str], tuple[bool, str]] = {}
    for index in range(max(len(s.nodes) for s in shapes)):
        batch = [s for s in shapes if index < len(s.nodes)]
        plane.apply([probe(shape, index) for shape in batch])
        expected = {(s.namespace, f"probe-{index}"): s.node_names[index] for s in batch}
        deadline = time.monotonic() + timeout_s
        while True:
            for pod in _list(plane, "pods", "-A", "-l", PROBE_LABEL):
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                outcome = _outcome(pod)
                if key in expected and outcome is not None:
                    answers[key[0], expected.pop(key)] = outcome
            if not expected:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the scheduler never answered for {sorted(expected)}")
            time.sleep(0.3)
        # Gone before the next round (they hold resources and count for spreading); kubectl's own --wait
        # took about 4 s a round, a LIST every 0.1 s about 1.
        plane.kubectl("delete", *PROBES, "--grace-period=0", "--force", "--wait=false")
        plane.wait_for("the probes gone", lambda: not _list(plane, *PROBES), 60, 0.1)
    return answers


def judge(plane: ControlPlane, shapes: Sequence[Shape]) -> list[Verdict]:
    """Both answers for every node of every shape (the shapes are created, probed, then left in place)."""
    setup(plane, shapes)
    theirs = scheduler_answers(plane, shapes)
    verdicts = []
    for shape, (snapshot, subject) in zip(shapes, read_back(plane, shapes), strict=True):
        ours = our_answers(snapshot, subject)
        for node in shape.node_names:
            placed, why = theirs[shape.namespace, node]
            verdicts.append(Verdict(shape.seed, node, ours[node], placed, why, shape.features))
    return verdicts


def cleanup(plane: ControlPlane, shapes: Iterable[Shape]) -> None:
    shapes = list(shapes)
    plane.kubectl("delete", "namespace", *[s.namespace for s in shapes], "--wait=false", check=False)
    # One DELETE of the collection: kubectl deletes named nodes one by one (about 33 s for 40 shapes).
    groups = urllib.parse.quote(f"{objects.GROUP_LABEL} in ({','.join(s.namespace for s in shapes)})")
    plane.kubectl("delete", "--raw", f"/api/v1/nodes?labelSelector={groups}", check=False)
    dra = [
        f"{o['kind'].lower()}/{o['metadata']['name']}"
        for s in shapes
        for o in s.dra
        if o["kind"] in CLUSTER_KINDS
    ]
    if dra:
        plane.kubectl("delete", *dra, "--wait=false", check=False)


# --- the table --------------------------------------------------------------------------------------------


def our_class(reason: str) -> str:
    """A "we say no" reason, without its counts: the class it is tallied under."""
    if reason.startswith("resource-claim-"):  # the planner keeps the pod: the code, without names
        return reason.split(":", 1)[0]
    if "checked):" in reason:
        reason = reason.split("checked):", 1)[1]
    return " ".join(w for w in reason.split() if not w.isdigit()).strip(" ,") or reason


def table(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    both_fit = sum(1 for v in verdicts if not v.ours and v.placed)
    both_refuse = sum(1 for v in verdicts if v.ours and not v.placed)
    wrong = [v for v in verdicts if not v.ours and not v.placed]
    conservative = [v for v in verdicts if v.ours and v.placed]
    return {
        "shapes": len({v.seed for v in verdicts}),
        "probes": len(verdicts),
        "both_fit": both_fit,
        "both_refuse": both_refuse,
        "we_fit_scheduler_refuses": len(wrong),
        "we_refuse_scheduler_places": len(conservative),
        "we_fit_scheduler_refuses_cases": [
            {"seed": v.seed, "node": v.node, "scheduler": v.theirs, "features": v.features} for v in wrong
        ],
        "both_refuse_classes": dict(
            Counter(v.theirs for v in verdicts if v.ours and not v.placed).most_common()
        ),
        "we_refuse_scheduler_places_classes": dict(
            Counter(our_class(v.ours) for v in conservative).most_common()
        ),
    }
