"""Fault injection against ``descheduler run``: the stand-in API server misbehaves, the limits still hold.

Each test starts a real subprocess on a small cluster whose hot node hosts four pods of one Deployment
(removing one is not enough to cool it, so the planner always wants more), injects one fault, and
checks the invariants from the server's side (eviction requests as it recorded them) and from the
process's logs. Each prints its figures (evictions, limit violations, time to detect and to recover)
for the issue's closing note; run with ``-s`` to see them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver import Fault, RecordedRequest
from tests.integration.service_fixtures import Cluster, evictions, kubeconfig_of, live_cluster
from tests.support.service import (
    Descheduler,
    Ports,
    UsageBackend,
    metric_samples,
    run_descheduler,
    service_config,
    write_config,
)

pytestmark = pytest.mark.integration

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


def _last_replica_on_hot_node(cluster: Cluster) -> None:
    cluster.node("f-hot")
    cluster.node("f-cool-1", cpu=8)
    cluster.node("f-cool-2", cpu=8)
    pods = {"web-1": ("f-hot", 0.2)}
    pods.update({f"web-{i}": (f"f-cool-{i % 2 + 1}", 0.1) for i in range(2, 7)})
    cluster.deployment("web", pods)


def test_a_silently_stalled_watch_is_replaced_and_no_cycle_acts_on_the_stale_cache(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    """While the connections are silent the Deployment is scaled from 6 to 1 and its last pod's node gets
    hot: evicting it would be an outage, which only a stale cache could not see."""
    with live_cluster(tmp_path, usage_backend, _last_replica_on_hot_node) as cluster:
        server = cluster.server
        ports = Ports.free()
        config = _config(
            tmp_path, usage_backend, ports, watchCache={"watchTimeout": "2s", "maxStaleness": "3s"}
        )
        with run_descheduler(config, kubeconfig_of(server), ports, tmp_path) as proc:
            proc.wait_ready()
            proc.wait_for(lambda: len(proc.events("cycle_summary")) >= 2, timeout=10, what="two cycles")
            assert server.stall_watches() >= 5
            stalled = time.monotonic()
            _scale_web_to_one_behind_the_cache(cluster)
            not_ready_at = proc.wait_for(
                lambda: time.monotonic() if proc.get("/readyz")[0] == 503 else None,
                timeout=10,
                what="/readyz to report the stale cache",
            )
            ready_again_at = proc.wait_for(
                lambda: time.monotonic() if proc.get("/readyz")[0] == 200 else None,
                timeout=15,
                what="the stalled watches to be replaced",
            )
            proc.wait_for(
                lambda: any(s["skips"].get("replicas-1") for s in proc.events("cycle_summary")),
                timeout=20,
                what="the hotspot's last replica to be skipped as replicas-1",
            )
            readyz_text = proc.get("/readyz")[1]
            proc.terminate()
    skipped = proc.events("cycle_skipped")
    figures(
        "stalled-watches",
        evictions=len(evictions(server)),
        limit_violations=len(evictions(server)),
        detect_seconds=round(not_ready_at - stalled, 1),
        recover_seconds=round(ready_again_at - stalled, 1),
        cycles_skipped=len(skipped),
    )
    assert evictions(server) == [], "the last replica was evicted on a stale cache"
    assert skipped and all(s["code"] == "stale-cache" for s in skipped)
    assert "watch cache stale" in skipped[0]["reason"]
    assert readyz_text.strip() in ("ok", "")


def _scale_web_to_one_behind_the_cache(cluster: Cluster) -> None:
    """On the server only (the watches are silent): 6 -> 1 replicas, and the last replica's node gets hot."""
    server = cluster.server
    server.patch("deployments", "default", "web", {"spec": {"replicas": 1}}, group="apps")
    rs = server.list("replicasets", "default", group="apps")[0]["metadata"]["name"]
    server.patch("replicasets", "default", rs, {"spec": {"replicas": 1}}, group="apps")
    for i in range(2, 7):
        server.delete("pods", "default", f"web-{i}")
        cluster.usage.remove_pod("default", f"web-{i}")
    cluster.usage.set_pod_cores("default", "web-1", 3.2)


def test_with_default_watch_settings_a_stalled_cache_cannot_evict_a_workload_scaled_down_meanwhile(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    """The watches go silent (noticed only after their read timeout, 15 s by default) and the Deployment
    is scaled from 6 to 1: the cache still says 6 when the hotspot is confirmed, the server says 1. The
    read right before the eviction sees it, nothing is sent, and the cache is listed again at once."""
    with live_cluster(tmp_path, usage_backend, _last_replica_on_hot_node) as cluster:
        server = cluster.server
        ports = Ports.free()
        config = _config(tmp_path, usage_backend, ports)  # watchCache: the defaults
        with run_descheduler(config, kubeconfig_of(server), ports, tmp_path) as proc:
            proc.wait_ready()
            proc.wait_for(lambda: len(proc.events("cycle_summary")) >= 2, timeout=10, what="two cycles")
            assert server.stall_watches() >= 5
            stalled = time.monotonic()
            _scale_web_to_one_behind_the_cache(cluster)
            stopped = proc.wait_for(
                lambda: proc.events("eviction_not_verified"), timeout=15, what="the server's copy to stop it"
            )
            stopped_at = time.monotonic()
            proc.wait_for(
                lambda: any(s["skips"].get("replicas-1") for s in proc.events("cycle_summary")),
                timeout=10,
                what="the re-listed cache to skip the last replica as replicas-1",
            )
            relisted_at = time.monotonic()
            verified = metric_samples(proc.get("/metrics")[1], "descheduler_eviction_verify_requests_total")
            proc.terminate()
    figures(
        "stalled-watches-default-settings",
        evictions=len(evictions(server)),
        stopped_after_seconds=round(stopped_at - stalled, 1),
        relisted_after_seconds=round(relisted_at - stalled, 1),
        verify_requests=verified,
    )
    assert evictions(server) == [], "the last replica was evicted on a stale cache"
    assert stopped[0]["code"] in ("verify-workload-changed", "verify-pod-changed")
    assert "deployments" in stopped[0]["resync"] or "pods" in stopped[0]["resync"]
    assert relisted_at - stalled < 15, "the disagreement re-lists the cache before the watch times out"


def test_evictions_the_server_applies_after_the_client_gave_up_never_break_the_workload_window(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    """Every other eviction is applied 3 s after it arrived, long after the client (1 s cycles) gave up:
    its outcome is unknown and it counts in the objectLimiters window until the cache shows it applied,
    so by the server's own apply times no two evictions of the Deployment fall in one window."""
    latency = 3.0
    slowed: list[RecordedRequest] = []
    turn = itertools.count()

    def slow_every_other(request: RecordedRequest) -> bool:
        if next(turn) % 2:
            return False
        slowed.append(request)
        return True

    with _running(tmp_path, usage_backend) as (cluster, proc):
        server = cluster.server
        server.inject(Fault(subresource="eviction", latency=latency, when=slow_every_other))
        proc.wait_for(lambda: len(evictions(server)) >= 2, timeout=40, what="two evictions")
        proc.wait_for(lambda: proc.events("eviction_resolved"), timeout=15, what="the slow one to resolve")
        proc.terminate()
    sent = evictions(server)
    late = {id(r) for r in slowed}
    applied = sorted(r.at + (latency if id(r) in late else 0.0) for r in sent)
    violations = sum(
        1 for i, t in enumerate(applied) if sum(1 for u in applied[: i + 1] if t - u < WINDOW - 0.25) > 1
    )
    figures(
        "applied-after-the-client-gave-up",
        evictions=len(sent),
        slowed=len(slowed),
        apply_gaps=[round(b - a, 2) for a, b in itertools.pairwise(applied)],
        window_violations=violations,
    )
    assert slowed, "the first eviction was slowed"
    assert "unknown" in {e["result"] for e in proc.events("eviction")}
    assert violations == 0, "by the server's apply times, objectLimiters.workload was exceeded"
