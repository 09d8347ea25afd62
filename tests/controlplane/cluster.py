"""Start and stop a real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok (fake kubelets for every node).

Everything runs as child processes with free ports under one folder (certificates, data, logs,
kubeconfigs); ``ControlPlane.stop()`` stops them by PID. Components log to ``<root>/logs/<name>.log``
so a failing test can show what the server said.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.controlplane import build, objects
from tests.controlplane.certs import Pki, make_pki
from tests.support.ports import free_port

SERVICE_CIDR = "10.0.0.0/24"
# The controllers the descheduler relies on; node-lifecycle stays off (kwok owns node status).
CONTROLLERS = (
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "disruption-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    # Makes a pod's ResourceClaims from its ResourceClaimTemplates (DRA); kube-scheduler allocates them.
    "resourceclaim-controller",
)

# DRA's alpha features, for tests/controlplane/test_dra_allocator_agreement.py: partitionable devices
# (shared counters), device taints, and distinctAttribute (part of consumable capacity). Off, the API
# server drops the fields and the scheduler ignores them.
DRA_GATES = "--feature-gates=DRAPartitionableDevices=true,DRADeviceTaints=true,DRAConsumableCapacity=true"


class ControlPlaneError(RuntimeError):
    """A component did not start or become healthy; the message names it and quotes its log."""


@dataclass
class Component:
    """One child process, its log file and how to tell it is healthy."""

    name: str
    argv: list[str]
    log: Path
    health_url: str
    process: subprocess.Popen[bytes] | None = None
    tls: ssl.SSLContext | None = None
    """How its health URL is reached (set when launched; a restart waits on it again)."""

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the process group: a crash, nothing flushed or released."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


def _get(url: str, context: ssl.SSLContext | None, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def wait_healthy(component: Component, context: ssl.SSLContext | None, deadline_s: float) -> float:
    """Seconds until ``component`` answered 200 on its health URL; raises if it died or timed out."""
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < deadline_s:
        assert component.process is not None
        if component.process.poll() is not None:
            raise ControlPlaneError(
                f"{component.name} exited with {component.process.returncode}:\n{component.log_tail()}"
            )
        try:
            status, body = _get(component.health_url, context)
            if status == 200:
                return time.monotonic() - started
            last = f"HTTP {status}: {body[:300]!r}"
        except (OSError, ssl.SSLError) as exc:
            last = str(exc)
        time.sleep(0.2)
    raise ControlPlaneError(
        f"{component.name} not healthy after {deadline_s:.0f}s ({last}):\n{component.log_tail()}"
    )


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str], name: str = "test") -> Path:
    """A kubeconfig for ``server`` with one user entry (client certificate or token)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(json.dumps(config, indent=2))
    return path


@dataclass
class ControlPlane:
    """A running control plane; ``kubeconfig`` is the admin's (``system:masters``)."""

    root: Path
    pki: Pki
    server: str
    kubeconfig: Path
    kubectl_path: Path
    """kubectl built from the same Kubernetes release as the server (no version skew)."""
    components: list[Component] = field(default_factory=list)
    startup_seconds: dict[str, float] = field(default_factory=dict)
    audit_log: Path | None = None
    """The API server's audit log (JSON lines), when started with an audit policy."""

    # -- life cycle ---------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        root: Path,
        binaries: dict[str, Path] | None = None,
        audit_policy: dict[str, Any] | None = None,
        profiling: bool = False,
    ) -> ControlPlane:
        """Build (or reuse) the binaries and start every component, waiting on each health endpoint.

        ``audit_policy`` (an ``audit.k8s.io/v1`` Policy) turns on the API server's audit log, written as
        JSON lines to ``<root>/logs/audit.log``: the only per-client record of requests the server keeps
        (``apiserver_request_total`` has no user or user-agent label). ``profiling`` serves the API
        server's ``/debug/pprof`` (to the admin; benchmarks profile it).
        """
        bins = binaries or build.ensure_all()
        root.mkdir(parents=True, exist_ok=True)
        pki = make_pki(root / "pki")
        logs = root / "logs"
        etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
        server = f"https://127.0.0.1:{api_port}"
        admin = write_kubeconfig(
            root / "admin.kubeconfig", server, pki.ca_crt,
            {"client-certificate": str(pki.admin_crt), "client-key": str(pki.admin_key)},
        )  # fmt: skip
        plane = cls(root=root, pki=pki, server=server, kubeconfig=admin, kubectl_path=bins["kubectl"])
        audit_flags: list[str] = []
        if audit_policy is not None:
            policy_path = root / "audit-policy.json"
            policy_path.write_text(json.dumps(audit_policy))
            plane.audit_log = logs / "audit.log"
            audit_flags = [
                f"--audit-policy-file={policy_path}", f"--audit-log-path={plane.audit_log}",
                "--audit-log-format=json", "--audit-log-maxsize=0",
            ]  # fmt: skip
        tls = ssl.create_default_context(cafile=str(pki.ca_crt))
        tls.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        try:
            etcd = Component(
                "etcd",
                [
                    str(bins["etcd"]), "--name=default", f"--data-dir={root / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                    f"--initial-cluster=default=http://127.0.0.1:{etcd_peer}",
                    "--unsafe-no-fsync", "--quota-backend-bytes=4294967296", "--log-level=warn",
                ],
                logs / "etcd.log",
                f"http://127.0.0.1:{etcd_port}/health",
            )  # fmt: skip
            plane._launch(etcd, None, 60)
            apiserver = Component(
                "kube-apiserver",
                [
                    str(bins["kube-apiserver"]),
                    f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
                    "--endpoint-reconciler-type=none",
                    f"--tls-cert-file={pki.server_crt}", f"--tls-private-key-file={pki.server_key}",
                    f"--client-ca-file={pki.ca_crt}",
                    f"--requestheader-client-ca-file={pki.ca_crt}",
                    "--requestheader-allowed-names=front-proxy-client",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--proxy-client-cert-file={pki.proxy_crt}", f"--proxy-client-key-file={pki.proxy_key}",
                    f"--service-account-key-file={pki.sa_pub}",
                    f"--service-account-signing-key-file={pki.sa_key}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    "--api-audiences=https://kubernetes.default.svc.cluster.local",
                    "--authorization-mode=RBAC", f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--allow-privileged=true", f"--profiling={str(profiling).lower()}",
                    f"--cert-dir={root / 'apiserver-certs'}",
                    "--enable-priority-and-fairness=true", "--v=1",
                    # The node-lifecycle controller that would lift the not-ready taint is off (kwok owns
                    # node status), so the plugin that puts it on new nodes is off too.
                    "--disable-admission-plugins=TaintNodesByCondition", DRA_GATES,
                    *audit_flags,
                ],
                logs / "kube-apiserver.log",
                f"{server}/readyz",
            )  # fmt: skip
            plane._launch(apiserver, tls, 120)
            manager = Component(
                "kube-controller-manager",
                [
                    str(bins["kube-controller-manager"]), f"--kubeconfig={admin}",
                    f"--authentication-kubeconfig={admin}", f"--authorization-kubeconfig={admin}",
                    "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
                    f"--controllers={','.join(CONTROLLERS)}", f"--root-ca-file={pki.ca_crt}",
                    f"--service-account-private-key-file={pki.sa_key}",
                    "--use-service-account-credentials=false",
                    f"--cert-dir={root / 'kcm-certs'}", "--v=1",
                ],
                logs / "kube-controller-manager.log",
                "",
            )  # fmt: skip
            manager.health_url = f"https://127.0.0.1:{_flag_port(manager.argv)}/healthz"
            plane._launch(manager, insecure, 60)
            scheduler = Component(
                "kube-scheduler",
                [
                    str(bins["kube-scheduler"]), f"--kubeconfig={admin}",
                    f"--authentication-kubeconfig={admin}", f"--authorization-kubeconfig={admin}",
                    "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
                    f"--cert-dir={root / 'scheduler-certs'}", "--v=1", DRA_GATES,
                ],
                logs / "kube-scheduler.log",
                "",
            )  # fmt: skip
            scheduler.health_url = f"https://127.0.0.1:{_flag_port(scheduler.argv)}/healthz"
            plane._launch(scheduler, insecure, 60)
            kwok_port = free_port()
            kwok = Component(
                "kwok",
                [
                    str(bins["kwok"]), f"--kubeconfig={admin}", f"--config={bins['stages.yaml']}",
                    "--manage-all-nodes=true",
                    f"--server-address=127.0.0.1:{kwok_port}", "--cidr=10.244.0.0/16", "--node-ip=10.1.0.1",
                ],
                logs / "kwok.log",
                f"http://127.0.0.1:{kwok_port}/healthz",
            )  # fmt: skip
            plane._launch(kwok, None, 60)
            plane._wait_default_service_account("default", 60)
        except BaseException:
            plane.stop()
            raise
        return plane

    def _launch(self, component: Component, context: ssl.SSLContext | None, deadline_s: float) -> None:
        self.components.append(component)
        component.tls = context
        component.start()
        self.startup_seconds[component.name] = wait_healthy(component, context, deadline_s)

    def component(self, name: str) -> Component:
        (found,) = [c for c in self.components if c.name == name]
        return found

    def kill(self, name: str) -> None:
        """SIGKILL one component (``etcd``, ``kube-apiserver``, ``kwok``, ...): a crash, as in production."""
        self.component(name).kill()

    def restart(self, name: str, deadline_s: float = 120.0) -> float:
        """Start a stopped or killed component again with the same flags, ports and data (etcd keeps its
        data directory); seconds until it is healthy again."""
        component = self.component(name)
        component.stop()
        component.start()
        return wait_healthy(component, component.tls, deadline_s)

    def stop(self) -> None:
        """Stop every component, newest first (kwok and controllers before the API server and etcd)."""
        for component in reversed(self.components):
            component.stop()

    def logs(self, lines: int = 15) -> str:
        return "\n\n".join(f"== {c.name} ({c.log}) ==\n{c.log_tail(lines)}" for c in self.components)

    def rss_mib(self) -> dict[str, float]:
        """Resident memory of each component now, from /proc."""
        out: dict[str, float] = {}
        for c in self.components:
            if c.process is None or c.process.poll() is not None:
                continue
            for line in Path(f"/proc/{c.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out[c.name] = int(line.split()[1]) / 1024
        return out

    def _wait_default_service_account(self, namespace: str, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0:
                return
            time.sleep(0.3)
        raise ControlPlaneError(
            f"no 'default' ServiceAccount in {namespace} after {deadline_s}s:\n{self.logs()}"
        )

    # -- helpers for tests ---------------------------------------------------------------------------

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this control plane (admin unless ``kubeconfig`` says otherwise)."""
        proc = subprocess.run(
            [str(self.kubectl_path), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, objects: Sequence[dict[str, Any]] | str, namespace: str | None = None) -> None:
        """``kubectl apply`` objects given as dicts (sent as a JSON List) or as YAML/JSON text."""
        text = (
            objects
            if isinstance(objects, str)
            else json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        )
        ns = [f"--namespace={namespace}"] if namespace else []
        self.kubectl("apply", "--server-side", "--force-conflicts", *ns, "-f", "-", stdin=text)

    def get_json(self, *args: str, kubeconfig: Path | None = None) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json", kubeconfig=kubeconfig).stdout)

    def token_kubeconfig(self, namespace: str, service_account: str, path: Path, hours: int = 2) -> Path:
        """A kubeconfig that authenticates as a ServiceAccount with a token from the TokenRequest API."""
        token = self.kubectl(
            "create", "token", service_account, "-n", namespace, f"--duration={hours}h"
        ).stdout.strip()
        return write_kubeconfig(path, self.server, self.pki.ca_crt, {"token": token}, name=service_account)

    def add_nodes(self, group: str, names: Sequence[str], **kwargs: Any) -> None:
        """Create kwok nodes for ``group`` and wait until kwok reports every one Ready."""
        self.apply([objects.node(n, group, **kwargs) for n in names])

        def ready() -> bool:
            items = self.get_json("nodes", "-l", f"{objects.GROUP_LABEL}={group}")["items"]
            up = {i["metadata"]["name"] for i in items if _is_ready(i)}
            return up >= set(names)

        self.wait_for(f"nodes {list(names)} Ready", ready, timeout_s=60)

    def running_pods(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        """Pods kwok reports Running and that are not being deleted."""
        args = ["pods", "-n", namespace] + (["-l", selector] if selector else [])
        return [
            p
            for p in self.get_json(*args)["items"]
            if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    def wait_for(self, what: str, predicate: Any, timeout_s: float = 60.0, interval_s: float = 0.3) -> Any:
        """Poll ``predicate()`` until it returns a truthy value (returned); bounded by ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval_s)
        raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


def _is_ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _flag_port(argv: list[str]) -> int:
    for arg in argv:
        if arg.startswith("--secure-port="):
            return int(arg.split("=", 1)[1])
    raise ValueError("no --secure-port in argv")
