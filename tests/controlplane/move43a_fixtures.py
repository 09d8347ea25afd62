"""Fixtures of the tests moved off the stand-in API server (issue 43): identities whose requests the real
API server records in its audit log, and workloads whose pods sit on the nodes a test names.

The stand-in recorded every request; the real server's only per-client record is its audit log. The
session control plane logs (at the ``Request`` level: URI, user agent, status and request body) the
requests of ServiceAccounts in ``AUDITED_NAMESPACE`` and nothing else, so the other tests pay nothing
for it. A test that needs to know what a client sent runs that client as an :class:`AuditedIdentity`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.connection import connect
from descheduler.kube.errors import ApiStatusError
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane, write_kubeconfig

AUDITED_NAMESPACE = "descheduler-audited"


_SEQUENCE = itertools.count()


@dataclass(frozen=True)
class Request:
    """One request as the real server's audit log has it (its ``ResponseComplete`` stage)."""

    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    uri: str
    user_agent: str
    body: Any

    @property
    def query(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.uri).query))

    @property
    def is_eviction(self) -> bool:
        return self.verb == "create" and self.resource == "pods" and self.subresource == "eviction"

    @property
    def dry_run(self) -> bool:
        options = (self.body or {}).get("deleteOptions") or {} if isinstance(self.body, dict) else {}
        return self.query.get("dryRun") == "All" or options.get("dryRun") == ["All"]


def _request(raw: dict[str, Any]) -> Request:
    ref = raw.get("objectRef") or {}
    return Request(
        verb=raw.get("verb", ""),
        resource=ref.get("resource", ""),
        subresource=ref.get("subresource", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        code=int((raw.get("responseStatus") or {}).get("code", 0)),
        uri=raw.get("requestURI", ""),
        user_agent=raw.get("userAgent", ""),
        body=raw.get("requestObject"),
    )


@dataclass
class AuditedIdentity:
    """A ServiceAccount bound to cluster-admin whose every request the server's audit log keeps."""

    plane: ControlPlane
    account: str
    kubeconfig: Path
    token: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{AUDITED_NAMESPACE}:{self.account}"

    def requests(self) -> list[Request]:
        """Every completed request of this identity so far, in order; call ``flush`` first to be sure
        the server has written the latest."""
        assert self.plane.audit_log is not None, "the control plane was started without an audit log"
        out: list[Request] = []
        for line in self.plane.audit_log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                raw = json.loads(line)
                if raw.get("stage") == "ResponseComplete" and raw["user"]["username"] == self.username:
                    out.append(_request(raw))
        return out

    def flush(self, timeout: float = 10.0) -> list[Request]:
        """Send a marker request and wait until the log holds it: every earlier request is in the log
        then. Returns the requests before the marker."""
        marker = f"audit-marker-{next(_SEQUENCE)}-{time.monotonic_ns()}"
        api = connect(str(self.kubeconfig), qps=100, burst=100)
        try:
            with contextlib.suppress(ApiStatusError):
                api.get(f"/api/v1/namespaces/{AUDITED_NAMESPACE}/configmaps/{marker}")
        finally:
            api.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.requests()
            names = [r.name for r in seen]
            if marker in names:
                return [r for r in seen[: names.index(marker)] if not r.name.startswith("audit-marker-")]
            time.sleep(0.1)
        raise AssertionError(f"the audit log did not record {marker} within {timeout}s")

    def evictions(self) -> list[Request]:
        return [r for r in self.flush() if r.is_eviction]


@contextlib.contextmanager
def audited_identities(plane: ControlPlane, folder: Path) -> Iterator[Callable[[str], AuditedIdentity]]:
    """Makes audited identities (``make("replica-a")``), kubeconfigs in ``folder``; deleted at the end."""
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AUDITED_NAMESPACE}}])
    made: list[str] = []

    def make(name: str) -> AuditedIdentity:
        account = f"{name}-{next(_SEQUENCE)}-{time.monotonic_ns() % 100000}"
        plane.apply(objects.cluster_admin_account(account, AUDITED_NAMESPACE))
        made.append(account)
        token = plane.kubectl("create", "token", account, "-n", AUDITED_NAMESPACE, "--duration=2h").stdout
        kubeconfig = write_kubeconfig(
            folder / f"{account}.kubeconfig", plane.server, plane.pki.ca_crt, {"token": token.strip()},
            name=account,
        )  # fmt: skip
        return AuditedIdentity(plane, account, kubeconfig, token.strip())

    try:
        yield make
    finally:
        for account in made:
            plane.kubectl("delete", "clusterrolebinding", f"bench-{account}", "--ignore-not-found")
            plane.kubectl("delete", "serviceaccount", account, "-n", AUDITED_NAMESPACE, "--ignore-not-found")


@pytest.fixture
def audited(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Callable[[str], AuditedIdentity]]:
    """Makes audited identities for one test (``audited("replica-a")``)."""
    with audited_identities(control_plane, tmp_path) as make:
        yield make


# --- workloads whose pods sit where the test says -------------------------------------------------------


def placed_replicaset(
    plane: ControlPlane, namespace: str, app: str, pods: Mapping[str, str], *, cpu: str = "100m"
) -> None:
    """A ReplicaSet ``app`` owning one running pod per entry of ``pods`` (pod name -> node).

    The pods are made bound to their nodes first, then the ReplicaSet, whose controller adopts them (the
    real ownerReference, uid included): so each pod has the name and node the test chose, and an evicted
    one is replaced by the controller and placed by kube-scheduler, as in production."""
    bare = [objects.bare_pod(name, namespace, node, cpu=cpu) for name, node in pods.items()]
    for pod in bare:
        pod["metadata"]["labels"] = {"app": app}
    plane.apply(bare, namespace=namespace)
    template = objects.pod_template(app, namespace, cpu=cpu)
    plane.apply(
        [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": app, "labels": {"app": app}},
                "spec": {
                    "replicas": len(pods),
                    "selector": {"matchLabels": {"app": app}},
                    "template": template,
                },
            }
        ],
        namespace=namespace,
    )

    def adopted_and_running() -> bool:
        found = {
            p["metadata"]["name"]: p
            for p in plane.get_json("pods", "-n", namespace, "-l", f"app={app}")["items"]
        }
        return set(found) == set(pods) and all(
            p.get("status", {}).get("phase") == "Running"
            and any(o.get("controller") for o in p["metadata"].get("ownerReferences", []))
            for p in found.values()
        )

    plane.wait_for(f"the pods of {app} adopted and Running", adopted_and_running, timeout_s=60)


def pod_uids(plane: ControlPlane, namespace: str) -> dict[str, str]:
    """Name -> uid of the namespace's pods that are not being deleted."""
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in plane.get_json("pods", "-n", namespace)["items"]
        if not p["metadata"].get("deletionTimestamp")
    }


def add_node_objects(plane: ControlPlane, group: str, nodes: list[dict[str, Any]]) -> list[str]:
    """Create ``nodes`` (built with ``objects.node`` and then given labels or annotations of their own) and
    wait until kwok reports each Ready. Applied once: ``ControlPlane.add_nodes`` applies the plain builder's
    nodes, which would take the extra fields off again."""
    plane.apply(nodes)
    names = {n["metadata"]["name"] for n in nodes}

    def ready() -> bool:
        items = plane.get_json("nodes", "-l", f"{objects.GROUP_LABEL}={group}")["items"]
        up = {
            i["metadata"]["name"]
            for i in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in i.get("status", {}).get("conditions", [])
            )
        }
        return up >= names

    plane.wait_for(f"nodes {sorted(names)} Ready", ready, timeout_s=60)
    return sorted(names)


def daemon_pods(plane: ControlPlane, namespace: str, name: str, nodes: list[str]) -> None:
    """A DaemonSet's pods, one per node: the DaemonSet object is real (so the garbage collector keeps its
    pods), its controller is not run here, so the pods are made bound to the nodes and owned by hand."""
    template = objects.pod_template(name, namespace, cpu="50m")
    plane.apply(
        [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"app": name}}, "template": template},
            }
        ],
        namespace=namespace,
    )
    uid = plane.get_json("daemonset", name, "-n", namespace)["metadata"]["uid"]
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "uid": uid, "controller": True}
    pods = []
    for node in nodes:
        pod = objects.bare_pod(f"{name}-{node}", namespace, node, cpu="50m")
        pod["metadata"]["labels"] = {"app": name}
        pod["metadata"]["ownerReferences"] = [owner]
        pods.append(pod)
    plane.apply(pods, namespace=namespace)
    plane.wait_for(
        f"the pods of {name} Running", lambda: len(plane.running_pods(namespace, f"app={name}")) == len(nodes)
    )


# --- metrics.k8s.io through the real aggregator ----------------------------------------------------------

METRICS_GROUP_VERSION = "metrics.k8s.io/v1beta1"
_METRICS_RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": METRICS_GROUP_VERSION,
    "resources": [
        {
            "name": "nodes",
            "singularName": "",
            "namespaced": False,
            "kind": "NodeMetrics",
            "verbs": ["get", "list"],
        },
        {
            "name": "pods",
            "singularName": "",
            "namespaced": True,
            "kind": "PodMetrics",
            "verbs": ["get", "list"],
        },
    ],
}


@dataclass
class MetricsBackend:
    """What the aggregated metrics backend serves (items as metrics-server writes them) and the query
    strings the API server forwarded to it."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    forwarded: list[str]

    def answer(self, path: str, query: dict[str, str]) -> dict[str, Any] | None:
        base = f"/apis/{METRICS_GROUP_VERSION}"
        wanted = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if "=" in kv)

        def listed(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
            labels = [(i, i["metadata"].get("labels") or {}) for i in items]
            kept = [i for i, have in labels if all(have.get(k) == v for k, v in wanted.items())]
            return {"kind": f"{kind}List", "apiVersion": METRICS_GROUP_VERSION, "metadata": {}, "items": kept}

        if path == base:
            return _METRICS_RESOURCES
        if path == f"{base}/nodes":
            return listed("NodeMetrics", self.nodes)
        if path == f"{base}/pods":
            return listed("PodMetrics", self.pods)
        parts = path.removeprefix(f"{base}/namespaces/").split("/")
        if path.startswith(f"{base}/namespaces/") and len(parts) == 2 and parts[1] == "pods":
            return listed("PodMetrics", [p for p in self.pods if p["metadata"]["namespace"] == parts[0]])
        return None


@contextlib.contextmanager
def aggregated_metrics(plane: ControlPlane, namespace: str, backend: MetricsBackend) -> Iterator[None]:
    """``metrics.k8s.io/v1beta1`` registered with the real API server (an APIService whose ExternalName
    Service points at 127.0.0.1) and served by ``backend`` over HTTPS: requests to it go through the real
    server's authentication, authorization and aggregation proxy. Unregistered at the end, before the
    backend stops (an unavailable aggregated API would stall namespace deletion for every other test)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(plane.pki.server_crt), str(plane.pki.server_key))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path.startswith(f"/apis/{METRICS_GROUP_VERSION}/"):
                backend.forwarded.append(url.path + ("?" + url.query if url.query else ""))
            body = backend.answer(url.path, query)
            data = json.dumps(body if body is not None else {"kind": "Status", "code": 404}).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    name = "v1beta1.metrics.k8s.io"
    try:
        plane.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "metrics", "namespace": namespace},
                    "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
                },
                {
                    "apiVersion": "apiregistration.k8s.io/v1",
                    "kind": "APIService",
                    "metadata": {"name": name},
                    "spec": {
                        "group": "metrics.k8s.io",
                        "version": "v1beta1",
                        "service": {
                            "name": "metrics",
                            "namespace": namespace,
                            "port": server.server_address[1],
                        },
                        "insecureSkipTLSVerify": True,
                        "groupPriorityMinimum": 100,
                        "versionPriority": 100,
                    },
                },
            ]
        )
        plane.wait_for(
            "the metrics APIService Available",
            lambda: any(
                c["type"] == "Available" and c["status"] == "True"
                for c in plane.get_json("apiservice", name).get("status", {}).get("conditions", [])
            ),
            timeout_s=60,
        )
        yield
    finally:
        plane.kubectl("delete", "apiservice", name, "--ignore-not-found")
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
