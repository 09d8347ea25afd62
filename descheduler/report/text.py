"""Cycles as text for people and JSON for scripts: ``simulate``'s output and the service's text audit.

The JSON keys ``cycles[].cycle`` and ``cycles[].evictions[].{pod,node,reason}`` are a contract users
script against; everything else is added information and may grow.

Text output shows every name and message with control and bidirectional-formatting characters escaped
(``\\u202e``): a pod named with a right-to-left override must not visually rewrite its line or the next
one. JSON keeps the exact strings (its own escaping is for machines).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from descheduler.planner import NodeReport, Plan
from descheduler.planner.model import RESTART
from descheduler.report.html import render_html as html_page
from descheduler.report.html import summary_examples


class Moved(Protocol):
    """A pod re-created elsewhere between simulated cycles (``simulate --reschedule``)."""

    @property
    def pod(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def destination(self) -> str: ...


class CycleResult(Protocol):
    """One simulated cycle as the renderers read it. Declared here, not imported from ``simulate``,
    so the report layer stays below the commands that use it (``simulate.runner`` provides it)."""

    @property
    def cycle(self) -> int: ...
    @property
    def now(self) -> float: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def rescheduled(self) -> Sequence[Moved]: ...


def _escaped(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape(text: str) -> str:
    """``text`` with every character Python deems non-printable (C0/C1 controls, bidirectional marks,
    embeddings, overrides and isolates U+202A..U+202E and U+2066..U+2069, line separators...) written
    as ``\\uXXXX``, so it cannot rewrite a terminal line. The common case costs one scan."""
    return text if text.isprintable() else "".join(map(_escaped, text))


def _time(now: float) -> str:
    """UTC time of ``now``; seconds since the epoch when beyond what a date can show (year 9999)."""
    try:
        return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{now:.0f}s after the epoch"


def cycle_dict(result: CycleResult) -> dict[str, Any]:
    body = result.plan.to_dict()
    out: dict[str, Any] = {"cycle": result.cycle, "time": _time(result.now), "evictions": body["evictions"]}
    out["nodes"] = body["nodes"]
    out["skips"] = body["skips"]
    out["skipForm"] = body["skipForm"]
    if "skipSummaries" in body:
        out["skipSummaries"] = body["skipSummaries"]
    out["notes"] = body["notes"]
    if result.rescheduled:
        out["rescheduled"] = [
            {"pod": m.pod, "from": m.source, "to": m.destination or None} for m in result.rescheduled
        ]
    return out


def render_json(results: Sequence[CycleResult]) -> str:
    return json.dumps({"cycles": [cycle_dict(r) for r in results]}, indent=2) + "\n"


def render_html(results: Sequence[CycleResult]) -> str:
    """The HTML report over the same per-cycle records as ``render_json``."""
    records = [cycle_dict(r) for r in results]
    titles = [f"Cycle {r.cycle} at {_time(r.now)}" for r in results]
    return html_page(records, titles, "descheduler simulate")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [len(h) for h in headers]
    rows = [[escape(cell) for cell in row] for row in rows]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _pct(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else f"{int(value)}"


def _resource_cell(report: NodeReport, resource: str) -> str:
    for item in report.resources:
        if item.resource == resource:
            cell = f"{item.usage_percent:.2f} ({_pct(item.low_percent)}-{_pct(item.high_percent)})"
            sampled = item.sample_percent
            if item.sample is not None and item.sample != item.usage and sampled is not None:
                cell += f" sampled {sampled:.2f}"  # the estimate differs from the raw sample
            if item.running_percent is not None:
                cell += f" running {item.running_percent:.2f}"  # pods bound here have not started
            return cell
    return "-"


def _class_cell(report: NodeReport) -> str:
    text = report.node_class
    if report.cordoned:
        text += " (cordoned)"
    return text


def render_plan_text(plan: Plan, title: str) -> list[str]:
    """One cycle as text; also usable for a one-off dry-run audit."""
    lines = [escape(title)]
    lines += [f"  {escape(note)}" for note in plan.notes]
    lines.append("")
    lines += _node_table(plan)
    skipped_nodes = [r for r in plan.node_reports if r.skip_code]
    if skipped_nodes:
        lines.append("")
        lines.append("  Skipped nodes:")
        lines += _table(
            ["NODE", "CODE", "MESSAGE"],
            [[r.node, r.skip_code, r.skip_message] for r in skipped_nodes],
            "    ",
        )
    stops = [r for r in plan.node_reports if r.stop_code]
    if stops:
        lines.append("")
        lines.append("  Hotspots:")
        lines += _table(
            ["NODE", "OUTCOME", "DETAIL"], [[r.node, r.stop_code, r.stop_message] for r in stops], "    "
        )
    lines.append("")
    lines += _eviction_table(plan)
    if plan.pod_skips:
        lines.append("")
        lines.append("  Skipped pods:")
        lines += _table(
            ["POD", "NODE", "CODE", "MESSAGE"],
            [[s.pod, s.node, s.code, s.message] for s in plan.pod_skips],
            "    ",
        )
    if plan.skip_summaries:
        lines.append("")
        lines.append(
            "  Pods a filter left alone on hotspots that stopped first, by reason (--explain all lists each):"
        )
        lines += _table(
            ["NODE", "STOPPED", "CODE", "PODS", "FOR EXAMPLE", "FIRST POD'S MESSAGE"],
            [[s.node, s.stop, s.code, str(s.count), summary_examples(s.examples, s.count), s.message]
             for s in plan.skip_summaries],
            "    ",
        )  # fmt: skip
    return lines


def _node_table(plan: Plan) -> list[str]:
    """One row per node: class, anomaly count, each resource against its thresholds, evictions."""
    resources = list(dict.fromkeys(res.resource for report in plan.node_reports for res in report.resources))
    has_prod = any(r.prod_class for r in plan.node_reports)
    headers = ["NODE", "POOL", "CLASS", "ANOMALY"]
    headers += [f"{r.upper()}% (LOW-HIGH)" for r in resources]
    if has_prod:
        headers += ["PROD CLASS"]
    headers += ["EVICTED"]
    rows = []
    for report in plan.node_reports:
        if report.node_class == "skipped":
            anomaly = str(report.anomaly_count)
        else:
            anomaly = f"{report.anomaly_count}/{report.consecutive_abnormalities}"
        if report.normal_count:  # a confirmed hotspot in a dip: how long it may last
            anomaly += f" (normal {report.normal_count}/{report.consecutive_normalities})"
        row = [report.node, report.pool or "-", _class_cell(report), anomaly]
        row += [_resource_cell(report, r) for r in resources]
        if has_prod:
            row.append(f"{report.prod_class} {report.prod_anomaly_count}" if report.prod_class else "-")
        row.append(str(report.evicted))
        rows.append(row)
    return _table(headers, rows)


def _eviction_table(plan: Plan) -> list[str]:
    """The planned moves; an ACTION column only when some are surge-first restarts
    (``surgeSingleReplica``) and a DEVICES column only when some hold DRA devices, so without any the
    table is as it always was."""
    if not plan.evictions:
        return ["  Evictions: none"]
    restarts = any(e.action == RESTART for e in plan.evictions)
    devices = any(e.devices for e in plan.evictions)
    headers = [
        "POD",
        "NODE",
        "DESTINATION",
        *(["ACTION"] if restarts else []),
        "REASON",
        *(["DEVICES"] if devices else []),
    ]
    rows = [
        [
            e.pod.key,
            e.node,
            e.destination,
            *(["would-restart" if e.action == RESTART else "would-evict"] if restarts else []),
            e.reason,
            *([e.devices] if devices else []),
        ]
        for e in plan.evictions
    ]
    return ["  Evictions:", *_table(headers, rows, "    ")]


def render_text(results: Sequence[CycleResult]) -> str:
    lines: list[str] = []
    total = 0
    for result in results:
        if lines:
            lines.append("")
        lines += render_plan_text(result.plan, f"Cycle {result.cycle} at {_time(result.now)}")
        if result.rescheduled:
            lines.append("")
            lines.append("  Rescheduled:")
            lines += _table(
                ["POD", "FROM", "TO"],
                [[m.pod, m.source, m.destination or "(pending: no node fits)"] for m in result.rescheduled],
                "    ",
            )
        total += len(result.plan.evictions)
    lines.append("")
    lines.append(f"{len(results)} cycle(s), {total} eviction(s)")
    return "\n".join(lines) + "\n"
