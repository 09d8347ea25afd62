"""A node annotation cannot freeze the live service (issue 25), on the real API server.

Whoever may annotate a Node (a kubelet, koordlet) once stopped the descheduler: a
``node.koordinator.sh/raw-allocatable`` of ``{"cpu":"1e999999999"}`` made a watch thread compute
``10**999999999`` while holding the GIL, so ``/healthz`` stopped answering and SIGTERM was ignored. Here
``descheduler run`` watches such a node, one whose annotation is not JSON at all, and a healthy one:

- ``/healthz`` answers every poll in under a second, from the start to the end;
- cycles run over all three nodes: the two hostile ones fall back to ``status.allocatable``, each reported
  once in the log (``object_fallback``), however many cycles and watch events follow;
- the node's annotation changed in flight (a watch event through the fast and exact decoders) is read
  again without a freeze;
- SIGTERM stops the process within its usual bound.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import fresh_namespace, lease_namespace
from tests.controlplane.move43a_fixtures import add_node_objects
from tests.controlplane.usage import ClusterUsage
from tests.support.service import (
    Descheduler,
    Ports,
    UsageBackend,
    http_get,
    metric_samples,
    run_descheduler,
    service_config,
    write_config,
)

pytestmark = pytest.mark.controlplane

RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
HOSTILE = {
    "absurd-quantity": json.dumps({"cpu": "1e999999999"}),
    "not-json": '{"cpu": "8", memory',
}
HEALTHZ_BOUND = 1.0
CYCLES = 3
"""Cycles to see complete after the first, each over all three nodes."""
SHUTDOWN_BOUND = 10.0


@dataclass
class Observed:
    proc: Descheduler
    hostile: list[str]
    """The hostile nodes' names (prefixed with the module's namespace)."""
    healthz_seconds: list[float] = field(default_factory=list)
    healthz_statuses: list[int] = field(default_factory=list)
    exit_code: int | None = None
    metrics: str = ""


def _poll_healthz(proc: Descheduler, seen: Observed) -> None:
    started = time.monotonic()
    status, _ = http_get(proc.url("/healthz"), timeout=5.0)
    seen.healthz_seconds.append(time.monotonic() - started)
    seen.healthz_statuses.append(status)


def _summaries(proc: Descheduler) -> list[dict[str, object]]:
    return proc.events("cycle_summary")


def build(plane: ControlPlane, group: str) -> dict[str, int]:
    """A healthy node and the hostile ones (the real server stores any annotation string), two pods."""
    nodes = [objects.node(f"{group}-healthy", group)]
    for name, annotation in HOSTILE.items():
        node = objects.node(f"{group}-{name}", group)
        node["metadata"]["annotations"][RAW_ALLOCATABLE] = annotation
        nodes.append(node)
    add_node_objects(plane, group, nodes)
    plane.apply([objects.deployment("app", group, replicas=2)], namespace=group)
    plane.wait_for("the app's pods Running", lambda: len(plane.running_pods(group, "app=app")) == 2)
    return {n["metadata"]["name"]: 4 for n in nodes}


@pytest.fixture(scope="module")
def observed(
    control_plane: ControlPlane, usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    workdir = tmp_path_factory.mktemp("hostile-node")
    group = fresh_namespace(control_plane, f"hostile-node-{time.monotonic_ns() % 100000}")
    lease_namespace(control_plane)
    api = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    try:
        usage = ClusterUsage(api, group, build(control_plane, group), {"app": 0.2})
        with usage.following():
            usage_backend.install(usage.model)
            ports = Ports.free()
            doc = service_config(
                prometheus_url=usage_backend.url,
                ports=ports,
                dry_run=True,
                lease_name=f"lease-{group}",
                node_selector={"matchLabels": {objects.GROUP_LABEL: group}},
            )
            config = write_config(workdir / "config.yaml", doc)
            with run_descheduler(config, control_plane.kubeconfig, ports, workdir) as proc:
                seen = Observed(proc, [f"{group}-{name}" for name in HOSTILE])
                # Measured from the moment the endpoint listens (the process starts it before its cache).
                proc.wait_for(lambda: proc.get("/healthz")[0] != 0, timeout=30, what="/healthz to listen")

                def polled(check: object) -> object:
                    _poll_healthz(proc, seen)
                    return check() if callable(check) else check

                proc.wait_for(
                    lambda: polled(lambda: len(_summaries(proc)) >= 1), timeout=30, what="a first cycle"
                )
                # A change to a hostile node arrives as a watch event: read again, bounded as well.
                control_plane.kubectl("label", "node", f"{group}-absurd-quantity", "touched=yes")
                first = len(_summaries(proc))
                proc.wait_for(
                    lambda: polled(lambda: len(_summaries(proc)) >= first + CYCLES),
                    timeout=30,
                    what=f"{CYCLES} more cycles",
                    interval=0.1,
                )
                seen.metrics = proc.get("/metrics")[1]
                seen.exit_code = proc.terminate(timeout=SHUTDOWN_BOUND)
                yield seen
    finally:
        api.close()
        control_plane.kubectl("delete", "namespace", group, "--wait=false", check=False)
        control_plane.kubectl("delete", "nodes", "-l", f"{objects.GROUP_LABEL}={group}", "--wait=false")


def test_healthz_answers_within_a_second_throughout(observed: Observed) -> None:
    assert len(observed.healthz_seconds) >= 10
    assert set(observed.healthz_statuses) == {200}
    assert max(observed.healthz_seconds) < HEALTHZ_BOUND


def test_cycles_run_over_every_node_the_hostile_ones_on_their_allocatable(observed: Observed) -> None:
    summaries = _summaries(observed.proc)
    assert len(summaries) >= 1 + CYCLES
    for summary in summaries:
        nodes = summary["nodes"]
        assert isinstance(nodes, dict)
        assert sum(nodes.values()) == 3, summary
    assert not observed.proc.events("reflector_crashed")
    assert not observed.proc.events("object_rejected")


def test_each_fallback_is_reported_once_naming_the_node_and_the_rule(observed: Observed) -> None:
    fallbacks = observed.proc.events("object_fallback")
    assert sorted(str(f["object"]) for f in fallbacks) == sorted(observed.hostile)
    for record in fallbacks:
        warning = str(record["warning"])
        assert f"Node {record['object']}: annotation {RAW_ALLOCATABLE}" in warning
        assert "thresholds use status.allocatable" in warning


def test_every_cycles_audit_and_the_metrics_name_the_nodes_kept_with_a_fallback(observed: Observed) -> None:
    audits = observed.proc.events("audit_cycle")
    assert len(audits) >= CYCLES
    for header in audits:
        problems = header["objectProblems"]
        assert sorted(problems) == sorted(f"Node {name}" for name in observed.hostile)
        assert all(why.startswith("kept with a fallback") for why in problems.values())
    gauge = metric_samples(observed.metrics, "descheduler_cluster_objects_not_as_sent")
    assert ({"handling": "fallback"}, float(len(HOSTILE))) in gauge
    assert ({"handling": "left-out"}, 0.0) in gauge


def test_sigterm_stops_the_process_within_its_bound(observed: Observed) -> None:
    assert observed.exit_code == 0
    assert observed.proc.exit_seconds is not None and observed.proc.exit_seconds < SHUTDOWN_BOUND
