"""A Grafana-free rendering of the dashboard's panels from Prometheus query results: one static HTML page
with an inline SVG per panel, laid out on the dashboard's own grid.

It exists for the README's picture and for the integration test that runs every panel's query: the
picture is of real data a real Prometheus scraped from a running service, not a mock-up. It is not a
replacement for Grafana (no zoom, no tooltips).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PALETTE = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0",
           "#508642", "#cca300")  # fmt: skip
CELL_W = 52
CELL_H = 34


@dataclass(frozen=True)
class Series:
    """One result series: its labels and its points (unix seconds, value)."""

    labels: Mapping[str, str]
    points: Sequence[tuple[float, float]]


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format; an empty template shows the label set."""
    if not template:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return "{" + inner + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def _mapped(panel: Mapping[str, Any], value: float) -> str | None:
    for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        option = mapping.get("options", {}).get(f"{value:g}")
        if option:
            return str(option["text"])
    return None


def _fmt(value: float, unit: str) -> str:
    if unit == "percentunit":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return f"{value:.2f}s" if value < 10 else f"{value:.0f}s"
    return f"{value:g}" if abs(value) >= 0.01 or value == 0 else f"{value:.3f}"


def _unit(panel: Mapping[str, Any]) -> str:
    return str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit") or "")


COLORS = {"red": "#e24d42", "orange": "#ef843c", "green": "#73bf69", "blue": "#5794f2", "yellow": "#eab839",
          "text": "#8e8e8e", "transparent": "none"}  # fmt: skip


def _timeline(
    panel: Mapping[str, Any], lines: Sequence[tuple[str, Series]], width: int, window: tuple[float, float]
) -> str:
    """A state timeline: one band per series, each step coloured by the panel's value mapping."""
    if not lines:
        return '<div class="muted">No data</div>'
    left, row = 120, 18
    t0, t1 = window
    span = (t1 - t0) or 1
    plot_w = max(10, width - left - 4)
    parts = [f'<svg width="{width}" height="{row * len(lines) + 4}" role="img">']
    for index, (name, series) in enumerate(lines):
        y = index * row + 2
        parts.append(
            f'<text x="{left - 6}" y="{y + 12}" class="axis" text-anchor="end">{html.escape(name)}</text>'
        )
        points = list(series.points)
        for i, (t, v) in enumerate(points):
            end = points[i + 1][0] if i + 1 < len(points) else t1
            color = "#555"
            for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
                option = mapping.get("options", {}).get(f"{v:g}")
                if option:
                    color = COLORS.get(option.get("color", ""), option.get("color", "#555"))
            x0 = left + (t - t0) / span * plot_w
            x1 = left + (end - t0) / span * plot_w
            width_px = max(0.5, x1 - x0)
            parts.append(
                f'<rect x="{x0:.1f}" y="{y}" width="{width_px:.1f}" height="{row - 3}" fill="{color}"/>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _drawn(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points a chart draws: Prometheus answers 0/0 (a ratio over an interval with no observations)
    with NaN, which Grafana leaves out (a gap); in an SVG path it is an error."""
    return [(t, v) for t, v in points if math.isfinite(v)]


def _segments(points: Sequence[tuple[float, float]]) -> list[tuple[float, float, bool]]:
    """(t, v, starts a segment) for each drawn point: the line breaks where a value was left out."""
    out = []
    gap = True
    for t, v in points:
        if not math.isfinite(v):
            gap = True
            continue
        out.append((t, v, gap))
        gap = False
    return out


def _chart(
    panel: Mapping[str, Any],
    lines: Sequence[tuple[str, Series]],
    width: int,
    height: int,
    window: tuple[float, float] | None = None,
) -> str:
    unit = _unit(panel)
    left, right, top, bottom = 46, 10, 8, 20
    plot_w, plot_h = max(10, width - left - right), max(10, height - top - bottom)
    points = [p for _, s in lines for p in _drawn(s.points)]
    if not points:
        return (
            f'<svg width="{width}" height="{height}"><text x="10" y="20" class="muted">No data</text></svg>'
        )
    t0, t1 = window or (min(t for t, _ in points), max(t for t, _ in points))
    v0 = min(0.0, min(v for _, v in points))
    v1 = max(v for _, v in points)
    v1 = v1 if v1 > v0 else v0 + 1
    span = t1 - t0 or 1

    def x(t: float) -> float:
        return left + (t - t0) / span * plot_w

    def y(v: float) -> float:
        return top + plot_h - (v - v0) / (v1 - v0) * plot_h

    parts = [f'<svg width="{width}" height="{height}" role="img">']
    for i in range(5):
        value = v0 + (v1 - v0) * i / 4
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y(value) + 4:.1f}" class="axis" text-anchor="end">'
            f"{html.escape(_fmt(value, unit))}</text>"
        )
    parts.append(f'<text x="{left}" y="{height - 4}" class="axis">{span:.0f}s of data</text>')
    bars = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("drawStyle") == "bars"
    for index, (name, series) in enumerate(lines):
        color = PALETTE[index % len(PALETTE)]
        dashed = ' stroke-dasharray="6 4"' if "threshold" in name else ""
        if "high threshold" in name:
            color = "#e24d42"
        elif "low threshold" in name:
            color = "#1f78c1"
        if bars:
            for t, v in _drawn(series.points):
                parts.append(
                    f'<rect x="{x(t) - 1.5:.1f}" y="{y(max(v, 0)):.1f}" width="3" '
                    f'height="{abs(y(v) - y(0)):.1f}" fill="{color}"/>'
                )
            continue
        path = " ".join(
            f"{'M' if gap else 'L'}{x(t):.1f},{y(v):.1f}" for t, v, gap in _segments(series.points)
        )
        parts.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dashed}/>')
    parts.append("</svg>")
    legend_items = "".join(
        f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{html.escape(name)}</span>'
        for i, (name, _) in enumerate(lines[:8])
    )
    more = f"<span>+{len(lines) - 8} more</span>" if len(lines) > 8 else ""
    return "".join(parts) + f'<div class="legend">{legend_items}{more}</div>'


def _stat(panel: Mapping[str, Any], lines: Sequence[tuple[str, Series]]) -> str:
    if not lines:
        return '<div class="stat muted">No data</div>'
    cells = []
    for name, series in lines[:4]:
        value = series.points[-1][1] if series.points else float("nan")
        text = _mapped(panel, value) or _fmt(value, _unit(panel))
        cells.append(f'<div class="stat">{html.escape(text)}<small>{html.escape(name)}</small></div>')
    return "".join(cells)


def _table(lines: Sequence[tuple[str, Series]]) -> str:
    if not lines:
        return '<div class="muted">No data</div>'
    keys = sorted({k for _, s in lines for k in s.labels if k not in ("__name__", "instance", "job")})
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "<th>value</th>"
    rows = []
    for _, series in lines:
        value = series.points[-1][1] if series.points else float("nan")
        cells = "".join(f"<td>{html.escape(series.labels.get(k, ''))}</td>" for k in keys)
        rows.append(f"<tr>{cells}<td>{value:g}</td></tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


STYLE = """
body{margin:0;background:#111217;color:#ccccdc;font:12px DejaVu Sans,Arial,sans-serif}
h1{font-size:16px;margin:10px 12px}
.board{position:relative;margin:0 6px}
.panel{position:absolute;box-sizing:border-box;background:#181b1f;border:1px solid #2c3235;border-radius:2px;
  padding:4px 6px;overflow:hidden}
.panel h2{font-size:12px;margin:0 0 4px;font-weight:500}
.row h2{font-size:14px}.row{background:none;border:none}
.grid{stroke:#2c3235}.axis{fill:#8e8e8e;font-size:10px}.muted{color:#8e8e8e;fill:#8e8e8e}
.legend span{display:inline-block;margin-right:8px;font-size:10px}.legend i{display:inline-block;width:10px;
  height:3px;margin-right:3px;vertical-align:middle}
.stat{display:inline-block;font-size:26px;margin:6px 12px 0 0;color:#73bf69}.stat small{display:block;
  font-size:10px;color:#8e8e8e}
table{border-collapse:collapse;font-size:11px}
td,th{border-bottom:1px solid #2c3235;padding:2px 6px;text-align:left}
"""


def render(
    dashboard: Mapping[str, Any],
    results: Mapping[int, Sequence[tuple[str, Series]]],
    window: tuple[float, float] | None = None,
) -> str:
    """The page: ``results`` maps a panel id to its (legend, series) lines, in target order; every chart
    shares the time axis ``window`` (start, end) when given."""
    boxes = []
    bottom = 0
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        left, top = grid["x"] * CELL_W, grid["y"] * CELL_H
        width, height = grid["w"] * CELL_W - 4, grid["h"] * CELL_H - 4
        bottom = max(bottom, top + height)
        title = html.escape(panel.get("title", ""))
        style = f"left:{left}px;top:{top}px;width:{width}px;height:{height}px"
        if panel["type"] == "row":
            boxes.append(f'<div class="panel row" style="{style}"><h2>{title}</h2></div>')
            continue
        lines = results.get(panel["id"], [])
        if panel["type"] == "stat":
            body = _stat(panel, lines)
        elif panel["type"] == "table":
            body = _table(lines)
        elif panel["type"] == "state-timeline" and window is not None:
            body = _timeline(panel, lines, width - 12, window)
        else:
            body = _chart(panel, lines, width - 12, height - 48, window)
        boxes.append(
            f'<div class="panel" data-panel="{panel["id"]}" style="{style}"><h2>{title}</h2>{body}</div>'
        )
    name = html.escape(dashboard.get("title", "dashboard"))
    return (
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{name} (preview)</title><style>{STYLE}</style></head><body>"
        f'<h1>{name} <span class="muted">(Grafana-free preview of the panels, real data)</span></h1>'
        f'<div class="board" style="height:{bottom + 10}px;width:{24 * CELL_W}px">{"".join(boxes)}</div>'
        "</body></html>\n"
    )
