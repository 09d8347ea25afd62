"""Operator and autoscaler marks on a real control plane, with the shipped RBAC (namespaces: list, watch).

A pause annotation on the namespace holds every eviction while the hot node is confirmed cycle after
cycle; removing it with ``kubectl annotate ...-`` lets the same process evict at once, with no config
change and no restart. A hot node carrying the cluster autoscaler's ``ToBeDeletedByClusterAutoscaler``
taint is skipped: nothing is evicted from it, however long it stays hot. An opt-out annotation added to a
pod while its eviction waits out the server's ``Retry-After`` stops that eviction: the pod is read again
right before the request that follows the wait.
"""

from __future__ import annotations

import socket
import ssl
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.config.migration import PAUSE_ANNOTATION
from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from descheduler.planner import reasons
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import HotCluster, hot_cluster_serving_usage, install_manifests, loop_config
from tests.support import service
from tests.support.service import NAMESPACE, Descheduler

pytestmark = pytest.mark.controlplane

CYCLES_HELD = 4
"""Cycles after the first paused skip in which nothing may be evicted (the node is confirmed hot in 2)."""


@pytest.fixture(scope="module")
def shipped_identity(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The descheduler's ServiceAccount with exactly the shipped RBAC."""
    docs = install_manifests(control_plane)
    (account,) = [d["metadata"] for d in docs if d["kind"] == "ServiceAccount"]
    path = tmp_path_factory.mktemp("marks-identity") / "kubeconfig"
    return control_plane.token_kubeconfig(account["namespace"], account["name"], path)


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[KubeApi]:
    client = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    yield client
    client.close()


def skipped(proc: Descheduler, code: str) -> float:
    samples = service.metric_samples(proc.get("/metrics")[1], "descheduler_pods_skipped_total")
    return sum(value for labels, value in samples if labels.get("reason") == code)


def node_class(proc: Descheduler, node: str) -> str:
    samples = service.metric_samples(proc.get("/metrics")[1], "descheduler_node_classification")
    return next((labels["class"] for labels, value in samples if labels["node"] == node and value == 1), "")


def cycles(proc: Descheduler) -> int:
    return len(proc.events("cycle_summary"))


@dataclass
class Setting:
    """What each test here runs on: the control plane, the shipped identity, an admin client, the usage
    backend, the test's namespace and a working folder."""

    plane: ControlPlane
    identity: Path
    api: KubeApi
    backend: service.UsageBackend
    namespace: str
    workdir: Path

    @contextmanager
    def marked(
        self, mark: Callable[[HotCluster], object], **options: Any
    ) -> Iterator[tuple[HotCluster, Descheduler]]:
        """The hot cluster with its usage served, ``mark`` applied to it, then ``descheduler run`` (live)
        on it as the shipped identity; ``options`` go to ``loop_config`` (``interval``...)."""
        with hot_cluster_serving_usage(self.plane, self.api, self.namespace, self.backend) as cluster:
            mark(cluster)
            ports = service.Ports.free()
            doc = loop_config(self.backend.url, ports, self.namespace, dry_run=False, **options)
            config = service.write_config(self.workdir / "config.yaml", doc)
            with service.run_descheduler(config, self.identity, ports, self.workdir) as proc:
                yield cluster, proc


@pytest.fixture
def setting(
    control_plane: ControlPlane,
    shipped_identity: Path,
    api: KubeApi,
    usage_backend: service.UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> Setting:
    return Setting(control_plane, shipped_identity, api, usage_backend, namespace, tmp_path)


def test_a_namespace_pause_holds_evictions_until_it_is_removed_without_a_restart(setting: Setting) -> None:
    plane, namespace = setting.plane, setting.namespace
    pause = ("annotate", "namespace", namespace, f"{PAUSE_ANNOTATION}=INC-1 hold")
    with setting.marked(lambda _: plane.kubectl(*pause)) as (cluster, proc):
        proc.wait_ready(timeout=30)
        proc.wait_for(lambda: skipped(proc, reasons.PAUSED) > 0, timeout=60, what="a paused skip")
        held_from = cycles(proc)
        proc.wait_for(lambda: cycles(proc) >= held_from + CYCLES_HELD, timeout=30, what="more cycles")
        evicted_while_paused = list(proc.events("eviction"))
        class_while_paused = node_class(proc, cluster.hot)
        plane.kubectl("annotate", "namespace", namespace, f"{PAUSE_ANNOTATION}-")
        lifted_at = cycles(proc)
        proc.wait_for(lambda: proc.events("eviction"), timeout=60, what="an eviction once resumed")
        first = proc.events("eviction")[0]
        proc.terminate()
    assert evicted_while_paused == []
    assert class_while_paused == "hotspot"
    assert first["node"] == cluster.hot
    assert first["cycle"] >= lifted_at


def test_a_hot_node_the_cluster_autoscaler_is_deleting_is_left_alone(setting: Setting) -> None:
    taint = "ToBeDeletedByClusterAutoscaler=1764000000:NoSchedule"
    tainted = setting.marked(lambda cluster: setting.plane.kubectl("taint", "nodes", cluster.hot, taint))
    with tainted as (cluster, proc):
        proc.wait_ready(timeout=30)
        proc.wait_for(lambda: cycles(proc) >= 2 + CYCLES_HELD, timeout=60, what="cycles")
        hot_class = node_class(proc, cluster.hot)
        evicted = list(proc.events("eviction"))
        proc.terminate()
    assert hot_class == "skipped"
    assert evicted == []


REJECTING = "lad-test-reject-evictions"
"""The API Priority and Fairness objects that make the server answer the descheduler's evictions in the
test's namespace with 429 and ``Retry-After`` (its flow control's own answer, not a budget's refusal)."""


def rejecting_evictions(namespace: str) -> list[dict[str, Any]]:
    """The descheduler's ``pods/eviction`` creations in ``namespace`` go to a level that rejects."""
    subject = {"kind": "Group", "group": {"name": f"system:serviceaccounts:{NAMESPACE}"}}
    rule = {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/eviction"], "namespaces": [namespace]}
    return objects.rejecting_flow(REJECTING, {"subjects": [subject], "resourceRules": [rule]})


@contextmanager
def seat_held(kubeconfig: Path, namespace: str) -> Iterator[Callable[[], None]]:
    """Holds the rejecting priority level's one seat (a level with no concurrency still runs one request
    when idle): an eviction request of the descheduler's identity whose body is left unsent, so every
    other eviction the level gets meanwhile is answered 429 with Retry-After. Released by the callable
    it yields, or on exit."""
    doc = yaml.safe_load(kubeconfig.read_text())
    server = urllib.parse.urlsplit(doc["clusters"][0]["cluster"]["server"])
    context = ssl.create_default_context(cafile=doc["clusters"][0]["cluster"]["certificate-authority"])
    token = doc["users"][0]["user"]["token"]
    raw = socket.create_connection((server.hostname, server.port), timeout=30)
    conn = context.wrap_socket(raw, server_hostname=server.hostname)
    head = (
        f"POST /api/v1/namespaces/{namespace}/pods/seat-holder/eviction HTTP/1.1\r\n"
        f"Host: {server.netloc}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"
    )
    conn.sendall(head.encode())
    try:
        yield conn.close
    finally:
        conn.close()


def test_an_opt_out_added_during_a_retry_after_wait_stops_the_eviction(setting: Setting) -> None:
    """The server's flow control answers the eviction 429 with Retry-After; while the evictor waits, the
    pod gets ``karpenter.sh/do-not-disrupt`` and the server stops rejecting: the request after the wait is
    not sent and the pod keeps running (before, it was evicted on the read made before the wait)."""
    plane, namespace = setting.plane, setting.namespace
    plane.apply(rejecting_evictions(namespace))
    try:
        with (
            seat_held(setting.identity, namespace) as release,
            setting.marked(lambda _: None, interval="15s", consecutive_abnormalities=1) as (_, proc),
        ):
            proc.wait_ready(timeout=30)
            waiting = proc.wait_for(
                lambda: proc.events("eviction_throttled_retrying"), timeout=60, what="a Retry-After wait"
            )[0]
            pod = str(waiting["pod"]).split("/", 1)[1]
            uid = plane.kubectl("get", "pod", pod, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
            plane.kubectl("annotate", "pod", pod, "-n", namespace, "karpenter.sh/do-not-disrupt=true")
            release()
            outcome = proc.wait_for(
                lambda: [e for e in proc.events("eviction") if e["pod"] == waiting["pod"]],
                timeout=60,
                what="the outcome of the eviction that waited",
            )[0]
            evicted = [e["pod"] for e in proc.events("eviction") if e["result"] == "evicted"]
            proc.terminate()
    finally:
        plane.kubectl("delete", "flowschema", REJECTING, "--ignore-not-found")
        plane.kubectl("delete", "prioritylevelconfiguration", REJECTING, "--ignore-not-found")
    assert outcome["result"] == "not-verified", outcome
    assert "karpenter.sh/do-not-disrupt" in outcome["message"]
    still = plane.kubectl("get", "pod", pod, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    assert still == uid, "the pod opted out during the wait is still running"
    assert waiting["pod"] not in evicted
