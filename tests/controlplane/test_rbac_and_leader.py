"""The shipped RBAC on a real API server (the descheduler runs as its own ServiceAccount, with a token from
the TokenRequest API, through a live and a dry-run cycle), and Lease leader election between two
``descheduler run`` processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from descheduler.kube.api import KubeApi
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import hot_cluster_serving_usage, install_manifests, loop_config
from tests.support.service import (
    LEASE,
    NAMESPACE,
    Ports,
    UsageBackend,
    run_command,
    run_descheduler,
    write_config,
)

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def identity(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig that is the descheduler's ServiceAccount, as the shipped manifests define it."""
    docs = install_manifests(control_plane)
    (account,) = [d["metadata"] for d in docs if d["kind"] == "ServiceAccount"]
    return control_plane.token_kubeconfig(
        account["namespace"], account["name"], tmp_path_factory.mktemp("identity") / "kubeconfig"
    )


def can_i(plane: ControlPlane, kubeconfig: Path, *args: str) -> bool:
    answer = plane.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


NEEDED = [
    ("list", "pods", "--all-namespaces"),
    ("watch", "nodes"),
    ("watch", "namespaces"),
    ("list", "poddisruptionbudgets.policy", "--all-namespaces"),
    ("watch", "replicasets.apps", "--all-namespaces"),
    ("create", "pods", "--subresource=eviction", "-n", "default"),
    ("create", "events.events.k8s.io", "-n", "default"),
    ("list", "events", "--all-namespaces"),  # a deleted journal is rebuilt from our Events
    ("update", f"leases.coordination.k8s.io/{LEASE}", "-n", NAMESPACE),
    ("get", f"configmaps/{LEASE}-migrations", "-n", NAMESPACE),
    ("update", f"configmaps/{LEASE}-migrations", "-n", NAMESPACE),
    ("create", "configmaps", "-n", NAMESPACE),
    ("patch", "nodes"),  # the hotspot taint, on in what we ship; the admission policy holds it to the taint
]
NOT_NEEDED = [
    ("get", "secrets", "--all-namespaces"),
    ("create", "pods", "-n", "default"),
    ("update", "pods", "-n", "default"),
    ("delete", "pods", "-n", "default"),  # only with the optional Delete-policy component
    ("update", "deployments.apps", "-n", "default"),
    ("patch", "deployments.apps", "-n", "default"),  # only with the optional surge-restart component
    ("delete", "poddisruptionbudgets.policy", "-n", "default"),
    ("update", "namespaces/default"),
    ("update", "leases.coordination.k8s.io/someone-elses", "-n", NAMESPACE),
    ("update", f"leases.coordination.k8s.io/{LEASE}", "-n", "default"),
    ("list", "configmaps", "--all-namespaces"),
    ("update", "configmaps/load-aware-descheduler-config", "-n", NAMESPACE),
    ("create", "configmaps", "-n", "default"),
]


@pytest.mark.parametrize("request_", NEEDED, ids=[" ".join(r[:3]) for r in NEEDED])
def test_the_service_account_may_do_what_the_descheduler_needs(
    control_plane: ControlPlane, identity: Path, request_: tuple[str, ...]
) -> None:
    assert can_i(control_plane, identity, *request_)


@pytest.mark.parametrize("request_", NOT_NEEDED, ids=[" ".join(r[:2]) for r in NOT_NEEDED])
def test_the_service_account_may_not_do_more(
    control_plane: ControlPlane, identity: Path, request_: tuple[str, ...]
) -> None:
    assert not can_i(control_plane, identity, *request_)


def test_a_request_outside_the_rules_is_forbidden_by_the_real_server(
    control_plane: ControlPlane, identity: Path
) -> None:
    result = control_plane.kubectl("get", "secrets", "-n", "kube-system", kubeconfig=identity, check=False)
    assert result.returncode != 0
    assert "Forbidden" in result.stderr and "system:serviceaccount:load-aware-descheduler" in result.stderr


def test_a_live_and_a_dry_run_cycle_succeed_as_the_service_account(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    identity: Path,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
        # A dry-run audit first, as `once`: it must see the hotspot and evict nothing.
        ports = Ports.free()
        dry = loop_config(usage_backend.url, ports, namespace, dry_run=True, consecutive_abnormalities=1)
        audit = run_command(
            "once", "--config", str(write_config(tmp_path / "dry.yaml", dry)), "--kubeconfig",
            str(identity), "--dry-run", "--output", "json", timeout=120,
        )  # fmt: skip
        assert audit.returncode == 0, audit.stderr[-3000:]
        assert "would-evict" in audit.stdout
        assert "orbidden" not in audit.stderr, "a request the shipped RBAC does not allow"
        untouched = {p["metadata"]["name"] for p in control_plane.running_pods(namespace, "app=busy")}
        assert untouched == set(cluster.initial_pods)
        # Then the live service with the shipped Lease name, until it has evicted.
        live = loop_config(usage_backend.url, ports, namespace, dry_run=False, consecutive_abnormalities=2)
        with run_descheduler(write_config(tmp_path / "live.yaml", live), identity, ports, tmp_path) as proc:
            proc.wait_ready(timeout=30)
            proc.wait_for(
                lambda: [e for e in proc.events("eviction") if e["result"] == "evicted"],
                timeout=60,
                what="an eviction made as the service account",
            )
            holder = control_plane.get_json("lease", LEASE, "-n", NAMESPACE)["spec"]["holderIdentity"]
            proc.terminate()
    assert holder == proc.identity
    assert proc.exit_code == 0
    assert "orbidden" not in proc.stderr(), "a request the shipped RBAC does not allow"
    left = {p["metadata"]["name"] for p in control_plane.running_pods(namespace, "app=busy")}
    assert set(cluster.initial_pods) - left, "a pod of the hot node was evicted"


# --- leader election ---------------------------------------------------------------------------------------


def holder_of(plane: ControlPlane, lease: str) -> str:
    result = plane.kubectl(
        "get", "lease", lease, "-n", NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}", check=False
    )
    return result.stdout.strip() if result.returncode == 0 else ""


def test_two_replicas_elect_one_leader_and_the_other_takes_over_when_it_dies(
    control_plane: ControlPlane, namespace: str, usage_backend: UsageBackend, tmp_path: Path
) -> None:
    control_plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    lease = f"lease-{namespace}"
    configs = []
    for name in ("a", "b"):
        ports = Ports.free()
        doc = loop_config(usage_backend.url, ports, namespace, dry_run=True, lease_name=lease)
        configs.append((name, ports, write_config(tmp_path / f"{name}.yaml", doc)))
    (a_name, a_ports, a_cfg), (b_name, b_ports, b_cfg) = configs
    with (
        run_descheduler(a_cfg, control_plane.kubeconfig, a_ports, tmp_path, name=a_name) as a,
        run_descheduler(b_cfg, control_plane.kubeconfig, b_ports, tmp_path, name=b_name) as b,
    ):
        first = control_plane.wait_for(
            "a leader",
            lambda: (
                holder_of(control_plane, lease) in (a.identity, b.identity)
                and holder_of(control_plane, lease)
            ),
        )
        leader, follower = (a, b) if first == a.identity else (b, a)
        # Only the leader runs cycles.
        leader.wait_for(lambda: len(leader.events("cycle_summary")) >= 2, timeout=30, what="two cycles")
        assert follower.events("cycle_summary") == []
        leader.kill()  # a crash: the Lease is not released, the follower waits for it to expire
        follower.wait_for(
            lambda: holder_of(control_plane, lease) == follower.identity, timeout=20, what="takeover"
        )
        follower.wait_for(
            lambda: follower.events("cycle_summary"), timeout=30, what="the new leader's first cycle"
        )
        assert follower.terminate() == 0
    assert holder_of(control_plane, lease) == "", "SIGTERM releases the Lease"
