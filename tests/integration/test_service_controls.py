"""Eviction windows and the churn budget against ``descheduler run`` processes on the stand-in API server.

- **A window across a DST change.** The real clock cannot be moved, so the time zone is: the process
  reads ``Test/Shift`` from a TZif file written here (``PYTHONTZPATH``) whose clocks go forward one hour
  (+01:00 to +02:00, plus the seconds that put the new clock's next whole minute 30 s from now, so the
  test need not wait for one: up to 90 s before) a few seconds before the window opens. The window is
  written in the new wall-clock time; a process that kept the offset it started with would open it an
  hour late. It must evict nothing
  before the opening (each planned eviction is ``outside-window``), announce the opening in advance on
  its gauge, and evict once it opens. (Clocks going back cannot be shown in seconds: a wall-clock time
  within the hour after the change is in the repeated hour, a start read as its second occurrence and an
  end as its first; the unit tests hold those rules and the autumn window with Europe/Berlin's real dates.)
- **The budget across SIGKILL.** Two evictions per hour: a process killed right after spending the first
  one is followed by one that spends the second and then nothing, and a third process after that one is
  killed evicts nothing either, with the node still hot all along.

The cluster and its config are ``test_service_restart.py``'s: one hot node, three Deployments.
"""

from __future__ import annotations

import struct
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.service_fixtures import evictions, kubeconfig_of
from tests.integration.test_service_restart import cluster_for, config, evicted_names, keep_hot
from tests.support.service import (
    Descheduler,
    Ports,
    UsageBackend,
    metric_samples,
    run_descheduler,
    write_config,
)

pytestmark = pytest.mark.integration

ZONE = "Test/Shift"


def tzif(transition: int, before: int, after: int) -> bytes:
    """A version-1 TZif file (RFC 8536): offset ``before`` until ``transition``, then ``after`` (DST)."""
    names = b"TST\0TDT\0"
    header = b"TZif" + b"\0" * 16 + struct.pack(">6l", 0, 0, 0, 1, 2, len(names))
    types = struct.pack(">lbb", before, 0, 0) + struct.pack(">lbb", after, 1, 4)
    return header + struct.pack(">l", transition) + bytes([1]) + types + names


def with_mc(path: Path, **migration: Any) -> Path:
    doc = yaml.safe_load(path.read_text())
    doc["profiles"][0]["pluginConfig"][1]["args"].update(migration)
    return write_config(path, doc)


def monotonic_of(wall: float) -> float:
    return wall - (time.time() - time.monotonic())


def summaries(proc: Descheduler) -> list[dict[str, Any]]:
    return proc.events("cycle_summary")


def test_a_window_written_in_the_new_clock_time_opens_on_time_across_the_dst_change(
    usage_backend: UsageBackend, tmp_path: Path
) -> None:
    opens = int(time.time()) + 30  # time for the process to start and plan a few cycles while closed
    shift = opens - 12  # clocks go forward 12 s before the window opens
    after = 7200 + (-(opens + 7200)) % 60  # +02:00 and the seconds that make ``opens`` a whole minute
    tzdir = tmp_path / "zoneinfo"
    (tzdir / "Test").mkdir(parents=True)
    (tzdir / "Test" / "Shift").write_bytes(tzif(shift, after - 3600, after))
    start = datetime.fromtimestamp(opens, UTC) + timedelta(seconds=after)  # the wall clock after the change
    assert start.second == 0
    end = start + timedelta(minutes=3)
    window = {
        "days": [start.strftime("%a")],
        "start": start.strftime("%H:%M"),
        "end": end.strftime("%H:%M"),
        "timeZone": ZONE,
    }
    with cluster_for(tmp_path, usage_backend) as cluster:
        ports = Ports.free()
        cfg = with_mc(config(usage_backend, ports, tmp_path), evictionWindows=[window])
        env = {"PYTHONTZPATH": str(tzdir)}
        with run_descheduler(cfg, kubeconfig_of(cluster.server), ports, tmp_path, "dst", env=env) as proc:
            proc.wait_for(
                lambda: any((s.get("evictions") or {}).get("outside-window") for s in summaries(proc)),
                timeout=25,
                what="a cycle that planned an eviction outside the window",
            )
            gauge = metric_samples(
                proc.get("/metrics")[1], "descheduler_eviction_window_next_open_timestamp_seconds"
            )
            closed = metric_samples(proc.get("/metrics")[1], "descheduler_eviction_window_open")
            announced_before_shift = time.time() < shift
            proc.wait_for(lambda: evicted_names(cluster), timeout=opens - time.time() + 20, what="the window")
            keep_hot(cluster)
            first = next(r for r in evictions(cluster.server) if r.status == 201)
            outside = [s["evictions"]["outside-window"] for s in summaries(proc) if "outside-window" in
                       (s.get("evictions") or {})]  # fmt: skip
            proc.terminate()
    print(
        f"\nDST window: opens at {opens:.0f} (shift at {shift:.0f}); first eviction "
        f"{first.at - monotonic_of(opens):+.2f}s after it; {len(outside)} cycles planned outside the window"
    )
    assert announced_before_shift, "the gauge was read after the clocks changed: the test proves less"
    assert gauge == [({}, float(opens))], "the gauge announced the opening in the new clock time"
    assert closed == [({}, 0.0)]
    assert first.at >= monotonic_of(opens) - 0.05, "nothing is evicted before the window opens"
    assert first.at < monotonic_of(opens) + 10
    assert outside, "the cycles before the opening planned and reported their evictions"


BUDGET = {"churnBudget": {"maxEvictions": 2, "period": "1h"}}


def test_the_budget_holds_across_sigkill_and_restart(usage_backend: UsageBackend, tmp_path: Path) -> None:
    with cluster_for(tmp_path, usage_backend) as cluster:
        server = cluster.server
        ports = Ports.free()
        cfg = with_mc(config(usage_backend, ports, tmp_path), **BUDGET)
        with run_descheduler(cfg, kubeconfig_of(server), ports, tmp_path, "first") as first:
            first.wait_for(
                lambda: evicted_names(cluster), timeout=30, what="the first eviction", interval=0.01
            )
            first.kill()
        keep_hot(cluster)
        with run_descheduler(cfg, kubeconfig_of(server), ports, tmp_path, "second") as second:
            second.wait_for(lambda: len(evicted_names(cluster)) >= 2, timeout=30, what="the second eviction")
            keep_hot(cluster)
            second.wait_for(
                lambda: any((s.get("skips") or {}).get("budget-spent") for s in summaries(second)),
                timeout=30,
                what="a cycle that found the budget spent",
            )
            left = metric_samples(second.get("/metrics")[1], "descheduler_churn_budget_remaining")
            second.kill()
        keep_hot(cluster)
        with run_descheduler(cfg, kubeconfig_of(server), ports, tmp_path, "third") as third:
            third.wait_for(
                lambda: len([s for s in summaries(third) if (s.get("skips") or {}).get("budget-spent")]) >= 3,
                timeout=30,
                what="three cycles of the third process finding the budget spent",
            )
            rebuilt = third.events("state_rebuilt")
            third.terminate()
        done = [r.name for r in evictions(server) if r.status == 201]
    print(
        f"\nBUDGET across SIGKILL: evictions {done}, third process rebuilt {rebuilt[0]['migrations']} records"
    )
    assert len(done) == 2, "two per hour, whatever the restarts"
    assert left == [({"namespace": ""}, 0.0)]
    assert rebuilt and rebuilt[0]["migrations"] == 2
