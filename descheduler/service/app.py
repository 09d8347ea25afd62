"""``descheduler run`` and ``descheduler once``: build the process, start it, loop or run one cycle, stop.

Order of start-up matters for safety: configuration first (an invalid one exits 2 before touching the
cluster), then the watch cache, and cycles only after the cache has synced and, with leader election,
only while this replica holds the lease. The components themselves are wired in ``process``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from datetime import datetime
from typing import Any

import structlog
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from descheduler.config.load import EffectiveConfig, load_config
from descheduler.config.lownodeload import NodePool, effective_anomaly_condition
from descheduler.kube.connection import REACH_BUDGET_SECONDS, unreachable_reason
from descheduler.kube.errors import KubeError
from descheduler.planner import loop_warnings
from descheduler.report import render_html
from descheduler.report.options import add_report_options, skip_form
from descheduler.service.audit import render_record_text, usage_unavailable
from descheduler.service.health import add_debug_cache_flag
from descheduler.service.observability import configure_logging
from descheduler.service.process import SYNC_STALL_SECONDS, Service

log = structlog.get_logger("descheduler.service")

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
