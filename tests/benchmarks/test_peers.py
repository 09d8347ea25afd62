"""The figures of the side-by-side benchmark (``benchmarks/peers.py``) rest on small pure helpers; each is
checked here without Go or a control plane: the minimum evictions a node needs, what counts as unneeded,
reading the API server's audit log, and the two configurations being the same policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.peers import (
    BASE_CORES,
    HIGH_CPU,
    HOT_PODS_PER_NODE,
    HOTSPOTS,
    LOW_CPU,
    NODE_CPUS,
    PEER_MEMORY_QUERY,
    PEER_QUERY,
    QUIET_REPLICAS,
    SHIPPED_CONFIGMAP,
    Row,
    Settings,
    arrivals,
    configmap_config,
    cycle_times,
    koord_config,
    needed_evictions,
    ours_config,
    parse_audit,
    peer_command,
    peer_policy,
    prometheus_queries,
    rows_from_json,
    shipped_config,
    spread_table,
    table,
    unneeded_evictions,
)
from descheduler.config.load import load_config_document
from tests.support.service import Ports


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        ([0.6] * 6, 2),  # 3.9 of 4 cores (97.5 %): 82.5 % after one, 67.5 % after two
        ([0.08] * 10, 0),  # 27.5 %: not hot
        ([1.5, 0.6, 0.6], 1),  # 3.0 cores (75 %): the largest pod alone is enough
        ([0.6] * 8, 4),  # 5.1 cores, capped at 4 (100 %): usage above capacity is not free to remove
        ([], 0),
    ],
    ids=["the-benchmark-hot-node", "a-cool-node", "largest-first", "over-capacity", "empty"],
)
def test_a_node_needs_the_fewest_largest_pods_that_bring_it_under_high(
    pods: list[float], expected: int
) -> None:
    assert needed_evictions(pods, base=0.3, cpus=4, high=HIGH_CPU) == expected


HOT = {f"busy-{i}": ("hot", 0.0) for i in range(6)}  # 3.9 of 4 cores: 97.5 %
CORES = {**dict.fromkeys(HOT, 0.6), "busy-new": 0.6, "quiet-0": 0.08}


@pytest.mark.parametrize(
    ("evictions", "landed", "expected"),
    [
        ([(10, "busy-0"), (10.1, "busy-1")], HOT, 0),  # 97.5 % then 82.5 %: both needed
        ([(10, "busy-0"), (12, "busy-1"), (14, "busy-2")], HOT, 1),  # the third found it at 67.5 %
        # a replacement landed back at t=13 (82.5 % again): the third is needed after all
        ([(10, "busy-0"), (12, "busy-1"), (14, "busy-2")], {**HOT, "busy-new": ("hot", 13.0)}, 0),
        ([(10, "quiet-0")], {**HOT, "quiet-0": ("cool", 0.0)}, 1),  # a cool node is never worth it
        ([(10, "gone")], HOT, 0),  # a pod never seen running is not judged
    ],
    ids=["two-needed", "one-on-a-lagging-figure", "re-cured-after-a-replacement", "cool-node", "unknown-pod"],
)
def test_an_eviction_is_unneeded_when_its_node_was_not_hot_at_that_moment(
    evictions: list[tuple[float, str]], landed: dict[str, tuple[str, float]], expected: int
) -> None:
    assert unneeded_evictions(evictions, landed, CORES, base=0.3, cpus=4, high=HIGH_CPU) == expected


def _audit(stage: str, verb: str, resource: str, sub: str | None, code: int, user: str = "sa") -> str:
    ref = {"resource": resource, "name": "busy-00-abc-xyz", "namespace": "run0"}
    if sub:
        ref["subresource"] = sub
    return json.dumps(
        {
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": "2026-11-23T15:26:24.766432Z",
        }
    )


def test_the_audit_log_yields_completed_requests_with_their_subresource_and_code() -> None:
    lines = [
        _audit("ResponseComplete", "create", "pods", "eviction", 201),
        _audit("ResponseComplete", "create", "pods", "eviction", 429),
        _audit("ResponseStarted", "watch", "pods", None, 200),  # a watch's first stage: not counted twice
        _audit("ResponseComplete", "update", "leases", None, 200),
        "not json",
    ]
    events = parse_audit(lines)
    assert [(e.verb, e.resource, e.code) for e in events] == [
        ("create", "pods/eviction", 201),
        ("create", "pods/eviction", 429),
        ("update", "leases", 200),
    ]
    assert events[0].name == "busy-00-abc-xyz"
    assert events[0].received == pytest.approx(1795447584.766432)


def test_our_configuration_is_valid_and_says_what_the_readme_states() -> None:
    doc = ours_config("run0", "http://127.0.0.1:9090", Ports(1, 2), Settings(2.0, 3, 10.0))
    effective = load_config_document(doc)
    assert effective.low_node_load is not None
    assert effective.low_node_load.anomaly_condition.consecutive_abnormalities == 3
    assert effective.config.descheduling_interval == 2.0


SHIPPED_TEXT = (Path(__file__).resolve().parents[2] / "manifests" / "base" / "config.yaml").read_text()


def _rendered(*docs: object) -> str:
    """What ``kubectl kustomize`` prints: the objects as one multi-document YAML stream."""
    import yaml

    return yaml.safe_dump_all(docs)


def _configmap(name: str, data: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_the_shipped_row_runs_what_the_base_configmap_says_at_the_benchmarks_time_scale() -> None:
    import yaml

    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "load-aware-descheduler"}}
    rendered = _rendered(namespace, _configmap(f"{SHIPPED_CONFIGMAP}-5h7k2m", {"config.yaml": SHIPPED_TEXT}))
    shipped = configmap_config(rendered, "manifests")
    assert shipped == yaml.safe_load(SHIPPED_TEXT)
    doc = shipped_config(shipped, "run2", "http://127.0.0.1:9090", Ports(1, 2), Settings(2.0, 2, 10.0))
    effective = load_config_document(doc)
    lnl = effective.low_node_load
    assert lnl is not None
    shipped_args = {pc["name"]: pc["args"] for pc in shipped["profiles"][0]["pluginConfig"]}
    # As shipped: the taint, the thresholds and the migration limits.
    assert lnl.hotspot_taint.enabled is shipped_args["LowNodeLoad"]["hotspotTaint"]["enabled"] is True
    assert lnl.low_thresholds == shipped_args["LowNodeLoad"]["lowThresholds"]
    assert lnl.high_thresholds == shipped_args["LowNodeLoad"]["highThresholds"]
    for key, field in (
        ("maxMigratingPerNode", "max_migrating_per_node"),
        ("maxMigratingGlobally", "max_migrating_globally"),
    ):
        assert getattr(effective.migration, field) == shipped_args["MigrationController"][key]
    # The run's: time scale, nodes, usage source, Lease namespace, ports.
    assert effective.config.descheduling_interval == 2.0
    assert lnl.anomaly_condition.consecutive_abnormalities == 2
    assert effective.migration.object_limiters["workload"].duration == 10.0
    assert doc["nodeSelector"] == {"matchLabels": {"descheduler.test/group": "run2"}}
    assert doc["metricsProviders"][0]["prometheus"]["url"] == "http://127.0.0.1:9090"
    assert doc["leaderElection"]["resourceNamespace"] == "peers-bench"
    assert shipped["leaderElection"]["resourceNamespace"] == "load-aware-descheduler"  # not edited in place


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        ([_configmap("other-config", {"config.yaml": "a: 1"})], "no ConfigMap load-aware-descheduler-config"),
        ([_configmap(f"{SHIPPED_CONFIGMAP}x", {"c": "a: 1"})], "no ConfigMap load-aware-descheduler-config"),
        ([_configmap(SHIPPED_CONFIGMAP, {"a": "x: 1", "b": "y: 2"})], "data must hold exactly one key"),
        ([_configmap(SHIPPED_CONFIGMAP, None)], "data must hold exactly one key"),
        ([_configmap(f"{SHIPPED_CONFIGMAP}-h", {"config.yaml": "- a list"})], "not a configuration mapping"),
    ],
    ids=["absent", "a-longer-name", "two-keys", "no-data", "not-a-mapping"],
)
def test_a_kustomization_without_the_shipped_configmap_is_an_error_naming_it(
    docs: list[object], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        configmap_config(_rendered(*docs), "manifests/overlays/x")
    assert str(caught.value).startswith("manifests/overlays/x: ")


def test_the_peer_gets_the_same_thresholds_nodes_and_usage_window() -> None:
    policy = peer_policy("run0", "http://127.0.0.1:9090")
    args = policy["profiles"][0]["pluginConfig"][1]["args"]
    assert args["thresholds"] == {"MetricResource": LOW_CPU}
    assert args["targetThresholds"] == {"MetricResource": HIGH_CPU}
    assert args["metricsUtilization"]["prometheus"]["query"] == PEER_QUERY
    assert "[5s]" in PEER_QUERY
    assert policy["nodeSelector"] == "descheduler.test/group=run0"


def test_the_peer_runs_in_a_private_mount_namespace_with_pod_files(tmp_path: Path) -> None:
    argv = peer_command(
        Path("/bin/descheduler"), tmp_path / "p.yaml", tmp_path / "k", 6.0, tmp_path, tmp_path, 1
    )
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert "--descheduling-interval=6s" in argv
    assert "/run/secrets/kubernetes.io/serviceaccount" in argv[6]


RUNNING = {f"busy-{i}": "hot" for i in range(4)} | {f"quiet-{i}": "cool" for i in range(10)}
"""hot: 0.3 + 4 x 0.6 = 2.7 of 4 cores (67.5 %, cured); cool: 0.3 + 10 x 0.08 = 1.1 (27.5 %)."""
POD_CORES = {
    **dict.fromkeys([f"busy-{i}" for i in range(9)], 0.6),
    **dict.fromkeys([f"quiet-{i}" for i in range(10)], 0.08),
}


@pytest.mark.parametrize(
    ("case", "running", "new", "already", "made"),
    [
        ("a replacement on a cool node: neither", RUNNING, {"busy-8": "cool"}, [], []),
        (
            "a replacement that pushes a cured node over: made hot, not already hot",
            RUNNING,
            {"busy-8": "hot"},
            [],
            ["busy-8"],
        ),
        (
            "the next one onto that node: already hot",
            {**RUNNING, "busy-8": "hot"},
            {"busy-7": "hot"},
            ["busy-7"],
            [],
        ),
        (
            "two arriving together: neither was there before the other",
            RUNNING,
            {"busy-7": "hot", "busy-8": "hot"},
            [],
            ["busy-7", "busy-8"],
        ),
        (
            "a node over its capacity is hot before (uncapped)",
            {**RUNNING, "busy-4": "hot", "busy-5": "hot", "busy-6": "hot"},
            {"busy-7": "hot"},
            ["busy-7"],
            [],
        ),
    ],
)
def test_a_replacement_is_on_a_node_already_hot_or_made_it_hot_judged_before_and_after_it_arrived(
    case: str, running: dict[str, str], new: dict[str, str], already: list[str], made: list[str]
) -> None:
    present = {**running, **new}
    assert arrivals(new, present, POD_CORES, base=0.3, cpus=4, high=HIGH_CPU) == (already, made), case


def test_the_table_shows_both_measures_and_their_sum_the_old_one() -> None:
    line = table([Row("ours", replacements=27, landed_hot=2, made_hot=5)]).splitlines()[2]
    assert "| 2 of 27 | 5 of 27 | 7 of 27 |" in line


def test_the_table_has_one_row_per_descheduler_and_says_when_nothing_was_cured() -> None:
    rows = [Row("ours", evictions=4, cycles_to_cure=7, seconds_to_cure=27.1), Row("peer", evictions=9)]
    lines = table(rows).splitlines()
    assert len(lines) == 4
    assert "| ours | 4 (0) |" in lines[2] and "7 / 27.1" in lines[2]
    assert "not cured" in lines[3]


def test_prometheus_queries_are_read_from_its_own_request_counter_over_both_query_handlers() -> None:
    text = "\n".join(
        [
            "# TYPE prometheus_http_requests_total counter",
            'prometheus_http_requests_total{code="200",handler="/api/v1/query"} 68',
            'prometheus_http_requests_total{code="400",handler="/api/v1/query"} 2',
            'prometheus_http_requests_total{code="200",handler="/api/v1/query_range"} 5',
            'prometheus_http_requests_total{code="200",handler="/metrics"} 40',
        ]
    )
    assert prometheus_queries(text) == 75


def test_cycles_are_read_from_each_logs_own_timestamps() -> None:
    peer_log = "\n".join(
        [
            'I1123 16:10:16.604164   21240 feature_gate.go:477] "Updated" featureGates={}',
            'I1123 16:10:27.353821   21240 descheduler.go:252] "Number of evictions/requests" n=10',
            'I1123 16:10:29.234696   21240 descheduler.go:252] "Number of evictions/requests" n=10',
        ]
    )
    peer = cycle_times(peer_log, peer=True, year=2026)
    assert len(peer) == 2
    assert peer[1] - peer[0] == pytest.approx(1.880875)
    ours_log = "\n".join(
        [
            '{"event": "starting", "timestamp": "2026-11-23T15:26:23.844985Z"}',
            '{"event": "cycle_summary", "cycle": 1, "timestamp": "2026-11-23T15:26:25.046095Z"}',
            "not json",
            '{"event": "cycle_summary", "cycle": 2, "timestamp": "2026-11-23T15:26:26.874108Z"}',
        ]
    )
    ours = cycle_times(ours_log, peer=False, year=2026)
    assert ours == [pytest.approx(1795447585.046095), pytest.approx(1795447586.874108)]


def test_koordinators_cycles_are_its_node_pool_passes() -> None:
    log = "\n".join(
        [
            'I1127 07:30:01.000000   99 low_node_load.go:150] "try to process nodePool" nodePool="default"',
            'I1127 07:30:01.100000   99 evict.go:80] "Evicting pods from node" node="n1"',
            'I1127 07:30:03.250000   99 low_node_load.go:150] "try to process nodePool" nodePool="default"',
        ]
    )
    times = cycle_times(log, peer=False, koord=True, year=2026)
    assert len(times) == 2 and times[1] - times[0] == pytest.approx(2.25)
    assert cycle_times(log, peer=True, year=2026) == []


@pytest.mark.parametrize("hotspot", sorted(HOTSPOTS))
def test_koordinator_gets_the_same_policy_as_ours(hotspot: str) -> None:
    settings = Settings(2.0, 2, 10.0, hotspot=hotspot)
    koord = koord_config(Path("/tmp/kc"), "run0", Ports(1, 2), settings)
    ours = ours_config("run0", "http://127.0.0.1:9090", Ports(1, 2), settings)
    k_args = {pc["name"]: pc["args"] for pc in koord["profiles"][0]["pluginConfig"]}
    o_args = {pc["name"]: pc["args"] for pc in ours["profiles"][0]["pluginConfig"]}
    for key in ("lowThresholds", "highThresholds", "anomalyCondition", "nodeMetricExpirationSeconds"):
        assert k_args["LowNodeLoad"][key] == o_args["LowNodeLoad"][key]
    assert k_args["MigrationController"]["objectLimiters"] == o_args["MigrationController"]["objectLimiters"]
    assert k_args["MigrationController"]["defaultJobMode"] == "EvictDirectly"
    assert koord["dryRun"] is False and koord["deschedulingInterval"] == ours["deschedulingInterval"]
    assert koord["nodeSelector"] == ours["nodeSelector"]
    assert (hotspot == "memory") == ("memory" in k_args["LowNodeLoad"]["highThresholds"])
    assert load_config_document(koord, "<koord>").low_node_load is not None


def test_the_memory_shape_has_hot_nodes_by_memory_only_and_two_evictions_cure_each() -> None:
    h = HOTSPOTS["memory"]
    busy, quiet = [h.busy] * HOT_PODS_PER_NODE, [h.quiet] * QUIET_REPLICAS
    assert needed_evictions(busy, base=h.base, cpus=h.capacity, high=HIGH_CPU) == 2
    assert needed_evictions(quiet, base=h.base, cpus=h.capacity, high=HIGH_CPU) == 0
    assert 100 * (h.base + sum(quiet) + h.busy) / h.capacity < HIGH_CPU  # a destination stays cool
    cores = [h.busy_cores] * HOT_PODS_PER_NODE
    assert needed_evictions(cores, base=BASE_CORES, cpus=NODE_CPUS, high=LOW_CPU) == 0
    policy = peer_policy("run0", "http://p", "memory")
    assert policy["profiles"][0]["pluginConfig"][1]["args"]["metricsUtilization"]["prometheus"]["query"] == (
        PEER_MEMORY_QUERY
    )


def test_repeated_runs_become_one_row_with_median_and_range(tmp_path: Path) -> None:
    rows = [
        Row("koordinator (2s)", evictions=8, seconds_to_cure=10.0, cycles_to_cure=5,
            request_mix={"watch nodemetrics": 0.5, "create pods/eviction": 1.0}),
        Row("koordinator (2s)", evictions=12, seconds_to_cure=None, request_mix={}),
        Row("koordinator (2s)", evictions=10, seconds_to_cure=14.0, cycles_to_cure=7, request_mix={}),
        Row("load-aware (2s)", evictions=8, seconds_to_cure=20.0, cycles_to_cure=9, queries_per_cycle=7.5),
    ]  # fmt: skip
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([r.__dict__ for r in rows]))
    text = spread_table(rows_from_json([path]))
    koord = next(line for line in text.splitlines() if line.startswith("| koordinator"))
    ours = next(line for line in text.splitlines() if line.startswith("| load-aware"))
    cells = [c.strip() for c in koord.strip("|").split("|")]
    assert cells[1:4] == ["3", "10 (8-12)", "0"]
    assert cells[6:9] == ["2 of 3", "6 (5-7)", "12.0 (10.0-14.0)"]
    assert cells[-1] == "0.0 (0.0-0.5)"
    assert [c.strip() for c in ours.strip("|").split("|")][-1] == "7.5"
