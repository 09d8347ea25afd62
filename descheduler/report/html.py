"""The HTML report of ``simulate --output html`` and ``once --output html``: one self-contained page.

It reads the very records the other outputs print (``Plan.to_dict()`` per cycle, as ``simulate --output
json`` and the dry-run audit record hold them), so the picture cannot disagree with the decisions. Per
cycle: each node's usage against its low and high thresholds before and after the planned evictions,
the evictions as arrows from source to destination, and the pods left alone grouped by reason.

Nothing is fetched when the page is viewed: styles, the inline SVG and a few lines of script are in the
file, and a Content-Security-Policy forbids every other source, so the report can be mailed or attached
to a ticket and opened offline. The policy names the page's one style sheet and one script by their
sha256, not ``'unsafe-inline'``: should a name ever slip past the escaping, a script or style it injects
still does not run. Names come from the cluster, so bidi overrides and control characters in them are
shown as visible ``\\u202e`` escapes rather than allowed to reorder or hide the text around them.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_ROWS = 40
"""Above this many nodes a cycle's chart shows only the nodes that matter (over, hotspots, sources and
destinations); the others are counted in a note."""
APPLIED_RESULTS = frozenset({"", "evicted", "would-evict", "restarted", "would-restart"})
"""Eviction (and surge-first restart) results counted in the "after" bars: planned (simulate), done, or
allowed by the server-side dry run. A refused or failed eviction leaves its pod where it is."""

ROW_H = 30
NAME_W = 190
RES_W = 300
ARROW_W = 260
TOP = 34


@dataclass(frozen=True)
class Bar:
    """One resource of one node: percentages of allocatable, before and after the evictions."""

    resource: str
    before: float
    after: float
    low: float
    high: float


@dataclass(frozen=True)
class NodeRow:
    name: str
    node_class: str
    anomaly: str
    cordoned: bool
    bars: tuple[Bar, ...]
    skip: str = ""


@dataclass(frozen=True)
class Move:
    number: int
    pod: str
    source: str
    destination: str
    reason: str
    workload: str
    result: str
    message: str
    devices: str = ""
    """For a pod holding DRA devices: what its destination gives it (the record's ``devices``)."""

    @property
    def applied(self) -> bool:
        return self.result in APPLIED_RESULTS


@dataclass
class CycleView:
    """What one cycle's section shows, computed from its record (pure data, tested without a browser)."""

    title: str
    rows: list[NodeRow]
    moves: list[Move]
    skips: dict[str, list[Mapping[str, Any]]]
    notes: list[str]
    stops: list[tuple[str, str, str]]
    hidden_nodes: int = 0
    classes: dict[str, int] = field(default_factory=dict)
    rescheduled: list[tuple[str, str, str]] = field(default_factory=list)
    """``simulate --reschedule``: where the stand-in scheduler re-created each evicted pod."""
    summaries: list[Mapping[str, Any]] = field(default_factory=list)
    """The record's ``skipSummaries``: per hotspot and reason, the filtered pods it never needed."""

    @property
    def left_alone(self) -> int:
        """Pods left alone: each listed skip, and every pod a summary counts."""
        listed = sum(len(v) for v in self.skips.values())
        return listed + sum(int(s.get("count", 0)) for s in self.summaries)


def _moves(record: Mapping[str, Any]) -> list[Move]:
    moves = []
    for number, item in enumerate(record.get("evictions", []), start=1):
        kind, name = item.get("workloadKind", ""), item.get("workloadName", "")
        moves.append(
            Move(
                number=number,
                pod=str(item["pod"]),
                source=str(item["node"]),
                destination=str(item.get("destination", "")),
                reason=str(item.get("reason", "")),
                workload=f"{kind} {name}".strip(),
                result=str(item.get("result", "")),
                message=str(item.get("message", "")),
                devices=str(item.get("devices", "")),
            )
        )
    return moves


def project(record: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Each node's usage per resource (absolute) after the cycle's applied evictions: the pod's measured
    usage leaves its source and lands on the destination the planner reserved for it."""
    after: dict[str, dict[str, float]] = {}
    for node in record.get("nodes", []):
        after[node["node"]] = {r["resource"]: float(r["usage"]) for r in node.get("resources", [])}
    for item in record.get("evictions", []):
        if str(item.get("result", "")) not in APPLIED_RESULTS:
            continue
        for resource, amount in (item.get("usage") or {}).items():
            source = after.get(item["node"], {})
            if resource in source:
                source[resource] -= float(amount)
            target = after.get(item.get("destination", ""), {})
            if resource in target:
                target[resource] += float(amount)
    return after


def cycle_view(record: Mapping[str, Any], title: str) -> CycleView:
    after = project(record)
    moves = _moves(record)
    involved = {m.source for m in moves} | {m.destination for m in moves}
    rows: list[NodeRow] = []
    classes: dict[str, int] = {}
    for node in record.get("nodes", []):
        klass = str(node.get("class", ""))
        classes[klass] = classes.get(klass, 0) + 1
        bars = []
        for res in node.get("resources", []):
            base = float(res.get("allocatable") or 0)
            later = after.get(node["node"], {}).get(res["resource"], float(res["usage"]))
            bars.append(
                Bar(
                    resource=str(res["resource"]),
                    before=float(res["usagePercent"]),
                    after=round(later / base * 100, 2) if base > 0 else float(res["usagePercent"]),
                    low=float(res["lowPercent"]),
                    high=float(res["highPercent"]),
                )
            )
        skip = node.get("skip") or {}
        anomaly = (
            f"{node.get('anomalyCount', 0)}/{node.get('consecutiveAbnormalities', 0)}"
            if klass != "skipped"
            else ""
        )
        rows.append(
            NodeRow(
                name=str(node["node"]),
                node_class=klass,
                anomaly=anomaly,
                cordoned=bool(node.get("cordoned")),
                bars=tuple(bars),
                skip=f"{skip.get('code', '')}: {skip.get('message', '')}" if skip else "",
            )
        )
    hidden = 0
    if len(rows) > MAX_ROWS:
        keep = [r for r in rows if r.node_class in ("hotspot", "over") or r.name in involved]
        hidden = len(rows) - len(keep)
        rows = keep
    skips: dict[str, list[Mapping[str, Any]]] = {}
    for skip in record.get("skips", []):
        skips.setdefault(str(skip.get("code", "")), []).append(skip)
    stops = [
        (str(n["node"]), str(n["stop"].get("code", "")), str(n["stop"].get("message", "")))
        for n in record.get("nodes", [])
        if n.get("stop")
    ]
    return CycleView(
        title=title,
        rows=rows,
        moves=moves,
        skips=dict(sorted(skips.items(), key=lambda kv: (-len(kv[1]), kv[0]))),
        notes=[str(n) for n in record.get("notes", [])],
        stops=stops,
        rescheduled=[
            (str(m.get("pod", "")), str(m.get("from", "")), str(m.get("to") or "(pending: no node fits)"))
            for m in record.get("rescheduled", [])
        ],
        hidden_nodes=hidden,
        classes=classes,
        summaries=list(record.get("skipSummaries", [])),
    )


# --- drawing ------------------------------------------------------------------------------------------------


_INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 controls, bidi marks, embeddings, overrides and isolates, line and paragraph separators."""


def visible(text: str) -> str:
    """``text`` with each invisible or reordering character written as ``\\uXXXX``, so a node named
    ``"evil\\u202egnp.exe"`` reads as that and not as ``evilexe.png``."""
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _e(text: object) -> str:
    return html.escape(visible(str(text)), quote=True)


def _resources(view: CycleView) -> list[str]:
    """Every resource a row has a bar for, in the order first seen."""
    return list(dict.fromkeys(bar.resource for row in view.rows for bar in row.bars))


def _bar_svg(bar: Bar, x: float, y: float, scale: float) -> str:
    """Threshold zones as the track, the usage before as a solid bar, after as an outlined bar below."""
    width = RES_W - 60

    def px(percent: float) -> float:
        return x + max(0.0, min(percent, scale)) / scale * width

    state = "over" if bar.before > bar.high else "low" if bar.before <= bar.low else "mid"
    later = "over" if bar.after > bar.high else "low" if bar.after <= bar.low else "mid"
    parts = [
        f'<rect class="zone-low" x="{x:.1f}" y="{y:.1f}" width="{px(bar.low) - x:.1f}" height="20"/>',
        f'<rect class="zone-mid" x="{px(bar.low):.1f}" y="{y:.1f}" width="{px(bar.high) - px(bar.low):.1f}" '
        'height="20"/>',
        f'<rect class="zone-over" x="{px(bar.high):.1f}" y="{y:.1f}" width="{x + width - px(bar.high):.1f}" '
        'height="20"/>',
        f'<rect class="before {state}" x="{x:.1f}" y="{y + 2:.1f}" width="{px(bar.before) - x:.1f}" '
        f'height="8"><title>{_e(bar.resource)} before: {bar.before:.2f}% (low {bar.low:g}%, '
        f"high {bar.high:g}%)</title></rect>",
        f'<rect class="after {later}" x="{x:.1f}" y="{y + 11:.1f}" width="{px(bar.after) - x:.1f}" '
        f'height="7"><title>{_e(bar.resource)} after: {bar.after:.2f}%</title></rect>',
        f'<line class="threshold" x1="{px(bar.high):.1f}" x2="{px(bar.high):.1f}" y1="{y - 2:.1f}" '
        f'y2="{y + 22:.1f}"/>',
        f'<text class="pct" x="{x + width + 6:.1f}" y="{y + 9:.1f}">{bar.before:.1f}%</text>',
    ]
    if abs(bar.after - bar.before) >= 0.005:
        parts.append(
            f'<text class="pct after-text" x="{x + width + 6:.1f}" y="{y + 19:.1f}">→{bar.after:.1f}%</text>'
        )
    return "".join(parts)


def _chart_svg(view: CycleView, number: int) -> str:
    """Node rows with their bars, and the arrows in a gutter on the right (marker ids unique per cycle:
    a hidden section must not hide the arrowheads of another)."""
    resources = _resources(view)
    scale = max([100.0] + [max(b.before, b.after) for r in view.rows for b in r.bars])
    arrows_x = NAME_W + RES_W * len(resources) + 10
    width = arrows_x + ARROW_W
    height = TOP + ROW_H * len(view.rows) + 10
    index = {row.name: i for i, row in enumerate(view.rows)}
    parts = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{_e(view.title)}: node usage and evictions">',
        f'<defs><marker id="head-{number}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" class="head"/></marker></defs>',
    ]
    for i, name in enumerate(resources):
        x = NAME_W + i * RES_W
        parts.append(f'<text class="col" x="{x}" y="16">{_e(name)}: % of allocatable, before / after</text>')
    parts.append(f'<text class="col" x="{arrows_x}" y="16">evictions: source → destination</text>')
    for i, row in enumerate(view.rows):
        y = TOP + i * ROW_H
        label = row.name + (" (cordoned)" if row.cordoned else "")
        parts.append(
            f'<g class="node {row.node_class}" data-node="{_e(row.name)}" data-class="{_e(row.node_class)}">'
            f'<text class="name" x="4" y="{y + 10}">{_e(label)}</text>'
            f'<text class="klass" x="4" y="{y + 22}">{_e(row.node_class)}'
            f"{(' ' + _e(row.anomaly)) if row.anomaly else ''}</text>"
        )
        if row.skip:
            parts.append(f'<text class="skipnote" x="{NAME_W}" y="{y + 14}">{_e(row.skip)}</text>')
        by_name = {b.resource: b for b in row.bars}
        for j, name in enumerate(resources):
            if name in by_name:
                parts.append(_bar_svg(by_name[name], NAME_W + j * RES_W, y, scale))
        parts.append("</g>")
    for k, move in enumerate(view.moves):
        if move.source not in index or move.destination not in index:
            continue
        y1 = TOP + index[move.source] * ROW_H + 10
        y2 = TOP + index[move.destination] * ROW_H + 10
        bulge = arrows_x + 44 + (k % 8) * 30
        start, end = arrows_x + 4, arrows_x + 8
        klass = "arrow" if move.applied else "arrow refused"
        parts.append(
            f'<g class="{klass}" data-pod="{_e(move.pod)}" data-from="{_e(move.source)}" '
            f'data-to="{_e(move.destination)}" data-number="{move.number}">'
            f"<title>#{move.number} {_e(move.pod)}: {_e(move.source)} → {_e(move.destination)}"
            f"{(' (' + _e(move.result) + ')') if move.result else ''}</title>"
            f'<path d="M{start},{y1} C{bulge},{y1} {bulge},{y2} {end},{y2}" '
            f'marker-end="url(#head-{number})"/>'
            f'<text x="{bulge - 8}" y="{(y1 + y2) / 2 + 4:.1f}">{move.number}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], klass: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{klass}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _section(view: CycleView, number: int) -> str:
    counts = ", ".join(f"{n} {k}" for k, n in sorted(view.classes.items()))
    applied = sum(1 for m in view.moves if m.applied)
    parts = [
        f'<section class="cycle" data-cycle="{number}" data-evictions="{len(view.moves)}">',
        f"<h2>{_e(view.title)}</h2>",
        f'<p class="summary">{_e(counts)}; {len(view.moves)} eviction(s) planned'
        f"{f', {applied} applied in the after bars' if applied != len(view.moves) else ''}"
        f"; {view.left_alone} pod(s) left alone</p>",
    ]
    parts += [f'<p class="note">{_e(n)}</p>' for n in view.notes]
    if view.hidden_nodes:
        parts.append(
            f'<p class="note">{view.hidden_nodes} other node(s) neither over nor involved in an eviction are '
            "not drawn.</p>"
        )
    parts.append(f'<div class="scroll">{_chart_svg(view, number)}</div>')
    if view.moves:
        has_result = any(m.result for m in view.moves)
        has_devices = any(m.devices for m in view.moves)
        headers = (
            ["#", "pod", "workload", "from", "to", "reason"]
            + (["devices"] if has_devices else [])
            + (["result", "detail"] if has_result else [])
        )
        rows = [
            [str(m.number), m.pod, m.workload, m.source, m.destination, m.reason]
            + ([m.devices] if has_devices else [])
            + ([m.result, m.message] if has_result else [])
            for m in view.moves
        ]
        parts.append("<h3>Evictions</h3>" + _table(headers, rows, "evictions"))
    else:
        parts.append('<h3>Evictions</h3><p class="none">none</p>')
    if view.rescheduled:
        parts.append(
            "<h3>Rescheduled (simulated scheduler)</h3>"
            + _table(["pod", "from", "to"], [list(m) for m in view.rescheduled], "rescheduled")
        )
    if view.stops:
        parts.append(
            "<h3>Hotspots</h3>" + _table(["node", "outcome", "detail"], [list(s) for s in view.stops])
        )
    if view.skips:
        parts.append("<h3>Pods left alone, by reason</h3>")
        for code, items in view.skips.items():
            rows = [[str(s.get("pod", "")), str(s.get("node", "")), str(s.get("message", ""))] for s in items]
            parts.append(
                f'<details class="skip" data-code="{_e(code)}" open><summary><code>{_e(code)}</code> '
                f"({len(items)})</summary>{_table(['pod', 'node', 'message'], rows)}</details>"
            )
    if view.summaries:
        rows = [
            [
                str(s.get("node", "")),
                str(s.get("stop", "")),
                str(s.get("code", "")),
                str(s.get("count", "")),
                _examples(s),
                str(s.get("message", "")),
            ]
            for s in view.summaries
        ]
        parts.append(
            "<h3>Pods a filter left alone on hotspots that stopped first, per reason</h3>"
            + _table(
                ["node", "stopped", "code", "pods", "for example", "first pod's message"], rows, "summaries"
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _examples(summary: Mapping[str, Any]) -> str:
    return summary_examples([str(e) for e in summary.get("examples", [])], int(summary.get("count", 0)))


def summary_examples(examples: Sequence[str], count: int) -> str:
    """The pods a skip summary names, and how many more it stands for (text and HTML say it alike)."""
    more = count - len(examples)
    return ", ".join(examples) + (f" and {more} more" if more > 0 else "")


STYLE = """
body{font:14px/1.4 "DejaVu Sans",Arial,sans-serif;margin:16px 24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 4px;border-top:1px solid #d0d4dc;padding-top:14px}
h3{font-size:15px;margin:14px 0 4px}.summary,.note{color:#4a5263;margin:2px 0}.none{color:#4a5263}
.scroll{overflow-x:auto}svg.chart text{font:12px "DejaVu Sans",Arial,sans-serif;fill:#1d2330}
svg .col{font-weight:bold}svg .klass,svg .pct{fill:#4a5263;font-size:11px}svg .after-text{fill:#1565c0}
svg .skipnote{fill:#8a5a00;font-style:italic}
.zone-low{fill:#e3f0fb}.zone-mid{fill:#eef3e8}.zone-over{fill:#fbe4e2}.threshold{stroke:#c62828;stroke-width:1.5;
stroke-dasharray:3 2}.before.low{fill:#5b8fd6}.before.mid{fill:#6aa84f}.before.over{fill:#d9534f}
.after{fill:none;stroke:#1565c0;stroke-width:1.5}.after.over{stroke:#c62828}
.node.hotspot .name{fill:#c62828;font-weight:bold}.node.over .name{fill:#b35c00}
.node.skipped .name{fill:#8a8f99}
.arrow path{fill:none;stroke:#6a1b9a;stroke-width:2}.arrow .head,.head{fill:#6a1b9a}.arrow text{fill:#6a1b9a;
font-weight:bold}.arrow.refused path{stroke:#8a8f99;stroke-dasharray:5 3}.arrow:hover path{stroke-width:4}
table{border-collapse:collapse;margin:4px 0 8px;font-size:13px}th,td{border-bottom:1px solid #e1e4ea;
padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f5f8}details.skip{margin:4px 0}
summary{cursor:pointer}code{background:#f3f5f8;padding:0 3px}.controls{margin:8px 0;color:#4a5263}
.legend span{margin-right:14px}.legend i{display:inline-block;width:22px;height:9px;margin-right:4px;
vertical-align:middle}.key-low{background:#e3f0fb}.key-mid{background:#eef3e8}.key-over{background:#fbe4e2}
.key-before{background:#6aa84f}.legend i.key-after{border:2px solid #1565c0;height:5px}
.legend i.key-arrow{background:#6a1b9a;height:3px}
"""

SCRIPT = """
(function () {
  var box = document.getElementById('only-evictions');
  var sections = Array.prototype.slice.call(document.querySelectorAll('section.cycle'));
  function apply() {
    var shown = 0;
    sections.forEach(function (s) {
      var hide = box.checked && s.getAttribute('data-evictions') === '0';
      s.hidden = hide;
      if (!hide) { shown += 1; }
    });
    document.getElementById('shown').textContent = shown + ' of ' + sections.length + ' cycle(s) shown';
  }
  box.addEventListener('change', apply);
  apply();
})();
"""


def _sha256(source: str) -> str:
    """A CSP hash source: the digest of the element's text exactly as it stands in the page."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode("ascii") + "'"


CSP = (
    f"default-src 'none'; style-src {_sha256(STYLE)}; script-src {_sha256(SCRIPT)}; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)
"""Computed when the module loads, from the very strings the page embeds, so an edit cannot forget it."""


def render_html(records: Sequence[Mapping[str, Any]], titles: Sequence[str], heading: str) -> str:
    """The page for ``records`` (one per cycle, ``Plan.to_dict()`` shape), titled ``titles``."""
    views = [cycle_view(record, title) for record, title in zip(records, titles, strict=True)]
    total = sum(len(v.moves) for v in views)
    sections = "".join(_section(view, i) for i, view in enumerate(views, start=1))
    legend = (
        '<p class="legend"><span><i class="key-low"></i>at or below low</span>'
        '<span><i class="key-mid"></i>between low and high</span>'
        '<span><i class="key-over"></i>above high (red dashes: high threshold)</span>'
        '<span><i class="key-before"></i>usage before</span>'
        '<span><i class="key-after"></i>usage after the evictions</span>'
        '<span><i class="key-arrow"></i>eviction, numbered as in its table</span></p>'
    )
    data = json.dumps({"cycles": len(views), "evictions": total}).replace("</", "<\\/")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(heading)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{_e(heading)}</h1>"
        f'<p class="summary">{len(views)} cycle(s), {total} eviction(s)</p>{legend}'
        '<p class="controls"><label><input type="checkbox" id="only-evictions"> only cycles with evictions'
        '</label> · <span id="shown"></span></p>'
        f'{sections}<script type="application/json" id="report-data">{data}</script>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )
