"""The pure parts of the soak (``soak.py``): the seeded schedule, the usage model's moving load, the
measures computed from a recorded timeline, and the safety checks. No control plane here, so each part is
unit-tested on synthetic timelines (``tests/benchmarks/test_soak.py``).

Times are seconds from the start of the run. A node's *true* usage is the exporter's own figure (what the
simulated kubelets report), sampled by the soak every ``SAMPLE_S``; ``calm`` is the same without bursts.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SAMPLE_S = 1.0
"""How often the soak records every node's true usage."""
NODE_CPUS = 4
BASE_CORES = 0.3
POD_CORES = 0.2
"""A normal pod's CPU use; seven of them and the base load: 1.7 of 4 cores (42.5 %)."""
BUSY_CORES = 0.6
"""A pod of a sustained step: seven of them on one node use all of it; three must go to cure it."""
BURST_CORES = 1.8
"""Extra load on a node during a burst: 1.7 + 1.8 = 3.5 of 4 cores (87.5 %)."""
DRIFT_AMPLITUDE = 0.25
"""Pods' usage swings by +-25 % over a drift period, out of phase across node groups."""
LOW = 40.0
HIGH = 70.0
GROUPS = 4
"""Node groups (zones) the drift moves load across."""
WINDOW_S = 5.0
"""The usage window (a 5 s rate over 1 s scrapes): a node's figure lags the truth by up to window + 1."""

FAULTS = ("kill-apiserver", "kill-etcd", "restart-prometheus", "kill-leader", "restart-kwok")
CHURN = ("scale", "rollout", "namespace", "pdb-edit", "node-add", "node-cordon", "node-drain")


@dataclass(frozen=True)
class Plan:
    """What the schedule is generated from: the same plan and seed give the same events."""

    seed: int
    duration_s: float
    nodes: int
    interval_s: float
    consecutive: int
    warmup_s: float = 30.0
    drift_period_s: float = 1200.0
    burst_every_s: float = 60.0
    step_every_s: float = 120.0
    step_s: tuple[float, float] = (240.0, 480.0)
    churn_every_s: float = 30.0
    fault_every_s: float = 180.0
    """One fault of some kind this often (a short run still has one of each)."""
    checkpoint_every_s: float = 300.0

    @property
    def burst_s(self) -> float:
        """A burst lasts so long that, with the window's lag, it is seen for fewer than ``consecutive``
        cycles: it must never be acted on."""
        return max(1.0, min(5.0, (self.consecutive - 1) * self.interval_s - WINDOW_S - 2.0))


@dataclass(frozen=True)
class Event:
    t: float
    kind: str
    target: str = ""
    duration_s: float = 0.0
    value: float = 0.0


def node_names(count: int) -> list[str]:
    """The starting nodes, spread round-robin over the groups."""
    return [f"soak-g{i % GROUPS}-{i:03d}" for i in range(count)]


def group_of(node: str) -> int:
    return int(node.split("-")[1][1:])


def apps(nodes: int) -> list[tuple[str, str, int]]:
    """(namespace, name, replicas) of every workload: Deployments ``dep-*`` and StatefulSets ``sts-*``
    in two namespaces, seven pods per node in all."""
    total = nodes * 7
    out: list[tuple[str, str, int]] = []
    i = 0
    while total > 0:
        replicas = min(total, 3 + i % 6)
        kind = "sts" if i % 5 == 4 else "dep"
        out.append((f"soak-{'ab'[i % 2]}", f"{kind}-{i:03d}", replicas))
        total -= replicas
        i += 1
    return out


def make_schedule(plan: Plan) -> list[Event]:
    """The run's events, in time order, from ``plan`` alone: every descheduler meets the same ones.

    Bursts hit random nodes; sustained steps make the pods of a node busy for 4-8 minutes (the soak
    keeps a busy pod's load with its workload when it is moved); churn and faults come at their rates,
    faults round-robin over the five kinds, evenly spread, so a short run has one of each.
    """
    rng = random.Random(plan.seed)
    end = plan.duration_s - 20.0
    alive = node_names(plan.nodes)
    lives = {n: (0.0, math.inf) for n in alive}
    """node -> (added, removed): bursts and steps hit only nodes there for their whole length."""
    events: list[Event] = []
    workloads = apps(plan.nodes)
    t, added, spare = plan.warmup_s, 0, 0
    cordoned: list[str] = []
    while (t := t + rng.expovariate(1.0 / plan.churn_every_s)) < end:
        kind = rng.choice(CHURN)
        ns, app, replicas = rng.choice(workloads)
        at = round(t, 1)
        if kind == "scale":
            events.append(Event(at, kind, f"{ns}/{app}", value=max(1, replicas + rng.choice((-2, -1, 1, 2)))))
        elif kind in ("rollout", "pdb-edit"):
            events.append(Event(at, kind, f"{ns}/{app}", value=rng.choice((1, 2))))
        elif kind == "namespace":
            spare += 1
            name = f"soak-tmp-{spare:03d}"
            events.append(Event(at, "namespace-create", name))
            events.append(Event(round(min(t + rng.uniform(60.0, 300.0), end), 1), "namespace-delete", name))
        elif kind == "node-add":
            added += 1
            name = f"soak-g{added % GROUPS}-x{added:03d}"
            alive.append(name)
            lives[name] = (at, math.inf)
            events.append(Event(at, kind, name))
        elif kind == "node-cordon":
            node = rng.choice(alive)
            if node in cordoned:
                cordoned.remove(node)
                events.append(Event(at, "node-uncordon", node))
            else:
                cordoned.append(node)
                events.append(Event(at, kind, node))
        elif len(alive) > plan.nodes // 2:  # node-drain: drained, then removed
            node = rng.choice(alive)
            alive.remove(node)
            if node in cordoned:
                cordoned.remove(node)
            lives[node] = (lives[node][0], at)
            events.append(Event(at, kind, node))

    def target(t: float, length: float) -> str:
        return rng.choice(sorted(n for n, (a, r) in lives.items() if a + 15.0 <= t and t + length + 5.0 < r))

    t = plan.warmup_s
    while (t := t + rng.expovariate(1.0 / plan.burst_every_s)) < end:
        events.append(Event(round(t, 1), "burst", target(t, plan.burst_s), plan.burst_s, BURST_CORES))
    t = plan.warmup_s
    while (t := t + rng.expovariate(1.0 / plan.step_every_s)) < end:
        length = round(min(rng.uniform(*plan.step_s), end - t + 10), 1)
        events.append(Event(round(t, 1), "step", target(t, length), length, BUSY_CORES))
    faults = max(len(FAULTS), int(plan.duration_s // plan.fault_every_s))
    span = (end - plan.warmup_s - 30.0) / faults
    for i in range(faults):
        at = plan.warmup_s + 15.0 + span * (i + rng.uniform(0.0, 0.2))
        down = 0.0 if FAULTS[i % len(FAULTS)] in ("restart-prometheus", "kill-leader") else rng.uniform(3, 8)
        events.append(Event(round(at, 1), FAULTS[i % len(FAULTS)], "", round(down, 1)))
    t = 0.0
    while (t := t + plan.checkpoint_every_s) < end:
        events.append(Event(t, "checkpoint"))
    events.append(Event(round(end + 10.0, 1), "checkpoint"))
    return sorted(events, key=lambda e: (e.t, e.kind, e.target))


def schedule_digest(events: Sequence[Event]) -> str:
    """A short fingerprint of a schedule, so two runs can be shown to have met the same one."""
    return hashlib.sha256(repr([asdict(e) for e in events]).encode()).hexdigest()[:16]


def drift(group: int, t: float, period_s: float) -> float:
    """The factor on a pod's usage in node group ``group`` at ``t``: a slow daily-like swing, each group a
    quarter period after the previous one, so load moves around the groups."""
    return 1.0 + DRIFT_AMPLITUDE * math.sin(2 * math.pi * (t / period_s + group / GROUPS))


def active(events: Iterable[Event], kind: str, t: float) -> list[Event]:
    return [e for e in events if e.kind == kind and e.t <= t < e.t + e.duration_s]


# --- the timeline ------------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """What the soak recorded: per node the true usage (``total``) and the same without bursts (``calm``)
    at ``times`` (NaN while the node is absent or cordoned), and the evictions the server accepted."""

    times: list[float] = field(default_factory=list)
    total: dict[str, list[float]] = field(default_factory=dict)
    calm: dict[str, list[float]] = field(default_factory=dict)

    def add(self, t: float, sample: Mapping[str, tuple[float, float]]) -> None:
        n = len(self.times)
        self.times.append(t)
        for node, (total, calm) in sample.items():
            if node not in self.total:
                self.total[node] = [math.nan] * n
                self.calm[node] = [math.nan] * n
            self.total[node].append(total)
            self.calm[node].append(calm)
        for node in self.total.keys() - sample.keys():
            self.total[node].append(math.nan)
            self.calm[node].append(math.nan)

    def window(self, node: str, start: float, end: float, calm: bool = False) -> list[tuple[float, float]]:
        values = (self.calm if calm else self.total).get(node, [])
        return [
            (t, v)
            for t, v in zip(self.times, values, strict=False)
            if start <= t <= end and not math.isnan(v)
        ]


@dataclass(frozen=True)
class Eviction:
    t: float
    pod: str
    """``namespace/name``."""
    node: str
    workload: str
    """``namespace/app``."""


def seconds_over(points: Sequence[tuple[float, float]], high: float) -> float:
    """Seconds over ``high`` among samples ``SAMPLE_S`` apart."""
    return SAMPLE_S * sum(v > high for _, v in points)


def lookback(interval_s: float, consecutive: int) -> float:
    """How far before an eviction its node must have been hot: the confirming cycles plus the window's
    lag and a sample of slack."""
    return consecutive * interval_s + WINDOW_S + 2 * SAMPLE_S


def required_hot_s(interval_s: float, consecutive: int) -> float:
    """The least time over the threshold a node confirmed hot over ``consecutive`` cycles has spent:
    the span of those cycles, less a sample for the sampling's own granularity."""
    return max(SAMPLE_S, (consecutive - 1) * interval_s - SAMPLE_S)


def unconfirmed(
    timeline: Timeline, evictions: Sequence[Eviction], interval_s: float, consecutive: int
) -> list[Eviction]:
    """Evictions from a node that was not over the high threshold long enough, by the exporter's truth."""
    span, need = lookback(interval_s, consecutive), required_hot_s(interval_s, consecutive)
    return [e for e in evictions if seconds_over(timeline.window(e.node, e.t - span, e.t), HIGH) < need]


def burst_caused(
    timeline: Timeline,
    evictions: Sequence[Eviction],
    bursts: Sequence[Event],
    interval_s: float,
    consecutive: int,
) -> list[Eviction]:
    """Evictions from a node that was hot only through a burst: a burst on it within the look-back and
    its usage without the burst never over the high threshold in that time."""
    span = lookback(interval_s, consecutive)
    out = []
    for e in evictions:
        near = [b for b in bursts if b.target == e.node and b.t <= e.t and b.t + b.duration_s >= e.t - span]
        if near and seconds_over(timeline.window(e.node, e.t - span, e.t, calm=True), HIGH) == 0:
            out.append(e)
    return out


def window_breaches(evictions: Sequence[Eviction], window_s: float, per_window: int) -> list[Eviction]:
    """Evictions beyond ``per_window`` of one workload within ``window_s`` (one second of slack for the
    audit log's timestamps)."""
    out = []
    by_workload: dict[str, list[float]] = {}
    for e in sorted(evictions, key=lambda e: e.t):
        times = by_workload.setdefault(e.workload, [])
        if sum(e.t - t < window_s - 1.0 for t in times) >= per_window:
            out.append(e)
        times.append(e.t)
    return out


def node_breaches(evictions: Sequence[Eviction], interval_s: float, per_cycle: int) -> list[Eviction]:
    """Evictions beyond ``per_cycle`` from one node within half an interval (one cycle's evictions are
    sent together; the next cycle is an interval later)."""
    out = []
    by_node: dict[str, list[float]] = {}
    for e in sorted(evictions, key=lambda e: e.t):
        times = by_node.setdefault(e.node, [])
        if sum(e.t - t < interval_s / 2 for t in times) >= per_cycle:
            out.append(e)
        times.append(e.t)
    return out


DISRUPTING = ("scale", "rollout", "pdb-edit", "namespace-create", "namespace-delete")
"""Churn that disrupts the pods of its target workload (``namespace/app``) or namespace."""


PDB_FAULTS = ("kill-apiserver", "kill-etcd", "restart-kwok")
"""Faults that leave pods unready or PDB status stale for every workload; a Prometheus restart or the
leader's death explains no low PDB."""


def pdb_breaches(
    low: Sequence[tuple[float, str]],
    evictions: Sequence[Eviction],
    faults: Sequence[tuple[str, float, float]],
    done: Sequence[tuple[float, str, str]],
) -> list[tuple[float, str]]:
    """Samples of a PDB (``namespace/name``, named after its workload) below its desired healthy count that
    the descheduler is to blame for: within 30 s after it evicted a pod of that workload, and not explained
    by a fault of ``PDB_FAULTS`` (from its start to 60 s after the component is back), a drain of a node
    that ran a pod of that workload (120 s), or churn of that workload or namespace (60 s). ``faults``:
    (kind, start, back); ``done``: (time, kind, target) of every event applied, a drain once per workload
    that had a pod on the node (target: the workload)."""
    out = []
    for t, name in low:
        if not any(e.workload == name and t - 30 <= e.t <= t for e in evictions):
            continue
        if any(kind in PDB_FAULTS and a - 5 <= t <= b + 60 for kind, a, b in faults):
            continue
        if any(
            (kind == "node-drain" and at <= t <= at + 120 and name == target)
            or (
                kind in DISRUPTING
                and at <= t <= at + 60
                and (name == target or name.startswith(target + "/"))
            )
            for at, kind, target in done
        ):
            continue
        out.append((t, name))
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def cures(timeline: Timeline, steps: Sequence[Event]) -> list[float | None]:
    """Per sustained step: seconds from its start until its node's calm usage is under the high threshold
    again (None: still hot when the step ended, or the node was gone). A step on a node that never got hot
    (too few pods there) counts 0."""
    out: list[float | None] = []
    for step in steps:
        points = timeline.window(step.target, step.t + SAMPLE_S, step.t + step.duration_s, calm=True)
        hot_seen = False
        cured: float | None = None
        for t, v in points:
            if v > HIGH:
                hot_seen = True
            elif hot_seen or t > step.t + 3 * SAMPLE_S + WINDOW_S:
                cured = t - step.t if hot_seen else 0.0
                break
        out.append(cured)
    return out


def evictions_needed(busy: int, node: str, t: float, period_s: float) -> int:
    """The fewest of a stepped node's ``busy`` pods whose eviction at ``t`` brings its demand (base load,
    plus ``BUSY_CORES`` times its group's drift a busy pod) to the high threshold or under. What a cure's
    evictions are judged against: the drift moves it, so one step needs 3 at one time and 4 at another.
    Demand, not measured usage: a saturated node reads 100 % whatever its pods ask for."""
    per_pod = BUSY_CORES * drift(group_of(node), t, period_s)
    for k in range(busy + 1):
        if 100.0 * (BASE_CORES + (busy - k) * per_pod) / NODE_CPUS <= HIGH:
            return k
    return busy


def measures(
    timeline: Timeline,
    evictions: Sequence[Eviction],
    events: Sequence[Event],
    replacements_pending_s: float,
    interval_s: float,
    consecutive: int,
) -> dict[str, Any]:
    """The figures load-aware rebalancing is judged by, from the run's timeline and evictions."""
    steps = [e for e in events if e.kind == "step"]
    cure = cures(timeline, steps)
    cured = [c for c in cure if c is not None and c > 0]
    hot_node_s = sum(
        SAMPLE_S * sum(v > HIGH for v in values if not math.isnan(v)) for values in timeline.total.values()
    )
    per_cure = []
    for step, c in zip(steps, cure, strict=True):
        if c:
            per_cure.append(sum(step.t <= e.t <= step.t + c and e.node == step.target for e in evictions))
    moved_again = 0
    by_workload: dict[str, list[float]] = {}
    for e in evictions:
        by_workload.setdefault(e.workload, []).append(e.t)
    for e in evictions:
        if any(e.t < t <= e.t + 3600.0 for t in by_workload[e.workload]):
            moved_again += 1
    cvs, ranges = spread(timeline)
    bursts = [e for e in events if e.kind == "burst"]
    return {
        "evictions": len(evictions),
        "hot_node_seconds": hot_node_s,
        "steps": len(steps),
        "steps_hot": sum(c is None or c > 0 for c in cure),
        "steps_cured": len(cured),
        "cures_s": cured,
        "cure_s_p50": percentile(cured, 0.5),
        "cure_s_p95": percentile(cured, 0.95),
        "evictions_per_cured_hotspot": statistics.mean(per_cure) if per_cure else None,
        "ping_pong_share": moved_again / len(evictions) if evictions else 0.0,
        "replacement_pending_s": replacements_pending_s,
        "burst_evictions": len(burst_caused(timeline, evictions, bursts, interval_s, consecutive)),
        "unconfirmed_evictions": len(unconfirmed(timeline, evictions, interval_s, consecutive)),
        "cv_mean": statistics.mean(cvs) if cvs else None,
        "cv_last": cvs[-1] if cvs else None,
        "range_mean": statistics.mean(ranges) if ranges else None,
    }


def spread(timeline: Timeline) -> tuple[list[float], list[float]]:
    """Per sample: the coefficient of variation and the max-min of the nodes' usage (present nodes)."""
    cvs: list[float] = []
    ranges: list[float] = []
    for i in range(len(timeline.times)):
        values = [v[i] for v in timeline.total.values() if not math.isnan(v[i])]
        if len(values) < 2:
            continue
        mean = statistics.fmean(values)
        cvs.append(statistics.pstdev(values) / mean if mean else 0.0)
        ranges.append(max(values) - min(values))
    return cvs, ranges


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (t seconds, value), per hour: how fast RSS or CPU per cycle grows."""
    if len(points) < 3:
        return None
    ts, vs = [p[0] for p in points], [p[1] for p in points]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    den = sum((t - mt) ** 2 for t in ts)
    return 3600.0 * sum((t - mt) * (v - mv) for t, v in zip(ts, vs, strict=True)) / den if den else None


def resource_trends(
    procs: Sequence[Mapping[str, Any]], cycles: Sequence[float], warm: float
) -> dict[str, Any]:
    """RSS, threads, fds and interner size of the process that did the work after ``warm`` (the most CPU:
    a leader; a standby only waits), first and last and slope per hour, and its CPU seconds per cycle
    (between consecutive samples, over the cycles in between) and that figure's slope."""
    by_pid: dict[int, list[Mapping[str, Any]]] = {}
    for p in procs:
        if p["t"] >= warm:
            by_pid.setdefault(p["pid"], []).append(p)
    if not by_pid:
        return {}
    samples = max(by_pid.values(), key=lambda s: s[-1]["cpu_s"] - s[0]["cpu_s"])
    out: dict[str, Any] = {
        "pid": samples[0]["pid"],
        "span_s": samples[-1]["t"] - samples[0]["t"],
        "rss_start_mib": samples[0]["rss_mib"],
        "rss_end_mib": samples[-1]["rss_mib"],
    }
    for key in ("rss_mib", "threads", "fds", "interner"):
        points = [(p["t"], float(p[key])) for p in samples if p.get(key) is not None]
        out[f"{key}_slope_per_hour"] = slope_per_hour(points)
        out[f"{key}_first_last"] = (points[0][1], points[-1][1]) if points else None
    per_cycle = []
    for a, b in itertools.pairwise(samples):
        n = sum(a["t"] < t <= b["t"] for t in cycles)
        if n:
            per_cycle.append((b["t"], (b["cpu_s"] - a["cpu_s"]) / n))
    out["cpu_per_cycle_s"] = statistics.fmean(v for _, v in per_cycle) if per_cycle else None
    out["cpu_per_cycle_slope_per_hour"] = slope_per_hour(per_cycle)
    return out


def recovered(fault_end: float, cycle_times: Sequence[float], within_s: float) -> float | None:
    """Seconds from a fault's end (the component back) to the first cycle after it, if within ``within_s``."""
    after = [t - fault_end for t in cycle_times if t > fault_end]
    return after[0] if after and after[0] <= within_s else None


# --- the plot ----------------------------------------------------------------------------------------------


def svg_plot(timeline: Timeline, evictions: Sequence[Eviction], events: Sequence[Event], title: str) -> str:
    """Usage spread (max, mean, min of the nodes' true usage) and hot nodes over time, evictions as ticks
    and faults as labelled lines: an SVG written by hand (no plotting library is installed)."""
    width, height, left, top, plot_h = 1200, 560, 60, 40, 380
    end = timeline.times[-1] if timeline.times else 1.0
    x = lambda t: left + (width - left - 20) * t / max(end, 1.0)  # noqa: E731
    y = lambda v: top + plot_h * (1 - min(v, 100.0) / 100.0)  # noqa: E731
    series: dict[str, list[str]] = {"max": [], "mean": [], "min": []}
    hot: list[str] = []
    for i, t in enumerate(timeline.times):
        values = [v[i] for v in timeline.total.values() if not math.isnan(v[i])]
        if not values:
            continue
        for name, value in (("max", max(values)), ("mean", statistics.fmean(values)), ("min", min(values))):
            series[name].append(f"{x(t):.1f},{y(value):.1f}")
        hot.append(f"{x(t):.1f},{top + plot_h + 100 - 4 * sum(v > HIGH for v in values):.1f}")
    colours = {"max": "#d62728", "mean": "#1f77b4", "min": "#2ca02c"}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="14">{title}</text>',
        f'<line x1="{left}" y1="{y(HIGH):.1f}" x2="{width - 20}" y2="{y(HIGH):.1f}" '
        'stroke="#999" stroke-dasharray="4"/>',
        f'<text x="5" y="{y(HIGH) + 4:.1f}">high {HIGH:g}%</text>',
        f'<text x="5" y="{y(100) + 4:.1f}">100%</text><text x="5" y="{y(0) + 4:.1f}">0%</text>',
    ]
    for name, points in series.items():
        parts.append(f'<polyline fill="none" stroke="{colours[name]}" points="{" ".join(points)}"/>')
    parts.append(f'<polyline fill="none" stroke="#ff7f0e" points="{" ".join(hot)}"/>')
    parts.append(f'<text x="5" y="{top + plot_h + 60}">hot nodes</text>')
    for e in evictions:
        parts.append(
            f'<line x1="{x(e.t):.1f}" y1="{top + plot_h + 2}" x2="{x(e.t):.1f}" '
            f'y2="{top + plot_h + 12}" stroke="black"/>'
        )
    for ev in events:
        if ev.kind in FAULTS:
            parts.append(
                f'<line x1="{x(ev.t):.1f}" y1="{top}" x2="{x(ev.t):.1f}" y2="{top + plot_h}" '
                'stroke="#9467bd" stroke-dasharray="2"/>'
            )
            parts.append(
                f'<text x="{x(ev.t) + 2:.1f}" y="{top + 10}" fill="#9467bd" font-size="10">{ev.kind}</text>'
            )
    legend = (
        "max / mean / min usage (red, blue, green); hot nodes (orange, below); evictions (ticks); "
        "faults (purple)"
    )
    parts.append(f'<text x="{left}" y="{height - 10}">{legend}; {end:.0f} s</text></svg>')
    return "\n".join(parts)
