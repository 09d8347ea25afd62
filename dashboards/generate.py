"""The Grafana dashboard of the descheduler, as code (grafanalib), and the files generated from it.

Run ``python -m dashboards.generate`` after changing a panel: it rewrites ``dashboards/descheduler.json``
(import it in Grafana), the optional kustomize component ``manifests/components/grafana-dashboard/``
(a ConfigMap the Grafana sidecar picks up) and, when the Helm chart is in the repo, the chart's copy that
its optional ``grafanaDashboard`` template serves. ``--check`` exits 1 if a committed file differs from what
the code generates; a unit test runs the same comparison, so the JSON never drifts from the code.

Every query selects ``job=~"$job"`` so several instances (one per node pool) share the dashboard, and
reads only metrics the service exports (``descheduler/service/observability.py``). The control-plane
test ``tests/controlplane/test_dashboard.py`` runs every query against a real Prometheus that scraped a
running service and requires each to return series.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grafanalib.core import (
    Dashboard,
    GridPos,
    RowPanel,
    Stat,
    StateTimeline,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)
from grafanalib.core import Panel as GrafanaPanel

REPO = Path(__file__).resolve().parents[1]
DASHBOARD_JSON = REPO / "dashboards" / "descheduler.json"
COMPONENT = REPO / "manifests" / "components" / "grafana-dashboard"
CONFIGMAP_YAML = COMPONENT / "configmap.yaml"
CONFIGMAP_NAME = "load-aware-descheduler-dashboard"
CONFIGMAP_KEY = "load-aware-descheduler.json"
CHART = REPO / "charts" / "load-aware-descheduler"
CHART_DASHBOARD = CHART / "dashboards" / CONFIGMAP_KEY
"""The chart's copy (Helm reads files only from inside the chart), used by its optional dashboard template."""
UID = "load-aware-descheduler"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
JOB = 'job=~"$job"'
NODE = 'node=~"$node"'
EVICTED = "descheduler_pods_evicted_total"

CLASS_CODES = {"skipped": 0, "low": 1, "normal": 2, "over": 3, "hotspot": 4}
CLASS_COLORS = {"skipped": "text", "low": "blue", "normal": "green", "over": "orange", "hotspot": "red"}


def _target(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> Target:
    return Target(expr=expr, legendFormat=legend, refId=ref, datasource=DATASOURCE, instant=instant)


def counted(selector: str, window: str) -> str:
    """Increase of a counter over ``window``, counting series born inside it.

    A labelled counter is born at 1 (its first eviction of a node or workload), and ``increase()``
    only sees changes between samples, so that first eviction would never show. A series absent
    ``window`` ago got all of its value inside the window: for those the current value is used, for
    the others ``increase()``; the two sides never hold the same series.
    """
    old = f"{selector} offset {window}"
    return f"((increase({selector}[{window}]) and {old}) or ({selector} unless {old}))"


def _value_map(values: dict[int, tuple[str, str]]) -> list[dict[str, Any]]:
    options = {str(k): {"text": text, "color": color, "index": i} for i, (k, (text, color)) in
               enumerate(sorted(values.items()))}  # fmt: skip
    return [{"type": "value", "options": options}]


def _dashed(regex: str, color: str) -> dict[str, Any]:
    """Threshold series drawn as dashed lines of one colour, so they read as limits, not as nodes."""
    return {
        "matcher": {"id": "byRegexp", "options": regex},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": color}},
            {"id": "custom.lineWidth", "value": 2},
        ],
    }


def _usage_panel(resource: str, title: str, pos: GridPos) -> TimeSeries:
    usage = f'descheduler_node_usage_ratio{{{JOB},{NODE},resource="{resource}"}}'
    threshold = f'descheduler_node_threshold_ratio{{{JOB},{NODE},resource="{resource}"'
    return TimeSeries(
        title=title,
        description=f"Measured {resource} usage of each node as a fraction of its allocatable, with the "
        "low and high thresholds (the lowest low and highest high of the selected nodes; see the next "
        "panel when node pools have different thresholds).",
        dataSource=DATASOURCE,
        targets=[
            _target(usage, "{{node}}", "A"),
            _target(f'min({threshold},level="low"}})', "low threshold", "B"),
            _target(f'max({threshold},level="high"}})', "high threshold", "C"),
        ],
        unit="percentunit",
        gridPos=pos,
        overrides=[_dashed("low threshold", "blue"), _dashed("high threshold", "red")],
        legendDisplayMode="table",
        legendPlacement="right",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
    )


def panels() -> list[GrafanaPanel]:
    """All panels, top to bottom; the order of ids is the order of this list."""
    y = 0

    def pos(w: int, h: int, x: int = 0) -> GridPos:
        return GridPos(h=h, w=w, x=x, y=y)

    out: list[GrafanaPanel] = [RowPanel(title="State", gridPos=pos(24, 1))]
    y += 1
    out += [
        Stat(
            title="Leader",
            description="1 while this replica holds the leader Lease (or runs without leader election).",
            dataSource=DATASOURCE,
            targets=[_target(f"max by (instance) (descheduler_leader{{{JOB}}})", "{{instance}}")],
            mappings=_value_map({0: ("standby", "yellow"), 1: ("leader", "green")}),
            reduceCalc="lastNotNull",
            graphMode="none",
            gridPos=pos(4, 4, 0),
        ),
        Stat(
            title="Mode",
            description="Dry-run audits every cycle and evicts nothing; live evicts.",
            dataSource=DATASOURCE,
            targets=[_target(f"max by (instance) (descheduler_dry_run{{{JOB}}})", "{{instance}}")],
            mappings=_value_map({0: ("live", "green"), 1: ("dry-run", "blue")}),
            reduceCalc="lastNotNull",
            graphMode="none",
            gridPos=pos(4, 4, 4),
        ),
        Stat(
            title="Hotspots now",
            description="Nodes over a high threshold for consecutiveAbnormalities cycles in a row.",
            dataSource=DATASOURCE,
            targets=[_target(f'sum(descheduler_nodes{{{JOB},class="hotspot"}})', "hotspots")],
            reduceCalc="lastNotNull",
            gridPos=pos(4, 4, 8),
        ),
        Stat(
            title="Evictions in range",
            description="Evictions (live) and would-be evictions (dry-run) in the dashboard's time range.",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"sum by (result) {counted(f'{EVICTED}{{{JOB}}}', '$__range')}",
                    "{{result}}",
                    instant=True,
                )
            ],
            reduceCalc="lastNotNull",
            graphMode="none",
            gridPos=pos(6, 4, 12),
        ),
        Stat(
            title="Since the last cycle",
            description="Seconds since the last cycle finished: should stay near deschedulingInterval.",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"time() - max by (instance) (descheduler_last_cycle_timestamp_seconds{{{JOB}}})",
                    "{{instance}}",
                )
            ],
            format="s",
            reduceCalc="lastNotNull",
            graphMode="none",
            gridPos=pos(6, 4, 18),
        ),
    ]
    y += 4
    out.append(
        StateTimeline(
            title="Leader and dry-run state",
            description="Per replica: holding the lease, and dry-run or live.",
            dataSource=DATASOURCE,
            targets=[
                _target(f"max by (instance) (descheduler_leader{{{JOB}}})", "{{instance}} leader", "A"),
                _target(f"max by (instance) (descheduler_dry_run{{{JOB}}})", "{{instance}} dry-run", "B"),
            ],
            mappings=_value_map({0: ("no", "transparent"), 1: ("yes", "green")}),
            gridPos=pos(24, 4),
        )
    )
    y += 4
    out += [
        Stat(
            title="Eviction window",
            description="Whether live evictions may happen now: open inside an evictionWindows window (or "
            "without windows), closed outside them (evictions are planned and reported outside-window).",
            dataSource=DATASOURCE,
            targets=[
                _target(f"min by (instance) (descheduler_eviction_window_open{{{JOB}}})", "{{instance}}")
            ],
            mappings=_value_map({0: ("closed", "orange"), 1: ("open", "green")}),
            reduceCalc="lastNotNull",
            graphMode="none",
            gridPos=pos(6, 6, 0),
        ),
        Stat(
            title="Next window opens",
            description="When the next evictionWindows window opens (absent without windows).",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    "1000 * (max by (instance) "
                    f"(descheduler_eviction_window_next_open_timestamp_seconds{{{JOB}}}) > 0)",
                    "{{instance}}",
                )
            ],
            format="dateTimeAsIso",
            reduceCalc="lastNotNull",
            graphMode="none",
            gridPos=pos(6, 6, 6),
        ),
        TimeSeries(
            title="Churn budget left",
            description="Evictions churnBudget still allows in its rolling period: cluster-wide "
            "(maxEvictions) and per namespace that spent some (maxEvictionsPerNamespace). At 0 pods "
            "are skipped budget-spent until the oldest counted eviction leaves the period.",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f'min by (namespace) (descheduler_churn_budget_remaining{{{JOB},namespace=""}})',
                    "cluster-wide",
                    "A",
                ),
                _target(
                    f'min by (namespace) (descheduler_churn_budget_remaining{{{JOB},namespace!=""}})',
                    "{{namespace}}",
                    "B",
                ),
            ],
            lineInterpolation="stepAfter",
            gridPos=pos(12, 6, 12),
        ),
    ]
    y += 6
    out.append(RowPanel(title="Nodes", gridPos=pos(24, 1)))
    y += 1
    out += [
        _usage_panel("cpu", "CPU usage against thresholds", pos(12, 9, 0)),
        _usage_panel("memory", "Memory usage against thresholds", pos(12, 9, 12)),
    ]
    y += 9
    high = f'descheduler_node_threshold_ratio{{{JOB},{NODE},level="high"}}'
    out.append(
        TimeSeries(
            title="Usage relative to each node's high threshold",
            description="usage / high threshold per node and resource: above 1 the node is over. Correct "
            "across node pools with different thresholds.",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"descheduler_node_usage_ratio{{{JOB},{NODE}}} / ignoring(level) {high}",
                    "{{node}} {{resource}}",
                )
            ],
            unit="percentunit",
            gridPos=pos(12, 8, 0),
            legendDisplayMode="table",
            legendPlacement="right",
            legendCalcs=["lastNotNull", "max"],
            tooltipMode="multi",
            tooltipSort="desc",
        )
    )
    class_expr = " + ".join(
        f'{code} * sum by (node) (descheduler_node_classification{{{JOB},{NODE},class="{name}"}})'
        for name, code in CLASS_CODES.items()
        if code
    )
    out.append(
        StateTimeline(
            title="Node classes over time",
            description="Each node's class per cycle: low (a destination), normal, over (counting "
            "anomalies), hotspot (acted on), skipped (not Ready, no usage sample, excluded).",
            dataSource=DATASOURCE,
            targets=[_target(class_expr, "{{node}}")],
            mappings=_value_map({code: (name, CLASS_COLORS[name]) for name, code in CLASS_CODES.items()}),
            gridPos=pos(12, 8, 12),
        )
    )
    y += 8
    out += [
        TimeSeries(
            title="Nodes by class",
            dataSource=DATASOURCE,
            targets=[_target(f"sum by (class) (descheduler_nodes{{{JOB}}})", "{{class}}")],
            stacking={"mode": "normal", "group": "A"},
            fillOpacity=30,
            gridPos=pos(12, 8, 0),
        ),
        TimeSeries(
            title="Anomaly counts",
            description="Consecutive cycles each node has been over its high threshold; it becomes a "
            "hotspot when the count reaches consecutiveAbnormalities (dashed).",
            dataSource=DATASOURCE,
            targets=[
                _target(f"descheduler_node_anomaly_count{{{JOB},{NODE}}} > 0", "{{node}}", "A"),
                _target(
                    f"max(descheduler_node_consecutive_abnormalities{{{JOB},{NODE}}})",
                    "hotspot threshold",
                    "B",
                ),
            ],
            overrides=[_dashed("hotspot threshold", "red")],
            lineInterpolation="stepAfter",
            gridPos=pos(12, 8, 12),
        ),
    ]
    y += 8
    out.append(RowPanel(title="Evictions and skips", gridPos=pos(24, 1)))
    y += 1
    rate = "$__rate_interval"
    out += [
        TimeSeries(
            title="Evictions by node",
            description="Source node of each eviction, by result (evicted, would-evict in dry-run, "
            "refused by a budget, failed).",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"sum by (node, result) {counted(f'{EVICTED}{{{JOB},{NODE}}}', rate)}",
                    "{{node}} {{result}}",
                )
            ],
            drawStyle="bars",
            fillOpacity=80,
            stacking={"mode": "normal", "group": "A"},
            gridPos=pos(12, 8, 0),
        ),
        TimeSeries(
            title="Evictions by namespace",
            dataSource=DATASOURCE,
            targets=[_target(f"sum by (namespace) {counted(f'{EVICTED}{{{JOB}}}', rate)}", "{{namespace}}")],
            drawStyle="bars",
            fillOpacity=80,
            stacking={"mode": "normal", "group": "A"},
            gridPos=pos(12, 8, 12),
        ),
    ]
    y += 8
    out += [
        Table(
            title="Evictions by workload",
            description="Per workload (the top controller: kind and name) in the time range, by result.",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    "sum by (namespace, workload_kind, workload, result) "
                    f"{counted(f'{EVICTED}{{{JOB}}}', '$__range')}",
                    instant=True,
                )
            ],
            transformations=[{"id": "labelsToFields", "options": {}}],
            gridPos=pos(12, 8, 0),
        ),
        TimeSeries(
            title="Evictions by reason",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"sum by (reason, result) {counted(f'{EVICTED}{{{JOB}}}', rate)}", "{{reason}} {{result}}"
                )
            ],
            drawStyle="bars",
            fillOpacity=80,
            stacking={"mode": "normal", "group": "A"},
            gridPos=pos(12, 8, 12),
        ),
    ]
    y += 8
    out.append(
        TimeSeries(
            title="Skipped pods by reason",
            description="Pods on hotspots that were considered and left alone, by reason code (see the "
            "audit log or `simulate` for each pod's message).",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"sum by (reason) {counted(f'descheduler_pods_skipped_total{{{JOB}}}', rate)}",
                    "{{reason}}",
                )
            ],
            drawStyle="bars",
            fillOpacity=80,
            stacking={"mode": "normal", "group": "A"},
            legendDisplayMode="table",
            legendPlacement="right",
            legendCalcs=["sum"],
            gridPos=pos(24, 8),
        )
    )
    y += 8
    out.append(RowPanel(title="Health", gridPos=pos(24, 1)))
    y += 1
    buckets = f"descheduler_loop_duration_seconds_bucket{{{JOB}}}"
    out += [
        TimeSeries(
            title="Cycle duration",
            description="descheduler_loop_duration_seconds (the Kubernetes descheduler's name): p50 and p99.",
            dataSource=DATASOURCE,
            targets=[
                _target(f"histogram_quantile(0.5, sum by (le) (rate({buckets}[{rate}])))", "p50", "A"),
                _target(f"histogram_quantile(0.99, sum by (le) (rate({buckets}[{rate}])))", "p99", "B"),
            ],
            unit="s",
            gridPos=pos(6, 8, 0),
        ),
        TimeSeries(
            title="Cycles by outcome",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"sum by (outcome) {counted(f'descheduler_cycles_total{{{JOB}}}', rate)}", "{{outcome}}"
                )
            ],
            drawStyle="bars",
            fillOpacity=80,
            stacking={"mode": "normal", "group": "A"},
            gridPos=pos(6, 8, 6),
        ),
        TimeSeries(
            title="Cache age and usage-sample age",
            description="Seconds since the watch cache last heard from the API server, and age of the oldest "
            "usage sample of the last cycle (nodes whose sample is too old are skipped).",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"max by (instance) (descheduler_cache_age_seconds{{{JOB}}})", "cache {{instance}}", "A"
                ),
                _target(
                    f"max by (instance) (descheduler_usage_sample_age_seconds{{{JOB}}})",
                    "usage sample {{instance}}",
                    "B",
                ),
            ],
            unit="s",
            gridPos=pos(6, 8, 12),
        ),
        TimeSeries(
            title="Usage source and unknown outcomes",
            description="Nodes without a usable usage sample (skipped), 1 while no node had one (the "
            "metrics source is down: nothing is judged), evictions whose outcome is still unknown, and "
            "nodes whose usage window overlaps a scrape gap (unknown, not low).",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"sum(descheduler_usage_nodes_without_sample{{{JOB}}})", "nodes without a sample", "A"
                ),
                _target(f"max(descheduler_usage_unavailable{{{JOB}}})", "usage source down", "B"),
                _target(f"sum(descheduler_unknown_evictions{{{JOB}}})", "evictions of unknown outcome", "C"),
                _target(
                    f'sum(descheduler_usage_unknown_nodes{{{JOB},reason="scrape-gap"}})',
                    "nodes unknown after a scrape gap",
                    "D",
                ),
            ],
            lineInterpolation="stepAfter",
            gridPos=pos(6, 8, 18),
        ),
    ]
    y += 8
    out += _cure_panels(y)
    for number, panel in enumerate(out, start=1):
        panel.id = number
    return out


def _cure_panels(y: int) -> list[GrafanaPanel]:
    """Cure time and evictions per cure (``service/cures.py``), over the last hour; 0 without a cure."""
    seconds = f"descheduler_hotspot_cure_seconds_bucket{{{JOB}}}"
    evictions = "descheduler_hotspot_cure_evictions"

    def quantile(q: float) -> str:
        """The cure time's quantile ``q``: empty (NaN) without a cure, so 0 stands in."""
        return f"histogram_quantile({q}, sum by (le) (increase({seconds}[1h]))) > 0 or vector(0)"

    return [
        RowPanel(title="Cures", gridPos=GridPos(h=1, w=24, x=0, y=y)),
        TimeSeries(
            title="Cure time",
            description="descheduler_hotspot_cure_seconds: from a node's confirmation as a hotspot to the "
            "first cycle it read not over, p50 and p95 of the cures ended in the last hour.",
            dataSource=DATASOURCE,
            targets=[_target(quantile(0.5), "p50", "A"), _target(quantile(0.95), "p95", "B")],
            unit="s",
            gridPos=GridPos(h=8, w=12, x=0, y=y + 1),
        ),
        TimeSeries(
            title="Evictions per cure",
            description="descheduler_hotspot_cure_evictions: evictions from a node during one cure, the "
            "mean of the cures ended in the last hour.",
            dataSource=DATASOURCE,
            targets=[
                _target(
                    f"sum(increase({evictions}_sum{{{JOB}}}[1h]))"
                    f" / sum(increase({evictions}_count{{{JOB}}}[1h])) > 0 or vector(0)",
                    "mean",
                )
            ],
            gridPos=GridPos(h=8, w=12, x=12, y=y + 1),
        ),
    ]


def dashboard() -> Dashboard:
    return Dashboard(
        title="Load-aware descheduler",
        uid=UID,
        description="Hot nodes against their thresholds, what moved where, what was skipped and why.",
        tags=["descheduler", "kubernetes"],
        timezone="utc",
        refresh="30s",
        time=Time("now-6h", "now"),
        panels=panels(),
        templating=Templating(
            list=[
                Template(name="datasource", label="Data source", query="prometheus", type="datasource"),
                Template(
                    name="job",
                    label="Job",
                    query="label_values(descheduler_build_info, job)",
                    dataSource=DATASOURCE,
                    includeAll=True,
                    multi=True,
                    allValue=".+",
                    default="$__all",
                ),
                Template(
                    name="node",
                    label="Node",
                    query='label_values(descheduler_node_usage_ratio{job=~"$job"}, node)',
                    dataSource=DATASOURCE,
                    includeAll=True,
                    multi=True,
                    allValue=".+",
                    default="$__all",
                ),
            ]
        ),
    ).auto_panel_ids()


def dashboard_json() -> str:
    """The dashboard as Grafana imports it: stable key order, so regenerating changes nothing."""
    from grafanalib._gen import DashboardEncoder

    data = dashboard().to_json_data()
    return json.dumps(data, sort_keys=True, indent=2, cls=DashboardEncoder) + "\n"


def configmap_yaml(document: str) -> str:
    """The dashboard in a ConfigMap labelled for the Grafana sidecar (``grafana_dashboard: "1"``)."""
    import yaml

    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "labels": {"grafana_dashboard": "1", "app.kubernetes.io/name": "load-aware-descheduler"},
            "annotations": {"grafana_folder": "Kubernetes"},
        },
        "data": {CONFIGMAP_KEY: document},
    }

    class BlockDumper(yaml.SafeDumper):
        """Multi-line strings as ``|`` blocks, so the JSON in the ConfigMap stays readable in review."""

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    BlockDumper.add_representer(str, text)
    header = "# Generated by `python -m dashboards.generate` from dashboards/generate.py: do not edit.\n"
    return header + yaml.dump(manifest, Dumper=BlockDumper, sort_keys=False, width=1000)


KUSTOMIZATION = """\
# Optional: the Grafana dashboard as a ConfigMap for the Grafana sidecar (label grafana_dashboard: "1").
# Add to an overlay with `components: [../../components/grafana-dashboard]`, or apply alone with
# `kubectl apply -k manifests/components/grafana-dashboard` (it then lands in your current namespace).
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
resources:
  - configmap.yaml
"""


def generated_files() -> dict[Path, str]:
    document = dashboard_json()
    files = {
        DASHBOARD_JSON: document,
        CONFIGMAP_YAML: configmap_yaml(document),
        COMPONENT / "kustomization.yaml": KUSTOMIZATION,
    }
    if (CHART / "Chart.yaml").exists():
        files[CHART_DASHBOARD] = document
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated_files().items():
        if path.exists() and path.read_text() == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(REPO)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    if stale:
        print("out of date (run python -m dashboards.generate): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
