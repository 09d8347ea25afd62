"""Restarts without a blind period, against ``descheduler run`` and ``descheduler once`` processes.

Each process writes a record of every eviction to the ConfigMap ``<lease>-migrations`` before sending it.
A process killed (SIGKILL) right after an eviction leaves its records behind; the next one, or the
standby that takes the Lease over, rebuilds the limits from them and evicts again in its first cycle
where the limits allow, and never beyond a limit or inside a window. When the records cannot be read
(RBAC forbids it), the old quiet period is the fallback, and the process says so. Each test prints the
time from the new process's start to its first live eviction (run with ``-s``).

The cluster: one hot node running an agent (DaemonSet, never moved) and pods of three Deployments. The
``alpha`` pods cover the node's excess best, so a process that forgot the first eviction would pick
``alpha`` again; ``objectLimiters.workload`` allows one eviction per Deployment per window, and
``maxNoOfPodsToEvictPerNode: 1`` one eviction per cycle, so every eviction is a decision on its own.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver import Fault, RecordedRequest
from tests.integration.service_fixtures import Cluster, evictions, kubeconfig_of, lease_holder, live_cluster
from tests.support.service import (
    LEASE,
    NAMESPACE,
    Descheduler,
    Ports,
    UsageBackend,
    metric_samples,
    one_eviction_per_workload,
    run_command,
    run_descheduler,
    service_config,
    write_config,
)

pytestmark = pytest.mark.integration

WINDOW = 12.0
"""objectLimiters.workload: one eviction per Deployment per this many seconds."""
RECORDS = f"{LEASE}-migrations"
HOT = "r-hot"


def build(cluster: Cluster) -> None:
    cluster.node(HOT, cpu=8)
    cluster.node("r-cool-1", cpu=16)
    cluster.node("r-cool-2", cpu=16)
    cluster.daemon_pod("r-agent", HOT, cores=2.5)
    cluster.deployment(
        "alpha", {f"alpha-{i}": (HOT, 0.8) for i in range(1, 4)} | {"alpha-4": ("r-cool-1", 0.1)}
    )
    cluster.deployment("beta", {f"beta-{i}": (HOT, 0.4) for i in range(1, 4)} | {"beta-4": ("r-cool-2", 0.1)})
    cluster.deployment(
        "gamma", {f"gamma-{i}": (HOT, 0.3) for i in range(1, 3)} | {"gamma-3": ("r-cool-2", 0.1)}
    )


def keep_hot(cluster: Cluster) -> None:
    """Play a load that moves in as pods leave: the hot node stays hot whatever was evicted."""
    gone = sum(0.8 if n.startswith("alpha") else 0.4 if n.startswith("beta") else 0.3
               for n in evicted_names(cluster))  # fmt: skip
    cluster.usage.set_pod_cores("kube-system", "r-agent", 2.5 + gone)


def evicted_names(cluster: Cluster) -> list[str]:
    return [r.name for r in evictions(cluster.server) if r.status == 201]


def config(backend: UsageBackend, ports: Ports, workdir: Path, name: str = "config") -> Path:
    doc = service_config(prometheus_url=backend.url, ports=ports, consecutive_abnormalities=1, interval="1s")
    return write_config(workdir / f"{name}.yaml", one_eviction_per_workload(doc, WINDOW))


def workload(pod: str) -> str:
    return pod.rsplit("-", 1)[0]


def window_violations(requests: Sequence[RecordedRequest]) -> list[tuple[str, str, float]]:
    """Pairs of evictions of one Deployment closer than the window (less a little for clock jitter)."""
    done = [r for r in requests if r.status == 201]
    out = []
    for i, later in enumerate(done):
        for earlier in done[:i]:
            if workload(earlier.name) == workload(later.name) and later.at - earlier.at < WINDOW - 0.5:
                out.append((earlier.name, later.name, round(later.at - earlier.at, 2)))
    return out


def stored_records(cluster: Cluster) -> list[dict[str, Any]]:
    cm = cluster.server.get("configmaps", NAMESPACE, RECORDS) or {}
    text = (cm.get("data") or {}).get("migrations.json")
    return list(json.loads(text)["records"]) if text else []


def first_eviction_after(cluster: Cluster, proc: Descheduler, started: float, timeout: float) -> float:
    """Seconds from ``started`` to ``proc``'s first eviction request the server answered 201."""
    found = proc.wait_for(
        lambda: [r for r in evictions(cluster.server, user_agent=proc.identity) if r.status == 201],
        timeout=timeout,
        what="the new process's first eviction",
        interval=0.02,
    )
    return float(found[0].at - started)


def figures(name: str, **values: Any) -> None:
    print(f"\nRESTART {name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))


@contextmanager
def cluster_for(tmp_path: Path, backend: UsageBackend) -> Iterator[Cluster]:
    with live_cluster(tmp_path, backend, build, full_window=True) as cluster:
        yield cluster


def kill_right_after_first_eviction(cluster: Cluster, proc: Descheduler) -> RecordedRequest:
    proc.wait_for(lambda: evicted_names(cluster), timeout=30, what="the first eviction", interval=0.01)
    proc.kill()
    keep_hot(cluster)
    [first] = [r for r in evictions(cluster.server) if r.status == 201]
    return first


def test_a_process_killed_right_after_an_eviction_is_followed_by_one_that_acts_in_its_first_cycle(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with cluster_for(tmp_path, usage_backend) as cluster:
        server = cluster.server
        ports = Ports.free()
        cfg = config(usage_backend, ports, tmp_path)
        with run_descheduler(cfg, kubeconfig_of(server), ports, tmp_path, "first") as first:
            victim = kill_right_after_first_eviction(cluster, first)
        left_behind = stored_records(cluster)
        started = time.monotonic()
        with run_descheduler(cfg, kubeconfig_of(server), ports, tmp_path, "second") as second:
            seconds = first_eviction_after(cluster, second, started, timeout=WINDOW - 2)
            second.wait_for(
                lambda: len(evicted_names(cluster)) >= 3, timeout=WINDOW + 10, what="more evictions"
            )
            keep_hot(cluster)
            # Past the first window alpha may move again: the limits are a window, not a ban.
            second.wait_for(
                lambda: sum(n.startswith("alpha") for n in evicted_names(cluster)) >= 2,
                timeout=WINDOW + 10,
                what="alpha's next eviction once its window had passed",
            )
            rebuilt = second.events("state_rebuilt")
            rebuilds = metric_samples(second.get("/metrics")[1], "descheduler_state_rebuilds_total")
            second.terminate()
    figures("sigkill", first_eviction_after_start_seconds=round(seconds, 2), window_seconds=WINDOW)
    assert workload(victim.name) == "alpha", "the pod that covers the excess best goes first"
    assert [(r["pod"], r["status"], r["workload"]["kind"], r["workload"]["name"]) for r in left_behind] in (
        [(f"default/{victim.name}", "evicted", "Deployment", "alpha")],
        [(f"default/{victim.name}", "intent", "Deployment", "alpha")],  # killed before the confirmation
    )
    assert rebuilt and rebuilt[0]["migrations"] == 1
    assert ({"result": "rebuilt", "reason": "ok"}, 1.0) in rebuilds
    sent = evictions(server)
    assert window_violations(sent) == []
    second_ones = [r.name for r in sent if second.identity in r.user_agent and r.status == 201]
    assert workload(second_ones[0]) != "alpha", "the first process's eviction still counts"
    assert max(Counter(r.name for r in sent if r.status == 201).values()) == 1, "no pod is evicted twice"


def test_when_rbac_forbids_the_records_the_quiet_period_is_the_fallback_and_says_why(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with cluster_for(tmp_path, usage_backend) as cluster:
        server = cluster.server
        server.inject(Fault(resource="configmaps", status=403, message="configmaps is forbidden"))
        ports = Ports.free()
        cfg = config(usage_backend, ports, tmp_path)
        started = time.monotonic()
        with run_descheduler(cfg, kubeconfig_of(server), ports, tmp_path, "forbidden") as proc:
            seconds = first_eviction_after(cluster, proc, started, timeout=WINDOW + 15)
            failed = proc.events("state_rebuild_failed")
            metrics = proc.get("/metrics")[1]
            proc.terminate()
    figures(
        "rbac-forbidden fallback (the old behaviour)", first_eviction_after_start_seconds=round(seconds, 2)
    )
    assert seconds >= WINDOW
    assert [(f["reason"], f["quiet_seconds"] > WINDOW - 1) for f in failed] == [("forbidden", True)]
    assert ({"result": "fallback", "reason": "forbidden"}, 1.0) in metric_samples(
        metrics, "descheduler_state_rebuilds_total"
    )
    writes = [r for r in server.requests if r.resource == "configmaps" and r.verb in ("create", "update")]
    assert writes == [], "a successor could not read records either: none are written"


def test_the_standby_that_takes_the_lease_over_rebuilds_the_records_and_acts_at_once(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with cluster_for(tmp_path, usage_backend) as cluster:
        server = cluster.server
        kubeconfig = kubeconfig_of(server)
        ports = [Ports.free(), Ports.free()]
        configs = [config(usage_backend, p, tmp_path, f"replica-{i}") for i, p in enumerate(ports)]
        with (
            run_descheduler(configs[0], kubeconfig, ports[0], tmp_path, "replica-0") as leader,
            run_descheduler(configs[1], kubeconfig, ports[1], tmp_path, "replica-1") as standby,
        ):
            leader.wait_for(lambda: lease_holder(server, LEASE) != "", timeout=15, what="a leader")
            if lease_holder(server, LEASE) == standby.identity:
                leader, standby = standby, leader
            kill_right_after_first_eviction(cluster, leader)
            killed = time.monotonic()
            standby.wait_for(
                lambda: lease_holder(server, LEASE) == standby.identity, timeout=15, what="the takeover"
            )
            took_over = time.monotonic()
            seconds = first_eviction_after(cluster, standby, took_over, timeout=WINDOW - 4)
            standby.terminate()
    figures(
        "failover",
        takeover_seconds=round(took_over - killed, 2),
        first_eviction_after_takeover_seconds=round(seconds, 2),
    )
    sent = evictions(server)
    assert window_violations(sent) == []
    by_standby = [r.name for r in sent if standby.identity in r.user_agent and r.status == 201]
    assert by_standby and workload(by_standby[0]) != "alpha"
    assert standby.events("state_rebuilt"), "the standby read the records when it took the Lease"


def test_a_cronjob_of_once_respects_the_window_across_runs(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    with cluster_for(tmp_path, usage_backend) as cluster:
        cfg = config(usage_backend, Ports.free(), tmp_path)
        runs = []
        for _ in range(3):
            done = run_command(
                "once", "--config", str(cfg), "--kubeconfig", str(kubeconfig_of(cluster.server)),
                "--output", "json", timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            runs.append(json.loads(done.stdout))
            keep_hot(cluster)
    moved = [[e["pod"] for e in run["evictions"] if e["result"] == "evicted"] for run in runs]
    figures("once x3", evicted=moved)
    assert [len(m) for m in moved] == [1, 1, 1]
    assert [workload(m[0].split("/")[1]) for m in moved] == ["alpha", "beta", "gamma"]
    assert [run["restore"]["migrations"] for run in runs] == [0, 1, 2]
