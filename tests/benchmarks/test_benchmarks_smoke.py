"""The benchmark scripts keep running, and the helpers their figures rest on compute what they claim.

The scripts run here at a tiny size, so they cannot rot unnoticed; only the shape of their summary line
is checked, never a timing. The helpers (synthetic cluster, lower bound, query classification, the
summary format) get ordinary assertions, because a wrong helper would make every figure wrong.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import synth
from benchmarks.balance_quality import min_cover, min_cover_in_order
from benchmarks.closedloop import World
from benchmarks.common import parse_summary, summary_line
from benchmarks.fakeprom import classify
from benchmarks.planning_shapes import build
from descheduler.config.providers import DEFAULT_QUERIES

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> dict[str, tuple[float, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    return parse_summary(last)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ("benchmarks.cycle_cost", "--sizes", "20", "--runs", "1", "--sync-runs", "1", "--churn", "20"),
            {
                "plan_20": "s",
                "sync_20": "s",
                "sync_cpu_20": "s",
                "floor_20": "s",
                "sync_vs_floor_20": "x",
                "rss_20": "MiB",
            },
        ),
        (
            ("benchmarks.control_plane_load", "--sizes", "20", "--cycles", "2"),
            {
                "cycles": "",
                "list_get_20": "",
                "evictions_20": "",
                "eviction_requests_20": "",
                "events_20": "",
                "queries_per_cycle_20": "",
            },
        ),
        (
            ("benchmarks.balance_quality", "--nodes", "20", "--max-cycles", "15", "--settle-cycles", "1"),
            {
                "over_at_start": "",
                "bound": "",
                "bound_priority_first": "",
                "evictions": "",
                "ratio": "x",
                "evicted_twice": "",
                "made_hot": "",
            },
        ),
        (
            ("benchmarks.planning_shapes", "--sizes", "20,40", "--runs", "1"),
            {
                "default_20": "s",
                "hot20_low50_40": "s",
                "hot20_low50_full_40": "s",
            },
        ),
        (
            ("benchmarks.closedloop_variants", "--nodes", "20", "--max-cycles", "6", "--settle-cycles", "1"),
            {
                "today_evictions": "",
                "aware_unneeded": "",
                "taint_on_hot": "",
                "taint_below_low": "",
                "taint_cycles": "",
                "taint_cooled": "",
                "bound": "",
            },
        ),
        (
            ("benchmarks.simulate_dump", "--sizes", "20"),
            {
                "floor_20": "s",
                "load_20": "s",
                "simulate_20": "s",
                "simulate_vs_floor_20": "x",
                "simulate_rss_20": "MiB",
            },
        ),
        (
            ("benchmarks.usage_fetch", "--nodes", "20"),
            {"samples_one_step_20": "", "samples_two_steps_20": "", "work_reduction_20": "x"},
        ),
        (
            ("benchmarks.steady_steps", "--nodes", "20", "--cycles", "2", "--churn", "5"),
            {"steady_steps_20": "s"},
        ),
        (
            ("benchmarks.snapshot_scale", "--sizes", "20"),
            {
                "snapshot_20": "s",
                "snapshot_rss_20": "MiB",
                "replay_20": "s",
                "replay_vs_floor_20": "x",
                "replay_rss_20": "MiB",
                "dump_20": "MiB",
            },
        ),
        (
            ("benchmarks.config_windows", "--sizes", "20,40", "--runs", "1"),
            {"overlap_20": "s", "overlap_40": "s", "validate_40": "s", "state_40": "s", "growth": "x"},
        ),
        (
            ("benchmarks.journal_capacity", "--records", "20", "--nodes", "20"),
            {"worst_bytes_per_record": "", "capacity_records": "", "bound_fits": "", "compacted_fits": ""},
        ),
        (
            (
                "benchmarks.protowire_decode",
                "--pods",
                "20",
                "--page",
                "8",
                "--repeat",
                "1",
                "--shape",
                "running",
            ),
            {"json_cpu": "s", "protobuf_cpu": "s", "ratio": "x"},
        ),
    ],
    ids=[
        "cycle_cost",
        "control_plane_load",
        "balance_quality",
        "planning_shapes",
        "closedloop_variants",
        "simulate_dump",
        "usage_fetch",
        "steady_steps",
        "snapshot_scale",
        "config_windows",
        "journal_capacity",
        "protowire_decode",
    ],
)
def test_each_benchmark_script_runs_small_and_ends_with_a_parsable_summary(
    command: tuple[str, ...], expected: dict[str, str]
) -> None:
    figures = _run(*command)
    for name, unit in expected.items():
        assert name in figures, f"{name} missing from {sorted(figures)}"
        value, got_unit = figures[name]
        assert got_unit == unit, f"{name} has unit {got_unit!r}, expected {unit!r}"
        assert value >= 0


@pytest.mark.parametrize(
    "line",
    ["", "SUMMARY", "RESULT a=1", "SUMMARY a=", "SUMMARY a=1.2.3s", "SUMMARY A=1", "SUMMARY a=1 b=2parsecs"],
)
def test_a_malformed_summary_line_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        parse_summary(line)


def test_a_summary_line_reads_back_the_figures_it_was_written_with() -> None:
    line = summary_line({"plan_500": "0.043s", "rss_500": "100MiB", "ratio": "1.18x", "cycles": "10"})
    assert parse_summary(line) == {
        "plan_500": (0.043, "s"),
        "rss_500": (100.0, "MiB"),
        "ratio": (1.18, "x"),
        "cycles": (10.0, ""),
    }
    with pytest.raises(ValueError):
        summary_line({"plan": "fast"})


def test_the_synthetic_cluster_has_the_promised_shape_and_is_reproducible() -> None:
    spec = synth.SynthSpec(nodes=50, seed=3)
    first, second = synth.generate(spec), synth.generate(spec)
    assert [p.uid for p in first.pods] == [p.uid for p in second.pods]
    assert len(first.pods) == 50 * spec.pods_per_node
    per_node = {n.name: 0 for n in first.nodes}
    for pod in first.pods:
        per_node[pod.node] += 1
    assert set(per_node.values()) == {spec.pods_per_node}
    assert len(first.hot_nodes) == round(50 * spec.hot_fraction)
    kinds = {o["kind"] for o in first.objects()}
    expected = {"Node", "Pod", "Deployment", "ReplicaSet", "StatefulSet", "PodDisruptionBudget", "Namespace"}
    assert expected <= kinds


def test_low_nodes_are_under_the_low_thresholds_and_full_ones_have_no_unrequested_cpu_or_memory() -> None:
    snapshot, usage = build(100, 30, "hot20-low50-full", 4)
    cluster = synth.generate(synth.SynthSpec(nodes=100, hot_fraction=0.2, low_fraction=0.5, seed=4))
    low = {n.name for n in cluster.nodes if n.low}
    assert len(low) == 50 and not any(n.low and n.hot for n in cluster.nodes)
    requested: dict[str, dict[str, int]] = {}
    for pod in snapshot.pods:
        for name, amount in pod.requests.items():
            requested.setdefault(pod.node_name, {}).setdefault(name, 0)
            requested[pod.node_name][name] += amount
    for node in snapshot.nodes:
        if node.name not in low:
            continue
        for resource in ("cpu", "memory"):
            percent = 100 * usage.nodes[node.name].resources[resource] / node.allocatable[resource]
            assert percent <= synth.LOW_THRESHOLDS[resource]
            assert requested[node.name][resource] >= node.allocatable[resource]


def test_a_nodes_usage_is_its_pods_usage_plus_the_system_overhead() -> None:
    cluster = synth.generate(synth.SynthSpec(nodes=30, seed=5))
    usage = cluster.node_usage()
    for node in cluster.nodes:
        pods = [p for p in cluster.pods if p.node == node.name]
        assert usage[node.name]["cpu"] == synth.SYSTEM_CPU_M + sum(p.cpu_usage_m for p in pods)
        assert usage[node.name]["memory"] == synth.SYSTEM_MEMORY + sum(p.memory_usage for p in pods)


def test_hot_nodes_are_over_the_high_cpu_threshold_and_the_others_are_not() -> None:
    cluster = synth.generate(synth.SynthSpec(nodes=100, seed=2))
    world = World(cluster)
    for node in cluster.nodes:
        assert (world.percent(node.name, "cpu") > synth.HIGH_THRESHOLDS["cpu"]) == node.hot


def test_an_evicted_pod_is_replaced_elsewhere_and_its_usage_moves_with_it() -> None:
    cluster = synth.generate(synth.SynthSpec(nodes=30, seed=4))
    world = World(cluster)
    hot = cluster.hot_nodes[0]
    pod = next(
        p
        for p in cluster.pods
        if p.node == hot and p.workload is not None and p.workload.kind == "Deployment"
    )
    before = {n: dict(u) for n, u in world.usage.items()}
    old, new = world.evict_and_replace(pod.key, synth.NOW)
    assert new is not None
    assert new.node != hot and new.key != old.key and old.key not in world.pods
    assert world.usage[hot]["cpu"] == before[hot]["cpu"] - pod.cpu_usage_m
    assert world.usage[new.node]["cpu"] == before[new.node]["cpu"] + pod.cpu_usage_m
    assert world.lineage[new.key].evictions == [synth.NOW]


@pytest.mark.parametrize(
    ("items", "need", "expected"),
    [
        ([(5, 0), (3, 0), (2, 0)], (4, 0), 1),
        ([(5, 0), (3, 0), (2, 0)], (7, 0), 2),
        ([(5, 0), (3, 0), (2, 0)], (11, 0), None),
        ([(9, 1), (1, 9), (5, 5)], (5, 5), 1),
        ([(9, 1), (1, 9), (4, 4)], (5, 5), 2),
        ([(6, 0), (0, 6), (3, 3), (3, 3)], (6, 6), 2),
        ([], (0, 0), 0),
    ],
)
def test_the_lower_bound_finds_the_fewest_pods_covering_every_excess(
    items: list[tuple[int, int]], need: tuple[int, int], expected: int | None
) -> None:
    assert min_cover(items, need) == (expected, True)


def test_the_lower_bound_agrees_with_trying_every_subset() -> None:
    items = [(7, 1), (1, 6), (4, 4), (2, 2), (6, 0), (0, 5), (3, 3)]
    for need in itertools.product(range(0, 16, 3), repeat=2):
        brute = next(
            (
                k
                for k in range(len(items) + 1)
                for subset in itertools.combinations(items, k)
                if all(sum(i[r] for i in subset) >= need[r] for r in range(2))
            ),
            None,
        )
        assert min_cover(items, need) == (brute, True), need


def test_the_priority_first_bound_spends_every_lower_tier_before_touching_a_higher_one() -> None:
    low_tier = [(1, 0), (1, 0)]
    high_tier = [(10, 0)]
    assert min_cover(low_tier + high_tier, (5, 0)) == (1, True)
    assert min_cover_in_order([low_tier, high_tier], (5, 0)) == (3, True)
    assert min_cover_in_order([low_tier, high_tier], (2, 0)) == (2, True)
    assert min_cover_in_order([low_tier, high_tier], (50, 0)) == (None, True)


@pytest.mark.parametrize("name", sorted(DEFAULT_QUERIES))
def test_the_prometheus_stand_in_recognises_every_default_query(name: str) -> None:
    query = DEFAULT_QUERIES[name].replace("${window}", "300s").replace("${nodeLabel}", "instance")
    assert classify(query) == name


def test_the_as_today_variant_decides_on_the_raw_sample_and_the_shipped_one_on_the_estimate() -> None:
    """The benchmarks' "as today" rows switch the estimate off; check that they really do."""
    from benchmarks.closedloop_variants import RAW_SAMPLES
    from descheduler.planner import commit, evicted_from
    from tests.unit.builders import NOW, World, cpu, settings

    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4)
    world.pod("p", on="hot", owner="web", usage=cpu("4"))
    world.pod("q", on="hot", owner="web", usage=cpu("1"))
    first = world.plan(settings())
    state = commit(first.state, evicted_from(first, ["default/p"]), NOW)
    world.remove_pod("p").set_node_usage("hot", cpu("8.2"))  # a minute later the sample still holds 4/5 of p
    shipped = world.plan(settings(), state, NOW + 60)
    as_today = world.plan(settings(), state, NOW + 60, parts=RAW_SAMPLES)
    usage = {r.node: r.resources[0].usage for r in shipped.node_reports}
    raw = {r.node: r.resources[0].usage for r in as_today.node_reports}
    assert (usage["hot"], raw["hot"]) == (5000, 8200)


def test_the_dump_benchmark_renames_pods_whose_name_synth_drew_twice() -> None:
    from benchmarks.simulate_dump import unique_pod_names

    cluster = synth.generate(synth.SynthSpec(nodes=4, pods_per_node=5))
    first, second = cluster.pods[0], cluster.pods[1]
    second.namespace, second.name = first.namespace, first.name
    assert unique_pod_names(cluster) == 1
    assert len({pod.key for pod in cluster.pods}) == len(cluster.pods)
    assert second.name == first.name + "x"


@pytest.mark.integration
def test_the_server_cost_benchmark_refuses_the_peer_row_clearly_when_the_peer_is_not_built(
    tmp_path: Path,
) -> None:
    """An empty binary cache: the run stops at once, names the missing peer and how to build it, and
    neither builds nor starts anything."""
    import os

    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.server_cost", "--nodes", "2", "--pods", "2", "--no-data"],
        cwd=ROOT,
        env={**os.environ, "DESCHEDULER_TEST_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Kubernetes descheduler (peer row) is not built" in proc.stderr
    assert "--peers" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir()), "nothing was built"


def test_the_server_cost_benchmark_refuses_an_unknown_row_before_it_starts_anything() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.server_cost", "--rows", "on,lean,leaner", "--no-data"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--rows: unknown leaner; known: off, on, lean, protobuf, peer" in proc.stderr


@pytest.mark.controlplane
def test_the_server_cost_benchmark_runs_small_on_the_real_control_plane(tmp_path: Path) -> None:
    figures = _run(
        "benchmarks.server_cost", "--nodes", "10", "--pods", "40", "--rows", "on", "--cycles", "1",
        "--interval", "3", "--scrape", "5", "--no-data", "--profile", str(tmp_path), "--profile-seconds", "1",
    )  # fmt: skip  # one row: each row is the same steps with another client (about 25 s of CI each)
    assert {k: unit for k, (_, unit) in figures.items()} == {
        "watchlist_server_cpu": "s",
        "idle_requests": "",
    }
    profile = (tmp_path / "apiserver-on.pb.gz").read_bytes()
    assert profile[:2] == b"\x1f\x8b", "kube-apiserver's CPU profile (gzipped protobuf)"
