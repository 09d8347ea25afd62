"""One descheduler process: its components wired together, leadership, health, start and stop.

``app`` builds one of these for ``descheduler run`` or ``descheduler once``; the components (watch cache,
usage source, evictor, tainter, Lease, journal, endpoints) are created here so both commands share one
wiring and one shutdown order.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import structlog

from descheduler.config.load import EffectiveConfig
from descheduler.config.models import LabelSelectorConfig
from descheduler.kube.api import DEFAULT_USER_AGENT, KubeApi
from descheduler.kube.cache import DEFAULT_RESOURCES, DRA_RESOURCES, ClusterCache, broken_after
from descheduler.kube.connection import connect
from descheduler.kube.events import EventRecorder
from descheduler.kube.evict import Evictor
from descheduler.kube.journal import ConfigMapJournal, journal_name
from descheduler.kube.leader import LeaderElector
from descheduler.kube.metrics_api import MetricsServerApi
from descheduler.kube.taints import NodeTainter
from descheduler.kube.verify import ServerReader
from descheduler.planner.steer import has_our_taint
from descheduler.service import apf
from descheduler.service.audit import observe_record, readiness, usage_unavailable
from descheduler.service.cycle import CycleRecord, CycleRunner
from descheduler.service.edges import Edges, Signals, Timing
from descheduler.service.health import Endpoints
from descheduler.service.heap import HeapKeeper
from descheduler.service.observability import Metrics
from descheduler.usage.source import build_source

log = structlog.get_logger("descheduler.service")

SYNC_STALL_SECONDS = 120.0
"""The first sync gives up on a resource that received no LIST page for this long, however long the whole
LIST takes while pages keep coming (a slow API server at 150,000 pods needs minutes, not a restart)."""
ONCE_LEASE_WAIT_FACTOR = 1.5
"""``once`` waits this many lease durations for the Lease before giving up (a live replica holds it)."""


def selector_string(selector: LabelSelectorConfig | str | None) -> str | None:
    """A label selector as the API's ``labelSelector`` query string (for server-side node sharding)."""
    if selector is None or isinstance(selector, str):
        return selector or None
    parts = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for expr in selector.match_expressions:
        if expr.operator == "In":
            parts.append(f"{expr.key} in ({','.join(expr.values)})")
        elif expr.operator == "NotIn":
            parts.append(f"{expr.key} notin ({','.join(expr.values)})")
        elif expr.operator == "Exists":
            parts.append(expr.key)
        else:
            parts.append(f"!{expr.key}")
    return ",".join(parts) or None


def cache_resources(effective: EffectiveConfig) -> frozenset[str]:
    """What the cache watches: DRA objects only when a device-holding pod may move
    (``evictResourceClaimPods``), so a cluster that does not use it pays nothing and needs no DRA RBAC."""
    if effective.migration.evict_resource_claim_pods:
        return DEFAULT_RESOURCES | DRA_RESOURCES
    return DEFAULT_RESOURCES


class Service:
    """Everything one process runs; built from an effective configuration and a kubeconfig."""

    def __init__(
        self,
        effective: EffectiveConfig,
        *,
        kubeconfig: str | None,
        dry_run: bool | None = None,
        steer_scheduler: bool = True,
    ) -> None:
        if dry_run is not None and dry_run != effective.dry_run:
            effective = effective.with_dry_run(dry_run)
        self.effective = effective
        config = effective.config
        self.metrics = Metrics()
        self.metrics.dry_run.set(1 if effective.dry_run else 0)
        self.identity = f"{socket.gethostname()}_{os.getpid()}"
        self.api = self._connect(kubeconfig)
        apf.register(self.metrics.registry, self.api.flow_control)
        self.cache = ClusterCache(
            self.api,
            node_selector=selector_string(config.node_selector),
            watch_timeout=config.watch_cache.watch_timeout,
            watch_list=config.watch_cache.watch_list,
            encoding=config.watch_cache.encoding,
            resources=cache_resources(effective),
        )
        self.usage = build_source(config.metrics_providers, metrics_api=MetricsServerApi(self.api))
        self.events = EventRecorder(self.api)
        self.heap = HeapKeeper()
        self.usage_problem: list[str] = []
        """Why the last cycle had no usable usage for any node (empty when it had): /readyz says it."""
        self.stop_requested = threading.Event()
        """Set by SIGTERM/SIGINT: every wait (Retry-After, rate limits, the loop) ends at once."""
        self._leading = threading.Event()
        workload_limiter = effective.migration.object_limiters.get("workload")
        workload_window = workload_limiter.duration if workload_limiter is not None else None
        self.evictor = self._build_evictor(300.0 if workload_window is None else workload_window)
        self.elector = self._build_elector()
        self.tainter = self._build_tainter(steer_scheduler)
        le = config.leader_election
        self.journal = ConfigMapJournal(
            self.api,
            namespace=le.resource_namespace,
            name=journal_name(le.resource_name),
            writer=self.identity,
            dry_run=effective.dry_run,
        )
        """Migration records written before each eviction: a new leader rebuilds every limit from them."""
        budget = effective.migration.churn_budget
        self.quiet_seconds = max(
            0.0 if workload_window is None else workload_window, budget.period if budget is not None else 0.0
        )
        """Only when the records cannot be read: evict nothing for one objectLimiters window (or churnBudget
        period, the longer), so the previous run's migrations have aged out of every window before this
        one acts."""
        self.runner = self._build_runner()
        self.runner.request_restore()
        self.endpoints = Endpoints(
            healthz_address=config.healthz_bind_address,
            metrics_address=config.metrics_bind_address,
            liveness=self._liveness,
            readiness=self._readiness,
            registry=self.metrics.registry,
        )

    # -- construction -----------------------------------------------------------------------
    def _connect(self, kubeconfig: str | None) -> KubeApi:
        """The identity in the User-Agent lets API server audit logs tell replicas and shards apart."""
        client = self.effective.config.client_connection
        return connect(
            kubeconfig, client.qps, client.burst, user_agent=f"{DEFAULT_USER_AGENT} ({self.identity})"
        )

    def _build_evictor(self, warning_window: float) -> Evictor:
        """``warning_window``: the objectLimiters workload window (5m without one); the evictor emits at
        most one refusal or failure Warning per pod and kind within it."""
        mc = self.effective.migration
        return Evictor(
            self.api,
            policy=mc.eviction_policy,
            delete_options=mc.default_delete_options,
            evict_qps=mc.evict_qps,
            evict_burst=mc.evict_burst,
            dry_run=self.effective.dry_run,
            events=self.events,
            guard=self._may_evict,
            warning_window=warning_window,
            stop=self.stop_requested,
        )

    def _build_elector(self) -> LeaderElector | None:
        """The Lease holder acts; without leader election this replica is the leader from the start."""
        le = self.effective.config.leader_election
        if not le.leader_elect:
            self._leading.set()
            self.metrics.leader.set(1)
            return None
        return LeaderElector(
            self.api,
            namespace=le.resource_namespace,
            name=le.resource_name,
            identity=self.identity,
            lease_duration=le.lease_duration,
            renew_deadline=le.renew_deadline,
            retry_period=le.retry_period,
            on_started_leading=self._started_leading,
            on_stopped_leading=self._stopped_leading,
        )

    def _build_tainter(self, steer_scheduler: bool) -> NodeTainter | None:
        """Hotspot taints only when asked for and enabled: ``once`` never taints (nothing would remove it)."""
        lnl = self.effective.low_node_load
        if not (steer_scheduler and lnl is not None and lnl.hotspot_taint.enabled):
            return None
        return NodeTainter(self.api, self.events, dry_run=self.effective.dry_run, guard=self._may_evict)

    def _build_runner(self) -> CycleRunner:
        watch_cache = self.effective.config.watch_cache
        return CycleRunner(
            self.effective,
            Edges(
                cluster=self.cache,
                usage=self.usage,
                evictor=self.evictor,
                tainter=self.tainter,
                journal=self.journal,
                verifier=ServerReader(self.api, resync=self.cache.resync),
                events=self.events,
            ),
            signals=Signals(
                is_leader=self._leading.is_set,
                cache_ages=lambda: self.cache.ages(time.time()),
                refresh=self.cache.refresh,
                untrusted_nodes=self._untrusted_nodes,
                on_record=self._observe,
                object_problems=self._object_problems,
            ),
            timing=Timing(
                max_cache_age=broken_after(watch_cache.max_staleness, watch_cache.watch_timeout),
                act_cache_age=watch_cache.max_staleness,
                fallback_quiet_seconds=self.quiet_seconds,
            ),
        )

    # -- leadership -------------------------------------------------------------------------
    def _started_leading(self) -> None:
        log.info("leader_elected", state_source=self.journal.where)
        self.runner.request_restore()  # the previous leader's records: read at the start of the next cycle
        self._leading.set()
        self.metrics.leader.set(1)

    def _stopped_leading(self) -> None:
        if self.stop_requested.is_set():
            log.info("leadership_released")  # our own shutdown: not worth a warning
        else:
            log.warning("leadership_lost")
            self.clear_taints("leadership lost")
        self._leading.clear()
        self.metrics.leader.set(0)

    def _may_evict(self) -> bool:
        """Checked by the evictor right before each call: leader (lease still valid) and not stopping."""
        if self.stop_requested.is_set() or not self._leading.is_set():
            return False
        return self.elector is None or bool(self.elector.is_leader())

    def _object_problems(self) -> dict[str, str]:
        """What the cache left out (``object_errors``) or kept with a fallback (``object_warnings``)."""
        left_out = {name: f"left out: {why}" for name, why in self.cache.object_errors.items()}
        kept = {name: f"kept with a fallback: {why}" for name, why in self.cache.object_warnings.items()}
        return {**left_out, **kept}

    def _untrusted_nodes(self) -> dict[str, str]:
        return {
            node: "a pod on this node could not be read from the API; see the cache's object errors"
            for node in self.cache.nodes_with_unparsed_pods
        }

    # -- health -----------------------------------------------------------------------------
    def _readiness(self) -> tuple[bool, str]:
        synced, steering = self.cache.synced, self.runner.steering.problem()
        conditions = "\n".join(c for c in (steering, self.api.flow_control.recent(time.monotonic())) if c)
        return readiness(synced, self.runner.stale_cache() if synced else "", self.usage_problem, conditions)

    def _liveness(self) -> tuple[bool, str]:
        interval = self.effective.config.descheduling_interval
        wedged_after = 3 * interval + 120
        runner = self.runner
        if runner.in_cycle and time.monotonic() - runner.last_started > wedged_after:
            return False, f"cycle running for more than {wedged_after:.0f}s"
        return True, "ok"

    def _observe(self, record: CycleRecord) -> None:
        observe_record(self.metrics, record, self.effective)
        if not record.skipped:
            self.usage_problem = usage_unavailable(record)

    # -- lifecycle --------------------------------------------------------------------------
    def start_edges(self) -> bool:
        """Start the endpoints, cache and leader election; wait for the first sync."""
        self.endpoints.start()
        self.cache.start()
        stalled = self.cache.wait_listed(SYNC_STALL_SECONDS, stop=self.stop_requested)
        if not self.cache.synced:
            if stalled:
                log.error("cache_sync_stalled", resources=stalled, stalled_for_seconds=SYNC_STALL_SECONDS)
            return False
        self.metrics.cache_synced.set(1)
        self.heap.settle()
        if self.elector is not None:
            self.elector.start()
        return True

    def cycle_if_leader(self) -> None:
        ages = self.cache.ages(time.time())
        self.metrics.cache_age.set(max(ages.values(), default=float("inf")))
        for resource, age in ages.items():
            self.metrics.cache_resource_age.labels(resource).set(age)
        self.endpoints.publish_cache_digest(self.cache.digest)  # only with --debug-cache
        if not self._leading.is_set():
            log.debug("cycle_idle", reason="not leader")
            self.heap.after_cycle()  # a standby replica holds the same cache
            return
        try:
            with self.heap.cycle():
                self.runner.run_cycle()
        except Exception:  # a broken cycle must not kill the loop; the next one retries
            self.metrics.cycles.labels(outcome="error").inc()
            log.exception("cycle_failed")

    def lead_one_cycle(self) -> bool:
        """Leadership for ``once``: a dry-run audit changes nothing and needs no Lease; a live one-shot
        cycle with leader election must hold the Lease, so it never evicts beside a running replica."""
        if self.elector is None or self.effective.dry_run:
            self.elector = None
            self._leading.set()
            self.metrics.leader.set(1)
            return True
        self.elector.start()
        wait = self.effective.config.leader_election.lease_duration * ONCE_LEASE_WAIT_FACTOR
        return self._leading.wait(wait)

    def request_stop(self, *_: object) -> None:
        log.info("shutdown_requested")
        self.stop_requested.set()
        self.runner.stopping.set()

    def clear_taints(self, why: str) -> None:
        """Our hotspot taint off every node that has it: on shutdown and when leadership is lost, so no
        node stays steered away from by a descheduler that no longer watches it."""
        if self.tainter is None or self.effective.dry_run or not self.cache.synced:
            return
        nodes = {node.name for node in self.cache.snapshot().nodes if has_our_taint(node)}
        nodes |= self.runner.tainted_nodes
        if not nodes:
            return
        message = f"descheduler {why}: hotspot taint removed"
        outcomes = self.tainter.remove_all(nodes, message)
        self.runner.tainted_nodes.clear()
        log.info("hotspot_taints_cleared", reason=why, results={o.node: o.result for o in outcomes})

    def shutdown(self) -> None:
        self.stop_requested.set()
        if self._leading.is_set():
            self.clear_taints("shutting down")
        if self.elector is not None:
            self.elector.stop(release=True, timeout=2.0)
        self._leading.clear()
        self.events.close(timeout=3.0)
        self.cache.stop(timeout=2.0)
        self.endpoints.stop()
