"""Restarts on the real control plane: ``descheduler run`` killed (SIGKILL) right after an eviction, then a
new process, or the standby replica taking the Lease over. The new one rebuilds the limits from the
migration records its predecessor wrote before each eviction, and acts in its first cycle where the limits
allow: it moves a pod of the *other* Deployment, never a second pod of the first one inside its
``objectLimiters`` window. The ReplicaSet controller and kube-scheduler replace what was evicted.

The hot node runs three pods each of ``busy`` and ``batch`` (0.6 cores each, 3.9 of 4 cores with the
system's 0.3). ``maxNoOfPodsToEvictPerNode: 1`` makes every eviction a decision of its own cycle;
``objectLimiters.workload`` allows one eviction per Deployment per window. Two evictions cure the node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import HIGH_CPU, HotCluster, loop_config
from tests.controlplane.usage import ClusterUsage
from tests.support.service import (
    Descheduler,
    Ports,
    UsageBackend,
    one_eviction_per_workload,
    run_descheduler,
    write_config,
)

pytestmark = pytest.mark.controlplane

WINDOW = 30.0
APPS = ("busy", "batch")


def build(plane: ControlPlane, api: KubeApi, namespace: str) -> HotCluster:
    """Every pod of both Deployments on the hot node (the only schedulable one until they run)."""
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "load-aware-descheduler"}}])
    hot, cool = f"{namespace}-hot", [f"{namespace}-cool-{i}" for i in range(3)]
    plane.add_nodes(namespace, [hot])
    plane.add_nodes(namespace, cool, unschedulable=True)
    plane.apply(
        [objects.deployment(app, namespace, replicas=3, cpu="250m") for app in APPS]
        + [objects.pdb(app, app, max_unavailable=1) for app in APPS],
        namespace=namespace,
    )
    pods = plane.wait_for(
        "every pod Running on the hot node",
        lambda: (
            p
            if len(p := plane.running_pods(namespace)) == 6 and all(x["spec"]["nodeName"] == hot for x in p)
            else None
        ),
        timeout_s=60,
    )  # fmt: skip
    for name in cool:
        plane.kubectl("uncordon", name)
    usage = ClusterUsage(api, namespace, dict.fromkeys([hot, *cool], 4), dict.fromkeys(APPS, 0.6))
    return HotCluster(
        namespace, hot, cool, usage, {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    )


def config(backend: UsageBackend, ports: Ports, namespace: str, workdir: Path, name: str) -> Path:
    doc = loop_config(
        backend.url,
        ports,
        namespace,
        dry_run=False,
        lease_name=f"lease-{namespace}",
        consecutive_abnormalities=1,
    )
    return write_config(workdir / f"{name}.yaml", one_eviction_per_workload(doc, WINDOW))


def evicted(proc: Descheduler) -> list[dict[str, Any]]:
    return [e for e in proc.events("eviction") if e["result"] == "evicted"]


def app_of(record: dict[str, Any]) -> str:
    return str(record["pod"].split("/")[1].rsplit("-", 2)[0])


def stamp(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


def kill_after_first_eviction(proc: Descheduler) -> dict[str, Any]:
    proc.wait_ready(timeout=30)
    proc.wait_for(lambda: evicted(proc), timeout=60, what="the first eviction", interval=0.01)
    proc.kill()
    return evicted(proc)[0]


def check_no_window_broken(records: list[dict[str, Any]]) -> None:
    for i, later in enumerate(records):
        for earlier in records[:i]:
            if app_of(earlier) == app_of(later):
                assert stamp(later) - stamp(earlier) >= WINDOW - 1, (earlier, later)


@contextmanager
def hot(plane: ControlPlane, api: KubeApi, namespace: str, backend: UsageBackend) -> Iterator[HotCluster]:
    cluster = build(plane, api, namespace)
    with cluster.usage.following():
        backend.install(cluster.usage.model, full_window=True, timeout=30)
        yield cluster


def test_a_new_process_after_a_sigkill_acts_in_its_first_cycle_and_keeps_the_window(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    with hot(control_plane, admin_api, namespace, usage_backend) as cluster:
        kubeconfig = control_plane.kubeconfig
        ports = Ports.free()
        cfg = config(usage_backend, ports, namespace, tmp_path, "config")
        with run_descheduler(cfg, kubeconfig, ports, tmp_path, "first") as first:
            victim = kill_after_first_eviction(first)
        started = time.monotonic()
        with run_descheduler(cfg, kubeconfig, ports, tmp_path, "second") as second:
            found = second.wait_for(lambda: evicted(second), timeout=WINDOW - 5, what="the first eviction")
            seconds = time.monotonic() - started
            second.wait_for(
                lambda: cluster.usage.node_percent(cluster.hot) < HIGH_CPU, timeout=30, what="the cure"
            )
            second.terminate()
    print(
        f"\nrestart on the real control plane: first live eviction {seconds:.2f}s after start "
        f"(window {WINDOW:g}s)"
    )
    rebuilt = second.events("state_rebuilt")
    assert rebuilt and rebuilt[0]["migrations"] == 1
    assert found[0]["cycle"] == 1, "the new process acts in its first cycle"
    assert app_of(found[0]) != app_of(victim), "the first process's eviction still counts"
    everything = [victim, *evicted(second)]
    check_no_window_broken(everything)
    assert sorted(app_of(r) for r in everything) == sorted(APPS)
    assert len(control_plane.running_pods(namespace)) == 6, "the ReplicaSets replaced both"


def test_the_standby_rebuilds_the_records_when_it_takes_the_lease_and_acts_at_once(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    with hot(control_plane, admin_api, namespace, usage_backend):
        kubeconfig = control_plane.kubeconfig
        ports = [Ports.free(), Ports.free()]
        cfgs = [config(usage_backend, p, namespace, tmp_path, f"replica-{i}") for i, p in enumerate(ports)]
        with (
            run_descheduler(cfgs[0], kubeconfig, ports[0], tmp_path, "replica-0") as one,
            run_descheduler(cfgs[1], kubeconfig, ports[1], tmp_path, "replica-1") as two,
        ):
            one.wait_ready(timeout=30)
            two.wait_ready(timeout=30)
            leader = one.wait_for(
                lambda: (
                    one if one.events("leader_elected") else two if two.events("leader_elected") else None
                ),
                timeout=30,
                what="a leader",
            )
            standby = two if leader is one else one
            victim = kill_after_first_eviction(leader)
            killed = time.monotonic()
            found = standby.wait_for(
                lambda: evicted(standby), timeout=WINDOW - 5, what="the standby's eviction"
            )
            seconds = time.monotonic() - killed
            standby.terminate()
    print(f"\nfailover on the real control plane: standby's first eviction {seconds:.2f}s after the kill")
    assert standby.events("state_rebuilt")
    assert app_of(found[0]) != app_of(victim)
    check_no_window_broken([victim, *evicted(standby)])
