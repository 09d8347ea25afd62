"""The soak's pure parts (``benchmarks/soak_model.py``): the schedule is a function of its plan, and the
measures and safety checks, computed from synthetic timelines, find what they are meant to find."""

from __future__ import annotations

import itertools
import json
import math
import os
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import soak
from benchmarks import soak_model as m

PLAN = m.Plan(seed=7, duration_s=900.0, nodes=40, interval_s=3.0, consecutive=5)


def timeline(values: dict[str, list[float]], calm: dict[str, list[float]] | None = None) -> m.Timeline:
    """One sample a second from t=0; ``calm`` defaults to ``values``."""
    line = m.Timeline()
    length = max(len(v) for v in values.values())
    for i in range(length):
        line.add(
            float(i),
            {n: (v[i], (calm or values)[n][i]) for n, v in values.items() if i < len(v)},
        )
    return line


def test_the_same_plan_gives_the_same_schedule_and_another_seed_another() -> None:
    first, again = m.make_schedule(PLAN), m.make_schedule(PLAN)
    other = m.make_schedule(m.Plan(**{**PLAN.__dict__, "seed": 8}))
    assert first == again
    assert m.schedule_digest(first) == m.schedule_digest(again) != m.schedule_digest(other)


@pytest.mark.parametrize("duration", [180.0, 900.0, 3600.0])
def test_every_schedule_has_each_fault_bursts_steps_and_churn_in_time_order(duration: float) -> None:
    plan = m.Plan(seed=1, duration_s=duration, nodes=20, interval_s=3.0, consecutive=5)
    events = m.make_schedule(plan)
    kinds = Counter(e.kind for e in events)
    assert all(kinds[f] >= 1 for f in m.FAULTS), kinds
    assert kinds["checkpoint"] >= 1 and kinds["burst"] >= 1
    assert [e.t for e in events] == sorted(e.t for e in events)
    assert all(plan.warmup_s <= e.t < duration for e in events if e.kind != "checkpoint")
    faults = sorted(e.t for e in events if e.kind in m.FAULTS)
    assert all(b - a >= 12 for a, b in itertools.pairwise(faults))


def test_a_burst_is_seen_for_fewer_cycles_than_confirm_a_hotspot() -> None:
    for consecutive in (3, 5, 8):
        plan = m.Plan(seed=1, duration_s=600.0, nodes=20, interval_s=3.0, consecutive=consecutive)
        seen = plan.burst_s + m.WINDOW_S + 1.0
        assert seen < consecutive * plan.interval_s or plan.burst_s == 1.0


def test_a_removed_node_is_never_a_target_after_its_drain() -> None:
    events = m.make_schedule(m.Plan(seed=3, duration_s=3600.0, nodes=20, interval_s=3.0, consecutive=5))
    drained = {e.target: e.t for e in events if e.kind == "node-drain"}
    assert drained
    later = [e for e in events if e.target in drained and e.t > drained[e.target]]
    assert later == []


def test_drift_moves_load_around_the_groups_within_its_amplitude() -> None:
    values = [m.drift(g, 300.0, 1200.0) for g in range(m.GROUPS)]
    assert max(values) == pytest.approx(1 + m.DRIFT_AMPLITUDE)
    assert min(values) == pytest.approx(1 - m.DRIFT_AMPLITUDE)


HOT = [90.0] * 30
COOL = [50.0] * 30


@pytest.mark.parametrize(
    ("usage", "evicted_at", "unconfirmed"),
    [
        (HOT, 25.0, False),  # hot throughout: confirmed
        (COOL, 25.0, True),  # never hot
        ([50.0] * 22 + [90.0] * 8, 25.0, True),  # hot for 3 s only
        ([50.0] * 10 + [90.0] * 15 + [50.0] * 5, 27.0, False),  # hot 15 s, cured just before
    ],
)
def test_an_eviction_from_a_node_not_hot_long_enough_is_caught(
    usage: list[float], evicted_at: float, unconfirmed: bool
) -> None:
    line = timeline({"n1": usage})
    e = m.Eviction(evicted_at, "ns/p", "n1", "ns/app")
    assert (m.unconfirmed(line, [e], 3.0, 5) == [e]) is unconfirmed


def test_an_eviction_while_only_a_burst_made_the_node_hot_is_burst_caused() -> None:
    total = [50.0] * 20 + [95.0] * 5 + [50.0] * 5
    line = timeline({"n1": total, "n2": HOT}, calm={"n1": COOL, "n2": HOT})
    bursts = [m.Event(20.0, "burst", "n1", 5.0, 1.8), m.Event(20.0, "burst", "n2", 5.0, 1.8)]
    on_burst = m.Eviction(24.0, "ns/a", "n1", "ns/a")
    on_real = m.Eviction(24.0, "ns/b", "n2", "ns/b")
    assert m.burst_caused(line, [on_burst, on_real], bursts, 3.0, 5) == [on_burst]


def test_a_second_eviction_of_a_workload_inside_its_window_is_a_breach() -> None:
    evictions = [m.Eviction(t, f"ns/p{t}", "n", w) for t, w in [(0, "a"), (10, "b"), (20, "a"), (55, "a")]]
    assert [e.t for e in m.window_breaches(evictions, 30.0, 1)] == [20]
    assert m.window_breaches(evictions, 30.0, 2) == []


def test_more_evictions_from_one_node_in_one_cycle_than_allowed_is_a_breach() -> None:
    evictions = [m.Eviction(t, f"ns/p{t}", "n1", f"w{t}") for t in (10.0, 10.2, 10.4, 13.0)]
    assert [e.t for e in m.node_breaches(evictions, 3.0, 2)] == [10.4]


def test_measures_of_a_synthetic_run() -> None:
    # soak-g0-001 hot from 10 s (a step) to 40 s, cured by the two evictions it needed; soak-g0-002
    # cool; a later eviction of the same workload counts as ping-pong.
    n1 = [50.0] * 10 + [95.0] * 30 + [55.0] * 60
    n2 = [40.0] * 100
    line = timeline({"soak-g0-001": n1, "soak-g0-002": n2})
    step = m.Event(10.0, "step", "soak-g0-001", 80.0, m.BUSY_CORES)
    evictions = [
        m.Eviction(35.0, "ns/a-1", "soak-g0-001", "ns/a"),
        m.Eviction(39.0, "ns/b-1", "soak-g0-001", "ns/b"),
        m.Eviction(80.0, "ns/a-2", "soak-g0-002", "ns/a"),
    ]
    got = m.measures(line, evictions, [step], 12.5, 3.0, 5)
    assert got["hot_node_seconds"] == 30.0
    assert got["steps_cured"] == 1 and got["cure_s_p50"] == 30.0
    assert got["evictions_per_cured_hotspot"] == 2
    assert got["ping_pong_share"] == pytest.approx(1 / 3)
    assert got["replacement_pending_s"] == 12.5
    assert got["burst_evictions"] == 0
    assert got["unconfirmed_evictions"] == 1  # n2 was never hot
    cvs, ranges = m.spread(line)
    assert ranges[0] == 10.0 and ranges[20] == 55.0
    assert got["cv_mean"] == pytest.approx(sum(cvs) / len(cvs))


@pytest.mark.parametrize(
    ("node", "t", "busy", "needed"),
    [
        ("soak-g0-088", 260.0, 7, 4),  # drift 1.245: three left ask for 82 % of the node
        ("soak-g1-041", 251.0, 7, 4),  # drift 1.063: three left, 71 %
        ("soak-g1-041", 280.0, 7, 3),  # drift 1.026 half a minute later: three left, 69 %
        ("soak-g3-031", 390.0, 8, 5),  # drift 1.113, one more pod busy
        ("soak-g2-001", 0.0, 1, 0),  # one busy pod and the base load: 22 %
    ],
)
def test_the_evictions_a_stepped_node_needs_follow_its_groups_drift(
    node: str, t: float, busy: int, needed: int
) -> None:
    assert m.evictions_needed(busy, node, t, 1200.0) == needed


def test_a_step_never_cured_is_not_counted_cured() -> None:
    line = timeline({"n1": [95.0] * 60})
    assert m.cures(line, [m.Event(5.0, "step", "n1", 50.0, 0.6)]) == [None]


def test_a_node_absent_for_a_while_is_nan_there() -> None:
    line = m.Timeline()
    line.add(0.0, {"a": (10.0, 10.0)})
    line.add(1.0, {"a": (10.0, 10.0), "b": (20.0, 20.0)})
    line.add(2.0, {"b": (20.0, 20.0)})
    assert math.isnan(line.total["b"][0]) and math.isnan(line.total["a"][2])
    assert line.window("a", 0, 2) == [(0.0, 10.0), (1.0, 10.0)]


def test_slope_and_recovery() -> None:
    assert m.slope_per_hour([(0.0, 100.0), (1800.0, 100.0), (3600.0, 100.0)]) == 0.0
    assert m.slope_per_hour([(0.0, 100.0), (1800.0, 105.0), (3600.0, 110.0)]) == pytest.approx(10.0)
    assert m.recovered(50.0, [40.0, 53.0, 56.0], 10.0) == pytest.approx(3.0)
    assert m.recovered(50.0, [40.0, 75.0], 10.0) is None


def test_the_plot_is_an_svg_with_the_evictions_and_faults() -> None:
    line = timeline({"n1": HOT, "n2": COOL})
    svg = m.svg_plot(line, [m.Eviction(5.0, "ns/a", "n1", "ns/a")], [m.Event(3.0, "kill-etcd")], "t")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "kill-etcd" in svg and svg.count('stroke="black"') == 1


def test_resource_trends_follow_the_process_that_worked_after_warm_up() -> None:
    leader = [{"t": t, "pid": 1, "rss_mib": 60 + t / 360, "cpu_s": t / 10, "threads": 16, "fds": 22}
              for t in range(0, 3601, 5)]  # fmt: skip
    standby = [
        {"t": t, "pid": 2, "rss_mib": 50.0, "cpu_s": 1.0, "threads": 15, "fds": 20} for t in range(0, 3601, 5)
    ]
    cycles = [float(t) for t in range(1, 3601, 3)]
    got = m.resource_trends(leader + standby, cycles, warm=600.0)
    assert got["pid"] == 1 and got["rss_start_mib"] == pytest.approx(60 + 600 / 360)
    assert got["rss_mib_slope_per_hour"] == pytest.approx(10.0)
    assert got["threads_slope_per_hour"] == 0.0 and got["interner_first_last"] is None
    assert got["cpu_per_cycle_s"] == pytest.approx(0.3, rel=0.3)
    assert m.resource_trends(leader, cycles, warm=4000.0) == {}


def test_the_committed_figures_read_back_into_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "soak-dev-2026-11-27.json"
    runs = json.loads(data.read_text())
    assert runs[0]["schedule_digest"] == runs[1]["schedule_digest"], "both met the same schedule"
    assert soak.main(["--summarise", str(data)]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 2 + len(runs)
    assert [r.split(" | ")[0].strip("| ") for r in rows[2:]] == [r["descheduler"] for r in runs]


CYCLE = '{"event": "cycle_summary", "usage_errors": %d, "aborted": null, "timestamp": "2026-11-27T10:00:00Z"}'


@pytest.mark.parametrize(("errors", "healthy"), [(0, True), (37, False)])
def test_our_cycles_are_read_with_whether_they_had_usage(errors: int, healthy: bool) -> None:
    assert soak.cycles_of("load-aware", "noise\n" + CYCLE % errors + "\n", 2026) == [(1795773600.0, healthy)]


@pytest.mark.parametrize(
    ("faults", "done", "blamed"),
    [
        ([], [], True),  # after our eviction of its workload, nothing else going on
        ([("kill-etcd", 95.0, 105.0)], [], False),  # etcd was down
        ([("restart-prometheus", 95.0, 105.0)], [], True),  # no pod or PDB status depends on it
        ([("kill-leader", 95.0, 105.0)], [], True),
        ([], [(90.0, "node-drain", "ns/app")], False),  # a drain evicted a pod of it too
        ([], [(90.0, "node-drain", "ns/other")], True),  # a drain of a node without its pods
        ([], [(90.0, "rollout", "ns/app")], False),  # its own workload rolled
        ([], [(90.0, "rollout", "ns/other")], True),  # another workload's rollout explains nothing
        ([], [(90.0, "namespace-delete", "ns")], False),
    ],
)
def test_a_low_pdb_is_blamed_on_the_descheduler_only_when_nothing_else_explains_it(
    faults: list[tuple[str, float, float]], done: list[tuple[float, str, str]], blamed: bool
) -> None:
    evictions = [m.Eviction(95.0, "ns/app-x", "n1", "ns/app")]
    low = [(100.0, "ns/app")]
    assert (m.pdb_breaches(low, evictions, faults, done) == low) is blamed
    assert m.pdb_breaches([(100.0, "ns/unrelated")], evictions, [], []) == []


def test_a_drain_explains_the_pdbs_of_the_workloads_running_on_that_node_only() -> None:
    lives = [
        soak.PodLife("u1", "a-1", "ns/a", created=0.0, node="n1", running=1.0),
        soak.PodLife("u2", "b-1", "ns/b", created=0.0, node="n2", running=1.0),
        soak.PodLife("u3", "c-1", "ns/c", created=0.0, node="n1", running=1.0, gone=50.0),
        soak.PodLife("u4", "d-1", "ns/d", created=0.0, node="n1", running=None),
    ]
    done = [
        {"at": 90.0, "kind": "node-drain", "target": "n1"},
        {"at": 95.0, "kind": "scale", "target": "ns/b"},
    ]
    assert soak.drained(done, lives) == [(90.0, "node-drain", "ns/a")]
    assert soak.churned(done) == [(95.0, "scale", "ns/b")]


@pytest.mark.parametrize("package", [None, Path("/tmp/before")])
def test_our_replicas_import_the_package_asked_for_before_the_repo_one(package: Path | None) -> None:
    from tests.support.service import REPO

    env, cwd = soak.ours_process(package)
    first = env["PYTHONPATH"].split(os.pathsep)
    expected = [str(REPO)] if package is None else [str(package.resolve()), str(REPO)]
    assert first == expected
    # ``python -m`` puts the working directory ahead of PYTHONPATH: it must hold the same package.
    assert cwd == (REPO if package is None else package.resolve())
    assert "KUBECONFIG" not in env


@pytest.mark.parametrize(
    ("system", "label"), [(None, "load-aware+taint"), ("before 39", "before 39, seed 1")]
)
def test_a_run_labelled_with_a_system_shows_it_and_its_seed_in_the_table(
    system: str | None, label: str
) -> None:
    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "soak-dev-2026-11-27.json"
    run = next(r for r in json.loads(data.read_text()) if r["descheduler"] == "load-aware+taint")
    if system is not None:
        run["system"] = system
    row = soak.table([run]).splitlines()[2]
    assert row.split(" | ")[0].strip("| ") == label


@pytest.mark.parametrize(
    ("measures", "cures"),
    [
        ({"cures_s": [40.0, 12.0, 30.0], "steps_cured": 3}, [40.0, 12.0, 30.0]),  # kept by the run
        ({"steps_cured": 2, "cure_s_p50": 31.0, "cure_s_p95": 46.0}, [31.0, 46.0]),  # older run, two steps
        ({"steps_cured": 2, "cure_s_p50": 20.0, "cure_s_p95": 20.0}, [20.0]),  # two equal: one known
        ({"steps_cured": 1, "cure_s_p50": 25.0, "cure_s_p95": 25.0}, [25.0]),
        ({"steps_cured": 0, "cure_s_p50": None, "cure_s_p95": None}, []),
        ({"steps_cured": 3, "cure_s_p50": 20.0, "cure_s_p95": 50.0}, None),  # the middle one is lost
    ],
)
def test_a_runs_cure_times_are_read_back_only_when_its_figures_hold_them(
    measures: dict[str, object], cures: list[float] | None
) -> None:
    assert soak.run_cures(measures) == cures


def test_the_runs_of_a_system_pool_their_cures_into_one_p50_and_p95() -> None:
    def labelled(
        system: str, seed: int, cures: list[float], per_cure: float, burst: int = 0, stepped: str = ""
    ) -> dict[str, object]:
        measures = {
            "cures_s": cures, "steps_cured": len(cures), "steps_hot": 2,
            "evictions_per_cured_hotspot": per_cure, "burst_evictions": burst, "unconfirmed_evictions": 0,
        }  # fmt: skip
        # A step of 7 busy pods on ``stepped`` from 240 s, its first eviction at 280 s.
        done = [{"kind": "step", "target": stepped, "t": 240.0, "duration_s": 300.0, "note": "7 pods busy"}]
        evictions = [{"t": 280.0, "node": stepped}, {"t": 290.0, "node": "soak-g0-002"}]
        return {
            "system": system, "plan": {"seed": seed, "drift_period_s": 1200.0}, "measures": measures,
            "violation_count": 0, "done": done if stepped else [], "evictions": evictions,
        }  # fmt: skip

    runs = [
        labelled("after", 7, [10.0, 50.0], 3.0, stepped="soak-g0-088"),  # 4 needed at 280 s
        labelled("koord", 7, [20.0], 4.0, burst=1),
        labelled("after", 8, [20.0, 30.0], 2.0, stepped="soak-g1-041"),  # 3 needed at 280 s
    ]
    lines = soak.pooled(runs).splitlines()
    assert lines == [
        "after: 2 runs (seeds 7, 8), steps cured 4 / hot 4, cure p50 / p95 20 / 50 s over 4 cures, "
        "evictions per cure 2.5 (needed 3.5), burst 0, unconfirmed 0, violations 0",
        "koord: 1 runs (seeds 7), steps cured 1 / hot 2, cure p50 / p95 20 / 20 s over 1 cures, "
        "evictions per cure 4.0 (needed -), burst 1, unconfirmed 0, violations 0",
    ]
