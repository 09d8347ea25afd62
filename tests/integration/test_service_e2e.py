"""``descheduler run`` end to end: a real subprocess against the test API server and a real Prometheus.

Two runs are made once per module and examined by the tests below. The live run sees a hotspot appear
(one pod's CPU use rises after the service has run healthy cycles), confirms it over two cycles, evicts
that pod through ``pods/eviction``, and watches the node cool down; then it is stopped with SIGTERM. The
dry-run run audits the same kind of hotspot every cycle without changing anything, and shows the
server-side check both passing and refused by a PodDisruptionBudget. Every request either run made is
then checked against the shipped RBAC rules.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.apiserver import Fault, RecordedRequest
from tests.apiserver.objects import pdb
from tests.integration.service_fixtures import (
    Cluster,
    evictions,
    is_dry_run,
    kubeconfig_of,
    lease_holder,
    live_cluster,
    rbac_allows,
    shipped_rbac_rules,
)
from tests.support.service import (
    LEASE,
    NAMESPACE,
    Descheduler,
    UsageBackend,
    metric_samples,
    run_command,
    run_descheduler,
    written_config,
)

pytestmark = pytest.mark.integration

HOT_NODE = "e2e-hot"
HOT_POD = "web-hot"
REASON = re.compile(r"node is overutilized, node cpu usage\((\d+\.\d\d)%\)>threshold\(70\.00%\)")


def _one_hotspot_cluster(prefix: str, app: str, hot_cores: float) -> Callable[[Cluster], None]:
    """A 4-core node hosting one evictable pod (``<app>-hot``, using ``hot_cores``), a DaemonSet pod and
    a kube-system pod; two idle 8-core nodes hosting the other replicas."""

    def build(cluster: Cluster) -> None:
        cluster.node(f"{prefix}-hot")
        cluster.node(f"{prefix}-cool-1", cpu=8)
        cluster.node(f"{prefix}-cool-2", cpu=8)
        cluster.deployment(
            app,
            {
                f"{app}-hot": (f"{prefix}-hot", hot_cores),
                f"{app}-2": (f"{prefix}-cool-1", 0.2),
                f"{app}-3": (f"{prefix}-cool-2", 0.2),
            },
        )
        cluster.deployment(
            "dns", {f"dns-{prefix}": (f"{prefix}-hot", 0.1), f"dns-{prefix}-2": (f"{prefix}-cool-1", 0.1)},
            namespace="kube-system",
        )  # fmt: skip
        cluster.daemon_pod(f"agent-{prefix}", f"{prefix}-hot")

    return build


def _pod_names(cluster: Cluster) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in cluster.server.list("pods")}


# --- the live run ------------------------------------------------------------------------------------------


@dataclass
class LiveRun:
    proc: Descheduler
    requests: list[RecordedRequest]
    pods_before: set[str]
    pods_after: set[str]
    pod_uid: str
    kube_events: list[dict[str, Any]]
    cycles_before_hot: int
    metrics: str
    health: dict[str, int]
    holder_while_running: str
    lease_after: dict[str, Any]


@pytest.fixture(scope="module")
def live(usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    workdir = tmp_path_factory.mktemp("live")
    with live_cluster(workdir, usage_backend, _one_hotspot_cluster("e2e", "web", 0.2)) as cluster:
        server = cluster.server
        pods_before = _pod_names(cluster)
        pod_uid = (server.get("pods", "default", HOT_POD) or {})["metadata"]["uid"]
        config, ports = written_config(workdir / "config.yaml", usage_backend.url)
        with run_descheduler(config, kubeconfig_of(server), ports, workdir) as proc:
            proc.wait_ready()
            proc.wait_for(lambda: lease_holder(server, LEASE) == proc.identity, timeout=10, what="the lease")
            proc.wait_for(lambda: len(proc.events("cycle_summary")) >= 2, timeout=10, what="two cycles")
            cycles_before_hot = len(proc.events("cycle_summary"))
            cluster.usage.set_pod_cores("default", HOT_POD, 2.8)  # the hotspot appears: 0.7 -> 3.3 of 4 cores
            proc.wait_for(lambda: evictions(server), timeout=25, what="an eviction")

            def cooled() -> bool:
                evicted_in = [e["cycle"] for e in proc.events("eviction")]
                return bool(evicted_in) and any(
                    s["cycle"] > evicted_in[0] and s["nodes"] == {"low": 3}
                    for s in proc.events("cycle_summary")
                )

            proc.wait_for(cooled, timeout=20, what="the node to cool down after the eviction")
            proc.wait_for(
                lambda: any(e["reason"] == "Descheduled" for e in server.list("events", "default")),
                timeout=10,
                what="the Descheduled event",
            )
            metrics = proc.get("/metrics")[1]
            health = {path: proc.get(path)[0] for path in ("/healthz", "/readyz", "/livez", "/nothing")}
            holder = lease_holder(server, LEASE)
            proc.terminate()
            result = LiveRun(
                proc=proc,
                requests=server.requests,
                pods_before=pods_before,
                pods_after=_pod_names(cluster),
                pod_uid=pod_uid,
                kube_events=server.list("events", "default"),
                cycles_before_hot=cycles_before_hot,
                metrics=metrics,
                health=health,
                holder_while_running=holder,
                lease_after=server.get("leases", NAMESPACE, LEASE, group="coordination.k8s.io") or {},
            )
    yield result


def test_the_hot_pod_and_only_it_is_evicted_through_the_eviction_subresource(live: LiveRun) -> None:
    calls = [r for r in live.requests if r.resource == "pods" and r.verb in ("create", "delete", "update")]
    assert [(r.verb, r.subresource, r.namespace, r.name, r.status) for r in calls] == [
        ("create", "eviction", "default", HOT_POD, 201)
    ]
    body = calls[0].body
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    preconditions = body["deleteOptions"]["preconditions"]
    assert preconditions["uid"] == live.pod_uid
    assert preconditions["resourceVersion"], "the pod's version as verified right before: one step"
    assert set(preconditions) == {"uid", "resourceVersion"}
    assert not is_dry_run(calls[0])
    assert live.pods_before - live.pods_after == {f"default/{HOT_POD}"}
    assert live.pods_after < live.pods_before


def test_the_hotspot_appears_after_healthy_cycles_and_is_confirmed_on_the_second_cycle_over(
    live: LiveRun,
) -> None:
    summaries = live.proc.events("cycle_summary")
    assert [s["cycle"] for s in summaries] == list(range(1, len(summaries) + 1))
    healthy = summaries[: live.cycles_before_hot]
    assert healthy and all(s["hotspots"] == 0 and "over" not in s["nodes"] for s in healthy)
    acting = [i for i, s in enumerate(summaries) if s["evictions"]]
    assert len(acting) == 1, [s["evictions"] for s in summaries]
    i = acting[0]
    assert summaries[i]["evictions"] == {"evicted": 1}
    assert summaries[i]["nodes"].get("hotspot") == 1 and summaries[i]["hotspots"] == 1
    assert summaries[i - 1]["nodes"].get("over") == 1, "consecutiveAbnormalities 2: one cycle over first"
    assert summaries[-1]["nodes"] == {"low": 3}, "the load left with the pod"


def test_a_descheduled_event_names_the_node_and_the_reason_in_koordinators_wording(live: LiveRun) -> None:
    (eviction_line,) = live.proc.events("eviction")
    assert REASON.fullmatch(eviction_line["reason"]), eviction_line["reason"]
    on_pod = [e for e in live.kube_events if e["involvedObject"]["name"] == HOT_POD]
    assert [(e["type"], e["reason"], e["message"]) for e in on_pod] == [
        (
            "Normal",
            "Descheduled",
            f'Pod evicted from node "{HOT_NODE}" by the reason "{eviction_line["reason"]}"',
        )
    ]
    assert on_pod[0]["involvedObject"]["uid"] == live.pod_uid
    assert all(e["involvedObject"]["name"] == HOT_POD for e in live.kube_events), "events on other pods"


def test_metrics_count_the_eviction_and_classify_every_node(live: LiveRun) -> None:
    evicted = metric_samples(live.metrics, "descheduler_pods_evicted_total")
    assert evicted == [
        (
            {
                "result": "evicted",
                "reason": "overutilized",
                "strategy": "LowNodeLoad",
                "profile": "load-aware",
                "node": HOT_NODE,
                "namespace": "default",
                "workload_kind": "Deployment",
                "workload": "web",
            },
            1.0,
        )
    ]
    classes = metric_samples(live.metrics, "descheduler_node_classification")
    current = {labels["node"]: labels["class"] for labels, value in classes if value == 1.0}
    assert current == {"e2e-hot": "low", "e2e-cool-1": "low", "e2e-cool-2": "low"}
    assert len(classes) == 3 * 5, "one series per node and class"
    assert metric_samples(live.metrics, "descheduler_leader") == [({}, 1.0)]
    assert metric_samples(live.metrics, "descheduler_dry_run") == [({}, 0.0)]
    ((_, sample_age),) = metric_samples(live.metrics, "descheduler_usage_sample_age_seconds")
    assert 0.0 < sample_age < 10.0, "Prometheus scrapes every second: its newest samples are seconds old"
    ((_, cache_age),) = metric_samples(live.metrics, "descheduler_cache_age_seconds")
    # Like kube-apiserver, the test server sends a bookmark about once a minute; a quiet watch is heard
    # from when the server ends it (timeoutSeconds 10 s plus up to 25% jitter) and it is opened again.
    assert 0.0 <= cache_age < 15.0, "every watch is renewed within its timeout, bookmarks or not"
    (completed,) = metric_samples(live.metrics, "descheduler_cycles_total")
    assert completed[0] == {"outcome": "completed"} and completed[1] >= live.cycles_before_hot + 3


def test_health_readiness_and_liveness_answer_200_on_one_address(live: LiveRun) -> None:
    assert live.health == {"/healthz": 200, "/readyz": 200, "/livez": 200, "/nothing": 404}


def test_logs_are_json_lines_naming_pod_node_reason_and_cycle_of_the_eviction(live: LiveRun) -> None:
    assert live.proc.non_json_lines() == []
    (eviction_line,) = live.proc.events("eviction")
    assert REASON.fullmatch(eviction_line["reason"]) and isinstance(eviction_line["cycle"], int)
    assert {k: eviction_line[k] for k in ("pod", "node", "result", "level")} == {
        "pod": f"default/{HOT_POD}",
        "node": HOT_NODE,
        "result": "evicted",
        "level": "info",
    }
    summary = [s for s in live.proc.events("cycle_summary") if s["cycle"] == eviction_line["cycle"]]
    assert len(summary) == 1 and summary[0]["evictions"] == {"evicted": 1}
    assert all("timestamp" in r and "level" in r for r in live.proc.records())
    assert "test-token" not in live.proc.stderr(), "the bearer token leaked into the log"


def test_sigterm_exits_0_within_seconds_and_releases_the_lease(live: LiveRun) -> None:
    assert live.proc.exit_code == 0
    assert live.proc.exit_seconds is not None and live.proc.exit_seconds < 5
    assert live.holder_while_running == live.proc.identity
    spec = live.lease_after["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert [r["event"] for r in live.proc.records()][-1] == "stopped"


# --- the dry run -------------------------------------------------------------------------------------------


@dataclass
class DryRun:
    proc: Descheduler
    requests: list[RecordedRequest]
    pods_before: set[str]
    pods_after: set[str]
    kube_events: list[dict[str, Any]]
    once: subprocess.CompletedProcess[str]
    refused_from_cycle: int
    metrics: str


def _audits_with(proc: Descheduler, result: str) -> list[dict[str, Any]]:
    """The audit_eviction records of shop-hot with this result, one per cycle."""
    return [
        e for e in proc.events("audit_eviction") if e["pod"] == "default/shop-hot" and e["result"] == result
    ]


@pytest.fixture(scope="module")
def dry(usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DryRun]:
    workdir = tmp_path_factory.mktemp("dry")

    def build(cluster: Cluster) -> None:
        _one_hotspot_cluster("dry", "shop", 2.8)(cluster)  # hot from the start
        cluster.server.create(pdb("shop-pdb", match_labels={"app": "shop"}, disruptions_allowed=1))

    with live_cluster(workdir, usage_backend, build) as cluster:
        server = cluster.server
        pods_before = _pod_names(cluster)
        config, ports = written_config(workdir / "config.yaml", usage_backend.url, dry_run=True)
        with run_descheduler(config, kubeconfig_of(server), ports, workdir) as proc:
            proc.wait_ready()
            proc.wait_for(lambda: _audits_with(proc, "would-evict"), timeout=25, what="a would-evict audit")

            # A one-off audit of the same cluster, as an operator would run it (a single cycle, so a
            # node must be a hotspot at its first cycle over).
            once_config, _ = written_config(
                workdir / "once.yaml", usage_backend.url, consecutive_abnormalities=1
            )
            once = run_command(
                "once", "--config", str(once_config), "--kubeconfig", str(kubeconfig_of(server)),
                "--dry-run", "--output", "json", timeout=60,
            )  # fmt: skip

            # The cache falls behind the server: its PodDisruptionBudget watch is cut and cannot come back
            # while the budget drops to 0. The planner still believes one disruption is allowed; the
            # server-side dry-run eviction is what catches it.
            server.inject(Fault(resource="poddisruptionbudgets", user_agent=proc.identity, status=503))
            server.drop_watches("poddisruptionbudgets")
            proc.wait_for(
                lambda: server.open_watches("poddisruptionbudgets") == 0, timeout=10, what="the PDB watch cut"
            )
            refused_from_cycle = len(proc.events("cycle_summary")) + 1
            server.patch(
                "poddisruptionbudgets",
                "default",
                "shop-pdb",
                {"status": {"disruptionsAllowed": 0, "currentHealthy": 2}},
                group="policy",
            )
            proc.wait_for(lambda: _audits_with(proc, "dry-run-refused"), timeout=15, what="a refused audit")
            metrics = proc.get("/metrics")[1]
            proc.terminate()
            result = DryRun(
                proc=proc,
                requests=server.requests,
                pods_before=pods_before,
                pods_after=_pod_names(cluster),
                kube_events=server.list("events"),
                once=once,
                refused_from_cycle=refused_from_cycle,
                metrics=metrics,
            )
    yield result


def test_dry_run_evicts_nothing_and_asks_the_server_only_with_dry_run_all(dry: DryRun) -> None:
    assert dry.pods_after == dry.pods_before
    calls = [r for r in dry.requests if r.resource == "pods" and r.verb in ("create", "delete", "update")]
    assert len(calls) >= 2
    assert all(r.subresource == "eviction" and r.name == "shop-hot" for r in calls)
    assert all(r.query.get("dryRun") == "All" and r.body["deleteOptions"]["dryRun"] == ["All"] for r in calls)
    assert dry.kube_events == [], "dry-run writes no events"
    assert dry.proc.exit_code == 0


def test_every_dry_run_cycle_writes_small_audit_records_per_node_eviction_and_skip_keyed_by_cycle(
    dry: DryRun,
) -> None:
    summaries = dry.proc.events("cycle_summary")
    audits = dry.proc.events("audit_cycle")
    assert [a["cycle"] for a in audits] == [s["cycle"] for s in summaries] == list(range(1, len(audits) + 1))
    assert all(a["dryRun"] is True and a["nodeCount"] == 3 for a in audits)
    last_cycle = audits[-1]["cycle"]
    nodes = {n["node"]: n for n in dry.proc.events("audit_node") if n["cycle"] == last_cycle}
    skips = [s for s in dry.proc.events("audit_skip") if s["cycle"] == last_cycle]
    counted = [s for s in dry.proc.events("audit_skip_summary") if s["cycle"] == last_cycle]
    assert audits[-1]["skipForm"] == "summarised" and audits[-1]["skipSummaryCount"] == len(counted)
    assert len(skips) + sum(s["count"] for s in counted) == audits[-1]["skipCount"]
    assert max(len(line.encode()) for line in dry.proc.log_lines()) < 16 * 1024
    assert set(nodes) == {"dry-hot", "dry-cool-1", "dry-cool-2"}
    hot = nodes["dry-hot"]
    assert hot["class"] == "hotspot" and hot["anomalyCount"] >= 2
    cpu = next(r for r in hot["resources"] if r["resource"] == "cpu")
    assert (cpu["lowPercent"], cpu["highPercent"], cpu["over"]) == (40.0, 70.0, True)
    assert {n["class"] for name, n in nodes.items() if name != "dry-hot"} == {"low"}
    skipped = {s["pod"]: s["code"] for s in skips} | {p: s["code"] for s in counted for p in s["examples"]}
    assert skipped["kube-system/agent-dry"] in ("filtered-daemonset", "filtered-namespace")


def test_the_audit_shows_the_server_side_check_passing_then_refused_by_the_disruption_budget(
    dry: DryRun,
) -> None:
    passing = _audits_with(dry.proc, "would-evict")
    refused = _audits_with(dry.proc, "dry-run-refused")
    assert passing and refused
    assert max(a["cycle"] for a in passing) < min(a["cycle"] for a in refused)
    assert min(a["cycle"] for a in refused) >= dry.refused_from_cycle
    last = dry.proc.events("audit_eviction")[-1]
    assert last in refused, "the refusal persists while the budget stays at 0"
    allowed = passing[0]
    assert allowed["message"] == "server-side dry run (Eviction) allows it"
    assert allowed["destination"] in ("dry-cool-1", "dry-cool-2") and allowed["usage"]["cpu"] > 0
    assert allowed["workload"], "the audit names the workload the pod belongs to"
    assert REASON.fullmatch(allowed["reason"])
    blocked = refused[0]
    assert "disruption budget" in blocked["message"] and "shop-pdb" in blocked["message"]
    results = {
        labels["result"] for labels, _ in metric_samples(dry.metrics, "descheduler_pods_evicted_total")
    }
    assert results == {"would-evict", "dry-run-refused"}, "metrics are emitted in dry-run too"


def test_once_dry_run_prints_the_audit_record_as_json(dry: DryRun) -> None:
    assert dry.once.returncode == 0, dry.once.stderr
    assert "Traceback" not in dry.once.stderr
    record = json.loads(dry.once.stdout)
    assert {"evictions", "nodes", "skips", "cycle", "dryRun"} <= set(record)
    assert record["dryRun"] is True and record["cycle"] == 1
    assert [(e["pod"], e["node"], e["result"]) for e in record["evictions"]] == [
        ("default/shop-hot", "dry-hot", "would-evict")
    ]
    assert {n["node"]: n["class"] for n in record["nodes"]}["dry-hot"] == "hotspot"
    assert record["skipForm"] == "summarised"  # as the service audits; --explain all lists every pod
    listed = [s["pod"] for s in record["skips"]]
    counted = [p for s in record.get("skipSummaries", []) for p in s["examples"]]
    assert "kube-system/agent-dry" in listed + counted
    once_requests = [r for r in dry.requests if "(" in r.user_agent and dry.proc.identity not in r.user_agent]
    assert once_requests, "the once process talked to the server"
    assert not [r for r in once_requests if r.resource == "leases"], "a dry-run audit needs no Lease"


# --- RBAC --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["live", "dry"])
def test_every_request_the_service_made_is_allowed_by_the_shipped_rbac_rules(
    run: str, request: pytest.FixtureRequest
) -> None:
    recorded: list[RecordedRequest] = request.getfixturevalue(run).requests
    rules = shipped_rbac_rules()
    denied = [r.describe() + f" name={r.name}" for r in recorded if not rbac_allows(rules, r)]
    assert denied == []
    made = Counter(
        (r.verb, r.group, f"{r.resource}/{r.subresource}" if r.subresource else r.resource) for r in recorded
    )
    expected = {
        ("list", "", "nodes"), ("watch", "", "nodes"), ("list", "", "pods"), ("watch", "", "pods"),
        ("list", "policy", "poddisruptionbudgets"), ("list", "apps", "replicasets"),
        ("create", "", "pods/eviction"), ("update", "coordination.k8s.io", "leases"),
    }  # fmt: skip
    if run == "live":
        expected.add(("create", "events.k8s.io", "events"))
    assert expected <= set(made), sorted(expected - set(made))


LEASES = "coordination.k8s.io"
RBAC_CASES = [
    ("evicting a pod", "create", "", "pods", "eviction", "default", "web-1", True),
    ("watching nodes", "watch", "", "nodes", "", "", "", True),
    ("renewing the descheduler's lease", "update", LEASES, "leases", "", NAMESPACE, LEASE, True),
    ("renewing another lease", "update", LEASES, "leases", "", NAMESPACE, "kube-scheduler", False),
    ("reading the lease in another namespace", "get", LEASES, "leases", "", "kube-system", LEASE, False),
    ("reading secrets", "list", "", "secrets", "", "default", "", False),
    ("creating pods", "create", "", "pods", "", "default", "", False),
    ("patching nodes (cordon)", "patch", "", "nodes", "", "", "node-1", False),
    ("writing pod status", "update", "", "pods", "status", "default", "web-1", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("verb", "group", "resource", "subresource", "namespace", "name", "allowed"),
    [case[1:] for case in RBAC_CASES],
    ids=[case[0] for case in RBAC_CASES],
)
def test_the_rbac_matcher_grants_exactly_what_the_rules_list(
    verb: str, group: str, resource: str, subresource: str, namespace: str, name: str, allowed: bool
) -> None:
    req = RecordedRequest(
        method="GET", path="/", query={}, verb=verb, is_resource=True, group=group, resource=resource,
        subresource=subresource, namespace=namespace, name=name,
    )  # fmt: skip
    assert rbac_allows(shipped_rbac_rules(), req) is allowed


def test_the_rbac_matcher_reads_both_manifests() -> None:
    sources = {rule.source for rule in shipped_rbac_rules()}
    assert sources == {
        "clusterrole.yaml ClusterRole/load-aware-descheduler",
        f"role.yaml Role/{LEASE}-leader-election",
    }
