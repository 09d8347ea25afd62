"""The summarised skip form changes what a plan lists, never what it decides.

Every scenario and a few planning-benchmark clusters are planned in both forms and compared item by item:
the same evictions in the same order, the same node reports, every pod the hotspot's loop examined with
the same reason in the same order, and each summary standing for exactly the detailed skips it replaces
(same node, reason and pass; its count, its first pods as examples, its hotspot's stop reason).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from benchmarks import synth
from benchmarks.planning_shapes import SHAPES, build
from descheduler.config.load import load_config
from descheduler.planner import DETAILED, SUMMARISED, Plan, PlannerState, PodSkip, SkipForm, plan, reasons
from descheduler.report.text import render_json
from descheduler.service.audit import audit_lines
from descheduler.service.records import CycleRecord
from descheduler.simulate.inputs import load_cluster, load_usage
from descheduler.simulate.runner import run

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (REPO / "tests" / "scenarios").iterdir() if (p / "config.yaml").is_file())
EXAMPLE = REPO / "config" / "examples" / "hotspot"
CYCLES = 8

LOOP_CODES = {
    reasons.FREES_NOTHING,
    reasons.ATTEMPTED,
    reasons.LIMIT_PER_NODE,
    reasons.LIMIT_PER_NAMESPACE,
    reasons.LIMIT_TOTAL,
    reasons.MIGRATING_PER_NODE,
    reasons.MIGRATING_PER_NAMESPACE,
    reasons.MIGRATING_GLOBALLY,
    reasons.MIGRATING_PER_WORKLOAD,
    reasons.UNAVAILABLE_PER_WORKLOAD,
    reasons.OBJECT_LIMITER,
    reasons.ALREADY_MIGRATING,
    reasons.PDB,
    reasons.PDB_MULTIPLE,
    reasons.PDB_REFUSED,
    reasons.NO_DESTINATION,
}
"""The reasons the hotspot's loop gives a pod it examined: never summarised."""


def _key(skip: PodSkip) -> tuple[str, str, bool]:
    return skip.node, skip.code, skip.prod


def compare(detailed: Plan, summarised: Plan) -> int:
    """Assert the two forms of one plan agree item by item; returns how many skips the summaries replace."""
    assert (detailed.skip_form, summarised.skip_form) == (DETAILED, SUMMARISED)
    assert detailed.skip_summaries == ()
    assert [e.to_dict() for e in summarised.evictions] == [e.to_dict() for e in detailed.evictions]
    assert summarised.node_reports == detailed.node_reports
    assert summarised.state == detailed.state and summarised.notes == detailed.notes
    summarised_keys = {(s.node, s.code, s.prod) for s in summarised.skip_summaries}
    assert len(summarised_keys) == len(summarised.skip_summaries), "one summary per hotspot, reason, pass"
    kept = [s for s in detailed.pod_skips if _key(s) not in summarised_keys]
    assert list(summarised.pod_skips) == kept, "every listed skip as in the detailed form, in order"
    replaced: dict[tuple[str, str, bool], list[PodSkip]] = {}
    for skip in detailed.pod_skips:
        if _key(skip) in summarised_keys:
            replaced.setdefault(_key(skip), []).append(skip)
    stops = {r.node: r.stop_code for r in detailed.node_reports}
    for summary in summarised.skip_summaries:
        group = replaced[(summary.node, summary.code, summary.prod)]
        assert summary.count == len(group)
        assert summary.examples == tuple(s.pod for s in group[:3])
        assert summary.message == group[0].message
        assert summary.code not in LOOP_CODES, "a pod the loop examined keeps its own skip"
        assert summary.stop == stops[summary.node] != reasons.STOP_CANDIDATES_EXHAUSTED
    assert summarised.skip_counts() == detailed.skip_counts()
    return sum(len(group) for group in replaced.values())


def simulated(folder: Path, form: SkipForm) -> list[Plan]:
    snapshot = load_cluster(folder / "cluster.yaml")
    series = load_usage(folder / "usage.yaml", snapshot)
    results = run(load_config(folder / "config.yaml"), snapshot, series, CYCLES, skip_form=form)
    return [r.plan for r in results]


@pytest.mark.parametrize("folder", [*SCENARIOS, EXAMPLE], ids=[f.name for f in [*SCENARIOS, EXAMPLE]])
def test_every_scenario_decides_the_same_in_both_forms(folder: Path) -> None:
    detailed, summarised = simulated(folder, DETAILED), simulated(folder, SUMMARISED)
    assert len(detailed) == len(summarised) == CYCLES
    for one, other in zip(detailed, summarised, strict=True):
        compare(one, other)
    assert any(p.evictions for p in detailed), "a scenario where nothing moves proves little"


def test_the_scenarios_summarise_something() -> None:
    """So the comparison above is not vacuous: the bundled example's cured hotspots have filtered pods."""
    replaced = sum(
        compare(one, other)
        for one, other in zip(simulated(EXAMPLE, DETAILED), simulated(EXAMPLE, SUMMARISED), strict=True)
    )
    assert replaced > 0


@pytest.mark.parametrize(("shape", "seed"), [(shape, seed) for shape in sorted(SHAPES) for seed in (1, 3)])
def test_a_benchmark_cluster_of_every_shape_decides_the_same_in_both_forms(shape: str, seed: int) -> None:
    snapshot, usage = build(120, 30, shape, seed=seed)
    config = synth.effective_config()
    detailed = plan(snapshot, usage, config, PlannerState(), synth.NOW, skip_form=DETAILED)
    summarised = plan(snapshot, usage, config, PlannerState(), synth.NOW, skip_form=SUMMARISED)
    assert detailed.evictions
    replaced = compare(detailed, summarised)
    assert replaced > len(summarised.skip_summaries) > 0, "summaries stand for several pods each"


def _record(result: Plan) -> CycleRecord:
    return CycleRecord(cycle=7, started=synth.NOW, duration=0.1, dry_run=True, plan=result, evictions=())


def _counts(lines: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event, fields in lines:
        if event in ("audit_skip", "audit_skip_summary"):
            counts[fields["code"]] = counts.get(fields["code"], 0) + int(fields.get("count", 1))
    return counts


def test_the_audit_and_the_json_count_every_pod_in_either_form() -> None:
    snapshot, usage = build(120, 30, "hot20-low50", seed=3)
    config = synth.effective_config()
    plans = {
        form: plan(snapshot, usage, config, PlannerState(), synth.NOW, skip_form=form)
        for form in (DETAILED, SUMMARISED)
    }
    audits = {form: audit_lines(_record(p)) for form, p in plans.items()}
    for form, lines in audits.items():
        header = lines[0][1]
        assert header["skipForm"] == form
        assert header["skipCount"] == sum(plans[form].skip_counts().values())
        assert header["skipSummaryCount"] == len(plans[form].skip_summaries)
        assert _counts(lines) == plans[form].skip_counts()
    assert audits[SUMMARISED][0][1]["skipCount"] == audits[DETAILED][0][1]["skipCount"]
    assert len(audits[SUMMARISED]) < len(audits[DETAILED])
    summary = next(fields for event, fields in audits[SUMMARISED] if event == "audit_skip_summary")
    assert set(summary) == {"cycle", "node", "code", "count", "examples", "message", "stop", "pass"}


class _Result:
    def __init__(self, result: Plan) -> None:
        self.cycle, self.now, self.plan, self.rescheduled = 1, synth.NOW, result, ()


@pytest.mark.parametrize("form", [DETAILED, SUMMARISED])
def test_the_json_output_says_which_form_it_holds(form: SkipForm) -> None:
    snapshot, usage = build(120, 30, "default", seed=3)
    result = plan(snapshot, usage, synth.effective_config(), PlannerState(), synth.NOW, skip_form=form)
    cycle = json.loads(render_json([_Result(result)]))["cycles"][0]
    assert cycle["skipForm"] == form
    assert ("skipSummaries" in cycle) == (form == SUMMARISED)
    listed = len(cycle["skips"]) + sum(s["count"] for s in cycle.get("skipSummaries", []))
    assert listed == sum(result.skip_counts().values())
