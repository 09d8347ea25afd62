"""Steering refused by the API server (issue 38): a hotspot taint answered 403 (RBAC without node ``patch``,
or the admission policy) turns steering off, said once (log line, Warning Event, /readyz detail, the
``descheduler_steering_active`` gauge), evictions go on unsteered, and a taint is tried again later."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from descheduler.kube.errors import ApiStatusError
from descheduler.kube.taints import NodeTainter
from descheduler.service.audit import observe_record, readiness
from descheduler.service.observability import Metrics
from descheduler.service.records import CycleRecord
from descheduler.service.steering import RETRY_SECONDS
from tests.unit.fakes import FakeEvictor, FakeTainter, seed_config, seed_runner

HOT = "cn-beijing.10.0.0.53"
POD = "default/stress-demo-588f9646cf-s7k2p"
TAINTING = seed_config(anomalyCondition={"consecutiveAbnormalities": 1}, hotspotTaint={"enabled": True})


@dataclass
class Run:
    """Cycles of a runner on the seed cluster whose taints the server refuses while ``refusing`` is set,
    at monotonic times chosen by the test."""

    calls: list[str]
    records: list[CycleRecord]
    metrics: Metrics


def cycles(times: list[float], refusing_until: float) -> Run:
    calls: list[str] = []
    now = [0.0]
    tainter = FakeTainter(calls, forbidden=lambda: now[0] < refusing_until)
    runner = seed_runner(FakeEvictor(calls=calls), config=TAINTING, tainter=tainter, monotonic=lambda: now[0])
    metrics = Metrics()
    records: list[CycleRecord] = []
    for at in times:
        now[0] = at
        calls.append(f"cycle at {at:g}")
        record = runner.run_cycle()
        assert record is not None
        observe_record(metrics, record, TAINTING)
        records.append(record)
    return Run(calls, records, metrics)


def steering_active(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("descheduler_steering_active")


def test_a_refused_taint_is_said_once_and_the_pod_is_still_evicted_unsteered() -> None:
    run = cycles([0.0, 10.0], refusing_until=float("inf"))
    assert run.calls == [
        "cycle at 0",
        f"taint {HOT}",
        f"refused {HOT}",  # the Warning Event, once
        POD,  # the eviction goes on, without steering
        "cycle at 10",  # within the retry period: no taint is tried, no second Event
        "default/web-6d4b75cb6d-a1b2c",
    ]
    first = run.records[0]
    assert first.steering_off.startswith(
        f"steering off: the API server refused the hotspot taint on node {HOT}"
    )
    assert "denied by the admission policy" in first.to_dict()["steeringOff"]
    assert first.to_dict()["hotspotTaints"]["changes"] == [
        {"node": HOT, "result": "forbidden", "message": "HTTP 403 Forbidden: denied by the admission policy"}
    ]
    assert steering_active(run.metrics) == 0


SCENARIOS: list[tuple[str, float, list[str], str, float]] = [
    # (case, refused until, taint calls after the retry period, steering_off, gauge)
    ("the policy was fixed meanwhile: steering is back", 100.0, [f"taint {HOT}"], "", 1),
    ("still refused: off again, and no second Event", float("inf"), [f"taint {HOT}"], "steering off", 0),
]


@pytest.mark.parametrize(
    ("case", "refused_until", "retried", "off", "gauge"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
def test_after_the_retry_period_one_taint_is_tried_again_and(
    case: str, refused_until: float, retried: list[str], off: str, gauge: float
) -> None:
    run = cycles([0.0, RETRY_SECONDS + 1], refusing_until=refused_until)
    later = run.calls[run.calls.index(f"cycle at {RETRY_SECONDS + 1:g}") + 1 :]
    assert [c for c in later if c.startswith(("taint", "untaint", "refused"))] == retried, case
    assert run.records[-1].steering_off.startswith(off) and bool(off) == bool(run.records[-1].steering_off)
    assert steering_active(run.metrics) == gauge
    assert run.calls.count(f"refused {HOT}") == 1


def test_steering_that_works_shows_active_and_leaves_readyz_plain() -> None:
    run = cycles([0.0], refusing_until=0.0)
    assert run.records[0].steering_off == "" and steering_active(run.metrics) == 1
    assert readiness(True, "", [], run.records[0].steering_off) == (True, "ok")


def test_readyz_stays_ready_and_carries_the_refusal_as_a_condition() -> None:
    run = cycles([0.0], refusing_until=float("inf"))
    ok, detail = readiness(True, "", [], run.records[0].steering_off)
    assert ok is True
    assert detail.splitlines()[0] == "ok" and detail.splitlines()[1].startswith("steering off:")
    assert readiness(False, "", [], "steering off: x") == (False, "cache not synced\nsteering off: x")


class ForbiddingApi:
    """Answers a node read, then refuses the patch as an admission policy does."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def request(self, method: str, path: str, **_: Any) -> Any:
        if method == "GET":
            return {"metadata": {"uid": "u1"}, "spec": {}}
        raise ApiStatusError(
            403,
            "ValidatingAdmissionPolicy 'x' denied request: may only add or remove its taint",
            reason="Forbidden",
        )


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record_node(self, node: str, uid: str, type_: str, reason: str, message: str, *, action: str) -> None:
        self.recorded.append((node, type_, reason))


def test_the_node_tainter_calls_a_403_forbidden_and_sends_no_success_event() -> None:
    events = Events()
    tainter = NodeTainter(ForbiddingApi(), events, dry_run=False)  # type: ignore[arg-type]
    outcome = tainter.add("n1", "hot")
    assert (outcome.result, "may only add or remove its taint" in outcome.message) == ("forbidden", True)
    assert events.recorded == []
    tainter.report_refused("n1", "steering off")
    assert events.recorded == [("n1", "Warning", "HotspotTaintRefused")]
