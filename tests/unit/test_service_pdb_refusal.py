"""PodDisruptionBudget refusals: the next candidate is tried in the same cycle, the refused budget is left
alone for the server's Retry-After, and limits still count every eviction of the cycle."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from descheduler.cluster.types import Pod
from descheduler.planner import DETAILED, SUMMARISED, SkipForm
from descheduler.service.audit import observe_record
from descheduler.service.cycle import CycleRunner
from descheduler.service.observability import Metrics
from tests.unit.builders import NOW, World, cpu, cycle_runner, settings
from tests.unit.fakes import Cluster, Outcome, Usage


@dataclass
class RefusingEvictor:
    """Refuses every pod whose name starts with ``refuse`` (with ``retry_after``), evicts the others."""

    refuse: str
    retry_after: float | None = None
    calls: list[str] = field(default_factory=list)

    def evict(self, pod: Pod, node: str, reason: str, deadline: float) -> Outcome:
        self.calls.append(pod.name)
        if pod.name.startswith(self.refuse):
            message = f"Cannot evict pod as it would violate the pod's disruption budget. ({self.refuse}-pdb)"
            return Outcome("refused-by-pdb", message, self.retry_after)
        return Outcome("evicted")

    def report_resolved(self, pod: Pod, node: str, reason: str, result: str, message: str) -> None:
        raise AssertionError("nothing is unknown here")


def web_and_api(hot: str = "8", web: str = "3", api: str = "1500m") -> World:
    """The hot node's best candidate is a ``web`` pod, whose budget the cache believes has room: two
    ``web`` pods and one ``api`` pod on it, using ``web`` and ``api`` cores each, the node ``hot``."""
    world = World()
    world.node("hot", cpu="10", usage=cpu(hot))
    world.node("cool", cpu="10", usage=cpu("1"))
    world.node("cool-2", cpu="10", usage=cpu("1"))
    world.deployment("web", replicas=6).deployment("api", replicas=6)
    world.pdb("web-pdb", app="web", allowed=1)
    world.pod("web-1", on="hot", owner="web", usage=cpu(web))
    world.pod("web-2", on="hot", owner="web", usage=cpu(web))
    world.pod("api-1", on="hot", owner="api", usage=cpu(api))
    return world


def runner(world: World, evictor: RefusingEvictor, clock: list[float], **top: Any) -> CycleRunner:
    return cycle_runner(
        settings(low={"cpu": 20}, high={"cpu": 50}, migration={"objectLimiters": {}}, top=top or None),
        Cluster(world.snapshot()),
        Usage(world),
        evictor,
        wall_clock=lambda: clock[0],
        pdb_retry_seconds=60.0,
    )


def cycle_at(run: CycleRunner, clock: list[float], at: float) -> Any:
    clock[0] = NOW + at
    record = run.run_cycle()
    assert record is not None
    return record


def test_after_a_refusal_the_next_candidate_is_tried_in_the_same_cycle() -> None:
    evictor = RefusingEvictor("web")
    clock = [NOW]
    record = cycle_at(runner(web_and_api(), evictor, clock), clock, 0)
    assert evictor.calls == ["web-2", "api-1"]
    assert [(e.pod, e.result) for e in record.evictions] == [
        ("default/web-2", "refused-by-pdb"),
        ("default/api-1", "evicted"),
    ]
    skips = {s.pod: s.code for s in record.plan.pod_skips}
    assert skips["default/web-1"] == "pdb-refused"


def pods_tried_per_cycle(
    evictor: RefusingEvictor, run: CycleRunner, clock: list[float], at: list[float]
) -> list[list[str]]:
    tried = []
    for moment in at:
        before = len(evictor.calls)
        cycle_at(run, clock, moment)
        tried.append(evictor.calls[before:])
    return tried


def test_a_refused_budget_is_left_alone_until_the_next_cycle_when_the_server_gives_no_retry_after() -> None:
    evictor = RefusingEvictor("web", retry_after=0)
    clock = [NOW]
    tried = pods_tried_per_cycle(evictor, runner(web_and_api(), evictor, clock), clock, [0, 30, 61])
    assert tried[0] == ["web-2", "api-1"]
    assert not any(p.startswith("web") for p in tried[1]), "refused 30 s ago: not asked again"
    assert tried[2][:1] == ["web-2"], "the minimum wait (one cycle) is over"


def test_the_servers_retry_after_is_honoured_when_longer() -> None:
    evictor = RefusingEvictor("web", retry_after=120)
    clock = [NOW]
    tried = pods_tried_per_cycle(evictor, runner(web_and_api(), evictor, clock), clock, [0, 90, 121])
    assert not any(p.startswith("web") for p in tried[1])
    assert tried[2][:1] == ["web-2"]


def one_pod_per_workload_on_a_hot_node() -> World:
    """Four single-pod candidates of equal usage, tried newest first: d, then b (refused), then c, a."""
    world = World()
    world.node("hot", cpu="10", usage=cpu("9500m"))
    for name in ("cool", "cool-2", "cool-3"):
        world.node(name, cpu="10", usage=cpu("1"))
    for app in ("a", "c", "b", "d"):
        world.deployment(app, replicas=4)
        world.pod(f"{app}-1", on="hot", owner=app, usage=cpu("1"))
    world.pdb("b-pdb", app="b", allowed=1)
    return world


def test_a_replan_after_a_refusal_still_counts_the_cycles_earlier_evictions_against_per_cycle_limits() -> (
    None
):
    evictor = RefusingEvictor("b")
    clock = [NOW]
    run = runner(one_pod_per_workload_on_a_hot_node(), evictor, clock, maxNoOfPodsToEvictPerNode=2)
    record = cycle_at(run, clock, 0)
    assert evictor.calls[:2] == ["d-1", "b-1"]
    evicted = [e.pod for e in record.evictions if e.result == "evicted"]
    assert len(evictor.calls) == 3, "the refused pod is replaced by one other"
    assert len(evicted) == 2, "maxNoOfPodsToEvictPerNode is 2 for the whole cycle"


@pytest.mark.parametrize("form", [SUMMARISED, DETAILED])
def test_a_re_plan_after_a_refusal_reports_skips_in_the_runners_form(form: SkipForm) -> None:
    """The cycle's plan and its re-plan after the refusal both use the runner's form; the DaemonSet pod of
    the hotspot, cured by ``api-1`` in the re-plan (6.5 - 3 = 3.5 cores, under 50 %; a ``web`` pod covers the
    1.5-core excess best, so one is tried first), is counted in a summary or listed: never both, never
    lost."""
    world = web_and_api(hot="6500m", web="1500m", api="3")
    world.pod("agent", on="hot", owner="agent", owner_kind="DaemonSet", usage=cpu("100m"))
    clock = [NOW]
    run = runner(world, RefusingEvictor("web"), clock)
    run.skip_form = form
    record = cycle_at(run, clock, 0)
    assert [(e.pod, e.result) for e in record.evictions] == [
        ("default/web-2", "refused-by-pdb"),
        ("default/api-1", "evicted"),
    ]
    assert record.plan.skip_form == form
    assert {r.node: r.stop_code for r in record.plan.node_reports}["hot"] == "no-longer-over"
    listed = [s.code for s in record.plan.pod_skips if s.pod == "default/agent"]
    counted = [(s.code, s.count) for s in record.plan.skip_summaries if "default/agent" in s.examples]
    if form == SUMMARISED:
        assert (listed, counted) == ([], [("filtered-daemonset", 1)])
    else:
        assert (listed, counted) == (["filtered-daemonset"], [])
    assert record.plan.skip_counts()["filtered-daemonset"] == 1


# --- back-off per budget (issue 37, point 14) -------------------------------------------------------------


def stale_budget(evictor: RefusingEvictor, clock: list[float]) -> CycleRunner:
    """The issue's stale budget: refusals with Retry-After 10, cycles (and the least wait) of 10 s."""
    world = web_and_api()
    return cycle_runner(
        settings(low={"cpu": 20}, high={"cpu": 50}, migration={"objectLimiters": {}}),
        Cluster(world.snapshot()),
        Usage(world, clock),
        evictor,
        wall_clock=lambda: clock[0],
        pdb_retry_seconds=10.0,
    )


def asked_at(evictor: RefusingEvictor, run: CycleRunner, clock: list[float], until: float) -> list[float]:
    """The cycles (every 7 s, offsets from NOW) in which a ``web`` pod was asked for."""
    asked = []
    for moment in range(0, int(until), 7):
        before = len(evictor.calls)
        cycle_at(run, clock, moment)
        if any(p.startswith("web") for p in evictor.calls[before:]):
            asked.append(float(moment))
    return asked


def test_a_budget_refused_again_and_again_is_asked_ever_less_often_up_to_ten_minutes() -> None:
    """The stale budget of the issue (Retry-After 10, a 10 s least wait): asked at 0, then after 10, 20,
    40, ... s, never more often than every 10 min once capped; the ``api`` pods proceed meanwhile."""
    evictor = RefusingEvictor("web", retry_after=10)
    clock = [NOW]
    run = stale_budget(evictor, clock)
    asked = asked_at(evictor, run, clock, 1900)
    gaps = [later - earlier for earlier, later in itertools.pairwise(asked)]
    waits = [10, 20, 40, 80, 160, 320, 600, 600]
    assert len(gaps) == len(waits), asked
    for gap, wait in zip(gaps, waits, strict=True):
        assert wait <= gap < wait + 7, (asked, gaps)
    assert "api-1" in evictor.calls, "other candidates proceed while the budget backs off"


def test_the_gauge_shows_the_budgets_in_back_off_and_an_allowed_eviction_starts_afresh() -> None:
    evictor = RefusingEvictor("web", retry_after=10)
    clock = [NOW]
    run = stale_budget(evictor, clock)
    metrics = Metrics(CollectorRegistry())
    assert asked_at(evictor, run, clock, 40) == [0, 14, 35]
    record = cycle_at(run, clock, 42)
    assert dict(record.pdb_backoffs) == {"default/web-pdb": NOW + 35 + 40}
    observe_record(metrics, record, run.config)
    assert metrics.registry.get_sample_value("descheduler_pdb_backing_off") == 1
    evictor.refuse = "nothing"  # the budget has room again: the next ask is evicted
    record = cycle_at(run, clock, 77)
    assert [e.result for e in record.evictions if e.pod.startswith("default/web")] == ["evicted"]
    assert dict(record.pdb_backoffs) == {}
    observe_record(metrics, record, run.config)
    assert metrics.registry.get_sample_value("descheduler_pdb_backing_off") == 0
    evictor.refuse = "web"
    first = len(evictor.calls)
    cycle_at(run, clock, 84)
    record = cycle_at(run, clock, 91)
    assert any(p.startswith("web") for p in evictor.calls[first:])
    assert max(record.pdb_backoffs.values()) <= NOW + 91 + 10, "refused once more: the first wait again"
