"""The hotspot taint's life cycle on a real control plane (kube-apiserver, kube-scheduler, kwok nodes).

``hotspotTaint`` puts a ``PreferNoSchedule`` taint of our key on a node over its high threshold (from its
first over cycle, before it is confirmed as a hotspot and its pods are evicted), and, while pods are being
moved, on a node with less room than one of them uses, so the stock kube-scheduler places the replacements
elsewhere; it keeps it while the node is hot, removes it after cooling, on SIGTERM, and (left by a killed
leader) in a new leader's first cycle. Dry-run writes nothing. Another taint on the node is never
modified, and a patch computed from a stale read is refused by the real server (JSON patch ``test``)
instead of overwriting a concurrent change.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.kube.api import KubeApi
from descheduler.kube.errors import ApiStatusError
from descheduler.kube.taints import NodeTainter
from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import (
    HIGH_CPU,
    HotCluster,
    build_hot_cluster,
    fresh_namespace,
    hot_cluster_serving_usage,
    install_manifests,
    loop_config,
)
from tests.controlplane.policy import (
    POLICY_DENIAL,
    REFUSALS,
    Proof,
    prove_policies,
    remove_our_policies,
)
from tests.support.service import (
    LEASE,
    MANIFESTS,
    Descheduler,
    Ports,
    UsageBackend,
    run_descheduler,
    write_config,
)

pytestmark = pytest.mark.controlplane

TEAM = {"key": "team", "value": "a", "effect": "PreferNoSchedule"}
OURS = {"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT}
NOTHING_MOVES = {"include": ["no-such-namespace"]}
"""evictableNamespaces that leave every pod in place: the node stays hot."""


def node_taints(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    return list(plane.get_json("node", node)["spec"].get("taints") or [])


def tainted(plane: ControlPlane, node: str) -> bool:
    return OURS in node_taints(plane, node)


def node_events(plane: ControlPlane, node: str) -> list[str]:
    items = plane.get_json("events", "-n", "default", "--field-selector", f"involvedObject.name={node}")[
        "items"
    ]
    return [e["reason"] for e in items if e["involvedObject"].get("kind") == "Node"]


def taint_lines(proc: Descheduler, action: str) -> list[dict[str, Any]]:
    return [e for e in proc.events("node_taint") if e.get("action") == action]


def config(
    backend: UsageBackend,
    namespace: str,
    folder: Path,
    *,
    lease: str | None = None,
    dry_run: bool = False,
    consecutive: int = 2,
    evictable: dict[str, Any] | None = None,
) -> tuple[Ports, Path]:
    """Free ports and a hotspot-taint config in ``folder``; the lease is the namespace's unless named."""
    ports = Ports.free()
    doc = loop_config(
        backend.url,
        ports,
        namespace,
        dry_run=dry_run,
        lease_name=lease or f"lease-{namespace}",
        consecutive_abnormalities=consecutive,
    )
    args = doc["profiles"][0]["pluginConfig"][0]["args"]
    args["hotspotTaint"] = {"enabled": True, "removeAfterCycles": 3}
    if evictable is not None:
        args["evictableNamespaces"] = evictable
    return ports, write_config(folder / "c.yaml", doc)


@pytest.fixture(scope="module")
def tainting_identity(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The descheduler's ServiceAccount as the shipped manifests make it: the hotspot taint's node ``patch``
    included, held to that taint by the shipped admission policy."""
    docs = install_manifests(control_plane)
    (account,) = [d["metadata"] for d in docs if d["kind"] == "ServiceAccount"]
    return control_plane.token_kubeconfig(
        account["namespace"], account["name"], tmp_path_factory.mktemp("taint-identity") / "kubeconfig"
    )


# --- a hotspot cured with the taint on ----------------------------------------------------------------------


@dataclass
class Steered:
    cluster: HotCluster
    proc: Descheduler
    taints_while_hot: list[dict[str, Any]]
    taints_after: list[dict[str, Any]]
    replacements: dict[str, str]
    events: list[str]
    evictions: list[dict[str, Any]]


@pytest.fixture(scope="module")
def steered(
    control_plane: ControlPlane,
    tainting_identity: Path,
    admin_api_module: KubeApi,
    usage_backend: UsageBackend,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Steered]:
    ns = fresh_namespace(control_plane, "hotspot-taint")
    workdir = tmp_path_factory.mktemp("hotspot-taint")
    cluster = build_hot_cluster(control_plane, admin_api_module, ns)
    control_plane.kubectl("taint", "nodes", cluster.hot, "team=a:PreferNoSchedule")
    with cluster.usage.following():
        usage_backend.install(cluster.usage.model, full_window=True, timeout=30)
        ports, path = config(usage_backend, ns, workdir, lease=LEASE)
        with run_descheduler(path, tainting_identity, ports, workdir) as proc:
            proc.wait_ready(timeout=30)
            proc.wait_for(lambda: tainted(control_plane, cluster.hot), timeout=60, what="the hotspot taint")
            while_hot = node_taints(control_plane, cluster.hot)
            proc.wait_for(
                lambda: cluster.usage.node_percent(cluster.hot) < HIGH_CPU, timeout=90, what="the cure"
            )
            proc.wait_for(lambda: not tainted(control_plane, cluster.hot), timeout=30, what="the taint to go")
            proc.wait_for(lambda: taint_lines(proc, "remove"), timeout=5, what="its log line")
            proc.terminate()
        replacements = {
            name: node for name, node in cluster.usage.placements.items() if name not in cluster.initial_pods
        }
    time.sleep(1)  # events are written in the background
    yield Steered(
        cluster=cluster,
        proc=proc,
        taints_while_hot=while_hot,
        taints_after=node_taints(control_plane, cluster.hot),
        replacements=replacements,
        events=node_events(control_plane, cluster.hot),
        evictions=proc.events("eviction"),
    )


def test_the_hotspot_is_tainted_before_the_first_eviction_beside_the_taint_already_there(
    steered: Steered,
) -> None:
    assert steered.taints_while_hot == [TEAM, OURS]
    lines = [e for e in steered.proc.records() if e.get("event") in ("node_taint", "eviction")]
    assert lines[0]["event"] == "node_taint" and lines[0]["action"] == "add"
    assert lines[0]["node"] == steered.cluster.hot


def test_the_taint_goes_on_at_the_first_over_cycle_before_the_node_is_confirmed_as_a_hotspot(
    steered: Steered,
) -> None:
    (added,) = taint_lines(steered.proc, "add")
    assert added["message"].startswith("node is over its high threshold (not yet confirmed) (cpu usage")
    assert added["cycle"] < steered.evictions[0]["cycle"]


def test_the_replacements_land_off_the_hot_node_and_the_fewest_pods_are_evicted(steered: Steered) -> None:
    assert steered.replacements and all(
        node in steered.cluster.cool for node in steered.replacements.values()
    )
    # 3.9 cores of 4: two pods of 0.6 bring it to 2.7 (67.5%); with consecutiveAbnormalities 2 and a 5 s
    # usage window, the migration-aware estimate keeps a cured node from being evicted from again.
    assert [e["result"] for e in steered.evictions] == ["evicted", "evicted"]


def test_the_taint_comes_off_after_cooling_and_only_our_entry_goes(steered: Steered) -> None:
    (added,) = taint_lines(steered.proc, "add")
    (removed,) = taint_lines(steered.proc, "remove")
    assert removed["cycle"] - added["cycle"] >= 3
    assert steered.taints_after == [TEAM]
    assert steered.events.count("HotspotTainted") == 1 and steered.events.count("HotspotUntainted") == 1


def test_every_request_was_allowed_by_the_shipped_rbac_and_admission_policy(steered: Steered) -> None:
    assert "orbidden" not in steered.proc.stderr()
    assert steered.proc.events("node_taint_failed") == []


# --- a node with too little room for a pod in motion -------------------------------------------------------

WARM_CORES = 2.2
"""0.3 + 2.2 of 4 cores (62.5 %): a normal node with 7.5 % of room below 70 %, less than one busy pod uses
(0.6 cores, 15 %), so a replacement placed there would make it hot."""


def test_a_node_with_less_room_than_a_pod_in_motion_is_tainted_while_pods_move_and_the_replacements_avoid_it(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
        warm = cluster.cool[0]
        cluster.usage.cores["warm"] = WARM_CORES
        control_plane.apply(
            [objects.deployment("warm", namespace, replicas=1, node_name=warm, cpu="10m")],
            namespace=namespace,
        )
        control_plane.wait_for(
            "the warm pod Running", lambda: control_plane.running_pods(namespace, "app=warm")
        )
        time.sleep(7)  # a whole 5 s usage window of it
        ports, path = config(usage_backend, namespace, tmp_path)
        with run_descheduler(path, control_plane.kubeconfig, ports, tmp_path) as proc:
            proc.wait_ready(timeout=30)
            proc.wait_for(
                lambda: cluster.usage.node_percent(cluster.hot) < HIGH_CPU, timeout=90, what="the cure"
            )
            proc.wait_for(
                lambda: not tainted(control_plane, warm) and not tainted(control_plane, cluster.hot),
                timeout=30,
                what="the taints to come off once nothing moves",
            )
            proc.terminate()
        replacements = {
            name: node
            for name, node in cluster.usage.placements.items()
            if name.startswith("busy-") and name not in cluster.initial_pods
        }
    warm_tainted = False
    evicted = 0
    for line in proc.records():  # in order: the warm node carries the taint at every eviction
        if line.get("event") == "node_taint" and line.get("node") == warm:
            warm_tainted = line["action"] == "add"
        elif line.get("event") == "eviction":
            assert warm_tainted, f"evicted {line.get('pod')} while {warm} was not tainted"
            evicted += 1
    assert evicted >= 2
    adds = [e for e in taint_lines(proc, "add") if e["node"] == warm]
    found = re.match(
        r"node has less room below its high threshold than a pod being moved uses "
        r"\(cpu room ([0-9.]+)% < ([0-9.]+)%\)",
        adds[0]["message"],
    )
    assert found is not None, adds[0]["message"]
    room, pod = float(found[1]), float(found[2])  # 7.5 % and 15 %, give or take a measured rate
    assert 6.5 < room < 8.5 and 14.0 < pod < 16.0
    assert replacements and warm not in replacements.values() and cluster.hot not in replacements.values()
    assert node_taints(control_plane, warm) == []


# --- kept while hot, SIGTERM, a new leader, dry-run ----------------------------------------------------


def test_the_taint_stays_while_the_node_is_hot_and_comes_off_on_sigterm(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
        ports, path = config(usage_backend, namespace, tmp_path, evictable=NOTHING_MOVES)
        with run_descheduler(path, control_plane.kubeconfig, ports, tmp_path) as proc:
            proc.wait_ready(timeout=30)
            proc.wait_for(lambda: tainted(control_plane, cluster.hot), timeout=60, what="the hotspot taint")
            seen = len(proc.events("cycle_summary"))
            proc.wait_for(
                lambda: len(proc.events("cycle_summary")) >= seen + 5, timeout=20, what="5 more cycles"
            )
            assert tainted(control_plane, cluster.hot), "kept while hot"
            assert len(taint_lines(proc, "add")) == 1 and taint_lines(proc, "remove") == []
            assert proc.terminate() == 0
    assert node_taints(control_plane, cluster.hot) == []
    (removed,) = taint_lines(proc, "remove")
    assert "shutting down" in removed["message"]


def test_a_new_leader_removes_the_taint_a_killed_leader_left_on_a_node_that_has_cooled(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
        ports, path = config(usage_backend, namespace, tmp_path, evictable=NOTHING_MOVES)
        with run_descheduler(path, control_plane.kubeconfig, ports, tmp_path, name="first") as first:
            first.wait_ready(timeout=30)
            first.wait_for(lambda: tainted(control_plane, cluster.hot), timeout=60, what="the hotspot taint")
            first.kill()  # no chance to clean up
        assert tainted(control_plane, cluster.hot)
        control_plane.kubectl("scale", "deployment", "busy", "-n", namespace, "--replicas=1")
        control_plane.wait_for(
            "the hot node to cool", lambda: cluster.usage.node_percent(cluster.hot) < 40, timeout_s=60
        )
        time.sleep(7)  # the 5 s usage window forgets the load
        with run_descheduler(path, control_plane.kubeconfig, ports, tmp_path, name="second") as second:
            second.wait_for(
                lambda: not tainted(control_plane, cluster.hot), timeout=30, what="the stale taint"
            )
            (removed,) = second.wait_for(
                lambda: taint_lines(second, "remove"), timeout=5, what="its log line"
            )
            second.terminate()
    assert "previous leader" in removed["message"]
    assert removed["cycle"] == 1, "at once, in its first cycle as leader"


def test_dry_run_taints_nothing_and_says_what_it_would_taint(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
        ports, path = config(usage_backend, namespace, tmp_path, dry_run=True)
        with run_descheduler(path, control_plane.kubeconfig, ports, tmp_path) as proc:
            proc.wait_ready(timeout=30)

            def would_taint() -> list[dict[str, Any]]:
                return [
                    change
                    for audit in proc.events("audit_cycle")
                    for change in audit.get("hotspotTaints", {}).get("changes", [])
                    if change["result"] == "would-add"
                ]

            changes = proc.wait_for(would_taint, timeout=60, what="an audit saying it would taint")
            proc.terminate()
    assert changes[0]["node"] == cluster.hot
    assert node_taints(control_plane, cluster.hot) == []
    assert taint_lines(proc, "add") == [] and node_events(control_plane, cluster.hot) == []


# --- the patch itself against the real server ---------------------------------------------------------------


def test_a_patch_from_a_stale_read_is_refused_by_the_real_server_and_the_concurrent_taint_is_kept(
    control_plane: ControlPlane, namespace: str, admin_api: KubeApi
) -> None:
    node = f"{namespace}-n"
    control_plane.add_nodes(namespace, [node])
    original = admin_api.request
    raced: list[int] = []
    answers: list[int] = []

    def racing_request(method: str, path: str, **kwargs: Any) -> Any:
        if method == "PATCH" and not raced:  # an operator taints the node between our read and our patch
            raced.append(1)
            control_plane.kubectl("taint", "nodes", node, "dedicated=gpu:NoSchedule")
        try:
            result = original(method, path, **kwargs)
        except ApiStatusError as exc:
            answers.append(exc.status)
            raise
        if method == "PATCH":
            answers.append(200)
        return result

    admin_api.request = racing_request  # type: ignore[method-assign]
    tainter = NodeTainter(admin_api, None, dry_run=False)
    added = tainter.add(node, "hot")
    assert added.result == "added"
    assert node_taints(control_plane, node) == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        OURS,
    ]
    assert answers == [422, 200], "the stale patch was refused by its test, not applied"
    admin_api.request = original  # type: ignore[method-assign]
    assert tainter.remove(node, "cool").result == "removed"
    assert node_taints(control_plane, node) == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]


# --- the shipped admission policy: the ServiceAccount may change nothing but its own taint ------------------


def kustomize_install(
    plane: ControlPlane, folder: Path, **overlay: Any
) -> tuple[Callable[[], object], str, str]:
    """``kubectl apply -k`` of an overlay of the shipped ``manifests/`` (the audit overlay, what
    ``kubectl apply -k manifests/`` installs) with ``overlay`` fields, plus surge-restart (so a Deployment
    change reaches the policy instead of stopping at RBAC), without the Deployment (no descheduler pod on
    the shared nodes). Returns the install and the ServiceAccount's namespace and name."""
    copy_of = folder / "manifests"
    shutil.copytree(MANIFESTS, copy_of)
    mine = copy_of / "mine"
    mine.mkdir()
    no_pod = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "load-aware-descheduler", "namespace": "load-aware-descheduler"},
        "$patch": "delete",
    }
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../overlays/audit"],  # what manifests/kustomization.yaml installs
        "components": ["../components/surge-restart"],
        "patches": [{"patch": yaml.safe_dump(no_pod)}],
        **overlay,
    }
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(body))
    rendered = [d for d in yaml.safe_load_all(plane.kubectl("kustomize", str(mine)).stdout) if d]
    assert not [d for d in rendered if d["kind"] == "Deployment"]
    (account,) = [d["metadata"] for d in rendered if d["kind"] == "ServiceAccount"]
    return (lambda: plane.kubectl("apply", "-k", str(mine))), account["namespace"], account["name"]


KUSTOMIZE_INSTALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "as shipped": ("policy-shipped", {}),
    "with a namespace and a namePrefix": (
        "policy-renamed",
        {"namespace": "lad-renamed", "namePrefix": "pool-a-"},
    ),
}
"""Each kustomize install: the test's namespace, and the overlay's fields."""


@pytest.fixture(scope="module", params=list(KUSTOMIZE_INSTALLS), ids=list(KUSTOMIZE_INSTALLS))
def kustomize_proof(
    request: pytest.FixtureRequest, control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proof]:
    folder = tmp_path_factory.mktemp("policy")
    test_namespace, overlay = KUSTOMIZE_INSTALLS[request.param]
    install, account_ns, account = kustomize_install(control_plane, folder, **overlay)
    ns = fresh_namespace(control_plane, test_namespace)
    try:
        remove_our_policies(control_plane)
        install()
        identity = control_plane.token_kubeconfig(account_ns, account, folder / "kubeconfig")
        yield prove_policies(control_plane, identity, f"system:serviceaccount:{account_ns}:{account}", ns)
    finally:
        control_plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        control_plane.kubectl(
            "delete", "nodes", "-l", f"{objects.GROUP_LABEL}={ns}", "--wait=false", check=False
        )
        if overlay:
            control_plane.kubectl(
                "delete", "-k", str(folder / "manifests" / "mine"), "--wait=false", check=False
            )
        control_plane.kubectl(
            "delete", "clusterrolebinding,clusterrole", "load-aware-descheduler-surge-restart", check=False
        )
        install_manifests(control_plane)  # the shared control plane's other tests expect the shipped policies


def test_as_the_shipped_service_account_adding_and_removing_our_taint_passes_the_policy(
    kustomize_proof: Proof,
) -> None:
    assert kustomize_proof.taint == ["added", "removed"]
    assert kustomize_proof.taints_after == [TEAM], "the other taint untouched"


def test_a_surge_restart_passes_the_policy(kustomize_proof: Proof) -> None:
    assert kustomize_proof.restart.returncode == 0, kustomize_proof.restart.stderr


@pytest.mark.parametrize(
    ("what", "message"), [(w, m) for w, _, m in REFUSALS], ids=[w for w, _, _ in REFUSALS]
)
def test_the_policy_refuses_the_service_account(kustomize_proof: Proof, what: str, message: str) -> None:
    answer = kustomize_proof.refused[what]
    assert answer.returncode != 0
    assert POLICY_DENIAL in answer.stderr and message in answer.stderr, answer.stderr


@pytest.mark.parametrize("what", [w for w, _, _ in REFUSALS])
def test_without_the_policy_the_same_change_passes_so_the_refusal_is_the_policys(
    kustomize_proof: Proof, what: str
) -> None:
    answer = kustomize_proof.unpoliced[what]
    assert answer.returncode == 0, answer.stderr


# --- steering refused: the descheduler says so once and works on -------------------------------------------


def test_a_service_account_without_node_patch_works_on_unsteered_and_says_so_once(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    """The shipped ServiceAccount with the hotspot-taint binding taken away (an operator who trimmed RBAC):
    the taint is refused with a real 403; the descheduler logs it once, puts one Warning Event on the node,
    shows it in /readyz (still ready) and in ``descheduler_steering_active`` (0), and cures the hotspot by
    evictions alone, without exiting."""
    docs = install_manifests(control_plane)
    (account,) = [d["metadata"] for d in docs if d["kind"] == "ServiceAccount"]
    control_plane.kubectl("delete", "clusterrolebinding", "load-aware-descheduler-hotspot-taint")
    identity = control_plane.token_kubeconfig(account["namespace"], account["name"], tmp_path / "identity")
    try:
        with hot_cluster_serving_usage(control_plane, admin_api, namespace, usage_backend) as cluster:
            ports, path = config(usage_backend, namespace, tmp_path, lease=LEASE)  # the Role's
            with run_descheduler(path, identity, ports, tmp_path) as proc:
                proc.wait_ready(timeout=30)
                proc.wait_for(lambda: proc.events("steering_refused"), timeout=60, what="the refusal")
                proc.wait_for(
                    lambda: cluster.usage.node_percent(cluster.hot) < HIGH_CPU, timeout=90, what="the cure"
                )
                ready = proc.get("/readyz")
                metrics = proc.get("/metrics")[1]
                assert proc.terminate() == 0
    finally:
        install_manifests(control_plane)
    (refused,) = proc.events("steering_refused")
    assert "403" in refused["error"] and refused["node"] == cluster.hot
    assert ready[0] == 200 and "steering off: the API server refused the hotspot taint" in ready[1], ready
    assert "descheduler_steering_active 0.0" in metrics
    assert [e["result"] for e in proc.events("eviction")].count("evicted") >= 2, "cured by evictions alone"
    assert not tainted(control_plane, cluster.hot)
    time.sleep(1)  # events are written in the background
    assert node_events(control_plane, cluster.hot).count("HotspotTaintRefused") == 1
