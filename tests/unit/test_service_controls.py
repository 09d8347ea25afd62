"""The runner and the controls: outside every eviction window nothing is sent (each planned eviction is
``outside-window``, dry run too); the churn budget, rebuilt from the journal, holds across a restart;
the gauges say whether a window is open, when the next opens and what budget is left."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from descheduler.config.load import EffectiveConfig, load_config_document
from descheduler.planner import reasons
from descheduler.service.audit import observe_record, render_record_text
from descheduler.service.evictions import OUTSIDE_WINDOW
from descheduler.service.observability import Metrics
from tests.unit.fakes import SEED, FakeEvictor, seed_runner
from tests.unit.fakes import SEED_NOW as NOW
from tests.unit.test_service_restart import FakeJournal, journaled

# NOW is Friday 2027-01-15 09:00 in Berlin (08:00 UTC).
FRIDAY_MORNING = {"days": ["Fri"], "start": "08:30", "end": "09:30", "timeZone": "Europe/Berlin"}
FRIDAY_NIGHT = {"days": ["Fri"], "start": "22:00", "end": "06:00", "timeZone": "Europe/Berlin"}
TOKYO_MORNING = {"days": ["Fri"], "start": "08:30", "end": "09:30", "timeZone": "Asia/Tokyo"}


def config(dry_run: bool = False, **migration: Any) -> EffectiveConfig:
    """The seed scenario's configuration, hotspots confirmed at once, ``migration`` in its evictor's args."""
    doc = yaml.safe_load((SEED / "config.yaml").read_text())
    doc["profiles"][0]["pluginConfig"][0]["args"]["anomalyCondition"] = {"consecutiveAbnormalities": 1}
    doc["profiles"][0]["pluginConfig"][1]["args"].update(migration)
    doc["dryRun"] = dry_run
    return load_config_document(doc)


@pytest.mark.parametrize(
    ("windows", "dry_run", "results", "sent"),
    [
        ([FRIDAY_MORNING], False, ["evicted"], 1),
        ([FRIDAY_NIGHT], False, [OUTSIDE_WINDOW], 0),
        ([TOKYO_MORNING], False, [OUTSIDE_WINDOW], 0),  # 08:30 in Tokyo was hours ago
        ([FRIDAY_NIGHT, FRIDAY_MORNING], False, ["evicted"], 1),
        ([FRIDAY_NIGHT], True, [OUTSIDE_WINDOW], 0),  # the audit shows what a live run would do now
    ],
)
def test_outside_every_window_each_planned_eviction_is_reported_and_none_is_sent(
    windows: list[dict[str, Any]], dry_run: bool, results: list[str], sent: int
) -> None:
    evictor = FakeEvictor()
    record = seed_runner(evictor, config=config(dry_run, evictionWindows=windows)).run_cycle()
    assert record is not None
    assert [e.result for e in record.evictions] == results
    assert len(evictor.calls) == sent
    assert record.window is not None and record.window.open == (sent == 1)


def test_the_record_and_the_gauges_say_when_the_next_window_opens() -> None:
    record = seed_runner(FakeEvictor(), config=config(evictionWindows=[FRIDAY_NIGHT])).run_cycle()
    assert record is not None
    opens = NOW + 13 * 3600  # Friday 22:00 in Berlin
    assert record.evictions[0].message == (
        "outside evictionWindows: the next window (Fri 22:00-06:00 Europe/Berlin) opens at "
        "2027-01-15T21:00:00Z"
    )
    assert record.to_dict()["evictionWindow"] == {
        "open": False,
        "nextOpen": "2027-01-15T21:00:00Z",
        "window": "Fri 22:00-06:00 Europe/Berlin",
    }
    assert record.evictions[0].message in render_record_text(record).splitlines()
    metrics = Metrics(CollectorRegistry())
    observe_record(metrics, record, config(evictionWindows=[FRIDAY_NIGHT]))
    assert metrics.registry.get_sample_value("descheduler_eviction_window_open") == 0
    assert (
        metrics.registry.get_sample_value("descheduler_eviction_window_next_open_timestamp_seconds") == opens
    )


def test_without_windows_the_gauge_says_open_and_the_record_says_nothing() -> None:
    record = seed_runner(FakeEvictor(), config=config()).run_cycle()
    assert record is not None
    metrics = Metrics(CollectorRegistry())
    observe_record(metrics, record, config())
    assert metrics.registry.get_sample_value("descheduler_eviction_window_open") == 1
    assert "evictionWindow" not in record.to_dict() and "churnBudget" not in record.to_dict()


BUDGET = {"objectLimiters": {}, "churnBudget": {"maxEvictions": 1, "period": "1h"}}


def test_the_budget_rebuilt_from_the_journal_holds_across_a_restart() -> None:
    """The first process spends the budget and dies; the next, reading the same records, evicts nothing
    within the hour and says when the budget returns."""
    journal = FakeJournal()
    first = FakeEvictor()
    before = journaled(first, journal, config=config(**BUDGET)).run_cycle()
    assert before is not None and len(first.calls) == 1
    assert before.budget is not None and before.budget.left == 0
    after_restart = FakeEvictor()
    later = [NOW + 60]
    record = journaled(after_restart, journal, config=config(**BUDGET), wall=later).run_cycle()
    assert record is not None
    assert record.restore is not None and record.restore.migrations == 1
    assert after_restart.calls == []
    spent = [s for s in record.plan.pod_skips if s.code == reasons.BUDGET_SPENT]
    assert spent and spent[0].message.endswith("budget returns at 2027-01-15T09:00:00Z")
    metrics = Metrics(CollectorRegistry())
    observe_record(metrics, record, config(**BUDGET))
    remaining = metrics.registry.get_sample_value("descheduler_churn_budget_remaining", {"namespace": ""})
    returns = metrics.registry.get_sample_value(
        "descheduler_churn_budget_returns_timestamp_seconds", {"namespace": ""}
    )
    assert (remaining, returns) == (0, NOW + 3600)
    assert "Churn budget over 1h0m0s: 0 left cluster-wide (returns at 2027-01-15T09:00:00Z)" in (
        render_record_text(record)
    )


def test_a_budget_without_the_journal_would_be_reset_by_a_restart() -> None:
    """The control: the same two runs, each with a fresh journal, both evict (the test above can fail)."""
    calls = []
    for _ in range(2):
        evictor = FakeEvictor()
        journaled(evictor, FakeJournal(), config=config(**BUDGET)).run_cycle()
        calls.append(len(evictor.calls))
    assert calls == [1, 1]


def test_the_per_namespace_gauge_follows_the_namespaces_that_spend() -> None:
    per_namespace = {"objectLimiters": {}, "churnBudget": {"maxEvictionsPerNamespace": 3}}
    record = seed_runner(FakeEvictor(), config=config(**per_namespace)).run_cycle()
    assert record is not None and record.budget is not None
    metrics = Metrics(CollectorRegistry())
    observe_record(metrics, record, config(**per_namespace))
    assert (
        metrics.registry.get_sample_value("descheduler_churn_budget_remaining", {"namespace": "default"}) == 2
    )
    assert metrics.registry.get_sample_value("descheduler_churn_budget_remaining", {"namespace": ""}) is None


class SlowJournal(FakeJournal):
    """A journal whose every write takes ``seconds`` of the wall clock ``wall``."""

    def __init__(self, wall: list[float], seconds: float) -> None:
        super().__init__()
        self.wall, self.seconds = wall, seconds

    def save(self, entries: Any, detectors: Any = None) -> None:
        self.wall[0] += self.seconds
        super().save(entries, detectors)


def test_a_window_that_closes_during_the_journal_write_stops_the_eviction() -> None:
    """Planned at 09:00 inside the 08:30-09:30 window; the intent record's write ends after 09:30: the
    window is judged again right before the request, so nothing is sent."""
    wall = [NOW]
    evictor = FakeEvictor()
    journal = SlowJournal(wall, seconds=3600)
    run = journaled(evictor, journal, config=config(evictionWindows=[FRIDAY_MORNING]), wall=wall)
    record = run.run_cycle()
    assert record is not None
    assert evictor.sent == []
    assert [e.result for e in record.evictions] == [OUTSIDE_WINDOW]
    assert "outside evictionWindows" in record.evictions[0].message
