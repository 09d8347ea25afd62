"""One descheduling cycle, read top to bottom as it runs: snapshot -> usage -> plan -> verify -> evict ->
record.

This is the thin shell around the pure planner; each concern with state of its own lives beside it:
``ledger.py`` (the migration journal: rebuild, write ahead, confirm), ``steering.py`` (hotspot taints),
``verify.py`` (reading from the server what an eviction rests on), ``evictions.py`` (the eviction pass
and its safety rules), ``unknown.py`` (evictions of unknown outcome), ``announce.py`` (what a cycle says
about outcomes other than its own evictions). What the runner talks to is in
``edges.py``; what a cycle did is a ``records.CycleRecord``. No cycle runs on a broken cache: while any
watched resource last heard from the API server longer ago than ``Timing.max_cache_age``, the cycle is
skipped (state untouched) and the record says why. Nothing is acted on (evicted, restarted, tainted) on a
stale one: a plan that would act first has the resources quiet for longer than ``Timing.act_cache_age``
refreshed (their watches re-opened, the server's answer awaited, bounded), then is made again on the
refreshed cache; if the server does not answer, the cycle is skipped as stale. An idle cycle refreshes
nothing, so it sends nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

import structlog

from descheduler.cluster.types import ClusterSnapshot, Rollout, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.planner import SUMMARISED, Plan, PlannerState, SkipForm, commit, plan, pod_usage_nodes
from descheduler.planner.controls import (
    Budget,
    BudgetState,
    budget_state,
    compile_budget,
    compile_windows,
    window_state,
)
from descheduler.planner.index import IndexCache
from descheduler.planner.state import RESTARTING
from descheduler.service import announce
from descheduler.service.edges import Clocks, Edges, Signals, Timing
from descheduler.service.evictions import EvictionPass, Gate, Pass, PdbBackoff, refused_budgets
from descheduler.service.freshness import acts, prove_fresh, stale_cache
from descheduler.service.ledger import Held, Ledger, lost_quiet
from descheduler.service.records import CycleRecord, EvictionRecord, Restore
from descheduler.service.restarts import Followed, follow
from descheduler.service.steering import Steering
from descheduler.service.unknown import Resolution, Unconfirmed, settle_state
from descheduler.service.verify import ServerCheck

__all__ = ["CycleRecord", "CycleRunner", "EvictionRecord", "Restore", "refused_budgets"]

log = structlog.get_logger("descheduler.cycle")


class CycleRunner:
    """Runs cycles one at a time and carries the planner state between them."""

    def __init__(
        self,
        config: EffectiveConfig,
        edges: Edges,
        *,
        clocks: Clocks | None = None,
        signals: Signals | None = None,
        timing: Timing | None = None,
    ) -> None:
        self.config = config
        self.edges = edges
        self.skip_form: SkipForm = SUMMARISED
        """How plans report the filtered pods of hotspots that stopped first: counted per reason (what the
        audit logs every cycle), or listed one by one (``once --explain all``)."""
        self.clocks = clocks or Clocks()
        self.signals = signals or Signals()
        timing = timing or Timing()
        self.timing = timing
        interval = config.config.descheduling_interval
        self.budget = timing.budget_seconds if timing.budget_seconds is not None else interval
        self.pdb_retry_seconds = (
            timing.pdb_retry_seconds if timing.pdb_retry_seconds is not None else interval
        )
        """The least time a refused budget is left alone (the server's Retry-After when longer): at least
        the next cycle, since Kubernetes answers a spent budget with Retry-After 0."""
        self.pdb_backoff = PdbBackoff()
        """Refused budgets' waits, doubled per refusal in a row (``evictions.PdbBackoff``)."""
        self.ledger = Ledger(
            edges.journal,
            monotonic=self.clocks.monotonic,
            fallback_quiet_seconds=timing.fallback_quiet_seconds,
            startup_quiet_seconds=timing.startup_quiet_seconds,
            lost_quiet_seconds=lost_quiet(config),
        )
        args = config.low_node_load
        steering_on = args is not None and args.hotspot_taint.enabled
        self.steering = Steering(
            edges.tainter if steering_on else None,
            args.hotspot_taint.remove_after_cycles if args else 0,
            monotonic=self.clocks.monotonic,
        )
        self.windows = compile_windows(config.migration)
        """``evictionWindows``: outside them every planned eviction is reported ``outside-window``."""
        self.churn: Budget | None = compile_budget(config.migration)
        self.state = PlannerState()
        self.indexes = IndexCache()
        """The cluster index of the last snapshot planned: shared by the cycle's two planner calls, its
        verification and its re-plans, and derived from for the next cycle's snapshot."""
        self.unconfirmed: dict[str, Unconfirmed] = {}
        """Evictions of unknown outcome, by pod key, until the cache settles them."""
        self.verified_requests = 0
        """API requests the verifications made so far."""
        self._last_verify_requests = 0
        self.cycles = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.last_started = 0.0
        self.last_finished = 0.0
        self.in_cycle = False

    @property
    def tainted_nodes(self) -> set[str]:
        """Nodes this replica has put the hotspot taint on (the service clears them on the way out)."""
        return self.steering.tainted_nodes

    def request_restore(self) -> None:
        """Rebuild the migration state from the journal at the start of the next cycle: called at start-up
        and when this replica takes the Lease (the previous leader's records are there). Hotspot taints
        are judged afresh too (a takeover)."""
        self.ledger.request_restore()
        self.steering.restart()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the cycle in progress (if any) to end; True if none is running."""
        if not self._lock.acquire(timeout=max(0.0, timeout)):
            return False
        self._lock.release()
        return True

    def run_cycle(self) -> CycleRecord | None:
        """Run one cycle; returns None if another is still running (cycles never overlap)."""
        if not self._lock.acquire(blocking=False):
            log.warning("cycle_skipped", reason="previous cycle still running")
            return None
        try:
            self.in_cycle = True
            self.last_started = self.clocks.monotonic()
            return self._run()
        finally:
            self.in_cycle = False
            self.last_finished = self.clocks.monotonic()
            self._lock.release()

    def stale_cache(self) -> str:
        """Why the cache is too old to act on, or ``""`` (``stale_cache``)."""
        return stale_cache(self.signals.cache_ages(), self.timing.max_cache_age)

    # -- the cycle ----------------------------------------------------------------------------------------
    def _run(self) -> CycleRecord:
        self.cycles += 1
        started = self.clocks.monotonic()
        now = self.clocks.wall()
        structlog.contextvars.bind_contextvars(cycle=self.cycles)
        try:
            stale = self.stale_cache()
            if stale:
                return self._skip(now, started, "stale-cache", stale)
            restore = self._restore() if self.ledger.restore_requested else None
            snapshot = self.edges.cluster.snapshot()
            resolved = self._settle_unknown(snapshot, now)
            followed = self._follow_restarts(snapshot, now)
            usage = self._usage(snapshot, now)
            decided = self._plan(snapshot, usage, now)
            if acts(snapshot, decided, steering=self.steering.tainter is not None):
                refreshed, stale = prove_fresh(self.signals, self.timing.act_cache_age)
                if stale:
                    return self._skip(now, started, "stale-cache", stale)
                if refreshed:  # decide again on what the re-opened watches brought
                    snapshot = self.edges.cluster.snapshot()
                    usage = self._usage(snapshot, now)
                    decided = self._plan(snapshot, usage, now)
            announce.backoffs(decided, self.edges.events, self.config.dry_run)
            acting = self.signals.is_leader() and not self.stopping.is_set()
            steering = self.steering.decide(snapshot, decided, acting)
            added = self.steering.add(steering)  # before the evictions, so replacements are steered away
            done, failures = self._evict(snapshot, usage, decided, started + self.budget)
            removed = self.steering.remove(steering)
            window = window_state(self.windows, now)
            if not window.open and decided.evictions:
                log.info("outside_eviction_window", planned=len(decided.evictions), message=window.message())
            record = CycleRecord(
                cycle=self.cycles,
                started=now,
                duration=self.clocks.monotonic() - started,
                dry_run=self.config.dry_run,
                plan=done.decided,
                evictions=tuple(done.records),
                aborted=done.aborted,
                usage_errors=dict(usage.node_errors),
                oldest_sample=min((sample.timestamp for sample in usage.nodes.values()), default=None),
                resolved=tuple(EvictionRecord.of(r.eviction, r.result, r.message) for r in resolved),
                restarts=tuple(f.record() for f in followed),
                restart_seconds=tuple(f.seconds for f in followed if f.result == "completed"),
                unconfirmed=tuple(sorted(self.unconfirmed)),
                taints=(*added, *removed),
                tainted=steering.keep,
                steering_off=self.steering.problem(),
                restore=restore,
                quiet_seconds_left=self.ledger.quiet_left() if not self.config.dry_run else 0.0,
                journal_failures=tuple(failures),
                journal_compactions=self.ledger.take_compactions(),
                verify_requests=self._last_verify_requests,
                object_problems=dict(self.signals.object_problems()),
                window=window,
                budget=self._budget(now),
                pdb_backoffs=self.pdb_backoff.backing_off(self.clocks.wall()),
            )
            self._report(record)
            return record
        finally:
            structlog.contextvars.unbind_contextvars("cycle")

    def _plan(self, snapshot: ClusterSnapshot, usage: UsageSnapshot, now: float) -> Plan:
        """The planner on this snapshot and usage, from the state as it stands (pure: may run twice)."""
        config, state, form = self.config, self.state, self.skip_form
        return plan(snapshot, usage, config, state, now, cache=self.indexes, skip_form=form)

    def _budget(self, now: float) -> BudgetState | None:
        """What is left of the churn budget after this cycle's evictions (None without one)."""
        if self.churn is None:
            return None
        return budget_state(self.churn, self.state.migrations, now)

    def _restore(self) -> Restore:
        restore, held = self.ledger.restore()
        self.state, self.unconfirmed = held.state, held.unsettled
        announce.journal_lost(restore, self.edges.events, self.config.dry_run)
        return restore

    def _usage(self, snapshot: ClusterSnapshot, now: float) -> UsageSnapshot:
        """Two steps: node usage first; then pod usage only for the nodes the plan may move pods from."""
        usage = distrust(self.edges.usage.fetch_nodes(snapshot.nodes), self.signals.untrusted_nodes())
        wanted = pod_usage_nodes(snapshot, usage, self.config, self.state, now, cache=self.indexes)
        pods = self.edges.usage.fetch_pods(wanted, snapshot.nodes, snapshot.pods)
        return UsageSnapshot(nodes=usage.nodes, pods=pods, node_errors=usage.node_errors)

    def _evict(
        self, snapshot: ClusterSnapshot, usage: UsageSnapshot, decided: Plan, deadline: float
    ) -> tuple[Pass, list[str]]:
        """The eviction pass, then the one ``commit`` of what (possibly) happened, then the journal."""
        held = Held(self.state, self.unconfirmed)
        ahead = self.ledger.write_ahead(decided.state, held, self.clocks.wall, self.config.dry_run)
        verifier = self.edges.verifier
        check = (
            ServerCheck(
                verifier,
                self.config,
                self.indexes.index_of(snapshot),
                decided.now,
                deadline,
                self.clocks.monotonic,
            )
            if verifier is not None
            else None
        )
        gate = Gate(
            stopping=self.stopping.is_set,
            is_leader=self.signals.is_leader,
            monotonic=self.clocks.monotonic,
            deadline=deadline,
            quiet_left=self.ledger.quiet_left,
            dry_run=self.config.dry_run,
        )
        runner = EvictionPass(
            self.config,
            self.edges.evictor,
            gate,
            self.clocks.wall,
            self.pdb_retry_seconds,
            check,
            ahead,
            self.indexes,
            self.windows,
            self.pdb_backoff,
        )
        done = runner.run(snapshot, usage, self.state, decided)
        self._last_verify_requests = check.requests if check is not None else 0
        self.verified_requests += self._last_verify_requests
        state = commit(
            done.decided.state,
            done.done,
            decided.now,
            applied=done.applied,
            sent=done.sent,
            unresolved=done.unresolved,
        )
        unconfirmed = {**self.unconfirmed, **{u.pod.key: u for u in done.unconfirmed}}
        held = Held(state, unconfirmed)
        failures: list[str] = []
        if ahead is not None:
            held = ahead.merged(held)
            confirm_failures, held = self.ledger.confirm(held, leader=self.signals.is_leader())
            failures = ahead.failures + confirm_failures
        self.state, self.unconfirmed = held.state, held.unsettled
        return done, failures

    def _settle_unknown(self, snapshot: ClusterSnapshot, now: float) -> list[Resolution]:
        """Settle earlier evictions of unknown outcome from the cache; tell the world how they turned out."""
        self.state, self.unconfirmed, settled = settle_state(
            self.state,
            self.unconfirmed,
            snapshot.pods,
            heard=now - max(self.signals.cache_ages().values(), default=0.0),
            settle=self.timing.unknown_settle_seconds,
            now=now,
            restart_settle=self.timing.restart_deadline_seconds,
            rollouts=_rollouts(snapshot) if any(u.restart for u in self.unconfirmed.values()) else None,
        )
        announce.resolved(settled, self.edges.evictor, now)
        return settled

    def _follow_restarts(self, snapshot: ClusterSnapshot, now: float) -> list[Followed]:
        """Restarts in flight (this process's or, from the journal, a predecessor's) that completed or
        failed: marked in the state (the journal keeps the outcome), logged, and told on the Deployment
        and the pod."""
        if not any(m.restart == RESTARTING for m in self.state.migrations):
            return []
        self.state, followed = follow(self.state, snapshot, self.indexes.index_of(snapshot), now)
        announce.followed(followed, self.edges.evictor)
        return followed

    def _skip(self, now: float, started: float, code: str, why: str) -> CycleRecord:
        """A cycle that did not run: no plan, no eviction, the planner state untouched."""
        log.warning("cycle_skipped", code=code, reason=why)
        record = CycleRecord(
            cycle=self.cycles,
            started=now,
            duration=self.clocks.monotonic() - started,
            dry_run=self.config.dry_run,
            plan=Plan(state=self.state, notes=(why,), now=now),
            evictions=(),
            unconfirmed=tuple(sorted(self.unconfirmed)),
            skipped=why,
            skip_code=code,
            pdb_backoffs=self.pdb_backoff.backing_off(now),
        )
        if self.signals.on_record is not None:
            self.signals.on_record(record)
        return record

    def _report(self, record: CycleRecord) -> None:
        classes = Counter(str(r.node_class) for r in record.plan.node_reports)
        log.info(
            "cycle_summary",
            dry_run=record.dry_run,
            nodes=dict(classes),
            hotspots=classes.get("hotspot", 0),
            evictions=dict(Counter(e.result for e in record.evictions)),
            skips=record.plan.skip_counts(),
            usage_errors=len(record.usage_errors),
            duration_seconds=round(record.duration, 3),
            aborted=record.aborted or None,
        )
        if self.signals.on_record is not None:
            self.signals.on_record(record)


def _rollouts(snapshot: ClusterSnapshot) -> dict[str, Rollout]:
    """The Deployments' rollouts by ``namespace/name``: what settles a restart of unknown outcome."""
    return {
        f"{w.namespace}/{w.name}": w.rollout
        for w in snapshot.workloads
        if w.kind == "Deployment" and w.rollout is not None
    }


def distrust(usage: UsageSnapshot, untrusted: Mapping[str, str]) -> UsageSnapshot:
    """Nodes the cache cannot fully describe (an unparsable pod) are skipped like nodes without usage."""
    if not untrusted:
        return usage
    errors = dict(usage.node_errors)
    for node, why in untrusted.items():
        errors[node] = f"{errors[node]}; {why}" if node in errors else why
    nodes = {name: sample for name, sample in usage.nodes.items() if name not in untrusted}
    return UsageSnapshot(nodes=nodes, pods=usage.pods, node_errors=errors)
