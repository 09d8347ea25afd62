"""The hotspot taint's life cycle through ``descheduler run``, test API server and real Prometheus.

With ``hotspotTaint.enabled`` a node over its high threshold gets our ``PreferNoSchedule`` taint before any
pod is evicted from it, keeps it while it stays hot, and loses it after ``removeAfterCycles`` normal or low
cycles, on SIGTERM, or (left behind by a killed leader) at once when a new leader finds it cool. A taint
of someone else on the same node is never touched, and dry-run writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from descheduler.planner.steer import TAINT_EFFECT, TAINT_KEY
from tests.apiserver import ApiServer, RecordedRequest, objects
from tests.integration.service_fixtures import (
    Cluster,
    evictions,
    kubeconfig_of,
    lease_holder,
    live_cluster,
    load_rbac_rules,
    rbac_allows,
    shipped_rbac_rules,
)
from tests.support.service import (
    GI,
    LEASE,
    MANIFESTS,
    Descheduler,
    Ports,
    UsageBackend,
    run_descheduler,
    service_config,
    write_config,
)

pytestmark = pytest.mark.integration

TEAM = {"key": "team", "value": "a", "effect": "PreferNoSchedule"}
OURS = {"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT}


def _cluster(prefix: str, *, movable: bool) -> Callable[[Cluster], None]:
    """A 4-core node (already tainted by its team) hosting the pod that will get hot, two idle 8-core
    nodes. ``movable``: the pod belongs to a 3-replica Deployment; else to a 1-replica one (never moved,
    so the node stays hot)."""

    def build(cluster: Cluster) -> None:
        cluster.server.create(objects.node(f"{prefix}-hot", cpu="4", memory="16Gi", taints=[TEAM]))
        cluster.usage.add_node(f"{prefix}-hot", base_cores=0.3, cpus=4, mem_total=16 * GI)
        cluster.node(f"{prefix}-cool-1", cpu=8)
        cluster.node(f"{prefix}-cool-2", cpu=8)
        if movable:
            pods = {f"{prefix}-app-hot": (f"{prefix}-hot", 0.2), f"{prefix}-app-2": (f"{prefix}-cool-1", 0.2)}
            pods[f"{prefix}-app-3"] = (f"{prefix}-cool-2", 0.2)
        else:
            pods = {f"{prefix}-app-hot": (f"{prefix}-hot", 0.2)}
        cluster.deployment(f"{prefix}-app", pods)

    return build


def _config(workdir: Path, backend: UsageBackend, ports: Ports, *, dry_run: bool = False) -> Path:
    doc = service_config(prometheus_url=backend.url, ports=ports, dry_run=dry_run)
    args = doc["profiles"][0]["pluginConfig"][0]["args"]
    args["hotspotTaint"] = {"enabled": True, "removeAfterCycles": 2}
    return write_config(workdir / "config.yaml", doc)


def taints(server: ApiServer, node: str) -> list[dict[str, Any]]:
    found = server.get("nodes", "", node) or {}
    return list(found.get("spec", {}).get("taints") or [])


def tainted(server: ApiServer, node: str) -> bool:
    return OURS in taints(server, node)


def node_patches(server: ApiServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.resource == "nodes" and r.verb == "patch"]


def taint_lines(proc: Descheduler, action: str) -> list[dict[str, Any]]:
    return [e for e in proc.events("node_taint") if e.get("action") == action]


def node_event_reasons(server: ApiServer, node: str) -> list[str]:
    return [
        e["reason"]
        for e in server.list("events", "default", group="events.k8s.io")
        if e["regarding"]["kind"] == "Node" and e["regarding"]["name"] == node
    ]


# --- a hotspot that is cured: added, then removed after cooling --------------------------------------------


@dataclass
class Cured:
    proc: Descheduler
    server: ApiServer
    taints_while_hot: list[dict[str, Any]]
    requests: list[RecordedRequest]
    events: list[str]


@pytest.fixture(scope="module")
def cured(usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cured]:
    workdir = tmp_path_factory.mktemp("taint-cured")
    with live_cluster(workdir, usage_backend, _cluster("tc", movable=True)) as cluster:
        server = cluster.server
        ports = Ports.free()
        with run_descheduler(
            _config(workdir, usage_backend, ports), kubeconfig_of(server), ports, workdir
        ) as proc:
            proc.wait_ready()
            proc.wait_for(lambda: len(proc.events("cycle_summary")) >= 2, timeout=15, what="two cycles")
            cluster.usage.set_pod_cores("default", "tc-app-hot", 2.8)  # 0.5 -> 3.1 of 4 cores
            proc.wait_for(lambda: tainted(server, "tc-hot"), timeout=25, what="the hotspot taint")
            while_hot = taints(server, "tc-hot")
            proc.wait_for(lambda: evictions(server), timeout=10, what="the eviction")
            proc.wait_for(lambda: not tainted(server, "tc-hot"), timeout=25, what="the taint to come off")
            proc.terminate()
            time.sleep(0.5)  # let the event writer's last request land
            yield Cured(proc, server, while_hot, list(server.requests), node_event_reasons(server, "tc-hot"))


def test_the_hotspot_is_tainted_before_its_pod_is_evicted_and_other_taints_stay_as_they_were(
    cured: Cured,
) -> None:
    assert cured.taints_while_hot == [TEAM, OURS]
    order = [
        (r.resource, r.verb, r.subresource)
        for r in cured.requests
        if (r.resource, r.verb) in (("nodes", "patch"), ("pods", "create"))
    ]
    assert order[:2] == [("nodes", "patch", ""), ("pods", "create", "eviction")]
    assert taints(cured.server, "tc-hot") == [TEAM], "only our entry came off"


def test_the_taint_comes_off_after_two_normal_or_low_cycles(cured: Cured) -> None:
    (added,) = taint_lines(cured.proc, "add")
    (removed,) = taint_lines(cured.proc, "remove")
    summaries = {s["cycle"]: s for s in cured.proc.events("cycle_summary")}
    assert removed["cycle"] - added["cycle"] >= 2
    cool = [
        c for c in range(added["cycle"] + 1, removed["cycle"] + 1) if "hotspot" not in summaries[c]["nodes"]
    ]
    assert len(cool) >= 2
    assert cured.events == ["HotspotTainted", "HotspotUntainted"]


def test_node_patches_are_json_patches_that_test_the_taints_first_and_need_the_optional_component(
    cured: Cured,
) -> None:
    patches = [r for r in cured.requests if r.resource == "nodes" and r.verb == "patch"]
    assert [p.status for p in patches] == [200, 200]
    for patch in patches:
        assert patch.body[0]["op"] == "test" and patch.body[0]["path"] == "/spec/taints"
    assert not any(rbac_allows(shipped_rbac_rules(), p) for p in patches)
    component = load_rbac_rules(MANIFESTS / "components" / "hotspot-taint" / "clusterrole.yaml")
    assert all(rbac_allows(shipped_rbac_rules() + component, r) for r in cured.requests if r.is_resource)


# --- a hotspot nothing can cure: kept while hot, removed on SIGTERM; a new leader cleans up -----------------


def test_the_taint_stays_while_the_node_is_hot_and_comes_off_on_sigterm(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with live_cluster(tmp_path, usage_backend, _cluster("tk", movable=False)) as cluster:
        server = cluster.server
        ports = Ports.free()
        with run_descheduler(
            _config(tmp_path, usage_backend, ports), kubeconfig_of(server), ports, tmp_path
        ) as proc:
            proc.wait_ready()
            cluster.usage.set_pod_cores("default", "tk-app-hot", 2.8)
            proc.wait_for(lambda: tainted(server, "tk-hot"), timeout=25, what="the hotspot taint")
            seen = len(proc.events("cycle_summary"))
            proc.wait_for(
                lambda: len(proc.events("cycle_summary")) >= seen + 4, timeout=15, what="4 more cycles"
            )
            assert tainted(server, "tk-hot"), "kept while hot"
            assert len(node_patches(server)) == 1, "nothing written while it stays hot"
            assert proc.terminate() == 0
        assert taints(server, "tk-hot") == [TEAM]
        (removed,) = taint_lines(proc, "remove")
        assert "shutting down" in removed["message"]


def test_a_new_leader_removes_the_taint_a_killed_leader_left_on_a_node_that_has_cooled(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with live_cluster(tmp_path, usage_backend, _cluster("tl", movable=False)) as cluster:
        server = cluster.server
        kubeconfig = kubeconfig_of(server)
        first_ports = Ports.free()
        config = _config(tmp_path, usage_backend, first_ports)
        with run_descheduler(config, kubeconfig, first_ports, tmp_path, name="first") as first:
            first.wait_ready()
            cluster.usage.set_pod_cores("default", "tl-app-hot", 2.8)
            first.wait_for(lambda: tainted(server, "tl-hot"), timeout=25, what="the hotspot taint")
            first.kill()  # no chance to clean up
        assert tainted(server, "tl-hot")
        cluster.usage.set_pod_cores("default", "tl-app-hot", 0.2)
        time.sleep(6)  # the 5 s usage window forgets the load
        with run_descheduler(config, kubeconfig, first_ports, tmp_path, name="second") as second:
            second.wait_for(
                lambda: lease_holder(server, LEASE) == second.identity, timeout=15, what="the lease"
            )
            second.wait_for(lambda: not tainted(server, "tl-hot"), timeout=15, what="the stale taint to go")
            (removed,) = second.wait_for(
                lambda: taint_lines(second, "remove"), timeout=5, what="its log line"
            )
            assert "previous leader" in removed["message"]
            assert removed["cycle"] == 1, "at once, in its first cycle as leader"
        assert taints(server, "tl-hot") == [TEAM]


def test_dry_run_taints_nothing_and_says_what_it_would_taint(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with live_cluster(tmp_path, usage_backend, _cluster("td", movable=False)) as cluster:
        server = cluster.server
        ports = Ports.free()
        config = _config(tmp_path, usage_backend, ports, dry_run=True)
        with run_descheduler(config, kubeconfig_of(server), ports, tmp_path) as proc:
            proc.wait_ready()
            cluster.usage.set_pod_cores("default", "td-app-hot", 2.8)

            def would_taint() -> list[dict[str, Any]]:
                return [
                    change
                    for audit in proc.events("audit_cycle")  # one line per cycle, then one per node and pod
                    for change in audit.get("hotspotTaints", {}).get("changes", [])
                    if change["result"] == "would-add"
                ]

            changes = proc.wait_for(would_taint, timeout=25, what="an audit saying it would taint")
            assert proc.terminate() == 0
        assert changes[0]["node"] == "td-hot" and changes[0]["action"] == "add"
        # Tainted on its first cycle over the threshold, before it is confirmed as a hotspot.
        message = changes[0]["message"]
        assert message.startswith("node is over its high threshold (not yet confirmed) (cpu usage")
        assert node_patches(server) == []
        assert taints(server, "td-hot") == [TEAM]
