"""The live service's health port on the real control plane (issue 37, point 18): ``/debug/cache`` is
served only with ``run --debug-cache``, then as the digest of the watch cache published at the start of
each cycle; flooded by 80 clients, every kubelet-like liveness probe (a fresh connection every 0.5 s, 1 s
timeout) is still answered 200. 127.0.0.1 only, the flood bounded to a few seconds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import hot_cluster_serving_usage, loop_config
from tests.support import flood, service

pytestmark = pytest.mark.controlplane

FLOOD_SECONDS = 6.0


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[KubeApi]:
    client = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    yield client
    client.close()


def test_debug_cache_is_opt_in_per_cycle_and_its_flood_never_starves_the_liveness_probe(
    control_plane: ControlPlane,
    api: KubeApi,
    usage_backend: service.UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    with hot_cluster_serving_usage(control_plane, api, namespace, usage_backend):
        plain = run_one(control_plane, usage_backend.url, namespace, tmp_path / "plain", ())
        assert plain[0] == 404, "off by default"
        status, body, probes, answered = run_one(
            control_plane, usage_backend.url, namespace, tmp_path / "debug", ("--debug-cache",)
        )
        pods_here = len(control_plane.running_pods(namespace))
    assert status == 200
    digest = json.loads(body)
    assert digest["pods"]["count"] >= pods_here > 0 and len(digest["pods"]["digest"]) == 64
    assert set(digest) >= {"nodes", "pods", "interner"}
    missed = [(p.status, round(p.seconds, 3)) for p in probes if not p.answered]
    assert not missed, f"{len(missed)} of {len(probes)} liveness probes missed under the flood: {missed}"
    assert len(probes) >= 8 and answered >= 80


def run_one(
    plane: ControlPlane, prometheus: str, namespace: str, workdir: Path, args: tuple[str, ...]
) -> tuple[int, str, list[flood.Probe], int]:
    """``descheduler run`` (dry-run) with ``args``: /debug/cache after its first cycle, and with the
    flag, the liveness probes while 80 clients flood /debug/cache."""
    workdir.mkdir(parents=True)
    ports = service.Ports.free()
    doc = loop_config(prometheus, ports, namespace, dry_run=True)
    config = service.write_config(workdir / "config.yaml", doc)
    with service.run_descheduler(config, plane.kubeconfig, ports, workdir, args=args) as proc:
        proc.wait_ready(timeout=60)
        proc.wait_for(lambda: proc.events("cycle_summary"), timeout=60, what="a cycle")
        status, body = proc.get("/debug/cache")
        flooded = flood.flooded(ports.healthz, "/debug/cache", 80, FLOOD_SECONDS) if args else ([], 0)
        probes, answered = flooded
        proc.terminate()
    return status, body, probes, answered
