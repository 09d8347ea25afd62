"""The container image users deploy, built from the repository's Dockerfile (``tests/image/build.py``) and
run the way ``manifests/`` runs it: the Deployment's args, user and security context and the ConfigMap's
config at its mount path are read from the rendered manifests, so the suite fails when the Dockerfile, the
manifests' args or the security context stop fitting each other. In-cluster configuration only: a real
ServiceAccount token, CA and namespace at the kubelet's path and ``KUBERNETES_SERVICE_HOST``/``_PORT``."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import SERVICE_ACCOUNT_DIR
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import hot_cluster_serving_usage, install_manifests
from tests.image.build import Podman, build_image, ensure_base
from tests.support.service import (
    MANIFESTS,
    REPO,
    Descheduler,
    Ports,
    UsageBackend,
    service_config,
    write_config,
)

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    return Podman(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def image(podman: Podman) -> str:
    """The working tree's image: the base from the cache, the dependency layers reused when warm."""
    return build_image(podman, ensure_base(podman))


def locked(path: Path) -> dict[str, str]:
    """Normalised name -> version of every pin in a pip-compile lock file."""
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), flags=re.MULTILINE)
    return {normalise(name): version for name, version in pins}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_holds_the_locked_dependencies_and_the_project_and_no_installer(
    podman: Podman, image: str
) -> None:
    listing = podman.run(
        "run", "--rm", "--entrypoint", "/opt/venv/bin/python", image, "-c",
        "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'], d.version)",
    ).stdout  # fmt: skip
    installed = {normalise(n): v for n, v in (line.split() for line in listing.splitlines())}
    project = yaml.safe_load(podman.run("image", "inspect", image).stdout)[0]["Config"]["Labels"]
    assert project["org.opencontainers.image.title"] == "load-aware-descheduler"
    version = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    assert installed == {**locked(REPO / "requirements.lock"), "load-aware-descheduler": version[1]}


# --- the container as the Deployment runs it ----------------------------------------------------------


def rendered(plane: ControlPlane) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Deployment and the ConfigMap of ``kubectl apply -k manifests/``."""
    docs = [d for d in yaml.safe_load_all(plane.kubectl("kustomize", str(MANIFESTS)).stdout) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    return deployment, configmaps[volume["configMap"]["name"]]


def fitted_config(shipped: dict[str, Any], backend: UsageBackend, ports: Ports, group: str) -> dict[str, Any]:
    """The ConfigMap's configuration with only what points at this test's world changed: usage from the
    test's Prometheus, free ports on the host network, 1 s cycles, the test's nodes and namespace. Its
    Lease, plugins and everything else stay as shipped."""
    fast = service_config(prometheus_url=backend.url, ports=ports, consecutive_abnormalities=1)
    doc = dict(shipped)
    for key in ("metricsProviders", "deschedulingInterval"):
        doc[key] = fast[key]
    for key in ("healthzBindAddress", "metricsBindAddress"):
        host = urlsplit(f"//{shipped[key]}").hostname
        doc[key] = f"{host}:{urlsplit('//' + fast[key]).port}"
    doc["leaderElection"] = {**shipped["leaderElection"], **{
        k: v for k, v in fast["leaderElection"].items() if k.endswith(("Duration", "Deadline", "Period"))
    }}  # fmt: skip
    args = doc["profiles"][0]["pluginConfig"][0]["args"]
    args["anomalyCondition"] = {"consecutiveAbnormalities": 1}
    args["evictableNamespaces"] = {"include": [group]}
    doc["nodeSelector"] = {"matchLabels": {objects.GROUP_LABEL: group}}
    return doc


def run_flags(pod: dict[str, Any], container: dict[str, Any], volumes: dict[str, Path]) -> list[str]:
    """podman flags for the pod's and container's security context and volume mounts."""
    context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    assert context["runAsNonRoot"] and context["runAsUser"] != 0
    flags = [f"--user={context['runAsUser']}:{context['runAsGroup']}", "--network=host"]
    if context.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    if context.get("allowPrivilegeEscalation") is False:
        flags.append("--security-opt=no-new-privileges")
    assert not context.get("privileged")
    flags += [f"--cap-drop={c}" for c in context.get("capabilities", {}).get("drop", [])]
    flags += [f"--cap-add={c}" for c in context.get("capabilities", {}).get("add", [])]
    declared = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        volume = declared[mount["name"]]
        if "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit", "64Mi").replace("Mi", "m")
            flags.append(f"--tmpfs={mount['mountPath']}:rw,size={size},mode=1777")
        else:
            mode = "ro" if mount.get("readOnly") else "rw"
            flags.append(f"--volume={volumes[mount['name']]}:{mount['mountPath']}:{mode}")
    return flags


def project(folder: Path, files: dict[str, str]) -> Path:
    """A folder of files readable by the container's user, as the kubelet projects a volume."""
    folder.mkdir(mode=0o755)
    for name, text in files.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o644)
    return folder


def test_the_image_runs_as_the_deployment_in_cluster_through_a_dry_run_cycle_and_exits_0_on_sigterm(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    podman: Podman,
    image: str,
    tmp_path: Path,
) -> None:
    deployment, configmap = rendered(control_plane)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    account = pod["serviceAccountName"]
    assert pod["automountServiceAccountToken"] is True
    install_manifests(control_plane)  # the ServiceAccount, its RBAC and the Lease namespace
    token = control_plane.kubectl("create", "token", account, "-n", deployment["metadata"]["namespace"])
    ports = Ports.free()
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    (item,) = volume["configMap"]["items"]
    shipped = yaml.safe_load(configmap["data"][item["key"]])
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert [declared["healthz"], declared["metrics"]] == [
        int(shipped[k].rsplit(":", 1)[1]) for k in ("healthzBindAddress", "metricsBindAddress")
    ], "the Deployment's ports are not the ConfigMap's bind addresses"
    config = tmp_path / "config"
    config.mkdir(mode=0o755)
    write_config(config / item["path"], fitted_config(shipped, usage_backend, ports, namespace)).chmod(0o644)
    secrets = project(tmp_path / "serviceaccount", {
        "token": token.stdout.strip(), "ca.crt": control_plane.pki.ca_crt.read_text(),
        "namespace": deployment["metadata"]["namespace"],
    })  # fmt: skip
    api = urlsplit(control_plane.server)
    argv = podman.argv(
        "run", "--rm", "--name", f"descheduler-{namespace}", "--init=false",
        *run_flags(pod, container, {volume["name"]: config}),
        f"--volume={secrets}:{SERVICE_ACCOUNT_DIR}:ro",
        f"--env=KUBERNETES_SERVICE_HOST={api.hostname}", f"--env=KUBERNETES_SERVICE_PORT={api.port}",
        *([f"--entrypoint={container['command'][0]}"] if "command" in container else []),
        image, *container.get("command", [])[1:], *container["args"],
    )  # fmt: skip
    assert "--dry-run" in argv, "the default overlay is the audit (dry-run) one"
    grace = pod["terminationGracePeriodSeconds"]
    with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
        log = tmp_path / "container.log"
        with log.open("wb") as out, (tmp_path / "stdout").open("wb") as stdout:
            process = subprocess.Popen(argv, env=podman.env, stdout=stdout, stderr=out)
        proc = Descheduler(process, log, tmp_path / "stdout", ports, "container")
        try:
            proc.wait_ready(timeout=60)
            proc.wait_for(
                lambda: [e for e in proc.events("eviction") if e.get("result") == "would-evict"],
                timeout=60, what="a would-be eviction on the hot node",
            )  # fmt: skip
            lease = shipped["leaderElection"]
            holder = control_plane.get_json("lease", lease["resourceName"], "-n", lease["resourceNamespace"])[
                "spec"
            ].get("holderIdentity")
            status, metrics = proc.get("/metrics")
            started = time.monotonic()
            code = proc.terminate(timeout=grace)
            stopped = time.monotonic() - started
        finally:
            podman.run("rm", "--force", f"descheduler-{namespace}", check=False)
        untouched = {p["metadata"]["name"] for p in control_plane.running_pods(namespace, "app=busy")}
    assert holder, "the container took the Lease"
    assert status == 200 and "descheduler_" in metrics
    assert code == 0 and stopped < grace, proc.stderr()[-3000:]
    assert untouched == set(cluster.initial_pods), "the audit overlay evicts nothing"
    assert "orbidden" not in proc.stderr(), "a request the shipped RBAC does not allow"
    released = control_plane.get_json("lease", lease["resourceName"], "-n", lease["resourceNamespace"])
    assert not released["spec"].get("holderIdentity"), "SIGTERM releases the Lease"
