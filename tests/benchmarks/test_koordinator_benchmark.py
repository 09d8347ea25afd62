"""The pure parts of running Koordinator's descheduler beside ours (``benchmarks/koordinator.py``)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks import koordinator as k
from benchmarks import koordinator_agreement as a
from descheduler.config.load import load_config_document


def test_a_node_metric_reports_system_usage_and_each_pod_as_koordlet_does() -> None:
    pods = [k.PodUsage("b", "p2", 0.25, 2**20), k.PodUsage("a", "p1", 1.5, 3 * 2**30)]
    status = k.node_metric_status(0.3, 2**30, pods, datetime(2026, 11, 26, 12, 0, 1, 500, tzinfo=UTC))
    assert status["updateTime"] == "2026-11-26T12:00:01Z"
    assert status["nodeMetric"] == {"systemUsage": {"resources": {"cpu": "300m", "memory": str(2**30)}}}
    assert status["podsMetric"] == [
        {
            "namespace": "a",
            "name": "p1",
            "podUsage": {"resources": {"cpu": "1500m", "memory": str(3 * 2**30)}},
        },
        {"namespace": "b", "name": "p2", "podUsage": {"resources": {"cpu": "250m", "memory": str(2**20)}}},
    ]
    assert k.node_metric("n1", status)["metadata"] == {"name": "n1"}


@pytest.mark.parametrize("dry_run", [True, False])
def test_koordinators_config_is_the_guides_evicting_directly_outside_a_cluster(dry_run: bool) -> None:
    config = k.koord_config(
        Path("/tmp/kubeconfig"),
        dry_run=dry_run,
        interval="2s",
        health_port=1234,
        low_node_load={"anomalyCondition": {"consecutiveAbnormalities": 1}},
        migration={"maxMigratingPerNode": 3},
    )
    guide = k.guide_configuration()
    args = {pc["name"]: pc["args"] for pc in config["profiles"][0]["pluginConfig"]}
    assert config["clientConnection"]["kubeconfig"] == "/tmp/kubeconfig"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["healthzBindAddress"] == "127.0.0.1:1234"
    assert config["deschedulingInterval"] == "2s" and config["dryRun"] is dry_run
    assert args["MigrationController"]["defaultJobMode"] == "EvictDirectly"
    assert args["MigrationController"]["maxMigratingPerNode"] == 3
    assert args["LowNodeLoad"]["anomalyCondition"] == {"consecutiveAbnormalities": 1}
    guide_args = {pc["name"]: pc["args"] for pc in guide["profiles"][0]["pluginConfig"]}
    assert args["LowNodeLoad"]["highThresholds"] == guide_args["LowNodeLoad"]["highThresholds"]
    # The same document is one our product accepts too: a team's ConfigMap works for both.
    load_config_document(config, "<koordinator>")


def test_a_checkout_at_another_commit_is_refused_before_building(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
         "--allow-empty", "-m", "x"],
        check=True,
    )  # fmt: skip
    with pytest.raises(k.BuildError, match="checkout " + k.KOORD_COMMIT):
        k.build(tmp_path, cache=tmp_path / "cache")
    with pytest.raises(k.BuildError, match="not a git checkout"):
        k.build(tmp_path / "missing", cache=tmp_path / "cache")


# --- the decision agreement's pure parts (benchmarks/koordinator_agreement.py) ---------------------------


def test_koordinators_first_cycle_is_read_from_its_log_and_acts_only_where_it_would_evict() -> None:
    log = "\n".join(
        [
            'I1 "try to process nodePool" nodePool="default"',
            'I2 "Evicting pods from node" node="n2"',
            'I3 "Evicted pod in dry run mode" pod="ns/a-1" node="n2"',
            'I4 "Evicted pod in dry run mode" pod="ns/b-1" node="n2"',
            'I5 "Evicted pod in dry run mode" pod="ns/a-2" node="n2"',
            # A hotspot whose pods are all non-removable (single replicas): logged, nothing evicted.
            'I6 "Evicting pods from node" node="n3" allPods=3 nonRemovablePods=3 removablePods=0',
        ]
    )
    apps = {"ns/a-1": "a", "ns/a-2": "a", "ns/b-1": "b"}
    assert a.koordinator_decisions(log, apps) is None
    decided = a.koordinator_decisions(log + '\nI6 "try to process nodePool" nodePool="default"', apps)
    assert decided is not None
    assert decided.sources == {"n2"}
    assert decided.evictions == {("n2", "a"): 2, ("n2", "b"): 1}
    assert decided.first == {"n2": "a"}


def test_agreement_compares_evictions_by_workload_and_the_first_per_node() -> None:
    ours = a.our_decisions(
        {"evictions": [{"node": "n1", "pod": "ns/b-1"}, {"node": "n1", "pod": "ns/a-1"}]},
        {"ns/a-1": "a", "ns/a-2": "a", "ns/b-1": "b"},
    )
    theirs = a.Decisions({"n1"})
    theirs.add("n1", "a")
    theirs.add("n1", "b")
    agreement = a.Agreement(1, ours, theirs)
    assert agreement.same_sources and agreement.same_evictions
    assert not agreement.same_first
    theirs.add("n1", "a")
    assert agreement.differences() == ["a on n1: ours 1, Koordinator 2"]


@pytest.mark.parametrize("seed", range(1, 21))
def test_random_shapes_stay_within_capacity_and_draw_every_feature(seed: int) -> None:
    shape = a.random_shape(seed)
    load = [a.BASE_CORES] * len(shape.nodes)
    for w in shape.workloads:
        assert w.qos in a.QOS and w.priority in ("", *a.PRIORITIES)
        for node, count in w.placement:
            load[node] += w.cores * count
    assert all(used <= a.FULL * cpus + 1e-9 for used, cpus in zip(load, shape.nodes, strict=True))
    assert shape.pools in ((), tuple("ab"[i % 2] for i in range(len(shape.nodes))))
    assert shape == a.random_shape(seed)


def test_the_twenty_shapes_cover_priorities_qos_pools_pdbs_and_limits() -> None:
    shapes = [a.random_shape(seed) for seed in range(1, 21)]
    workloads = [w for s in shapes for w in s.workloads]
    assert {w.qos for w in workloads} == set(a.QOS)
    assert {w.priority for w in workloads} == {"", *a.PRIORITIES}
    assert {w.pdb for w in workloads} == {True, False}
    assert any(s.pools for s in shapes) and any(not s.pools for s in shapes)
    assert {key for s in shapes for key in s.limits} == {
        "maxMigratingPerNode",
        "maxMigratingPerWorkload",
        "maxNoOfPodsToEvictPerNode",
    }


@pytest.mark.parametrize("generous", [False, True])
def test_one_document_for_both_with_pools_and_the_limits_of_the_mode(generous: bool) -> None:
    shape = next(s for s in map(a.random_shape, range(1, 40)) if s.pools and len(s.limits) >= 2)
    config = a.shape_config(shape, "agree-x", Path("/tmp/kc"), a.GENEROUS if generous else None)
    args = {pc["name"]: pc["args"] for pc in config["profiles"][0]["pluginConfig"]}
    pools = args["LowNodeLoad"]["nodePools"]
    assert [p["nodeSelector"] for p in pools] == [
        {"matchLabels": {"pool": "a"}},
        {"matchLabels": {"pool": "b"}},
    ]
    assert pools[1]["highThresholds"] == shape.pool_thresholds["b"][1]
    migration = args["MigrationController"]
    if generous:
        assert {k: migration[k] for k in a.GENEROUS} == a.GENEROUS
        assert "maxNoOfPodsToEvictPerNode" not in config
    else:
        for key, value in shape.limits.items():
            assert (config if key in a.TOP_LEVEL_LIMITS else migration)[key] == value
    load_config_document(config, "<agreement>")


def test_a_node_metric_is_written_when_its_usage_changes_or_its_refresh_is_due() -> None:
    written = {"n1": (0.3, 1, ()), "n2": (0.3, 1, ()), "n3": (0.3, 1, ())}
    at = {"n1": 100.0, "n2": 100.0, "n3": 91.0}
    current = {
        "n1": (0.3, 1, ()),
        "n2": (0.9, 1, (("ns", "p", 0.6, 1),)),
        "n3": (0.3, 1, ()),
        "n4": (0.3, 1, ()),
    }
    assert a.due_nodes(current, written, at, now=101.0, refresh=10.0) == ["n2", "n3", "n4"]
    assert a.due_nodes(written, written, at, now=100.5, refresh=10.0) == []
