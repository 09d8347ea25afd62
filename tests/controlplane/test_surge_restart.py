"""Surge-first restarts on a real control plane (kube-apiserver, kube-controller-manager, kube-scheduler,
kwok nodes): a hotspot held by single-replica Deployments is cured by rollout restarts, with the shipped RBAC
plus the optional surge-restart and hotspot-taint components.

The hot node runs four single-replica Deployments that surge first (Kubernetes' default strategy: 25 %
maxSurge rounds up to 1, 25 % maxUnavailable rounds down to 0) and two that do not (maxSurge 0, and
maxUnavailable 1), 0.5 and 0.55 cores each, 3.4 of 4 cores with the system's 0.3 (85 %, high threshold
70 %): two restarts cure it. ``minReadySeconds`` keeps each old pod running for a while after its
replacement is ready, so a restart stays in flight for several 1 s cycles. A thread reads every
Deployment and pod of the namespace from the server every 100 ms: the available replicas of each
restarted Deployment never drop below 1, and the moment each old pod is gone is measured.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import (
    HIGH_CPU,
    HotCluster,
    fresh_namespace,
    identity_with_components,
    lease_namespace,
    loop_config,
    sampling,
)
from tests.controlplane.usage import ClusterUsage
from tests.support.service import (
    LEASE,
    NAMESPACE,
    Descheduler,
    Ports,
    UsageBackend,
    run_descheduler,
    write_config,
)

pytestmark = pytest.mark.controlplane

SOLOS = ("solo-a", "solo-b", "solo-c", "solo-d")
NOT_SURGING = {
    "nosurge": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
    "unavail": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
}
CORES = {**dict.fromkeys(SOLOS, 0.5), **dict.fromkeys(NOT_SURGING, 0.55)}
MIN_READY = 8
"""Seconds a new pod must be ready before the old one goes: a restart stays in flight that long."""


def deployments() -> list[dict[str, Any]]:
    out = []
    for name in (*SOLOS, *NOT_SURGING):
        obj = objects.deployment(name, "", replicas=1, cpu="250m")
        obj["spec"]["minReadySeconds"] = MIN_READY
        if name in NOT_SURGING:
            obj["spec"]["strategy"] = NOT_SURGING[name]
        out.append(obj)
    return out


@contextmanager
def built(plane: ControlPlane, api: KubeApi, namespace: str, backend: UsageBackend) -> Iterator[HotCluster]:
    """Every pod on the hot node (the only schedulable one until they run), its usage followed and served
    by ``backend`` (a full window scraped). The usage is served while the Deployments wait out
    ``minReadySeconds``, so that wait and the scrapes overlap."""
    lease_namespace(plane)
    hot, cool = f"{namespace}-hot", [f"{namespace}-cool-{i}" for i in range(3)]
    plane.add_nodes(namespace, [hot])
    plane.add_nodes(namespace, cool, unschedulable=True)
    docs = deployments()
    for doc in docs:  # the node selector of the test's group
        doc["spec"]["template"]["spec"]["nodeSelector"] = {objects.GROUP_LABEL: namespace}
    plane.apply(docs, namespace=namespace)
    count = len(SOLOS) + len(NOT_SURGING)
    pods = plane.wait_for(
        "every pod Running on the hot node",
        lambda: (
            p
            if len(p := plane.running_pods(namespace)) == count
            and all(x["spec"]["nodeName"] == hot for x in p)
            else None
        ),
        timeout_s=60,
    )  # fmt: skip
    usage = ClusterUsage(api, namespace, dict.fromkeys([hot, *cool], 4), CORES)
    with usage.following():
        backend.model = usage.model  # served from now on; install() below waits for the full window
        wait_available(plane, namespace, "every Deployment available (minReadySeconds passed)")
        for name in cool:
            plane.kubectl("uncordon", name)
        backend.install(usage.model, full_window=True, timeout=30)
        yield HotCluster(
            namespace, hot, cool, usage, {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        )


@dataclass
class Watch:
    """What the server said every 100 ms: available replicas per Deployment, and when each pod was last
    seen (so when it was gone)."""

    api: KubeApi
    namespace: str
    samples: int = 0
    min_available: dict[str, int] = field(default_factory=dict)
    last_seen: dict[str, tuple[float, str, str]] = field(default_factory=dict)
    """Pod uid -> (last time seen, name, node)."""
    errors: list[str] = field(default_factory=list)

    def check(self) -> None:
        now = time.time()
        try:
            deps = self.api.get(f"/apis/apps/v1/namespaces/{self.namespace}/deployments")["items"]
            pods = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        except Exception as exc:  # a sample lost is reported, never silently dropped
            self.errors.append(str(exc))
            return
        self.samples += 1
        for dep in deps:
            name = dep["metadata"]["name"]
            available = int(dep.get("status", {}).get("availableReplicas", 0) or 0)
            self.min_available[name] = min(available, self.min_available.get(name, available))
        for pod in pods:
            meta = pod["metadata"]
            self.last_seen[meta["uid"]] = (now, meta["name"], pod["spec"].get("nodeName", ""))

    def gone_at(self, uid: str) -> float:
        return self.last_seen[uid][0]


@contextmanager
def watching(api: KubeApi, namespace: str) -> Iterator[Watch]:
    watch = Watch(api, namespace)
    with sampling(watch.check, "availability-watch"):
        yield watch


def config(
    backend: UsageBackend, ports: Ports, namespace: str, path: Path, *, dry_run: bool, **migration: Any
) -> Path:
    # The shipped Role grants the Lease of its own name (and its records ConfigMap) only.
    doc = loop_config(backend.url, ports, namespace, dry_run=dry_run, lease_name=LEASE)
    args = doc["profiles"][0]["pluginConfig"][0]["args"]
    args["hotspotTaint"] = {"enabled": True, "removeAfterCycles": 3}
    mc = doc["profiles"][0]["pluginConfig"][1]["args"]
    mc["surgeSingleReplica"] = True
    mc.update(migration)
    return write_config(path, doc)


COMPONENTS = ("surge-restart", "hotspot-taint")


@pytest.fixture(scope="module")
def restarting_identity(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The descheduler's ServiceAccount with the shipped RBAC plus the surge-restart and hotspot-taint
    components (removed afterwards: the shared control plane's other tests check the shipped RBAC alone)."""
    with identity_with_components(
        control_plane, COMPONENTS, tmp_path_factory.mktemp("surge-identity")
    ) as path:
        yield path


def generations(plane: ControlPlane, namespace: str) -> dict[str, int]:
    items = plane.get_json("deployments", "-n", namespace)["items"]
    return {d["metadata"]["name"]: int(d["metadata"]["generation"]) for d in items}


def stamp(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


def restarts(proc: Descheduler) -> list[dict[str, Any]]:
    return [e for e in proc.events("restart") if e["result"] == "restarted"]


def deployment_of(record: dict[str, Any]) -> str:
    return str(record["pod"].split("/")[1].rsplit("-", 2)[0])


# --- the cure, dry run first ----------------------------------------------------------------------------


@dataclass
class Cured:
    cluster: HotCluster
    audit: Descheduler
    proc: Descheduler
    watch: Watch
    before: dict[str, int]
    after_audit: dict[str, int]
    after: dict[str, int]
    pods_after: list[dict[str, Any]]
    events: list[tuple[str, str]]
    cured_at: float


@pytest.fixture(scope="module")
def cured(
    control_plane: ControlPlane,
    restarting_identity: Path,
    admin_api_module: KubeApi,
    usage_backend: UsageBackend,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cured]:
    ns = fresh_namespace(control_plane, "surge-restart")
    workdir = tmp_path_factory.mktemp("surge-restart")
    with built(control_plane, admin_api_module, ns, usage_backend) as cluster:
        before = generations(control_plane, ns)
        ports = Ports.free()
        audit_config = config(usage_backend, ports, ns, workdir / "audit.yaml", dry_run=True)
        with run_descheduler(audit_config, restarting_identity, ports, workdir, "audit") as audit:
            audit.wait_ready(timeout=30)
            audit.wait_for(
                lambda: [e for e in audit.events("audit_eviction") if e.get("result") == "would-restart"],
                timeout=60,
                what="an audit that would restart",
            )
            audit.terminate()
        after_audit = generations(control_plane, ns)
        live = config(usage_backend, ports, ns, workdir / "live.yaml", dry_run=False)
        with (
            watching(admin_api_module, ns) as watch,
            run_descheduler(live, restarting_identity, ports, workdir) as proc,
        ):
            proc.wait_ready(timeout=30)
            proc.wait_for(
                lambda: cluster.usage.node_percent(cluster.hot) < HIGH_CPU, timeout=90, what="the cure"
            )
            cured_at = time.time()
            proc.wait_for(
                lambda: (
                    len([e for e in proc.events("restart_followed") if e["result"] == "completed"])
                    >= len(restarts(proc))
                ),
                timeout=60,
                what="every restart followed to its end",
                naming=("restart", "eviction_resolved", "solo-"),
            )
            seen = len(proc.events("cycle_summary"))
            proc.wait_for(
                lambda: len(proc.events("cycle_summary")) >= seen + 5, timeout=30, what="5 more cycles"
            )
            proc.terminate()
        time.sleep(1)  # events are written in the background
        events = [
            (e["involvedObject"]["name"], e["reason"])
            for e in control_plane.get_json("events", "-n", ns)["items"]
            if e["involvedObject"].get("kind") == "Deployment"
        ]
    yield Cured(
        cluster=cluster,
        audit=audit,
        proc=proc,
        watch=watch,
        before=before,
        after_audit=after_audit,
        after=generations(control_plane, ns),
        pods_after=control_plane.running_pods(ns),
        events=events,
        cured_at=cured_at,
    )
    control_plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    control_plane.kubectl("delete", "nodes", "-l", f"{objects.GROUP_LABEL}={ns}", "--wait=false", check=False)


def wait_available(plane: ControlPlane, namespace: str, what: str) -> None:
    """Until every Deployment of ``namespace`` has its one replica available (minReadySeconds passed)."""
    plane.wait_for(
        what,
        lambda: all(
            int(d.get("status", {}).get("availableReplicas", 0) or 0) == 1
            for d in plane.get_json("deployments", "-n", namespace)["items"]
        ),
        timeout_s=60,
    )


def fresh_start(control_plane: ControlPlane) -> None:
    """Records of the module's other runs (same Lease) would be rebuilt too: start from none. The Lease
    goes with the journal, or the service would rightly take the journal for lost (issue 37, point 12)."""
    for kind, name in (("configmap", f"{LEASE}-migrations"), ("lease", LEASE)):
        control_plane.kubectl("delete", kind, name, "-n", NAMESPACE, "--ignore-not-found", check=False)


def test_the_component_grants_deployment_patch_to_the_service_account(
    control_plane: ControlPlane, restarting_identity: Path
) -> None:
    answer = control_plane.kubectl(
        "auth",
        "can-i",
        "patch",
        "deployments.apps",
        "-n",
        "default",
        kubeconfig=restarting_identity,
        check=False,
    ).stdout.strip()
    assert answer == "yes"


def test_the_dry_run_audit_says_would_restart_and_the_server_changed_nothing(cured: Cured) -> None:
    would = [e for e in cured.audit.events("audit_eviction") if e.get("result") == "would-restart"]
    assert would and all(e["action"] == "restart" and e["workloadName"] in SOLOS for e in would)
    assert cured.after_audit == cured.before, "dryRun=All: no generation moved"
    listed = list(cured.audit.events("audit_skip"))
    # The summarised form counts a stopped hotspot's filtered pods per reason; the message is the first's.
    listed += [
        {"pod": s["examples"][0], "code": s["code"], "message": s["message"]}
        for s in cured.audit.events("audit_skip_summary")
    ]
    skips = {e["pod"].split("/")[1].rsplit("-", 2)[0]: e for e in listed}
    assert (
        skips["nosurge"]["code"] == "surge-no-surge"
        and "maxSurge 0 resolves to 0" in skips["nosurge"]["message"]
    )
    assert skips["unavail"]["code"] == "surge-max-unavailable"
    assert "maxUnavailable 1 resolves to 1" in skips["unavail"]["message"]


def test_the_hotspot_is_cured_by_two_restarts_and_every_restart_completed(cured: Cured) -> None:
    done = restarts(cured.proc)
    followed = [e for e in cured.proc.events("restart_followed") if e["result"] == "completed"]
    assert len(done) == 2, [e["pod"] for e in done]
    assert sorted(e["pod"] for e in followed) == sorted(e["pod"] for e in done)
    assert cured.cluster.usage.node_percent(cured.cluster.hot) < HIGH_CPU
    assert "orbidden" not in cured.proc.stderr() and cured.proc.events("eviction") == []
    restarted = {deployment_of(e) for e in done}
    assert {(name, "RolloutRestarted") for name in restarted} <= set(cured.events)
    assert {(name, "RestartCompleted") for name in restarted} <= set(cured.events)


def test_available_replicas_never_dropped_below_one(cured: Cured) -> None:
    restarted = {deployment_of(e) for e in restarts(cured.proc)}
    assert cured.watch.samples > 50 and not cured.watch.errors
    assert all(cured.watch.min_available[name] >= 1 for name in restarted), cured.watch.min_available


def test_the_new_pods_run_off_the_hotspot_and_the_old_ones_are_gone(cured: Cured) -> None:
    done = restarts(cured.proc)
    for record in done:
        name = deployment_of(record)
        now = [p for p in cured.pods_after if p["metadata"]["labels"]["app"] == name]
        (pod,) = now
        assert pod["spec"]["nodeName"] in cured.cluster.cool
        assert pod["metadata"]["uid"] != cured.cluster.initial_pods[record["pod"].split("/")[1]]
        assert record["pod"].split("/")[1] not in {p["metadata"]["name"] for p in cured.pods_after}


def test_non_surging_deployments_are_left_alone_with_the_reason(cured: Cured) -> None:
    for name in NOT_SURGING:
        assert cured.after[name] == cured.before[name]
        (pod,) = [p for p in cured.pods_after if p["metadata"]["labels"]["app"] == name]
        assert pod["metadata"]["uid"] in cured.cluster.initial_pods.values()
    skipped = set().union(*(set(e.get("skips", {})) for e in cured.proc.events("cycle_summary")))
    assert {"surge-no-surge", "surge-max-unavailable"} <= skipped


def test_two_restarts_never_overlap_on_one_workload(cured: Cured) -> None:
    """Each restart stays in flight MIN_READY seconds over many 1 s cycles; none of the Deployments was
    patched twice (its generation moved by one at most)."""
    moved = {name: cured.after[name] - cured.before[name] for name in SOLOS}
    assert all(step in (0, 1) for step in moved.values()), moved
    per_deployment = [deployment_of(e) for e in restarts(cured.proc)]
    assert len(per_deployment) == len(set(per_deployment))


def test_report_the_figures(cured: Cured) -> None:
    done = restarts(cured.proc)
    watch = cured.watch
    seconds = []
    for record in done:
        uid = cured.cluster.initial_pods[record["pod"].split("/")[1]]
        seconds.append(watch.gone_at(uid) - stamp(record))
    cycles = [e["cycle"] for e in cured.proc.events("cycle_summary") if stamp(e) <= cured.cured_at]
    restart_cycles = sorted({e["cycle"] for e in done})
    print(
        f"\nsurge-first restarts on the real control plane: {len(done)} restart(s) in cycle(s) "
        f"{restart_cycles}, "
        f"cured by cycle {max(cycles) if cycles else '?'}; patch to old pod gone: "
        + ", ".join(f"{s:.1f}s" for s in seconds)
        + f" (minReadySeconds {MIN_READY}); {watch.samples} availability samples at 100 ms, min available "
        + str({k: v for k, v in sorted(watch.min_available.items())})
    )
    assert all(MIN_READY - 2 < s < MIN_READY + 20 for s in seconds), seconds


# --- SIGKILL in the middle of a restart ---------------------------------------------------------------


def test_a_sigkill_in_the_middle_of_a_restart_keeps_the_limits_through_the_journal(
    control_plane: ControlPlane,
    namespace: str,
    restarting_identity: Path,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    """``maxMigratingPerNode: 1``: one restart in flight per node. The first process is killed right after
    its first patch, while the old pod waits for its replacement; the next one rebuilds the record and sends
    no restart from that node until the old pod is gone. A process without the record would have sent one
    at once (the in-flight restart is invisible in the cluster but for an old pod still running)."""
    fresh_start(control_plane)
    with (
        built(control_plane, admin_api, namespace, usage_backend) as cluster,
        watching(admin_api, namespace) as watch,
    ):
        ports = Ports.free()
        cfg = config(
            usage_backend, ports, namespace, tmp_path / "c.yaml", dry_run=False, maxMigratingPerNode=1
        )
        with run_descheduler(cfg, restarting_identity, ports, tmp_path, "first") as first:
            first.wait_ready(timeout=30)
            (victim,) = first.wait_for(
                lambda: restarts(first), timeout=60, what="the first restart", interval=0.01
            )
            first.kill()
        killed = time.time()
        with run_descheduler(cfg, restarting_identity, ports, tmp_path, "second") as second:
            found = second.wait_for(lambda: restarts(second), timeout=60, what="the second process's restart")
            second.wait_for(
                lambda: cluster.usage.node_percent(cluster.hot) < HIGH_CPU, timeout=60, what="the cure"
            )
            second.terminate()
    old_uid = cluster.initial_pods[victim["pod"].split("/")[1]]
    old_gone = watch.gone_at(old_uid)
    waited = stamp(found[0]) - killed
    print(
        f"\nSIGKILL mid-restart: first patch at +0, old pod gone {old_gone - stamp(victim):.1f}s later; "
        f"the successor's first restart {waited:.1f}s after the kill"
    )
    rebuilt = second.events("state_rebuilt")
    assert rebuilt and rebuilt[0]["migrations"] >= 1
    assert stamp(found[0]) >= old_gone - 0.5, "in flight across the kill: maxMigratingPerNode 1 held"
    everything = [victim, *restarts(second)]
    names = [deployment_of(e) for e in everything]
    assert len(names) == len(set(names)), "no Deployment restarted twice"
    assert all(watch.min_available.get(name, 1) >= 1 for name in names), watch.min_available


# --- a restart whose surge pod never schedules ----------------------------------------------------------

DEADLINE = 6
"""The stuck Deployment's progressDeadlineSeconds: short, so the test is."""


def stuck_cluster(plane: ControlPlane, api: KubeApi, namespace: str) -> HotCluster:
    """``stuck`` (one replica, 2 cores) and ``filler`` (1.9 cores, does not surge) fill the hot node's
    4 cores; the cool nodes have room. Once both run, a LimitRange asking at least 3 cores of every
    container (which the descheduler does not model: it judges the new pod by the old one) makes the API
    server refuse ``stuck``'s surge pod: its restart is planned towards a cool node, and no new pod ever
    runs until the deadline."""
    lease_namespace(plane)
    hot, cool = f"{namespace}-hot", [f"{namespace}-cool-{i}" for i in range(2)]
    plane.add_nodes(namespace, [hot])
    plane.add_nodes(namespace, cool, unschedulable=True)
    stuck = objects.deployment("stuck", namespace, replicas=1, cpu="2")
    stuck["spec"]["progressDeadlineSeconds"] = DEADLINE
    filler = objects.deployment("filler", namespace, replicas=1, cpu="1900m")
    filler["spec"]["strategy"] = NOT_SURGING["nosurge"]
    plane.apply([stuck, filler], namespace=namespace)
    pods = plane.wait_for(
        "stuck and filler Running on the hot node",
        lambda: p if len(p := plane.running_pods(namespace)) == 2 else None,
        timeout_s=60,
    )
    wait_available(plane, namespace, "both Deployments available")
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": "at-least-3-cores"},
                "spec": {"limits": [{"type": "Container", "min": {"cpu": "3"}}]},
            }
        ],
        namespace=namespace,
    )
    for name in cool:
        plane.kubectl("uncordon", name)
    usage = ClusterUsage(api, namespace, dict.fromkeys([hot, *cool], 4), {"stuck": 2.0, "filler": 1.4})
    return HotCluster(
        namespace, hot, cool, usage, {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    )


def test_a_restart_whose_surge_pod_never_schedules_is_reported_failed_and_its_pod_stays(
    control_plane: ControlPlane,
    namespace: str,
    restarting_identity: Path,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    """The hot node (92.5 %) is held by ``stuck``; its restart is sent, the surge pod is never created, the
    Deployment passes its 6 s progress deadline. The service reports the restart failed (log, Warning
    Event on the Deployment), counts the old pod as staying (the node a hotspot again, the pod never
    ``filtered-terminating`` again, no second restart) and a successor, rebuilt from the journal, neither
    reports it again nor counts the pod as leaving."""
    cluster = stuck_cluster(control_plane, admin_api, namespace)
    fresh_start(control_plane)
    before = generations(control_plane, namespace)
    with cluster.usage.following():
        usage_backend.install(cluster.usage.model, full_window=True, timeout=30)
        ports = Ports.free()
        cfg = config(usage_backend, ports, namespace, tmp_path / "c.yaml", dry_run=False)
        with run_descheduler(cfg, restarting_identity, ports, tmp_path, "first") as first:
            first.wait_ready(timeout=30)
            (sent,) = first.wait_for(lambda: restarts(first), timeout=60, what="the restart")
            (failed,) = first.wait_for(
                lambda: [e for e in first.events("restart_followed") if e["result"] == "failed"],
                timeout=DEADLINE + 30,
                what="the restart reported failed",
            )
            seen = len(first.events("cycle_summary"))
            first.wait_for(
                lambda: len(first.events("cycle_summary")) >= seen + 3, timeout=30, what="3 more cycles"
            )
            first.terminate()
        with run_descheduler(cfg, restarting_identity, ports, tmp_path, "second") as second:
            second.wait_for(lambda: len(second.events("cycle_summary")) >= 4, timeout=60, what="4 cycles")
            second.terminate()
    time.sleep(1)  # events are written in the background
    warnings = [
        (e["reason"], e["type"])
        for e in control_plane.get_json("events", "-n", namespace)["items"]
        if e["involvedObject"].get("kind") == "Deployment" and e["involvedObject"]["name"] == "stuck"
    ]
    stuck_uid = cluster.initial_pods[sent["pod"].split("/")[1]]
    still = [p for p in control_plane.running_pods(namespace, "app=stuck")]
    after_failure = [e for e in first.events("cycle_summary") if stamp(e) > stamp(failed)]
    print(
        f"\nstuck surge restart on the real control plane: patch at {sent['timestamp']}, reported failed "
        f"{stamp(failed) - stamp(sent):.1f}s later (progressDeadlineSeconds {DEADLINE}): {failed['message']}"
    )
    assert deployment_of(sent) == "stuck" and "still runs" in failed["message"]
    assert ("RestartFailed", "Warning") in warnings, warnings
    assert [p["metadata"]["uid"] for p in still] == [stuck_uid], "the old pod runs on"
    assert generations(control_plane, namespace)["stuck"] == before["stuck"] + 1, "restarted once only"
    over = [e["nodes"].get("over", 0) + e["nodes"].get("hotspot", 0) for e in after_failure]
    assert over and all(n == 1 for n in over), "its node is judged by what it runs: over again"
    for proc in (first, second):
        late = [e for e in proc.events("cycle_summary") if proc is second or stamp(e) > stamp(failed)]
        assert not any("filtered-terminating" in e.get("skips", {}) for e in late), "it counts as staying"
    assert second.events("state_rebuilt") and second.events("restart_followed") == [], "told once"
    assert restarts(second) == []
