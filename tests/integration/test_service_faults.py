"""Fault injection against ``descheduler run``: the stand-in API server misbehaves, the limits still hold.

Each test starts a real subprocess on a small cluster whose hot node hosts four pods of one Deployment
(removing one is not enough to cool it, so the planner always wants more), injects one fault, and
checks the invariants from the server's side (eviction requests as it recorded them) and from the
process's logs. Each prints its figures (evictions, limit violations, time to detect and to recover)
for the issue's closing note; run with ``-s`` to see them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.apiserver import Fault, RecordedRequest
from tests.integration.service_fixtures import (
    Cluster,
    Descheduler,
    Ports,
    UsageBackend,
    evictions,
    kubeconfig_of,
    live_cluster,
    metric_samples,
    run_descheduler,
    service_config,
    usage_backend,
    write_config,
)

pytestmark = pytest.mark.integration
__all__ = ["usage_backend"]  # a fixture: imported so pytest finds it

WINDOW = 3.0
"""objectLimiters.workload: at most one eviction of the Deployment per this many seconds."""
CONSECUTIVE = 2


def _crowded_hot_node(cluster: Cluster) -> None:
    cluster.node("f-hot")
    cluster.node("f-cool-1", cpu=8)
    cluster.node("f-cool-2", cpu=8)
    pods = {f"web-{i}": ("f-hot", 0.9) for i in range(1, 5)}
    pods.update({"web-5": ("f-cool-1", 0.2), "web-6": ("f-cool-2", 0.2)})
    cluster.deployment("web", pods)


def _config(workdir: Path, backend: UsageBackend, ports: Ports, **extra: Any) -> Path:
    doc = service_config(
        prometheus_url=backend.url, ports=ports, consecutive_abnormalities=CONSECUTIVE, interval="1s"
    )
    mc = doc["profiles"][0]["pluginConfig"][1]["args"]
    mc["objectLimiters"] = {"workload": {"duration": f"{WINDOW:g}s", "maxMigrating": 1}}
    doc.update(extra)
    return write_config(workdir / "config.yaml", doc)


@contextmanager
def _running(
    tmp_path: Path, backend: UsageBackend, build: Callable[[Cluster], None] = _crowded_hot_node
) -> Iterator[tuple[Cluster, Descheduler]]:
    with live_cluster(tmp_path, backend, build) as cluster:
        ports = Ports.free()
        config = _config(tmp_path, backend, ports)
        with run_descheduler(config, kubeconfig_of(cluster.server), ports, tmp_path) as proc:
            proc.wait_ready()
            yield cluster, proc


def window_violations(requests: Sequence[RecordedRequest], window: float, allowed: int) -> int:
    """Evictions beyond ``allowed`` in any ``window`` (a little shorter, for the two clocks' jitter)."""
    times = sorted(r.at for r in requests)
    span = window - 0.25
    return sum(1 for i, t in enumerate(times) if sum(1 for u in times[: i + 1] if t - u < span) > allowed)


def resolved_metric(proc: Descheduler) -> list[tuple[dict[str, str], float]]:
    return metric_samples(proc.get("/metrics")[1], "descheduler_unknown_evictions_resolved_total")


def figures(name: str, **values: Any) -> None:
    print(f"\nFAULT {name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))


@pytest.mark.parametrize(
    "fault",
    [
        Fault(subresource="eviction", status=504, apply_first=True, message="upstream timed out"),
        Fault(subresource="eviction", drop=True, apply_first=True),
    ],
    ids=["applied-then-504", "applied-then-connection-reset"],
)
def test_evictions_of_unknown_outcome_count_against_every_limit_and_are_confirmed(
    fault: Fault, usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with _running(tmp_path, usage_backend) as (cluster, proc):
        server = cluster.server
        server.inject(fault)
        proc.wait_for(lambda: len(evictions(server)) >= 2, timeout=30, what="two evictions")
        proc.wait_for(
            lambda: len(proc.events("eviction_resolved")) >= 2, timeout=10, what="both to be confirmed"
        )
        proc.wait_for(
            lambda: ({"result": "evicted"}, 2.0) in resolved_metric(proc),
            timeout=5,
            what="the resolutions in /metrics",
        )
        proc.terminate()
    sent = evictions(server)
    logged = proc.events("eviction")
    cycles = [e["cycle"] for e in logged]
    resolved = proc.events("eviction_resolved")
    violations = window_violations(sent, WINDOW, 1)
    too_soon = sum(1 for a, b in itertools.pairwise(cycles) if b - a < CONSECUTIVE)
    figures(
        fault.message or "reset",
        evictions=len(sent),
        limit_violations=violations + too_soon,
        detect_seconds=max(r["seconds_unknown"] for r in resolved),
    )
    assert {e["result"] for e in logged} == {"unknown"}
    assert violations == 0, "objectLimiters.workload exceeded"
    assert too_soon == 0, f"a node was evicted from again before its anomaly count rebuilt: cycles {cycles}"
    assert {r["result"] for r in resolved} == {"evicted"}
    reasons = [e["reason"] for e in server.list("events", "default")]
    assert reasons.count("EvictionOutcomeUnknown") >= 2
    assert reasons.count("Descheduled") >= 2
    assert "EvictionFailed" not in reasons
