"""Our CPU to decode a sync's pods: msgspec JSON (``fastparse``) against the pure-Python protobuf reader
(``protoparse``), per 30,000 pods (issue 40: protobuf would cut kube-apiserver's CPU; this says what it
costs us).

    python -m benchmarks.protowire_decode [--pods 30000] [--page 500] [--repeat 3]

Pods are generated in the shape kube-apiserver 1.35 returns for the pods of ``server_cost``'s cluster
(defaults applied, admission's tolerations, two managed-fields entries, bound with ``spec.nodeName``,
Pending), and encoded both ways: JSON as Go writes it (compact), protobuf by ``tests/support/protowriter``
(the server's field numbers and order; its empty non-pointer fields added as the server's marshallers
write them). Each way runs its decoder and then ``try_convert`` on every item, in pages of ``--page``,
with one interner per run as the reflector does. Prints CPU seconds (process time, best of ``--repeat``).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import summary_line
from benchmarks.synth import ADMISSION_TOLERATIONS
from descheduler.cluster.fastparse import FAST_KINDS
from descheduler.cluster.protoparse import PROTO_KINDS
from descheduler.kube.cache import Interner
from tests.support.protowriter import list_body

PER = 30_000


def server_pod(i: int, workloads: int = 300, nodes: int = 1000) -> dict[str, Any]:
    """Pod ``i`` as the server stores it after defaulting (kwok_scale's template, bound, Pending)."""
    w = i % workloads
    name = f"w{w:04d}-5d8f7c9b6-{i:06x}"
    created = f"2026-11-28T10:{(i // 600) % 60:02d}:{i % 60:02d}Z"
    fields: dict[str, Any] = {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}}},
        "f:spec": {},
    }
    return {
        "metadata": {
            "name": name,
            "generateName": f"w{w:04d}-5d8f7c9b6-",
            "namespace": "bench",
            "uid": f"0b7e5c7a-{i:04x}-4c1a-9d7a-{i:012x}",
            "resourceVersion": str(100000 + i),
            "generation": 1,
            "creationTimestamp": created,
            "labels": {"app": f"w{w:04d}", "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"w{w:04d}-5d8f7c9b6",
                    "uid": f"1c7e5c7a-{w:04x}-4c1a-9d7a-{w:012x}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": created,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                },
                {
                    "manager": "loader",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": created,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:nodeName": {}}},
                },
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "resources": {
                        "requests": {"cpu": f"{50 + w % 7 * 50}m", "memory": f"{64 + w % 5 * 64}Mi"}
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "automountServiceAccountToken": False,
            "nodeName": f"kwok-node-{i % nodes:05d}",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
                *ADMISSION_TOLERATIONS,
            ],
            "priority": 0,
            "enableServiceLinks": False,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def running(pod: dict[str, Any], i: int) -> dict[str, Any]:
    """The same pod once a kubelet runs it: the status a real node reports (conditions, IPs, a container
    status), and the kubelet's managed-fields entry."""
    at = pod["metadata"]["creationTimestamp"]
    ip = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
    host = f"172.18.{i % 1000 // 250}.{i % 250}"
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": at}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    pod["status"] = {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host,
        "hostIPs": [{"ip": host}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": at,
        "containerStatuses": [
            {
                "name": "app",
                "state": {"running": {"startedAt": at}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": "registry.invalid/app:1",
                "imageID": "registry.invalid/app@sha256:" + "0" * 64,
                "containerID": f"containerd://{i:064x}",
                "started": True,
            }
        ],
        "qosClass": "Burstable",
    }
    pod["metadata"]["managedFields"].append(
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": at,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}}
            },
            "subresource": "status",
        }
    )
    return pod


def pages(
    pods: list[dict[str, Any]], size: int, encode: Callable[[list[dict[str, Any]], int], bytes]
) -> list[bytes]:
    return [encode(pods[i : i + size], i) for i in range(0, len(pods), size)]


def json_page(items: list[dict[str, Any]], i: int) -> bytes:
    page = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "7", "continue": f"c{i}"},
        "items": items,
    }
    return json.dumps(page, separators=(",", ":")).encode()


def proto_page(items: list[dict[str, Any]], i: int) -> bytes:
    return list_body("Pod", items, "7", f"c{i}")


def run(decode: Callable[[bytes], Any], bodies: list[bytes], convert: bool) -> float:
    fast = FAST_KINDS["Pod"]
    interner = Interner()
    gc.collect()
    start = time.process_time()
    for body in bodies:
        items = decode(body)[0]
        if convert:
            for item in items:
                if fast.try_convert(item, interner) is None:
                    raise SystemExit("an item left the fast path")
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=PER)
    parser.add_argument("--page", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--shape",
        choices=("pending", "running"),
        default="pending",
        help="pending: server_cost's pods "
        "(bound, never run: kwok is stopped); running: with the status a kubelet reports",
    )
    args = parser.parse_args(argv)
    pods = [server_pod(i) for i in range(args.pods)]
    if args.shape == "running":
        pods = [running(pod, i) for i, pod in enumerate(pods)]
    json_bodies = pages(pods, args.page, json_page)
    proto_bodies = pages(pods, args.page, proto_page)
    scale = PER / args.pods
    json_mb, proto_mb = sum(map(len, json_bodies)) / 1e6, sum(map(len, proto_bodies)) / 1e6
    sizes = f"JSON {json_mb:.1f} MB, protobuf {proto_mb:.1f} MB"
    print(f"{args.pods} {args.shape} pods in pages of {args.page}: {sizes}")
    print(f"CPU seconds per {PER:,} pods (process time, best of {args.repeat}):")
    ways = {
        "json (msgspec)": FAST_KINDS["Pod"].decode_page,
        "protobuf (protoparse)": PROTO_KINDS["Pod"].decode_page,
    }
    bodies = {"json (msgspec)": json_bodies, "protobuf (protoparse)": proto_bodies}
    totals = []
    for name, decode in ways.items():
        only = min(run(decode, bodies[name], False) for _ in range(args.repeat)) * scale
        total = min(run(decode, bodies[name], True) for _ in range(args.repeat)) * scale
        print(f"  {name:22s} decode {only:6.3f} s   decode+convert {total:6.3f} s")
        totals.append(total)
    ratio = totals[1] / totals[0]
    print(
        summary_line(
            {"json_cpu": f"{totals[0]:.3f}s", "protobuf_cpu": f"{totals[1]:.3f}s", "ratio": f"{ratio:.2f}x"}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
