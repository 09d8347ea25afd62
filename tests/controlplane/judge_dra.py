"""DRA shapes for the differential harness (``judge.py``, issue 42): the pod under test holds device claims.

Per shape: a DeviceClass or two, each node's ResourceSlices (devices with string, int, bool and version
attributes and whole or fractional capacities, some tainted, some nodes MIG-style partitionable with a
counter set in a slice of its own), filler pods the scheduler itself places (pinned to a node) on claims
of their own, and the pod under test with a ResourceClaimTemplate (``ExactCount``, ``All``,
``firstAvailable``, CEL selectors on attributes and capacity, ``matchAttribute``/``distinctAttribute``
constraints, tolerations of device taints) or, now and then, a shared ResourceClaim used by name.

Our side is the planner's path for a device-holding pod (``plan.py``: ``DeviceIndex.check`` first, then
``fits`` per destination), so the pod under test is read back as the planner would see it before a move:
holding an allocated claim of the template (reserved for it alone, its devices elsewhere). Each probe gets
a fresh claim from the template. A shared claim is never moved by the planner (``resource-claim-shared``):
its probes still run, and the table files every node of such a shape under that reason.
"""

from __future__ import annotations

import json
import random
from typing import Any

from tests.controlplane import objects

Obj = dict[str, Any]
DRIVER = objects.DRIVER
A = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'
TAINT_KEY = "example.com/maintenance"
MODELS = ("a100", "h100", "l4")
VERSIONS = ("1.2.0", "1.10.3", "2.0.1")
MEMORY = ("10Gi", "1.5Gi", "40Gi", "80Gi", "0.5")
SELECTORS = (
    f'{A}.model == "a100"',
    f'{A}.model.startsWith("h") || {A}.model == "l4"',
    f"{A}.numa == 1",
    f"{A}.index < 2",
    f"has({A}.healthy) && {A}.healthy",
    f'{A}.driverVersion.isGreaterThan(semver("1.5.0"))',
    f'{C}.memory.compareTo(quantity("20Gi")) >= 0',
    f'{C}.memory.isLessThan(quantity("2Gi"))',
    f'{A}.profile == "1g"',
)
"""The last one errors on a device without ``profile`` (the scheduler aborts then): rarely drawn."""


def _device(rng: random.Random, name: str, index: int, consumes: str = "") -> Obj:
    attributes: Obj = {
        "model": {"string": rng.choice(MODELS)},
        "index": {"int": index},
        "numa": {"int": rng.randint(0, 1)},
        "driverVersion": {"version": rng.choice(VERSIONS)},
    }
    if rng.random() < 0.8:
        attributes["healthy"] = {"bool": rng.random() < 0.8}
    device: Obj = {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": rng.choice(MEMORY)}},
    }
    if consumes:
        attributes["profile"] = {"string": consumes + "g"}
        counters = {"slices": {"value": consumes}}
        device["consumesCounters"] = [{"counterSet": "gpu0", "counters": counters}]
    if rng.random() < 0.15:
        effect = rng.choice(["NoSchedule", "NoSchedule", "None"])
        device["taints"] = [{"key": TAINT_KEY, "value": "yes", "effect": effect}]
    return device


def node_slices(rng: random.Random, namespace: str, node: str, partitions: bool) -> list[Obj]:
    """The node's pool: plain devices, or (``partitions`` allowing) a counter set and 3 partitions in a
    pool of 2 slices."""
    if rng.random() < 0.3 and partitions:
        parts = [
            _device(rng, "whole", 0, "2"),
            _device(rng, "half-0", 1, "1"),
            _device(rng, "half-1", 2, "1"),
        ]
        devices = parts + [_device(rng, f"gpu-{i}", 3 + i) for i in range(rng.randint(0, 1))]
        device_slice = objects.resource_slice(f"{node}-devs", node, devices, group=namespace)
        counter_slice = objects.resource_slice(f"{node}-ctr", node, [], group=namespace)
        del counter_slice["spec"]["devices"]
        counter_slice["spec"]["sharedCounters"] = [{"name": "gpu0", "counters": {"slices": {"value": "2"}}}]
        for item in (device_slice, counter_slice):
            item["spec"]["pool"]["resourceSliceCount"] = 2
        return [device_slice, counter_slice]
    devices = [_device(rng, f"gpu-{i}", i) for i in range(rng.choice([0, 1, 2, 2, 3, 4]))]
    return [objects.resource_slice(f"{node}-devs", node, devices, group=namespace)]


def _exactly(rng: random.Random, classes: list[str], features: list[str]) -> Obj:
    exactly: Obj = {"deviceClassName": rng.choice(classes)}
    if rng.random() < 0.12:
        exactly["allocationMode"] = "All"
        features.append("dra-all")
    else:
        exactly |= {"allocationMode": "ExactCount", "count": rng.choice([1, 1, 1, 2])}
    picked = rng.sample(SELECTORS[:-1], rng.choice([0, 1, 1, 2]))
    if rng.random() < 0.04:
        picked.append(SELECTORS[-1])
    if picked:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in picked]
        features.append("dra-cel")
    if rng.random() < 0.3:
        toleration: Obj = {"key": TAINT_KEY, "operator": "Exists"}
        if rng.random() < 0.5:
            toleration["effect"] = "NoSchedule"
        exactly["tolerations"] = [toleration]
        features.append("dra-toleration")
    return exactly


def claim_spec(rng: random.Random, classes: list[str], features: list[str]) -> Obj:
    """A claim's ``spec.devices``: one or two requests, maybe a firstAvailable one and a constraint."""
    requests: list[Obj] = []
    for i in range(rng.choice([1, 1, 2])):
        if rng.random() < 0.2:
            subs = [{"name": f"s{j}", **_exactly(rng, classes, features)} for j in range(2)]
            requests.append({"name": f"r{i}", "firstAvailable": subs})
            features.append("dra-firstAvailable")
        else:
            requests.append({"name": f"r{i}", "exactly": _exactly(rng, classes, features)})
    spec: Obj = {"requests": requests}
    if len(requests) == 2 and rng.random() < 0.4:
        kind = rng.choice(["matchAttribute", "distinctAttribute"])
        spec["constraints"] = [{kind: f"{DRIVER}/numa"}]
        features.append(f"dra-{kind}")
    return spec


def _use(pod: Obj, ref: Obj) -> None:
    pod["spec"]["resourceClaims"] = [ref]
    for container in pod["spec"]["containers"]:
        container.setdefault("resources", {})["claims"] = [{"name": ref["name"]}]


def add_dra(rng: random.Random, namespace: str, nodes: list[Obj], pod: Obj, features: list[str]) -> list[Obj]:
    """Give the shape devices; ``pod`` (under test) gets its claim. Returns the DRA objects and filler
    pods, in the order they must be created (``namespaced`` ones carry no namespace yet)."""
    classes = [f"{namespace}-gpu"]
    made: list[Obj] = [objects.device_class(classes[0])]
    if rng.random() < 0.5:
        classes.append(f"{namespace}-big")
        big = f'device.driver == "{DRIVER}" && {C}.memory.compareTo(quantity("10Gi")) >= 0'
        made.append(objects.device_class(classes[1], big))
    _fewer_node_limits(rng, pod, features)
    spec = claim_spec(rng, classes, features)
    for node in nodes:  # room, and no node taints: the devices decide (fillers must land too)
        room = {"cpu": "16", "memory": "32Gi", "pods": "110"}
        node["status"]["capacity"] = dict(room)
        node["status"]["allocatable"] = dict(room)
        node["spec"].pop("taints", None)
        # An All request selecting a partition panics kube-scheduler 1.35 (the planner keeps such a pod,
        # tests/unit/test_planner_devices.py): never probed, it would take the judge down.
        made += node_slices(rng, namespace, node["metadata"]["name"], "dra-all" not in features)
    exactly = {"deviceClassName": classes[0], "allocationMode": "ExactCount", "count": 1}
    hold = {"requests": [{"name": "r", "exactly": {**exactly, "tolerations": [{"operator": "Exists"}]}}]}
    made.append(_template("hold", hold))
    if rng.random() < 0.15:
        made.append({"apiVersion": objects.DRA_API, "kind": "ResourceClaim", "metadata": {"name": "shared"},
                     "spec": {"devices": spec}})  # fmt: skip
        _use(pod, {"name": "dev", "resourceClaimName": "shared"})
        features.append("dra-shared")
    else:
        made.append(_template("subject", spec))
        _use(pod, {"name": "dev", "resourceClaimTemplateName": "subject"})
        features.append("dra-template")
    for node in nodes:
        slices = [s for s in made if s.get("spec", {}).get("nodeName") == node["metadata"]["name"]]
        if any(s["spec"].get("devices") for s in slices) and rng.random() < 0.45:
            made.append(_filler(node["metadata"]["name"]))
            features.append("dra-held")
    return made


def _fewer_node_limits(rng: random.Random, pod: Obj, features: list[str]) -> None:
    """Mostly drop the pod's disk selector and node affinity: refused by labels, a node says nothing of
    its devices."""
    spec = pod["spec"]
    labels = [k for k in spec["nodeSelector"] if k != objects.GROUP_LABEL]
    if labels and rng.random() < 0.7:
        for key in labels:
            del spec["nodeSelector"][key]
        features.remove("nodeSelector")
    affinity = spec.get("affinity", {})
    if rng.random() < 0.7 and affinity.pop("nodeAffinity", None) is not None:
        features.remove("nodeAffinity")
        if not affinity:
            del spec["affinity"]


def _template(name: str, devices: Obj) -> Obj:
    return {
        "apiVersion": objects.DRA_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def _filler(node: str) -> Obj:
    """A pod the scheduler places on ``node`` with one device of its own (any, taints tolerated)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"hold-{node[-2:]}", "labels": {"app": "hold"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
            "containers": [{"name": "app", "image": "registry.invalid/hold:1", "resources": {}}],
        },
    }
    _use(pod, {"name": "dev", "resourceClaimTemplateName": "hold"})
    return pod


def holding(subject: Obj, templates: list[Obj]) -> list[Obj]:
    """The pod under test as the planner sees a device pod it could move: each template claim generated
    and allocated for it alone (its devices elsewhere, so none of the shape's counts as taken). Rewrites
    ``subject``'s claim statuses; returns the claims to add to the snapshot."""
    specs = {t["metadata"]["name"]: t["spec"]["spec"] for t in templates}
    meta = subject["metadata"]
    claims: list[Obj] = []
    statuses: list[Obj] = []
    for ref in subject["spec"].get("resourceClaims", []):
        if not ref.get("resourceClaimTemplateName"):
            continue
        name = f"{meta['name']}-{ref['name']}-held"
        statuses.append({"name": ref["name"], "resourceClaimName": name})
        owner = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }
        uid = f"{meta['uid']}-{ref['name']}"
        reserved = [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]
        claims.append(
            {
                "apiVersion": objects.DRA_API,
                "kind": "ResourceClaim",
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "uid": uid,
                    "ownerReferences": [owner],
                },
                "spec": json.loads(json.dumps(specs[ref["resourceClaimTemplateName"]])),
                "status": {"allocation": {"devices": {"results": []}}, "reservedFor": reserved},
            }
        )
    if statuses:
        subject.setdefault("status", {})["resourceClaimStatuses"] = statuses
    return claims
