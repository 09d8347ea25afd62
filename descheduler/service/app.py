"""``descheduler run`` and ``descheduler once``: wire the edges to the cycle runner.

Order of start-up matters for safety: configuration first (an invalid one exits 2 before touching the
cluster), then the watch cache, and cycles only after the cache has synced and, with leader election,
only while this replica holds the lease.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime
from typing import Any

import structlog
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from descheduler.config.load import EffectiveConfig, load_config
from descheduler.config.lownodeload import NodePool, effective_anomaly_condition
from descheduler.config.models import LabelSelectorConfig
from descheduler.kube.api import DEFAULT_USER_AGENT, KubeApi
from descheduler.kube.cache import DEFAULT_RESOURCES, DRA_RESOURCES, ClusterCache, broken_after
from descheduler.kube.connection import REACH_BUDGET_SECONDS, connect, unreachable_reason
from descheduler.kube.errors import KubeError
from descheduler.kube.events import EventRecorder
from descheduler.kube.evict import Evictor
from descheduler.kube.journal import ConfigMapJournal, journal_name
from descheduler.kube.leader import LeaderElector
from descheduler.kube.metrics_api import MetricsServerApi
from descheduler.kube.taints import NodeTainter
from descheduler.kube.verify import ServerReader
from descheduler.planner import loop_warnings
from descheduler.planner.steer import has_our_taint
from descheduler.report import render_html
from descheduler.report.options import add_report_options, skip_form
from descheduler.service import apf
from descheduler.service.audit import observe_record, readiness, render_record_text, usage_unavailable
from descheduler.service.cycle import CycleRecord, CycleRunner
from descheduler.service.edges import Edges, Signals, Timing
from descheduler.service.health import Endpoints, add_debug_cache_flag
from descheduler.service.heap import HeapKeeper
from descheduler.service.observability import Metrics, configure_logging
from descheduler.usage.source import build_source

log = structlog.get_logger("descheduler.service")

SYNC_STALL_SECONDS = 120.0
"""The first sync gives up on a resource that received no LIST page for this long, however long the whole
LIST takes while pages keep coming (a slow API server at 150,000 pods needs minutes, not a restart)."""
SHUTDOWN_CYCLE_WAIT_SECONDS = 3.0
"""On SIGTERM, how long the cycle in progress may take to finish an eviction request already sent.
Shutdown as a whole (this, the Lease release, the Event flush, the watches) stays under ~10 s, so
``terminationGracePeriodSeconds: 30`` is enough; the manifests keep 60 for a slow API server."""

EXIT_OK = 0
EXIT_FAILED = 1
"""The cycle could not run: API server unreachable, cache not synced, Lease held elsewhere, port taken."""
# Exit 2 (bad configuration, nothing started) is the CLI's: load_config raises ConfigError, cli maps it.
EXIT_NO_USAGE = 3
"""``once`` ran its cycle but no node had a usable usage sample (metrics source down): nothing was judged."""
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


def _build_service(
    effective: EffectiveConfig,
    kubeconfig: str | None,
    dry_run: bool | None = None,
    *,
    steer: bool = True,
) -> Service | None:
    """Connect to the cluster; a missing or broken kubeconfig is one clear line, not a traceback."""
    try:
        return Service(effective, kubeconfig=kubeconfig, dry_run=dry_run, steer_scheduler=steer)
    except (KubeError, ValueError) as exc:
        log.error("startup_failed", error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return None


def _unreachable(service: Service) -> bool:
    """Say, in one line, why the API server cannot be reached (after a bounded retry), if it cannot."""
    reason = unreachable_reason(service.api)
    if reason is None:
        return False
    log.error(
        "apiserver_unreachable", server=service.api.host, error=reason, gave_up_after=REACH_BUDGET_SECONDS
    )
    print(f"error: cannot reach the API server at {service.api.host}: {reason}", file=sys.stderr)
    return True


def _dry_run_override(args: argparse.Namespace) -> bool | None:
    """``--dry-run`` forces dry-run whatever the configuration says; without it the configuration rules."""
    return True if args.dry_run else None


def cmd_run(args: argparse.Namespace) -> int:
    effective = load_config(args.config)
    configure_logging(args.log_format, args.log_level)
    for notice in effective.notices:
        log.info("config_notice", notice=notice)
    for warning in loop_warnings(effective):
        log.warning("config_warning", warning=warning)
    service = _build_service(effective, args.kubeconfig, dry_run=_dry_run_override(args))
    if service is None:
        return EXIT_FAILED
    if args.debug_cache:
        service.endpoints.enable_debug_cache()
    if _unreachable(service):
        service.shutdown()
        return EXIT_FAILED
    signal.signal(signal.SIGTERM, service.request_stop)
    signal.signal(signal.SIGINT, service.request_stop)
    log.info(
        "starting",
        dry_run=service.effective.dry_run,
        dry_run_from="--dry-run flag" if args.dry_run else "configuration",
        interval=effective.config.descheduling_interval,
        leader_election=service.elector is not None,
    )
    try:
        started = service.start_edges()
    except OSError as exc:  # a health or metrics port already taken: say which, no traceback
        log.error("startup_failed", error=str(exc))
        print(f"error: cannot serve health/metrics endpoints: {exc}", file=sys.stderr)
        service.shutdown()
        return EXIT_FAILED
    if not started:
        log.error("cache_sync_failed" if not service.stop_requested.is_set() else "stopped_before_sync")
        service.shutdown()
        return EXIT_OK if service.stop_requested.is_set() else EXIT_FAILED
    scheduler = BackgroundScheduler(daemon=True)
    scheduler.add_job(
        service.cycle_if_leader,
        IntervalTrigger(seconds=effective.config.descheduling_interval),
        id="cycle",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=None,
        next_run_time=datetime.now().astimezone(),
    )
    scheduler.start()
    service.stop_requested.wait()
    # Do not wait for a cycle stuck in a long call: its waits end at once (stop_requested) and no new
    # eviction starts; a request already sent is given a few seconds to answer.
    scheduler.shutdown(wait=False)
    if not service.runner.wait_idle(SHUTDOWN_CYCLE_WAIT_SECONDS):
        log.warning("shutdown_cycle_still_running", waited_seconds=SHUTDOWN_CYCLE_WAIT_SECONDS)
    service.shutdown()
    log.info("stopped")
    return 0


def _fewest_abnormalities(effective: EffectiveConfig) -> int:
    """The smallest ``consecutiveAbnormalities`` of any node pool (1 without LowNodeLoad args)."""
    args = effective.low_node_load
    if args is None:
        return 1
    pools: list[NodePool | None] = [None, *args.node_pools]
    return min(effective_anomaly_condition(args, pool)[0].consecutive_abnormalities for pool in pools)


def cmd_once(args: argparse.Namespace) -> int:
    """One cycle. Exit codes: 0 done, 1 could not run, 2 bad configuration, 3 no node had usable usage."""
    effective = load_config(args.config)
    configure_logging(args.log_format, args.log_level)
    for warning in loop_warnings(effective):
        log.warning("config_warning", warning=warning)
    # The same migration records as ``run``: a CronJob of ``once`` respects objectLimiters across runs.
    # No hotspot taints from a one-off run: nothing would be left to remove them when they cool down.
    service = _build_service(effective, args.kubeconfig, dry_run=_dry_run_override(args), steer=False)
    if service is None:
        return EXIT_FAILED
    n = _fewest_abnormalities(service.effective)
    if n > 1:
        log.warning(
            "once_cannot_confirm_hotspots",
            consecutive_abnormalities=n,
            notice="a single cycle counts each node's anomaly once: with consecutiveAbnormalities above 1 "
            "no node becomes a hotspot, so nothing is (or would be) evicted",
        )
    try:
        if _unreachable(service):
            return EXIT_FAILED
        service.cache.start()
        stalled = service.cache.wait_listed(SYNC_STALL_SECONDS)
        if not service.cache.synced:
            print(
                f"error: the cluster cache did not sync: no LIST page of {', '.join(stalled)} "
                f"for {SYNC_STALL_SECONDS:.0f}s",
                file=sys.stderr,
            )
            return EXIT_FAILED
        if not service.lead_one_cycle():
            holder = service.elector.observed_holder if service.elector is not None else ""
            print(
                f"error: leader election is on and the Lease is held by {holder or 'another replica'}; "
                "not running a live cycle beside it (use --dry-run for an audit)",
                file=sys.stderr,
            )
            return EXIT_FAILED
        service.runner.skip_form = skip_form(args.explain)
        record = service.runner.run_cycle()
    finally:
        service.shutdown()  # releases the Lease and flushes the events of this cycle's evictions
    if record is None:
        return EXIT_FAILED
    if args.output == "json":
        print(json.dumps(record.to_dict(), indent=2, sort_keys=False))
    elif args.output == "html":
        mode = "dry-run audit" if record.dry_run else "live cycle"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.started))
        title = f"Cycle {record.cycle} at {stamp}" + (" (dry-run)" if record.dry_run else "")
        sys.stdout.write(render_html([record.to_dict()], [title], f"descheduler once: {mode}"))
    else:
        print(render_record_text(record))
    missing = usage_unavailable(record)
    if missing:
        print(
            f"error: no node had a usable usage sample, so nothing was judged (exit {EXIT_NO_USAGE}): "
            + "; ".join(missing[:3]),
            file=sys.stderr,
        )
        return EXIT_NO_USAGE
    return EXIT_OK


def add_service_parsers(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", required=True, help="configuration file or ConfigMap manifest")
    common.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)",
    )
    common.add_argument(
        "--dry-run",
        action="store_true",
        help="evict nothing whatever the configuration says: decide, log and audit only",
    )
    common.add_argument(
        "--log-format", choices=("json", "console"), default="json", help="log format (default json)"
    )
    common.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="lowest level logged (default info)",
    )

    run = sub.add_parser(
        "run",
        parents=[common],
        help="run the descheduler as a service, a cycle every deschedulingInterval",
        description="Run continuously: watch the cluster, read usage, and every deschedulingInterval cure "
        "hotspots. Serves /healthz, /readyz and /metrics. SIGTERM stops it cleanly. Exits 1 when the API "
        "server cannot be reached within 15 s at start-up, 2 for a bad configuration.",
        epilog="example: descheduler run --config /etc/descheduler/config.yaml --dry-run",
    )
    add_debug_cache_flag(run)
    run.set_defaults(func=cmd_run)

    once = sub.add_parser(
        "once",
        parents=[common],
        help="run a single cycle and exit (CronJob use, or a one-off dry-run audit)",
        description="Run one cycle against the live cluster and print its record. With --dry-run nothing is "
        "evicted; each would-be eviction is checked with a server-side dry-run eviction. Exit codes: 0 the "
        "cycle ran; 1 it could not run (API server unreachable within 15 s, cache not synced, Lease held "
        "by a running replica); 2 bad configuration; 3 it ran but no node had a usable usage sample.",
        epilog="example: descheduler once --config config.yaml --dry-run --output text",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_report_options(
        once,
        "record",
        "summary (default, as the service audits): the filtered pods of a hotspot that stopped for its "
        "own reason as one entry per reason with a count; all: one entry per pod (JSON: skipForm)",
    )
    once.set_defaults(func=cmd_once)
