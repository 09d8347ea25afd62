"""The real kubectl binary against the test API server (over TLS, with a bearer token): proof of fidelity.

kubectl exercises discovery, server-side printing, field selectors, strategic-merge patches, the Eviction
subresource with PodDisruptionBudgets and the metrics API, all in the ways the real server answers them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from descheduler.cluster.parse import parse_pod
from descheduler.kube.connection import connect
from descheduler.kube.events import EventRecorder
from descheduler.kube.evict import Evictor
from tests.apiserver import ApiServer, objects

KUBECTL = "/usr/bin/kubectl"
pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _kubectl_is_installed() -> None:
    """The real kubectl is on every machine of ours: its absence is a broken machine, not a skip."""
    assert os.access(KUBECTL, os.X_OK), f"kubectl is not installed at {KUBECTL}: these tests need it"


def kubectl(server: ApiServer, home: Path, *args: str) -> str:
    assert server.kubeconfig_path is not None
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "KUBECONFIG": str(server.kubeconfig_path)}
    done = subprocess.run(
        [KUBECTL, *args, "--cache-dir", str(home / "cache"), "--request-timeout=20s"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()[1:]]


@pytest.fixture
def cluster(tls_apiserver: ApiServer) -> ApiServer:
    server = tls_apiserver
    server.create(objects.namespace("default"))
    server.create(objects.namespace("kube-system"))
    server.create(objects.node("node-1", labels={"node-role.kubernetes.io/worker": ""}))
    server.create(objects.node("node-2", unschedulable=True))
    server.create(objects.pod("web-1", node="node-1"))
    server.create(objects.pod("web-2", node="node-2"))
    server.create(objects.pod("coredns", namespace="kube-system", node="node-1", labels={"k8s-app": "dns"}))
    server.create(objects.pdb("web-pdb", disruptions_allowed=1))
    return server


def test_kubectl_get_nodes_prints_status_roles_and_version(cluster: ApiServer, tmp_path: Path) -> None:
    table = rows(kubectl(cluster, tmp_path, "get", "nodes"))
    assert [r[:3] for r in table] == [
        ["node-1", "Ready", "worker"],
        ["node-2", "Ready,SchedulingDisabled", "<none>"],
    ]
    assert all(r[-1] == "v1.32.4" for r in table)
    # kubectl sends its token only over TLS: the server saw it
    assert any(r.authorization == "Bearer test-token" for r in cluster.requests if r.resource == "nodes")


def test_kubectl_get_pods_in_all_namespaces(cluster: ApiServer, tmp_path: Path) -> None:
    table = rows(kubectl(cluster, tmp_path, "get", "pods", "-A"))
    assert [(r[0], r[1], r[2], r[3]) for r in table] == [
        ("default", "web-1", "1/1", "Running"),
        ("default", "web-2", "1/1", "Running"),
        ("kube-system", "coredns", "1/1", "Running"),
    ]
    on_node = json.loads(
        kubectl(
            cluster, tmp_path, "get", "pods", "-A", "-o", "json", "--field-selector", "spec.nodeName=node-1"
        )
    )
    assert sorted(p["metadata"]["name"] for p in on_node["items"]) == ["coredns", "web-1"]
    assert (
        cluster.requests_for(verb="list", resource="pods")[-1].query["fieldSelector"]
        == "spec.nodeName=node-1"
    )


def test_kubectl_get_events_shows_the_descheduled_event_after_an_eviction(
    cluster: ApiServer, tmp_path: Path
) -> None:
    assert cluster.kubeconfig_path is not None
    api = connect(str(cluster.kubeconfig_path), qps=100, burst=100)
    recorder = EventRecorder(api)
    evictor = Evictor(api, evict_qps=0, evict_burst=1, dry_run=False, events=recorder, delete_options=None)
    pod = parse_pod(cluster.get("pods", "default", "web-1") or {})
    outcome = evictor.evict(pod, "node-1", "node utilization above 80%", time.monotonic() + 10)
    assert outcome.evicted, outcome.message
    assert recorder.flush(5)
    recorder.close()
    api.close()
    table = rows(kubectl(cluster, tmp_path, "get", "events"))
    assert len(table) == 1
    _, kind, reason, obj, *message = table[0]
    assert (kind, reason, obj) == ("Normal", "Descheduled", "pod/web-1")
    assert " ".join(message) == 'Pod evicted from node "node-1" by the reason "node utilization above 80%"'
    listed = json.loads(kubectl(cluster, tmp_path, "get", "events", "-o", "json"))["items"][0]
    assert listed["reportingComponent"] == "load-aware-descheduler"
    assert listed["involvedObject"]["uid"] == pod.uid
    assert [r[0] for r in rows(kubectl(cluster, tmp_path, "get", "pods"))] == ["web-2"]


def test_kubectl_drain_evicts_through_the_budget_and_waits_for_the_pods(
    cluster: ApiServer, tmp_path: Path
) -> None:
    cluster.patch(
        "poddisruptionbudgets", "default", "web-pdb", {"status": {"disruptionsAllowed": 2}}, group="policy"
    )
    cluster.create(objects.pod("web-3", node="node-1"))
    out = kubectl(
        cluster,
        tmp_path,
        "drain",
        "node-1",
        "--ignore-daemonsets",
        "--timeout=20s",
        "--pod-selector",
        "app=web",
    )
    assert "node/node-1 drained" in out
    assert sorted(p["metadata"]["name"] for p in cluster.list("pods", "default")) == ["web-2"]
    node = cluster.get("nodes", "", "node-1")
    assert node is not None and node["spec"]["unschedulable"] is True
    budget = cluster.get("poddisruptionbudgets", "default", "web-pdb")
    assert budget is not None and budget["status"]["disruptionsAllowed"] == 0


def test_kubectl_top_reads_node_metrics(cluster: ApiServer, tmp_path: Path) -> None:
    cluster.set_node_metrics("node-1", {"cpu": "1500m", "memory": "3Gi"})
    cluster.set_node_metrics("node-2", {"cpu": "250m", "memory": "1Gi"})
    table = rows(kubectl(cluster, tmp_path, "top", "nodes"))
    assert [(r[0], r[1], r[3]) for r in table] == [
        ("node-1", "1500m", "3072Mi"),
        ("node-2", "250m", "1024Mi"),
    ]
