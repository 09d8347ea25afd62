"""Logs (structlog) and Prometheus metrics: what the descheduler did and why, for operators.

Metric names follow the Kubernetes descheduler where one exists (``descheduler_pods_evicted_total``,
``descheduler_loop_duration_seconds``, ``descheduler_build_info``, the ``process_*`` family) so existing
dashboards keep working; ours only where it has none. Label values are bounded (codes, never free text).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from descheduler import __version__
from descheduler.planner.controls import BudgetState, WindowState
from descheduler.planner.model import NodeReport
from descheduler.service.cures import CureMetrics

NODE_CLASSES = ("hotspot", "over", "normal", "low", "skipped")


def configure_logging(fmt: str = "json", level: str = "info") -> None:
    """JSON lines by default (machines read logs); ``console`` for people at a terminal."""
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


class Metrics:
    """All metrics of one process, on their own registry so tests can create several."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._declare_evictions(self.registry)
        self._declare_migration_state(self.registry)
        self._declare_ping_pong(self.registry)
        self._declare_cycles(self.registry)
        self._declare_nodes(self.registry)
        self._declare_inputs(self.registry)
        self._declare_controls(self.registry)
        self.cures = CureMetrics(self.registry)
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes
        PlatformCollector(registry=self.registry)  # python_info
        self.build_info = Gauge(
            "descheduler_build_info", "Build information.", ["version", "python"], registry=self.registry
        )
        self.build_info.labels(version=__version__, python=sys.version.split()[0]).set(1)
        self._known_nodes: set[str] = set()

    # Each ``_declare_*`` is a table of one concern's metrics (name, help, labels) and nothing else.

    def _declare_evictions(self, r: CollectorRegistry) -> None:
        """Evictions and what became of them: the outcome of each call and of the unknown ones."""
        self.pods_evicted = Counter(
            "descheduler_pods_evicted",
            "Pods evicted (or, in dry-run, that would be), by result, reason, node, namespace and workload "
            "(kind and name of the top controller: bounded, unlike pod names).",
            ["result", "reason", "strategy", "profile", "node", "namespace", "workload_kind", "workload"],
            registry=r,
        )
        self.pods_skipped = Counter(
            "descheduler_pods_skipped", "Candidate pods not moved, by reason code.", ["reason"], registry=r
        )
        self.unknown_resolved = Counter(
            "descheduler_unknown_evictions_resolved",
            "Evictions of unknown outcome that the cache later settled, by result (evicted or failed).",
            ["result"],
            registry=r,
        )
        self.restarts_followed = Counter(
            "descheduler_restarts_followed",
            "Rollout restarts (surgeSingleReplica) followed to their end, by result: completed (old pod "
            "gone, Deployment rolled out) or failed (past its progress deadline, or stalled).",
            ["result"],
            registry=r,
        )
        self.restart_seconds = Histogram(
            "descheduler_restart_seconds",
            "Seconds from a restart's patch to the cycle that saw its old pod gone and its new pod Ready.",
            buckets=(5, 10, 20, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.unknown_pending = Gauge(
            "descheduler_unknown_evictions",
            "Evictions whose outcome is still unknown (counted as evicted until the cache settles them).",
            registry=r,
        )
        self.pdb_backing_off = Gauge(
            "descheduler_pdb_backing_off",
            "PodDisruptionBudgets whose refusals are backed off after the last cycle: no pod they cover is "
            "asked for until their wait (the server's Retry-After, doubled per refusal in a row, at most "
            "10 min) ends.",
            registry=r,
        )
        self.verify_requests = Counter(
            "descheduler_eviction_verify_requests",
            "API requests made right before evictions to verify the cache's view of the pod and its "
            "workload (a disagreement skips the pod with a verify-* reason).",
            registry=r,
        )

    def _declare_ping_pong(self, r: CollectorRegistry) -> None:
        """The ping-pong guard: workloads backed off because their replacements landed on hot nodes."""
        self.ping_pong_backoffs = Counter(
            "descheduler_ping_pong_backoffs",
            "Back-offs started because a workload's replacements kept landing on nodes over their high "
            "threshold, by workload kind and name (each episode once).",
            ["workload_kind", "workload"],
            registry=r,
        )
        self.ping_pong_backing_off = Gauge(
            "descheduler_ping_pong_backing_off_workloads",
            "Workloads left alone by the ping-pong guard in the last cycle.",
            registry=r,
        )
        self.steering_active = Gauge(
            "descheduler_steering_active",
            "1 while the leader applies hotspot taints (hotspotTaint on, and the API server accepts them); 0 "
            "when it is off or a taint was refused (403: RBAC or the admission policy).",
            registry=r,
        )

    def _declare_migration_state(self, r: CollectorRegistry) -> None:
        """The migration journal and the state rebuilt from it at a start or takeover."""
        self.state_rebuilds = Counter(
            "descheduler_state_rebuilds",
            "Starts and takeovers by how the migration state was obtained: result rebuilt (reason ok) "
            "or fallback (no live eviction for one objectLimiters window), reason forbidden, "
            "unavailable, invalid, no-journal or lost (the journal ConfigMap was deleted: rebuilt "
            "from Events, then a quiet period).",
            ["result", "reason"],
            registry=r,
        )
        self.state_rebuilt_migrations = Gauge(
            "descheduler_state_rebuilt_migrations",
            "Migrations rebuilt from the journal at the last start or takeover.",
            registry=r,
        )
        self.quiet_seconds = Gauge(
            "descheduler_quiet_period_seconds",
            "Seconds left of the fallback quiet period (no live eviction), 0 when none.",
            registry=r,
        )
        self.journal_write_failures = Counter(
            "descheduler_journal_write_failures",
            "Failed writes of the migration journal, by reason (a failed intent means no eviction).",
            ["reason"],
            registry=r,
        )
        self.journal_compactions = Counter(
            "descheduler_journal_compactions",
            "Journal writes that neared the ConfigMap's limit and dropped data safety does not need, by "
            "what was dropped (unconfirmed-detectors, workload-names, confirmed-detectors).",
            ["dropped"],
            registry=r,
        )

    def _declare_cycles(self, r: CollectorRegistry) -> None:
        """Cycles: how long, how often, how they ended, and this replica's role."""
        self.cycle_duration = Histogram(
            "descheduler_loop_duration_seconds",
            "Duration of one descheduling cycle (the Kubernetes descheduler's name for it).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.cycles = Counter("descheduler_cycles", "Cycles run, by outcome.", ["outcome"], registry=r)
        self.cycles_skipped = Counter(
            "descheduler_cycles_skipped",
            "Cycles that did not run at all, by reason code (stale-cache: the watch cache is too old).",
            ["reason"],
            registry=r,
        )
        self.last_cycle = Gauge(
            "descheduler_last_cycle_timestamp_seconds",
            "When the last cycle finished (unix time).",
            registry=r,
        )
        self.leader = Gauge(
            "descheduler_leader",
            "1 while this replica acts: it holds the leader lease, or leader election is off.",
            registry=r,
        )
        self.dry_run = Gauge(
            "descheduler_dry_run", "1 when the descheduler runs in dry-run mode.", registry=r
        )

    def _declare_nodes(self, r: CollectorRegistry) -> None:
        """Per node, as the last plan saw it (refreshed by ``observe_nodes``)."""
        self.node_usage = Gauge(
            "descheduler_node_usage_ratio",
            "Measured node usage as a fraction of allocatable.",
            ["node", "resource"],
            registry=r,
        )
        self.node_threshold = Gauge(
            "descheduler_node_threshold_ratio",
            "Node thresholds as a fraction of allocatable.",
            ["node", "resource", "level"],
            registry=r,
        )
        self.node_class = Gauge(
            "descheduler_node_classification",
            "1 for the node's current class, 0 otherwise.",
            ["node", "class"],
            registry=r,
        )
        self.node_anomaly = Gauge(
            "descheduler_node_anomaly_count",
            "Consecutive cycles the node has been over its high threshold.",
            ["node"],
            registry=r,
        )
        self.node_abnormalities = Gauge(
            "descheduler_node_consecutive_abnormalities",
            "Consecutive over cycles that make the node a hotspot (its pool's consecutiveAbnormalities).",
            ["node"],
            registry=r,
        )
        self.node_normal = Gauge(
            "descheduler_node_normal_count",
            "Consecutive normal cycles of a confirmed hotspot (more than consecutiveNormalities: it must be "
            "confirmed again).",
            ["node"],
            registry=r,
        )
        self.node_normalities = Gauge(
            "descheduler_node_consecutive_normalities",
            "Normal cycles in a row a confirmed hotspot may have and stay one (its pool's "
            "consecutiveNormalities).",
            ["node"],
            registry=r,
        )
        self.node_confirmed = Gauge(
            "descheduler_node_anomaly_confirmed",
            "1 while the node is a confirmed hotspot (a source in any cycle it is over), 0 otherwise.",
            ["node"],
            registry=r,
        )
        self.nodes_by_class = Gauge(
            "descheduler_nodes", "Nodes by class in the last cycle.", ["class"], registry=r
        )

    def _declare_inputs(self, r: CollectorRegistry) -> None:
        """The inputs of a cycle: the watch cache and the usage samples."""
        self.cache_age = Gauge(
            "descheduler_cache_age_seconds",
            "Seconds since the watch cache last heard from the API server.",
            registry=r,
        )
        self.cache_resource_age = Gauge(
            "descheduler_cache_resource_age_seconds",
            "Per watched resource, seconds since the watch cache last heard from the API server.",
            ["resource"],
            registry=r,
        )
        self.cache_synced = Gauge(
            "descheduler_cache_synced", "1 once the watch cache has synced.", registry=r
        )
        self.cluster_objects = Gauge(
            "descheduler_cluster_objects_not_as_sent",
            "Cluster objects the cache could not take as the API server sent them: left out (unparsable) or "
            "kept with a fallback (a node's unreadable raw-allocatable annotation: status.allocatable used).",
            ["handling"],
            registry=r,
        )
        self.usage_age = Gauge(
            "descheduler_usage_sample_age_seconds",
            "Age of the oldest usage sample used in the last cycle.",
            registry=r,
        )
        self.usage_errors = Gauge(
            "descheduler_usage_nodes_without_sample",
            "Nodes with no trustworthy usage sample in the last cycle.",
            registry=r,
        )
        self.usage_unknown = Gauge(
            "descheduler_usage_unknown_nodes",
            "Nodes whose usage was unknown, not low, in the last cycle, by reason (scrape-gap: see usage/).",
            ["reason"],
            registry=r,
        )
        self.usage_unavailable = Gauge(
            "descheduler_usage_unavailable",
            "1 when the last cycle had no usable usage sample for any node (the metrics source is down).",
            registry=r,
        )

    def _declare_controls(self, r: CollectorRegistry) -> None:
        """When evictions may happen (``evictionWindows``) and how many are left (``churnBudget``)."""
        self.window_open = Gauge(
            "descheduler_eviction_window_open",
            "1 while live evictions may happen: an evictionWindows window is open, or none is configured.",
            registry=r,
        )
        self.window_open.set(1)
        self.window_next_open = Gauge(
            "descheduler_eviction_window_next_open_timestamp_seconds",
            "When the next evictionWindows window opens (unix time); 0 without windows.",
            registry=r,
        )
        self.budget_left = Gauge(
            "descheduler_churn_budget_remaining",
            'Evictions churnBudget still allows in its rolling period: namespace="" cluster-wide '
            "(maxEvictions), else per namespace with evictions in the period (maxEvictionsPerNamespace).",
            ["namespace"],
            registry=r,
        )
        self.budget_returns = Gauge(
            "descheduler_churn_budget_returns_timestamp_seconds",
            "When a spent churn budget allows one more eviction (unix time), same labels as the remaining "
            "gauge; absent while budget is left.",
            ["namespace"],
            registry=r,
        )

    def observe_controls(self, window: WindowState | None, budget: BudgetState | None) -> None:
        """Refresh the window and budget gauges; namespaces that no longer spend anything are dropped."""
        if window is not None:
            self.window_open.set(1 if window.open else 0)
            self.window_next_open.set(window.next_open or 0)
        scopes: dict[str, tuple[int, float | None]] = {}
        if budget is not None:
            if budget.left is not None:
                scopes[""] = (budget.left, budget.returns)
            scopes.update(budget.namespaces)
        for gauge in (self.budget_left, self.budget_returns):
            for labels in list(gauge._metrics):
                if labels[0] not in scopes or gauge is self.budget_returns:
                    gauge.remove(*labels)
        for namespace, (left, back) in scopes.items():
            self.budget_left.labels(namespace).set(left)
            if back is not None:
                self.budget_returns.labels(namespace).set(back)

    def observe_nodes(self, node_reports: Iterable[NodeReport]) -> None:
        """Refresh per-node gauges from the plan's node reports; drop nodes that left the cluster."""
        seen: set[str] = set()
        counts = dict.fromkeys(NODE_CLASSES, 0)
        for report in node_reports:
            seen.add(report.node)
            counts[report.node_class] = counts.get(report.node_class, 0) + 1
            for klass in NODE_CLASSES:
                self.node_class.labels(report.node, klass).set(1 if klass == report.node_class else 0)
            self.node_anomaly.labels(report.node).set(report.anomaly_count)
            if report.consecutive_abnormalities:
                self.node_abnormalities.labels(report.node).set(report.consecutive_abnormalities)
                self.node_normalities.labels(report.node).set(report.consecutive_normalities)
            self.node_normal.labels(report.node).set(report.normal_count)
            self.node_confirmed.labels(report.node).set(1 if report.confirmed else 0)
            for res in report.resources:
                if res.base > 0:
                    self.node_usage.labels(report.node, res.resource).set(res.usage / res.base)
                    self.node_threshold.labels(report.node, res.resource, "low").set(res.low_percent / 100)
                    self.node_threshold.labels(report.node, res.resource, "high").set(res.high_percent / 100)
        for gone in self._known_nodes - seen:
            self._remove_node(gone)
        self._known_nodes = seen
        for klass, count in counts.items():
            self.nodes_by_class.labels(klass).set(count)

    def _remove_node(self, name: str) -> None:
        gauges = (
            self.node_usage,
            self.node_threshold,
            self.node_class,
            self.node_anomaly,
            self.node_abnormalities,
            self.node_normal,
            self.node_normalities,
            self.node_confirmed,
        )
        for gauge in gauges:
            for labels in list(gauge._metrics):  # prometheus_client keeps children keyed by label values
                if labels and labels[0] == name:
                    gauge.remove(*labels)
