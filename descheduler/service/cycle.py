"""One descheduling cycle: snapshot -> usage -> plan -> evict -> commit, with an audit record.

This is the thin shell around the pure planner. Every external dependency is a small protocol so the
same code runs against the live cluster, the test API server, and fakes in unit tests. Safety rules
enforced here (not in the planner, because they are about the outside world):
- no eviction unless this replica is leader at the moment of the call;
- no eviction after shutdown was requested or the cycle's time budget is spent;
- a failed eviction never counts as a migration (the planner's ``commit`` gets only real evictions);
- an eviction of unknown outcome counts as one until the cache settles it (see ``unknown.py``);
- no cycle at all on a stale cache: while any watched resource last heard from the API server longer
  ago than ``max_cache_age``, the cycle is skipped (state untouched) and the record says why.
- no eviction request is sent before its record is in the migration journal (see
  ``planner/journal.py``), so a successor rebuilds every limit from it instead of waiting a window out.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

from descheduler.cluster.selectors import selector_matches
from descheduler.cluster.types import (
    ClusterSnapshot,
    Node,
    Pod,
    PodDisruptionBudget,
    UsageSample,
    UsageSnapshot,
)
from descheduler.config.load import EffectiveConfig
from descheduler.planner import (
    Plan,
    PlannedEviction,
    PlannerState,
    add_departures,
    add_migrations,
    forget,
    plan,
    pod_usage_nodes,
    refuse,
    reset_anomalies,
)
from descheduler.planner import journal as records
from descheduler.planner.candidates import resolve_priority_threshold
from descheduler.planner.index import ClusterIndex
from descheduler.planner.journal import Entry, JournalError
from descheduler.planner.model import PodSkip
from descheduler.planner.settings import compile_settings
from descheduler.planner.state import settle_migrations
from descheduler.planner.steer import SteerDecision, SteerState, steer
from descheduler.planner.verify import Disagreement, ServerView, Threshold, recheck
from descheduler.service.unknown import DEFAULT_SETTLE_SECONDS, Resolution, Unconfirmed, resolve

log = structlog.get_logger("descheduler.cycle")


class SnapshotSource(Protocol):
    def snapshot(self) -> ClusterSnapshot: ...


class UsageSource(Protocol):
    def fetch_nodes(self, nodes: Sequence[Node]) -> UsageSnapshot: ...

    def fetch_pods(
        self, wanted: Collection[str] | None, nodes: Sequence[Node], pods: Sequence[Pod]
    ) -> Mapping[str, UsageSample]: ...


class Outcome(Protocol):
    @property
    def result(self) -> str: ...
    @property
    def message(self) -> str: ...

    @property
    def retry_after(self) -> float | None:
        """The server's Retry-After of a refusal, if it gave one."""
        ...


class TaintResult(Protocol):
    @property
    def result(self) -> str: ...
    def to_dict(self) -> dict[str, str]: ...


class Tainter(Protocol):
    def add(self, node: str, message: str) -> TaintResult: ...
    def remove(self, node: str, message: str) -> TaintResult: ...


class Evictor(Protocol):
    def evict(
        self,
        pod: Pod,
        node: str,
        reason: str,
        deadline: float,
        before_send: Callable[[], str | None] | None = None,
        verify: Callable[[], str | None] | None = None,
    ) -> Outcome:
        """``verify`` runs once after the rate limiter, dry run too: a message it returns stops the
        eviction (result ``not-verified``). ``before_send`` runs right before each request is sent; a
        message it returns stops the eviction (result ``failed``) without sending anything."""
        ...

    def report_resolved(self, pod: Pod, node: str, reason: str, result: str, message: str) -> None:
        """Tell the world (Events) how an ``unknown`` eviction turned out."""
        ...


class Verifier(Protocol):
    """Reads from the API server what an eviction rests on (``kube/verify.py``), and re-lists the cache
    resources the server disagreed with."""

    def read(self, pod: Pod, deadline: float) -> ServerView: ...

    def resync(self, resources: Sequence[str]) -> object: ...


class Journal(Protocol):
    """Where migration records outlive the process (``kube/journal.py``: a ConfigMap)."""

    @property
    def where(self) -> str: ...

    def load(self) -> tuple[Entry, ...]:
        """Raises ``JournalUnreadable``."""
        ...

    def save(self, entries: Sequence[Entry]) -> None:
        """Raises ``JournalWriteError``."""
        ...


@dataclass(frozen=True)
class Restore:
    """How a start or a takeover got its migration state: ``rebuilt`` from the journal, or the
    ``fallback`` (no live eviction for one objectLimiters window) and why."""

    result: str
    reason: str
    """``ok`` when rebuilt; else ``forbidden``, ``unavailable``, ``invalid`` or ``no-journal``."""
    migrations: int = 0
    pending: int = 0
    quiet_seconds: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class EvictionRecord:
    pod: str
    node: str
    destination: str
    reason: str
    result: str
    message: str
    workload_kind: str = ""
    workload_name: str = ""


@dataclass(frozen=True)
class CycleRecord:
    """What one cycle saw and did: the audit record of dry-run, and the summary of live runs."""

    cycle: int
    started: float
    duration: float
    dry_run: bool
    plan: Plan
    evictions: tuple[EvictionRecord, ...]
    aborted: str = ""
    usage_errors: dict[str, str] = field(default_factory=dict)
    oldest_sample: float | None = None
    """Measurement time of the oldest node usage sample of the cycle (freshness of the metrics source)."""
    resolved: tuple[EvictionRecord, ...] = ()
    """Evictions of unknown outcome (earlier cycles) that this cycle's cache settled: evicted or failed."""
    unconfirmed: tuple[str, ...] = ()
    """Pods whose eviction outcome is still unknown after this cycle (counted as evicted meanwhile)."""
    taints: tuple[Mapping[str, str], ...] = ()
    """Hotspot taints added or removed this cycle (``hotspotTaint``), or that dry-run would have."""
    tainted: tuple[str, ...] = ()
    """Nodes that keep the hotspot taint after this cycle."""
    skipped: str = ""
    """Why the cycle did not run at all (its plan is empty), e.g. a stale cache."""
    skip_code: str = ""
    """Bounded reason code of ``skipped`` (a metric label)."""
    restore: Restore | None = None
    """Set on the first cycle after a start or a takeover."""
    quiet_seconds_left: float = 0.0
    """Seconds of the fallback quiet period still to go (no live eviction meanwhile)."""
    journal_failures: tuple[str, ...] = ()
    """Reason codes of the journal writes that failed this cycle (each stopped an eviction or a confirm)."""
    verify_requests: int = 0
    """API requests made this cycle to verify planned evictions against the server."""

    def to_dict(self) -> dict[str, Any]:
        body = self.plan.to_dict()
        # Each planned eviction (usage, workload, pass) with the outcome of its call: the runner records
        # one outcome per planned eviction, in plan order.
        planned = {(e["pod"], e["node"]): e for e in body["evictions"]}
        body.update(
            {
                "cycle": self.cycle,
                "started": self.started,
                "durationSeconds": round(self.duration, 6),
                "dryRun": self.dry_run,
                "evictions": [
                    {
                        **planned.get((e.pod, e.node), {}),
                        "pod": e.pod,
                        "node": e.node,
                        "destination": e.destination,
                        "reason": e.reason,
                        "result": e.result,
                        "message": e.message,
                    }
                    for e in self.evictions
                ],
            }
        )
        if self.resolved:
            body["resolvedEvictions"] = [
                {"pod": e.pod, "node": e.node, "result": e.result, "message": e.message}
                for e in self.resolved
            ]
        if self.unconfirmed:
            body["unconfirmedEvictions"] = list(self.unconfirmed)
        if self.taints or self.tainted:
            body["hotspotTaints"] = {"changes": [dict(t) for t in self.taints], "kept": list(self.tainted)}
        if self.restore is not None:
            body["restore"] = {
                "result": self.restore.result,
                "reason": self.restore.reason,
                "migrations": self.restore.migrations,
                "pending": self.restore.pending,
                "quietSeconds": self.restore.quiet_seconds,
            }
        if self.aborted:
            body["aborted"] = self.aborted
        if self.skipped:
            body["skipped"] = {"code": self.skip_code, "message": self.skipped}
        return body


REFUSED_RESULTS = frozenset({"refused-by-pdb", "dry-run-refused"})
"""A PodDisruptionBudget said no: remembered per budget, and the cycle re-planned without its pods."""
MAX_REPLANS = 5
"""Re-plans per cycle after refusals: each removes at least one budget's pods, so this only bounds cost."""
EVICTED_RESULTS = frozenset({"evicted", "unknown"})
"""Counted as evictions by ``commit``: an ``unknown`` one may have happened, so it counts (safety)."""


class _WriteAhead:
    """One cycle's journal writes: each eviction's record goes in before its request is sent."""

    def __init__(self, runner: CycleRunner, decided: Plan) -> None:
        self.runner = runner
        unsettled = {
            k: records.Unsettled(u.sent, u.reason, u.destination) for k, u in runner.unconfirmed.items()
        }
        # The journal as it must read during this cycle: the plan's migrations, then each intent.
        self.work: dict[tuple[str, str], Entry] = {
            (e.pod, e.uid): e
            for e in records.project(decided.state.migrations, unsettled, decided.state.departures)
        }
        self.sent: dict[tuple[str, str], float] = {}
        self.failures: list[str] = []
        self.conflict = False
        """Another writer's records appeared: this cycle's plan did not count them, so it stops."""

    def intend(self, planned: PlannedEviction) -> str | None:
        """Write ``planned``'s intent record; a message means: do not send the eviction."""
        runner = self.runner
        if runner._journal_saved is None:  # a write failed earlier: read it again first
            error = runner._reload()
            if error is not None:
                self.failures.append("unreadable")
                return f"not sent: its migration record could not be written first ({error})"
            self.conflict = True
            return "not sent: the migration journal had to be read again; planning again next cycle"
        key = (planned.pod.key, planned.pod.uid)
        at = runner.wall_clock()
        self.work[key] = records.intent(planned, at)
        reason = runner._write(sorted(self.work.values(), key=lambda e: (e.at, e.pod)))
        if reason is not None:
            self.work.pop(key, None)
            self.failures.append(reason)
            self.conflict = self.conflict or reason == "conflict"
            return f"not sent: its migration record could not be written first ({reason})"
        self.sent[key] = at
        return None

    def settle(self, planned: PlannedEviction, result: str) -> float | None:
        """Keep the record of a possible eviction, drop the others; returns when it was sent."""
        key = (planned.pod.key, planned.pod.uid)
        if result in EVICTED_RESULTS and key in self.work:
            status = records.UNKNOWN if result == "unknown" else records.EVICTED
            self.work[key] = replace(self.work[key], status=status)
        else:
            self.work.pop(key, None)
        return self.sent.get(key)


class _Check:
    """One cycle's server-side verification: each planned eviction's pod and workload are read from the
    API server and the rules that read them are applied again (``planner/verify.py``)."""

    def __init__(self, runner: CycleRunner, snapshot: ClusterSnapshot, now: float, deadline: float) -> None:
        assert runner.verifier is not None
        self.verifier = runner.verifier
        self.runner = runner
        self.now = now
        self.deadline = deadline
        self.settings = compile_settings(runner.config)
        self.index = ClusterIndex.of(snapshot)
        self.threshold = Threshold(*resolve_priority_threshold(self.settings, self.index))
        self.last: Disagreement | None = None
        """The disagreement behind the last ``verify`` that stopped an eviction."""

    def verify(
        self, planned: PlannedEviction, decided: Plan, earlier: Sequence[PlannedEviction]
    ) -> str | None:
        """A message when the eviction must not be sent; None when the server's objects agree."""
        started = self.runner.monotonic()
        view = self.verifier.read(planned.pod, self.deadline)
        seconds = round(self.runner.monotonic() - started, 4)
        self.runner.verified_requests += view.requests
        cached = self.index.workload_of(planned.pod)
        found = recheck(
            planned, cached, view, self.settings, decided.state, list(earlier), self.threshold, self.now
        )
        self.last = found
        if found is None:
            log.info("eviction_verified", pod=planned.pod.key, requests=view.requests, seconds=seconds)
            return None
        log.warning(
            "eviction_not_verified",
            pod=planned.pod.key,
            node=planned.node,
            code=found.code,
            message=found.message,
            resync=list(found.stale),
            requests=view.requests,
            seconds=seconds,
        )
        if found.stale:
            self.verifier.resync(found.stale)
        return found.message


class CycleRunner:
    """Runs cycles one at a time and carries the planner state between them."""

    def __init__(
        self,
        *,
        config: EffectiveConfig,
        cluster: SnapshotSource,
        usage: UsageSource,
        evictor: Evictor,
        is_leader: Callable[[], bool] = lambda: True,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        budget_seconds: float | None = None,
        on_record: Callable[[CycleRecord], None] | None = None,
        untrusted_nodes: Callable[[], Mapping[str, str]] = dict,
        startup_quiet_seconds: float = 0.0,
        pdb_retry_seconds: float | None = None,
        cache_ages: Callable[[], Mapping[str, float]] = dict,
        max_cache_age: float | None = None,
        unknown_settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        tainter: Tainter | None = None,
        journal: Journal | None = None,
        fallback_quiet_seconds: float = 0.0,
        verifier: Verifier | None = None,
    ) -> None:
        self.config = config
        self.verifier = verifier
        """Reads each eviction's pod and workload from the server before it is sent (None: trust the
        snapshot, as ``simulate`` and unit tests do)."""
        self.verified_requests = 0
        """API requests the verifications made so far."""
        self.cluster = cluster
        self.usage = usage
        self.evictor = evictor
        self.is_leader = is_leader
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self.budget = budget_seconds if budget_seconds is not None else config.config.descheduling_interval
        self.on_record = on_record
        self.untrusted_nodes = untrusted_nodes
        self.quiet_until = monotonic() + startup_quiet_seconds
        """No live eviction before this (monotonic): the fallback when the migration state could not be
        rebuilt. Once the objectLimiters window has passed, a previous instance's migrations no longer
        count, so no limit is exceeded."""
        self.journal = journal
        self.fallback_quiet_seconds = fallback_quiet_seconds
        self._restore_requested = False
        self._restore_failed = False
        self._memory_only = journal is None
        """No journal writes: none configured, or reading it is forbidden (a successor cannot read it
        either, so it falls back to the quiet period too)."""
        self._journal_saved: tuple[Entry, ...] | None = None
        """The records as last read or written; None when unknown (read before the next write)."""
        self.state = PlannerState()
        self.pdb_retry_seconds = (
            pdb_retry_seconds if pdb_retry_seconds is not None else config.config.descheduling_interval
        )
        """The least time a refused budget is left alone (the server's Retry-After when longer): at least
        the next cycle, since Kubernetes answers a spent budget with Retry-After 0."""
        self.cache_ages = cache_ages
        """Per watched resource, seconds since it last heard from the API server."""
        self.max_cache_age = max_cache_age
        self.unknown_settle_seconds = unknown_settle_seconds
        self.unconfirmed: dict[str, Unconfirmed] = {}
        """Evictions of unknown outcome, by pod key, until the cache settles them."""
        args = config.low_node_load
        self.tainter = tainter if args is not None and args.hotspot_taint.enabled else None
        self.taint_after = args.hotspot_taint.remove_after_cycles if args is not None else 0
        self.steer_state = SteerState()
        self.takeover = True
        """The next cycle is this replica's first as leader: stale hotspot taints are cleaned at once."""
        self.tainted_nodes: set[str] = set()
        """Nodes this replica has put the hotspot taint on (cleared on shutdown and lost leadership)."""
        self.cycles = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.last_started = 0.0
        self.last_finished = 0.0
        self.in_cycle = False

    def start_quiet_period(self, seconds: float) -> None:
        """No live eviction for ``seconds`` from now."""
        self.quiet_until = self.monotonic() + seconds
        self.takeover = True
        self.steer_state = SteerState()

    def request_restore(self) -> None:
        """Rebuild the migration state from the journal at the start of the next cycle: called at
        start-up and when this replica takes the Lease (the previous leader's records are there).
        Hotspot taints are judged afresh too (a takeover)."""
        self._restore_requested = True
        self.takeover = True
        self.steer_state = SteerState()

    # -- the migration journal ------------------------------------------------------------------------
    def _restore(self) -> Restore:
        self._restore_requested = False
        self.state = PlannerState()
        self.unconfirmed = {}
        if self.journal is None:
            return self._fallback("no-journal", "no migration journal is configured")
        try:
            entries = self.journal.load()
        except JournalError as exc:
            if exc.reason == "forbidden":
                self._memory_only = True
            elif exc.reason == "unavailable":
                self._restore_requested = True  # read again next cycle; no eviction can be recorded meanwhile
            elif exc.reason == "invalid":
                self._journal_saved = ()  # unusable records: once the window has passed, overwrite them
            return self._fallback(exc.reason, str(exc))
        self._memory_only = False
        self._restore_failed = False
        self._adopt(entries)
        self.quiet_until = -math.inf
        restore = Restore(
            "rebuilt", "ok", migrations=len(self.state.migrations), pending=len(self.unconfirmed)
        )
        log.info(
            "state_rebuilt",
            source=self.journal.where,
            migrations=restore.migrations,
            unsettled=restore.pending,
            workloads=len({m.workload for m in self.state.migrations if m.workload}),
        )
        return restore

    def _fallback(self, reason: str, message: str) -> Restore:
        """The state cannot be read: wait one objectLimiters window out (once per failed restore)."""
        if not self._restore_failed:
            self.quiet_until = max(self.quiet_until, self.monotonic() + self.fallback_quiet_seconds)
        self._restore_failed = True
        left = max(0.0, self.quiet_until - self.monotonic())
        log.warning(
            "state_rebuild_failed",
            reason=reason,
            error=message,
            quiet_seconds=round(left, 3),
            notice="no live eviction until the objectLimiters window has passed",
        )
        return Restore("fallback", reason, quiet_seconds=left, message=message)

    def _adopt(self, entries: Sequence[Entry], *, keep_anomalies: bool = False) -> None:
        """Take ``entries`` as the migration state (merged with ours when ``keep_anomalies``)."""
        rebuilt = records.rebuild(entries)
        state = rebuilt.state
        if keep_anomalies:
            known = {(d.pod, d.uid) for d in self.state.departures}
            departures = self.state.departures + tuple(
                d for d in state.departures if (d.pod, d.uid) not in known
            )
            state = replace(self.state, migrations=state.migrations, departures=departures)
        self.state = state
        for e in rebuilt.pending:
            if e.pod not in self.unconfirmed:
                pod = Pod(namespace=e.namespace, name=e.name, uid=e.uid, node_name=e.node)
                self.unconfirmed[e.pod] = Unconfirmed(pod, e.node, e.destination, e.reason, e.at)
        self._journal_saved = tuple(entries)

    def _reload(self) -> str | None:
        """Read the journal again after a failed or conflicting write and keep every record of both
        sides (another writer's records count too). Returns the error, if it could not be read."""
        assert self.journal is not None
        try:
            theirs = self.journal.load()
        except JournalError as exc:
            return str(exc)
        ours = self._projection()
        self._adopt(records.merge(ours, theirs), keep_anomalies=True)
        self._journal_saved = tuple(theirs)
        return None

    def _projection(self) -> tuple[Entry, ...]:
        unsettled = {
            key: records.Unsettled(item.sent, item.reason, item.destination)
            for key, item in self.unconfirmed.items()
        }
        return records.project(self.state.migrations, unsettled, self.state.departures)

    def _write(self, entries: Sequence[Entry]) -> str | None:
        """Save ``entries``; on failure returns the reason code and forgets what the journal holds."""
        assert self.journal is not None
        try:
            self.journal.save(entries)
        except JournalError as exc:
            self._journal_saved = None
            log.warning("journal_write_failed", reason=exc.reason, error=str(exc))
            return exc.reason
        self._journal_saved = tuple(entries)
        return None

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
            self.last_started = self.monotonic()
            return self._run()
        finally:
            self.in_cycle = False
            self.last_finished = self.monotonic()
            self._lock.release()

    def _run(self) -> CycleRecord:
        self.cycles += 1
        cycle_id = self.cycles
        started_mono = self.monotonic()
        deadline = started_mono + self.budget
        now = self.wall_clock()
        structlog.contextvars.bind_contextvars(cycle=cycle_id)
        try:
            stale = self.stale_cache()
            if stale:
                return self._skip(cycle_id, now, started_mono, "stale-cache", stale)
            restore = self._restore() if self._restore_requested else None
            snapshot = self.cluster.snapshot()
            resolved = self._settle_unknown(snapshot.pods, now)
            # Two steps: node usage first; then pod usage only for the nodes the plan may move pods from.
            usage = self._distrust(self.usage.fetch_nodes(snapshot.nodes))
            wanted = pod_usage_nodes(snapshot, usage, self.config, self.state, now)
            usage = UsageSnapshot(
                nodes=usage.nodes,
                pods=self.usage.fetch_pods(wanted, snapshot.nodes, snapshot.pods),
                node_errors=usage.node_errors,
            )
            decided = plan(snapshot, usage, self.config, self.state, now)
            steering = self._steer(snapshot, decided)
            # Taints go on before the evictions, so the replacements are already steered away.
            added = [self.tainter.add(c.node, c.message) for c in steering.add] if self.tainter else []
            writing = self.journal is not None and not (self.config.dry_run or self._memory_only)
            ahead = _WriteAhead(self, decided) if writing else None
            requests_before = self.verified_requests
            decided, calls, aborted = self._evict_all(snapshot, usage, decided, now, deadline, ahead)
            failures = ahead.failures + self._confirm() if ahead is not None else []
            removed = (
                [self.tainter.remove(c.node, c.message) for c in steering.remove] if self.tainter else []
            )
            for change, result in zip(steering.add, added, strict=True):
                if result.result in ("added", "unchanged"):
                    self.tainted_nodes.add(change.node)
            for change, result in zip(steering.remove, removed, strict=True):
                if result.result in ("removed", "unchanged", "node-gone"):
                    self.tainted_nodes.discard(change.node)
            record = CycleRecord(
                cycle=cycle_id,
                started=now,
                duration=self.monotonic() - started_mono,
                dry_run=self.config.dry_run,
                plan=decided,
                evictions=tuple(calls),
                aborted=aborted,
                usage_errors=dict(usage.node_errors),
                oldest_sample=min((sample.timestamp for sample in usage.nodes.values()), default=None),
                resolved=tuple(
                    EvictionRecord(
                        pod=r.eviction.pod.key,
                        node=r.eviction.node,
                        destination=r.eviction.destination,
                        reason=r.eviction.reason,
                        result=r.result,
                        message=r.message,
                    )
                    for r in resolved
                ),
                unconfirmed=tuple(sorted(self.unconfirmed)),
                taints=tuple(t.to_dict() for t in (*added, *removed)),
                tainted=steering.keep,
                restore=restore,
                quiet_seconds_left=(
                    max(0.0, self.quiet_until - self.monotonic()) if not self.config.dry_run else 0.0
                ),
                journal_failures=tuple(failures),
                verify_requests=self.verified_requests - requests_before,
            )
            self._summarise(record)
            if self.on_record is not None:
                self.on_record(record)
            return record
        finally:
            structlog.contextvars.unbind_contextvars("cycle")

    def _steer(self, snapshot: ClusterSnapshot, decided: Plan) -> SteerDecision:
        """Which hotspot taints to add and remove (``hotspotTaint``); nothing when it is off or not leader."""
        if self.tainter is None or not self.is_leader() or self.stopping.is_set():
            return SteerDecision()
        decision = steer(
            snapshot.nodes,
            decided.node_reports,
            self.steer_state,
            self.taint_after,
            takeover=self.takeover,
            moving=decided.moving,
        )
        self.takeover = False
        self.steer_state = decision.state
        return decision

    def _evict_all(
        self,
        snapshot: ClusterSnapshot,
        usage: UsageSnapshot,
        first: Plan,
        now: float,
        deadline: float,
        ahead: _WriteAhead | None,
    ) -> tuple[Plan, list[EvictionRecord], str]:
        """Plan, evict, commit. A PodDisruptionBudget refusal is remembered for the server's Retry-After
        and the cycle is planned again at once, so the next candidate is tried in the same cycle; what was
        (possibly) evicted before counts against every limit of the new plan.

        Returns the plan the audit shows (the last one, with every planned eviction that was called),
        the eviction records in call order, and why the cycle stopped early (or ``""``).
        """
        base = self.state
        decided = first
        records: list[EvictionRecord] = []
        called: list[PlannedEviction] = []
        earlier: list[PlannedEviction] = []
        """Possibly evicted under an earlier plan of this cycle (already migrations of ``decided``)."""
        current: list[PlannedEviction] = []
        """Possibly evicted under ``decided``."""
        applied: dict[str, float] = {}
        """Pod key -> when the server's answer came: the latest moment it may have applied the eviction."""
        unresolved: set[str] = set()
        """Pod keys whose eviction's outcome is unknown: counted in every window until resolved."""
        unverified: list[PodSkip] = []
        attempted: set[str] = set()
        aborted = ""
        replans = 0
        check = _Check(self, snapshot, now, deadline) if self.verifier is not None else None
        queue = list(decided.evictions)
        while queue:
            planned = queue.pop(0)
            aborted = aborted or self._abort_reason(ahead, deadline)
            if aborted:
                records.append(self._record(planned, "not-attempted", aborted))
                called.append(planned)
                continue
            sent = self.wall_clock()
            hooks: dict[str, Callable[[], str | None]] = {}
            if check is not None:
                hooks["verify"] = functools.partial(check.verify, planned, decided, current)
            if ahead is not None:
                hooks["before_send"] = functools.partial(ahead.intend, planned)
            outcome = self.evictor.evict(planned.pod, planned.node, planned.reason, deadline, **hooks)
            answered = self.wall_clock()
            attempted.add(planned.pod.key)
            called.append(planned)
            records.append(self._record(planned, outcome.result, outcome.message))
            if outcome.result == "not-verified" and check is not None and check.last is not None:
                unverified.append(
                    PodSkip(planned.pod.key, planned.node, check.last.code, outcome.message, planned.prod)
                )
            if outcome.result in EVICTED_RESULTS:
                current.append(planned)
                applied[planned.pod.key] = answered
                if outcome.result == "unknown":
                    unresolved.add(planned.pod.key)
            if ahead is not None:
                sent = ahead.settle(planned, outcome.result) or sent
            if outcome.result == "unknown":
                self.unconfirmed[planned.pod.key] = Unconfirmed(
                    planned.pod, planned.node, planned.destination, planned.reason, sent
                )
            log_method = log.info if outcome.result in ("evicted", "would-evict") else log.warning
            log_method(
                "eviction",
                pod=planned.pod.key,
                node=planned.node,
                destination=planned.destination,
                reason=planned.reason,
                result=outcome.result,
                message=outcome.message,
            )
            if outcome.result in REFUSED_RESULTS and replans < MAX_REPLANS:
                replans += 1
                retry_after = max(outcome.retry_after or 0.0, self.pdb_retry_seconds)
                budgets = refused_budgets(planned.pod, snapshot.pdbs, outcome.message)
                base = refuse(base, budgets, self.wall_clock() + retry_after)
                log.info(
                    "replanning_after_refusal", pod=planned.pod.key, budgets=budgets, retry_after=retry_after
                )
                earlier += current
                current = []
                decided = plan(
                    snapshot,
                    after_evictions(usage, earlier),
                    self.config,
                    add_migrations(base, earlier, now, applied=applied, unresolved=unresolved),
                    now,
                )
                queue = self._within_cycle_limits(
                    [e for e in decided.evictions if e.pod.key not in attempted], earlier
                )
        state = add_migrations(decided.state, current, now, applied=applied, unresolved=unresolved)
        state = add_departures(state, earlier + current, now)
        self.state = reset_anomalies(state, [e.node for e in earlier + current], now)
        if unverified:
            decided = replace(decided, pod_skips=decided.pod_skips + tuple(unverified))
        return replace(decided, evictions=tuple(called) or decided.evictions), records, aborted

    def _abort_reason(self, ahead: _WriteAhead | None, deadline: float) -> str:
        """Why no further eviction is attempted this cycle, or ``""``."""
        if self.stopping.is_set():
            return "shutdown requested"
        if not self.is_leader():
            return "lost leadership"
        if self.monotonic() >= deadline:
            return "cycle time budget spent"
        if not self.config.dry_run and self.monotonic() < self.quiet_until:
            return (
                "start-up quiet period: the migration state could not be rebuilt, so the "
                "objectLimiters window of the previous run is waited out"
            )
        if ahead is not None and ahead.conflict:
            return "the migration journal was changed by another writer: planning again next cycle"
        return ""

    def _within_cycle_limits(
        self, queue: list[PlannedEviction], earlier: Sequence[PlannedEviction]
    ) -> list[PlannedEviction]:
        """A re-plan counts its own evictions only: the per-cycle limits (maxNoOfPodsToEvict...) must also
        count those of the cycle's earlier plans (in-flight and window limits already do, as migrations)."""
        cfg = self.config.config
        per_node = Counter(e.node for e in earlier)
        per_namespace = Counter(e.pod.namespace for e in earlier)
        total = len(earlier)
        kept = []
        for e in queue:
            if (
                (cfg.max_no_of_pods_to_evict_total is not None and total >= cfg.max_no_of_pods_to_evict_total)
                or (
                    cfg.max_no_of_pods_to_evict_per_node is not None
                    and per_node[e.node] >= cfg.max_no_of_pods_to_evict_per_node
                )
                or (
                    cfg.max_no_of_pods_to_evict_per_namespace is not None
                    and per_namespace[e.pod.namespace] >= cfg.max_no_of_pods_to_evict_per_namespace
                )
            ):
                continue
            kept.append(e)
            per_node[e.node] += 1
            per_namespace[e.pod.namespace] += 1
            total += 1
        return kept

    def stale_cache(self) -> str:
        """Why the cache is too old to act on, or ``""``: every resource must have heard recently."""
        if self.max_cache_age is None:
            return ""
        stale = {name: age for name, age in self.cache_ages().items() if age > self.max_cache_age}
        if not stale:
            return ""
        ages = ", ".join(
            f"{name} {'never' if age == float('inf') else f'{age:.0f}s ago'}"
            for name, age in sorted(stale.items())
        )
        return (
            f"watch cache stale: last heard from the API server: {ages} "
            f"(bound {self.max_cache_age:g}s); nothing is decided on data that old"
        )

    def _skip(self, cycle_id: int, now: float, started_mono: float, code: str, why: str) -> CycleRecord:
        """A cycle that did not run: no plan, no eviction, the planner state untouched."""
        log.warning("cycle_skipped", code=code, reason=why)
        record = CycleRecord(
            cycle=cycle_id,
            started=now,
            duration=self.monotonic() - started_mono,
            dry_run=self.config.dry_run,
            plan=Plan(state=self.state, notes=(why,), now=now),
            evictions=(),
            unconfirmed=tuple(sorted(self.unconfirmed)),
            skipped=why,
            skip_code=code,
        )
        if self.on_record is not None:
            self.on_record(record)
        return record

    def _confirm(self) -> list[str]:
        """After the cycle: write the records as the state now stands (outcomes known, failed ones
        gone), when that changes anything that matters. Returns the reasons of failed writes."""
        if self._journal_saved is None and self._reload() is not None:
            return ["unreadable"]
        current = self._projection()
        if not records.needs_write(self._journal_saved, current):
            return []
        reason = self._write(current)
        return [reason] if reason is not None else []

    def _settle_unknown(self, pods: Sequence[Pod], now: float) -> list[Resolution]:
        """Settle earlier evictions of unknown outcome from the cache; a confirmed failure stops counting."""
        if not self.unconfirmed:
            return []
        by_key = {pod.key: pod for pod in pods}
        settled, still = resolve(
            self.unconfirmed.values(),
            by_key,
            heard=now - max(self.cache_ages().values(), default=0.0),
            settle=self.unknown_settle_seconds,
        )
        self.unconfirmed = {item.pod.key: item for item in still}
        failed = [(r.eviction.pod.key, r.eviction.pod.uid) for r in settled if r.result == "failed"]
        # Applied at some moment until now, and never after the server's own request timeout: windows count
        # such an eviction from the latest of those moments (worst case in time).
        applied = {
            (r.eviction.pod.key, r.eviction.pod.uid): min(now, r.eviction.sent + self.unknown_settle_seconds)
            for r in settled
            if r.result == "evicted"
        }
        self.state = settle_migrations(forget(self.state, failed), applied)
        for r in settled:
            item = r.eviction
            (log.info if r.result == "evicted" else log.warning)(
                "eviction_resolved",
                pod=item.pod.key,
                node=item.node,
                result=r.result,
                message=r.message,
                seconds_unknown=round(now - item.sent, 3),
            )
            self.evictor.report_resolved(item.pod, item.node, item.reason, r.result, r.message)
        return settled

    def _distrust(self, usage: UsageSnapshot) -> UsageSnapshot:
        """Nodes the cache cannot fully describe (an unparsable pod) are skipped like nodes without usage."""
        untrusted = self.untrusted_nodes()
        if not untrusted:
            return usage
        errors = dict(usage.node_errors)
        for node, why in untrusted.items():
            errors[node] = f"{errors[node]}; {why}" if node in errors else why
        nodes = {name: sample for name, sample in usage.nodes.items() if name not in untrusted}
        return UsageSnapshot(nodes=nodes, pods=usage.pods, node_errors=errors)

    @staticmethod
    def _record(planned: Any, result: str, message: str) -> EvictionRecord:
        return EvictionRecord(
            pod=planned.pod.key,
            node=planned.node,
            destination=planned.destination,
            reason=planned.reason,
            result=result,
            message=message,
            workload_kind=planned.workload_kind,
            workload_name=planned.workload_name,
        )

    def _summarise(self, record: CycleRecord) -> None:
        classes = Counter(str(r.node_class) for r in record.plan.node_reports)
        skips = Counter(str(s.code) for s in record.plan.pod_skips)
        results = Counter(e.result for e in record.evictions)
        log.info(
            "cycle_summary",
            dry_run=record.dry_run,
            nodes=dict(classes),
            hotspots=classes.get("hotspot", 0),
            evictions=dict(results),
            skips=dict(skips),
            usage_errors=len(record.usage_errors),
            duration_seconds=round(record.duration, 3),
            aborted=record.aborted or None,
        )


_BUDGET_NAME = re.compile(r"disruption budget ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


def refused_budgets(pod: Pod, pdbs: Sequence[PodDisruptionBudget], message: str) -> list[str]:
    """The budgets (``namespace/name``) behind a refusal: those of the cache that select the pod, else the
    one the server's message names (a budget the cache has not seen yet)."""
    found = [
        f"{p.namespace}/{p.name}"
        for p in pdbs
        if p.namespace == pod.namespace and selector_matches(p.selector, pod.labels)
    ]
    if found:
        return sorted(found)
    named = _BUDGET_NAME.search(message)
    return [f"{pod.namespace}/{named.group(1)}"] if named else []


def after_evictions(usage: UsageSnapshot, evictions: Sequence[PlannedEviction]) -> UsageSnapshot:
    """Node usage as if ``evictions`` had moved: each pod's usage leaves its node and lands on its
    destination, so a re-plan within the cycle neither re-cures a cured node nor overfills a destination."""
    if not evictions:
        return usage
    nodes = dict(usage.nodes)
    for eviction in evictions:
        for name, sign in ((eviction.node, -1), (eviction.destination, 1)):
            sample = nodes.get(name)
            if sample is None:
                continue
            values = dict(sample.resources)
            for resource, amount in eviction.usage.items():
                if resource in values:
                    values[resource] = max(0, values[resource] + sign * amount)
            nodes[name] = UsageSample(values, sample.timestamp)
    return replace(usage, nodes=nodes)
