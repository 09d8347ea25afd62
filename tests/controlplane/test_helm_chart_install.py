"""The Helm chart installed into the real control plane: every rendered object accepted by a real
kube-apiserver (server-side validation), then the descheduler started as the pod would start it (the
Deployment's own arguments, the ConfigMap as the server stores it, the chart's ServiceAccount through a
TokenRequest token) for dry-run cycles that see the hotspot, take the chart's Lease and evict nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import fresh_namespace, hot_cluster_serving_usage, install_manifests, loop_config
from tests.controlplane.policy import (
    POLICY_DENIAL,
    REFUSALS,
    TEAM,
    prove_policies,
    remove_our_policies,
)
from tests.helm.build import BuildError, build_helm
from tests.support.service import REPO, Descheduler, Ports, UsageBackend, descheduler_command, subprocess_env

pytestmark = pytest.mark.controlplane

CHART = REPO / "charts" / "load-aware-descheduler"
RELEASE = "lad"
CHART_NAMESPACE = "lad-chart"
LEASE_NAME = "lad-chart-lease"


def rendered_chart(helm: Path, values: dict[str, Any], workdir: Path) -> list[dict[str, Any]]:
    values_file = workdir / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    done = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "--namespace", CHART_NAMESPACE, "-f", str(values_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_chart_installs_and_its_pod_command_runs_dry_run_cycles_as_its_service_account(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    try:
        helm = build_helm()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
    ports = Ports.free()
    config = loop_config(usage_backend.url, ports, namespace, dry_run=False, consecutive_abnormalities=1)
    values = {
        "config": config,  # the chart fits leader election and the endpoint ports to the release
        "ports": {"healthz": ports.healthz, "metrics": ports.metrics},
        "leaderElection": {"enabled": True, "resourceName": LEASE_NAME},
        "replicas": 0,  # the objects go to the real server; the process runs here, as the pod would
    }
    docs = rendered_chart(helm, values, tmp_path)
    control_plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CHART_NAMESPACE}}])
    control_plane.apply(docs)  # kubectl apply: the real server validates every object
    for doc in docs:
        kind, name = doc["kind"].lower(), doc["metadata"]["name"]
        where = ["-n", CHART_NAMESPACE] if "namespace" in doc["metadata"] else []
        assert control_plane.get_json(kind, name, *where)["metadata"]["name"] == name

    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    stored = control_plane.get_json(
        "configmap", f"{RELEASE}-load-aware-descheduler-config", "-n", CHART_NAMESPACE
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(stored["data"]["config.yaml"])
    identity = control_plane.token_kubeconfig(
        CHART_NAMESPACE, pod["serviceAccountName"], tmp_path / "identity.kubeconfig"
    )
    args = list(pod["containers"][0]["args"])
    assert args[:3] == ["run", "--config", "/etc/descheduler/config.yaml"] and "--dry-run" in args
    args[2] = str(config_file)

    with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
        err, out = (tmp_path / "run.stderr").open("wb"), (tmp_path / "run.stdout").open("wb")
        process = subprocess.Popen(
            descheduler_command(*args, "--kubeconfig", str(identity)),
            cwd=REPO,
            env=subprocess_env(),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        proc = Descheduler(
            process, tmp_path / "run.stderr", tmp_path / "run.stdout", ports, "chart", _closed=[err, out]
        )
        try:
            proc.wait_ready(timeout=30)
            would = proc.wait_for(
                lambda: [e for e in proc.events("audit_eviction") if e["result"] == "would-evict"],
                timeout=60,
                what="a would-evict audit record",
            )
            holder = control_plane.get_json("lease", LEASE_NAME, "-n", CHART_NAMESPACE)["spec"][
                "holderIdentity"
            ]
            assert proc.terminate() == 0
        finally:
            proc.cleanup()
    (starting,) = proc.events("starting")
    assert starting["dry_run"] is True and starting["dry_run_from"] == "--dry-run flag"
    assert would[0]["node"] == cluster.hot
    assert holder == proc.identity
    assert "orbidden" not in proc.stderr(), "a request the chart's RBAC does not allow"
    left = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in control_plane.running_pods(namespace, "app=busy")
    }
    assert left == cluster.initial_pods, "dry-run evicts nothing"


POLICY_RELEASE = "pool-b"
POLICY_NAMESPACE = "lad-helm"
INSTALL_VALUES = ["--set", "replicas=0", "--set", "rbac.surgeRestart=true"]


def test_helm_install_with_defaults_under_another_release_name_holds_its_account_to_the_policies(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """``helm install`` with the chart's defaults (plus ``rbac.surgeRestart``, so a Deployment change
    reaches the policy rather than stopping at RBAC, and no pod on the shared nodes): adding and removing
    our taint and a rollout restart pass as the release's ServiceAccount; every other change to a node or a
    Deployment is refused by the chart's policies, and passes once they are removed."""
    try:
        helm = build_helm()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
    ns = fresh_namespace(control_plane, "policy-helm")
    remove_our_policies(control_plane)
    base = [str(helm), "--kubeconfig", str(control_plane.kubeconfig), "-n", POLICY_NAMESPACE]
    installed = subprocess.run(
        [*base, "install", POLICY_RELEASE, str(CHART), "--create-namespace", *INSTALL_VALUES],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        assert installed.returncode == 0, installed.stderr
        account = f"{POLICY_RELEASE}-load-aware-descheduler"
        identity = control_plane.token_kubeconfig(POLICY_NAMESPACE, account, tmp_path / "identity")
        proof = prove_policies(
            control_plane, identity, f"system:serviceaccount:{POLICY_NAMESPACE}:{account}", ns
        )
    finally:
        subprocess.run([*base, "uninstall", POLICY_RELEASE], capture_output=True, timeout=120, check=False)
        control_plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        control_plane.kubectl(
            "delete", "nodes", "-l", f"{objects.GROUP_LABEL}={ns}", "--wait=false", check=False
        )
        install_manifests(control_plane)
    assert proof.taint == ["added", "removed"] and proof.taints_after == [TEAM]
    assert proof.restart.returncode == 0, proof.restart.stderr
    for what, _, message in REFUSALS:
        refused, unpoliced = proof.refused[what], proof.unpoliced[what]
        assert refused.returncode != 0 and POLICY_DENIAL in refused.stderr, (what, refused.stderr)
        assert message in refused.stderr, (what, refused.stderr)
        assert unpoliced.returncode == 0, (what, unpoliced.stderr)
