"""The entry point: one LowNodeLoad cycle over plain data, with every decision explained.

Per node pool: classify nodes, count anomalies, then handle hotspots hottest first. On each hotspot the
movable pods are ordered (``order.py``) and evicted one by one while the node is still over and the low
nodes still have room below their high thresholds; each must pass the limits, its PDB and the
destination check. With ``prodHighThresholds`` a second pass does the same for nodes whose prod pods
alone are over (and the node as a whole is not), moving prod pods only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from descheduler.cluster.types import ClusterSnapshot, Node, Pod, UsageSample, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.planner import reasons
from descheduler.planner.anomaly import Rule, is_hotspot, next_count
from descheduler.planner.autoscaler import removal_mark
from descheduler.planner.candidates import Rejection
from descheduler.planner.classify import (
    Levels,
    NodeView,
    build_view,
    classify,
    node_selected,
    pool_of,
    set_pool_thresholds,
    usage_problem,
    weighted_score,
)
from descheduler.planner.cure import continuing, in_motion
from descheduler.planner.devices import DeviceIndex, take_moved
from descheduler.planner.fit import DestinationSet
from descheduler.planner.index import ClusterIndex, IndexCache, WorkloadRef
from descheduler.planner.limits import GLOBAL, NODE, LimitHit, LimitTracker
from descheduler.planner.model import (
    DETAILED,
    EVICT,
    RESTART,
    SKIPPED,
    NodeReport,
    Plan,
    PlannedEviction,
    PodSkip,
    SkipForm,
    SkipSummary,
)
from descheduler.planner.order import Candidate, RankKey, is_prod, rank_key
from descheduler.planner.parts import FAST, Parts
from descheduler.planner.pingpong import (
    Backoff,
    backoffs,
    mark_bounces,
    match_replacements,
    replacements_since,
)
from descheduler.planner.placement import Neighbours
from descheduler.planner.settings import PoolSettings, Settings, compile_settings
from descheduler.planner.state import FAILED, AnomalyCount, Departure, Migration, PlannerState
from descheduler.planner.surge import follow_restarts, recent_restart


def plan(
    snapshot: ClusterSnapshot,
    usage: UsageSnapshot,
    config: EffectiveConfig,
    state: PlannerState,
    now: float,
    *,
    already: Sequence[PlannedEviction] = (),
    attempted: Mapping[str, str] | None = None,
    cache: IndexCache | None = None,
    parts: Parts = FAST,
    skip_form: SkipForm = DETAILED,
) -> Plan:
    """Decide this cycle's evictions. Pure: no I/O, no clock (``now`` is seconds since the epoch).

    A re-plan within a cycle (after the API server refused an eviction) passes ``already``: the evictions
    this cycle already sent (possibly applied). They count against every limit as this cycle's own, their
    usage has left their node for their destination, and their pods are not proposed again. ``attempted``
    maps the pods tried this cycle without an eviction (refused, failed...) to what happened: each is
    skipped with that reason, never dropped silently. ``state`` is the state the cycle started from; the
    caller records what happened with ``commit``.

    ``cache`` is the caller's ``IndexCache`` (the service's runner keeps one from cycle to cycle): with it
    the cluster index of an unchanged or slightly changed snapshot is reused, without it built afresh;
    the plan is the same either way. ``parts`` chooses the implementation of the optimised steps
    (``parts.py``; tests pass ``reference.REFERENCE``).

    ``skip_form``: ``summarised`` reports the filtered pods of a hotspot that stopped for its own reason
    (cured, a limit, no room left) as one ``SkipSummary`` per (hotspot, code) instead of one ``PodSkip``
    each; every pod the hotspot's loop examined, and every pod of a hotspot still over with its
    candidates exhausted, keeps its own ``PodSkip``. The decisions are the same in both forms.

    Never refuses a configuration: ``load_config`` has checked it (``compile_settings``).
    """
    state, _ = follow_restarts(snapshot, state, now)
    index = _index(restarts_leaving(snapshot, state), cache)
    cycle = _Cycle(index, after_evictions(usage, already), compile_settings(config), state, now, parts)
    cycle.skip_form = skip_form
    return cycle.run(already=already, attempted=attempted or {})


def restarts_leaving(snapshot: ClusterSnapshot, state: PlannerState) -> ClusterSnapshot:
    """The snapshot with the old pods of our surge-first restarts marked terminating.

    An evicted pod leaves its node's figures at once (it is terminating); a restarted one keeps running
    until its replacement is ready, which takes as long as the Deployment's ``minReadySeconds`` and its
    readiness probe. Counted as running meanwhile, its node would stay over and lose more pods than
    it needs to. So it counts as leaving, as an evicted one does: out of its node's usage, not a candidate
    (``filtered-terminating``), in flight for every limit while it exists. Not once the restart failed
    (``surge.follow_restarts`` dropped its departure): the pod then stays, and counts as staying."""
    leaving = {d.uid for d in state.departures if d.restart and d.uid}
    if not leaving or not any(p.uid in leaving and not p.terminating for p in snapshot.pods):
        return snapshot
    pods = tuple(
        replace(p, terminating=True) if p.uid in leaving and not p.terminating else p for p in snapshot.pods
    )
    return replace(snapshot, pods=pods)


def _index(snapshot: ClusterSnapshot, cache: IndexCache | None) -> ClusterIndex:
    return cache.index_of(snapshot) if cache is not None else ClusterIndex(snapshot)


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


def pod_usage_nodes(
    snapshot: ClusterSnapshot,
    usage: UsageSnapshot,
    config: EffectiveConfig,
    state: PlannerState,
    now: float,
    *,
    cache: IndexCache | None = None,
    parts: Parts = FAST,
) -> frozenset[str] | None:
    """The nodes whose pods' usage ``plan`` may read this cycle, judged from node usage alone.

    That is the nodes over a high threshold (hotspots are among them; pods move only from them) and the
    nodes holding a pod younger than the usage window plus ``nodeMetricExpirationSeconds``: only such a
    pod's own sample changes its node's migration-aware estimate (``estimate.py``: a pod there for the
    whole window counts as much in the sample as on the node, and departures carry their usage), so every
    other node's estimate, and class, is the same with or without pod usage. None means every node:
    with ``prodHighThresholds`` a node's prod usage is the sum of its prod pods' usage. Nothing when
    LowNodeLoad is off or paused. ``usage.pods`` is not read. Callers may add nodes.

    One approximation remains: a young pod with no sample of its own takes its workload's latest sample
    (``UsageEstimator.latest``) only from the pods whose usage was fetched, else its requests.

    ``cache`` and ``parts`` as for ``plan``: pass the same cache to both calls of a cycle so the index
    built here is the one ``plan`` uses.
    """
    settings = compile_settings(config)
    if not settings.enabled or settings.paused:
        return frozenset()
    if any(pool.prod_resources for pool in settings.pools):
        return None
    state, _ = follow_restarts(snapshot, state, now)
    cycle = _Cycle(_index(restarts_leaving(snapshot, state), cache), usage, settings, state, now, parts)
    cycle.classify_nodes()
    over = {view.name for views in cycle.views.values() for view in views if view.over}
    recent = now - settings.usage_window - settings.metric_expiration
    # The pods the estimate reads are the nodes' buckets; each bucket's youngest is kept in the index.
    index = cycle.index
    young = {node for node in index.pods_by_node if index.youngest_on(node) > recent}
    return frozenset(over | young)


def _restart_departure(departure: Departure, index: ClusterIndex, now: float) -> Departure:
    """A restarted pod leaves when its replacement is ready, not when the patch was sent: while it is still
    there its departure moves to ``now``; the first cycle it is gone, ``now`` is the latest it can have left
    and the departure becomes an ordinary one. Its share of the usage window is then never short (the
    safe side: more of the sample is put down to it, so its node is not judged hotter than it is)."""
    return replace(departure, left=now, restart=index.pod_exists(departure.uid, departure.pod))


_UNSEEN = Rejection("", "")
_Refused = tuple[Pod, str, str]
"""A pod the filters (or a missing usage sample) keep from being a candidate: the pod, the code, why."""
_EXAMPLES = 3
"""Pods a ``SkipSummary`` names."""
_NO_SAMPLE = "no usage sample for this pod: what moving it would free is unknown"


def _stale_sample(age: float) -> str:
    return f"pod usage sample is {age:.0f}s old, older than nodeMetricExpirationSeconds"


@dataclass(frozen=True, slots=True)
class _Drain:
    """One hotspot being drained in one pass (overall or prod) and where its pods may go."""

    pool: PoolSettings
    source: NodeView
    levels: Levels
    """The levels the pass judges the node by: its prod levels in the prod pass, else its overall ones."""
    destinations: DestinationSet
    headroom: dict[str, int]
    """What the pool's low nodes can still take below their high thresholds, per resource."""
    prod: bool


class _Cycle:
    """One planning pass over one snapshot's index: ``classify_nodes``, then ``run`` (which classifies
    too)."""

    def __init__(
        self,
        index: ClusterIndex,
        usage: UsageSnapshot,
        settings: Settings,
        state: PlannerState,
        now: float,
        parts: Parts = FAST,
    ) -> None:
        self.snapshot = index.snapshot
        self.parts = parts
        self.usage = usage
        self.settings = settings
        self.attempted: Mapping[str, str] = {}
        self.state = state
        self.now = now
        self.index = index
        self.notes: list[str] = []
        self.evictions: list[PlannedEviction] = []
        self.skips: list[PodSkip] = []
        self.skip_form: SkipForm = DETAILED
        self.summaries: list[SkipSummary] = []
        self.skipped_nodes: list[NodeReport] = []
        self.views: dict[str, list[NodeView]] = {pool.name: [] for pool in settings.pools}
        self.global_stop = ""
        self.detectors: Mapping[str, AnomalyCount] = state.anomalies
        self.prod_detectors: Mapping[str, AnomalyCount] = state.prod_anomalies
        """The detectors as this cycle left them (``_count_anomalies``), for the node reports."""
        self.cooling: dict[str, Backoff] = {}
        """Workloads the ping-pong guard leaves alone this cycle, by identity."""
        self._matched_memo: tuple[Sequence[Migration], tuple[Migration, ...]] | None = None
        # An evicted pod's load is in its old node's sample for one metrics window after it left; samples
        # up to nodeMetricExpirationSeconds old are still used.
        remembered = settings.usage_window + settings.metric_expiration
        departures = (_restart_departure(d, index, now) if d.restart else d for d in state.departures)
        self.departures = tuple(d for d in departures if d.left + remembered > now)
        self.estimator = parts.estimator(usage, self.index, self.departures, settings.usage_window)
        self.devices: DeviceIndex | None = None
        self.neighbours: Neighbours | None = None
        """DRA devices (``devices.py``): every device-holding pod that may move is checked against them,
        also one the evict annotation lets through with ``evictResourceClaimPods`` off."""

    # --- the cycle ------------------------------------------------------------------------------------

    def run(
        self, already: Sequence[PlannedEviction] = (), attempted: Mapping[str, str] | None = None
    ) -> Plan:
        s = self.settings
        self.attempted = attempted or self.attempted
        window = s.migration_memory
        migrations = tuple(
            m
            for m in self.state.migrations
            if self.index.pod_exists(m.uid, m.pod) or m.remembered(window, self.now)
        )
        departures = self.departures
        if not s.enabled:
            return Plan(
                state=replace(self.state, migrations=migrations, departures=departures),
                notes=("LowNodeLoad is not enabled in any profile's balance plugins: nothing to plan",),
                now=self.now,
            )
        self.classify_nodes()
        if s.ping_pong is not None:
            migrations = self._guard(self.state.migrations, window)
        anomalies, prod_anomalies = self._count_anomalies()
        refusals = {k: until for k, until in self.state.pdb_refusals.items() if until > self.now}
        new_state = PlannerState(
            anomalies=anomalies,
            prod_anomalies=prod_anomalies,
            migrations=migrations,
            departures=departures,
            pdb_refusals=refusals,
        )
        if s.paused:
            self.notes.append("LowNodeLoad is paused: nodes are classified, nothing is counted or evicted")
        else:
            self.limits = LimitTracker(s, self.index, migrations, self.now)
            # Which budgets select a pod reads the pod and the budgets alone (any change to a budget, its
            # status included, starts the memo afresh: the entries hold the budget objects).
            budgets = self.index.pod_memo("budgets", self.snapshot.pdbs)
            self.pdbs = self.parts.pdb_tracker(self.snapshot.pdbs, refusals, budgets)
            for done in already:  # this cycle's earlier evictions: its own, for every limit and budget
                self.limits.record(done.pod, done.node, self.index.workload_of(done.pod))
                if done.action != RESTART:
                    self.pdbs.record(done.pod)
            self.filter = self.parts.pod_filter(s, self.index)
            if s.evict_resource_claim_pods or any(p.resource_claims for p in self.snapshot.pods):
                self.devices = DeviceIndex(self.snapshot)
                moved = [
                    (d.pod, self.index.nodes[d.destination])
                    for d in already
                    if d.destination in self.index.nodes
                ]
                take_moved(self.devices, moved)
            self.neighbours = Neighbours(self.snapshot.nodes, self.index.pods_by_node)
            for done in already:  # their replacements land where the cycle sent them
                if done.destination:
                    self.neighbours.add(done.pod, done.destination)
            self._rejections: dict[str, Rejection | None] = {}
            self._rank_keys = self.index.pod_memo("rank key")
            for pool in s.pools:
                views = self.views[pool.name]
                self._balance(pool, views, prod=False)
                if pool.prod_resources:
                    self._balance(pool, views, prod=True)
        for pool in s.pools:
            self._pool_note(pool)
        return Plan(
            evictions=tuple(self.evictions),
            node_reports=self._reports(),
            pod_skips=tuple(self.skips),
            state=new_state,
            notes=tuple(self.notes),
            now=self.now,
            moving=self._moving(),
            backoffs=tuple(sorted(self.cooling.values(), key=lambda b: (b.describe(), b.workload))),
            skip_summaries=tuple(self.summaries),
            skip_form=self.skip_form,
        )

    def _matched(self, recorded: Sequence[Migration]) -> tuple[Migration, ...]:
        """``recorded`` with the replacements bound by now matched (``pingpong.match_replacements``),
        computed once a cycle: the ping-pong guard and the cure's pacing (``cure.py``) both read them."""
        if self._matched_memo is not None and self._matched_memo[0] is recorded:
            return self._matched_memo[1]
        unmatched = [m for m in recorded if m.workload and not m.replacement and not m.unresolved]
        wanted = {m.workload for m in unmatched}
        pods: dict[str, list[Pod]] = {}
        if wanted:
            # Only pods created after the earliest unmatched eviction can be replacements: one attribute
            # read skips the rest of a large cluster before any workload lookup.
            earliest = min(replacements_since(m) for m in unmatched)
            for pod in self.snapshot.pods:
                if pod.created < earliest:
                    continue
                ref = self.index.workload_of(pod)
                if ref is not None and ref.identity in wanted:
                    pods.setdefault(ref.identity, []).append(pod)
        matched = match_replacements(recorded, pods, self.now)
        self._matched_memo = (recorded, matched)
        return matched

    def _guard(self, recorded: Sequence[Migration], window: float) -> tuple[Migration, ...]:
        """The ping-pong guard (``pingpong.py``): match replacements, mark those on hot nodes, derive the
        back-offs; returns the migrations to keep, bounced ones included while their workload is not
        forgiven."""
        guard = self.settings.ping_pong
        assert guard is not None
        matched = self._matched(recorded)
        hot = {
            view.name
            for views in self.views.values()
            for view in views
            if view.over or any(view.measured.get(r, 0) > high for r, high in view.levels.high.items())
        }
        marked = mark_bounces(matched, hot, self.now, within=guard.within, runs=self._runs)
        chains = backoffs(marked, self.now, guard.base, guard.cap)
        self.cooling = {w: b for w, b in chains.items() if b.active(self.now)}
        return tuple(
            m
            for m in marked
            if self.index.pod_exists(m.uid, m.pod)
            or m.remembered(window, self.now)
            or (m.bounced and m.workload in chains)
        )

    def _runs(self, key: str, node: str) -> bool:
        """Whether pod ``key`` is on ``node`` and not leaving: a bounce needs its replacement still there."""
        return any(p.key == key and not p.terminating for p in self.index.pods_on(node))

    def _moving(self) -> dict[str, int]:
        """Per resource, the most one pod in motion uses (``Plan.moving``): this cycle's evictions, and the
        remembered departures whose workload has a pod that has not started (its replacement, pending)."""
        vectors: list[Mapping[str, int]] = [e.usage for e in self.evictions]
        if self.departures:
            waiting = set()
            for pod in self.snapshot.pods:
                if pod.phase == "Running" or pod.terminating or pod.is_terminal:
                    continue
                ref = self.index.workload_of(pod)
                if ref is not None:
                    waiting.add(ref.identity)
            vectors += [d.usage for d in self.departures if d.workload and d.workload in waiting]
        most: dict[str, int] = {}
        for vector in vectors:
            for name, amount in vector.items():
                if name != "pods" and amount > most.get(name, 0):
                    most[name] = amount
        return most

    def _skip_node(self, node: Node, pool: str, code: str, message: str) -> None:
        previous = self.state.anomalies.get(node.name)
        self.skipped_nodes.append(
            NodeReport(
                node=node.name,
                node_class=SKIPPED,
                pool=pool,
                anomaly_count=previous.count if previous else 0,
                cordoned=node.unschedulable,
                skip_code=code,
                skip_message=message,
                normal_count=previous.normal if previous else 0,
                confirmed=previous is not None and previous.confirmed is not None,
            )
        )

    def classify_nodes(self) -> None:
        """Each node skipped with its reason or viewed and classified in its pool (``views``)."""
        s = self.settings
        for node in sorted(self.snapshot.nodes, key=lambda n: n.name):
            if not node_selected(node, s.node_selectors):
                self._skip_node(
                    node, "", reasons.NODE_OUTSIDE_SELECTOR, "labels do not match the nodeSelector"
                )
                continue
            pool = pool_of(node, s)
            if pool is None:
                self._skip_node(node, "", reasons.NODE_OUTSIDE_POOLS, "matches no node pool's nodeSelector")
                continue
            if not node.ready:
                self._skip_node(node, pool.name, reasons.NODE_NOT_READY, "node is not Ready")
                continue
            if node.taints:
                mark = removal_mark(node)
                if mark:
                    self._skip_node(node, pool.name, reasons.NODE_AUTOSCALER, mark)
                    continue
            problem = usage_problem(node, self.usage, pool, s.metric_expiration, self.now)
            if problem is not None:
                self._skip_node(node, pool.name, *problem)
                continue
            view = build_view(
                node,
                pool,
                self.index.pods_on(node.name),
                self.usage,
                s.metric_expiration,
                self.now,
                self.estimator,
            )
            self.views[pool.name].append(view)
        for pool in s.pools:
            views = self.views[pool.name]
            set_pool_thresholds(pool, views)
            for view in views:
                classify(view)

    def _count(
        self,
        node: str,
        over: bool,
        low: bool,
        previous: Mapping[str, AnomalyCount],
        counts: dict[str, AnomalyCount],
        rule: Rule,
    ) -> tuple[int, bool]:
        """Advance one node's detector (frozen while paused); returns its count and whether it is a
        hotspot this cycle."""
        count = previous.get(node)
        if self.settings.paused:
            if count is not None:
                counts[node] = count
            return (count.count if count is not None else 0), False
        moving = count is not None and count.cure and bool(self._round_in_motion(node, count, rule))
        count = next_count(count, over, low, self.now, rule, moving)
        counts[node] = count
        return count.count, is_hotspot(count, over)

    def _count_anomalies(self) -> tuple[dict[str, AnomalyCount], dict[str, AnomalyCount]]:
        """New detectors; skipped nodes keep theirs, nodes gone from the cluster are forgotten."""
        previous, previous_prod = self.state.anomalies, self.state.prod_anomalies
        anomalies: dict[str, AnomalyCount] = {}
        prod_anomalies: dict[str, AnomalyCount] = {}
        for report in self.skipped_nodes:
            if report.node in previous:
                anomalies[report.node] = previous[report.node]
            if report.node in previous_prod:
                prod_anomalies[report.node] = previous_prod[report.node]
        for pool in self.settings.pools:
            rule = self._rule(pool)
            for view in self.views[pool.name]:
                view.anomaly_count, view.hotspot = self._count(
                    view.name, view.over, view.low, previous, anomalies, rule
                )
                if view.prod is None:
                    continue
                view.prod_anomaly_count, view.prod_hotspot = self._count(
                    view.name, view.prod_over, view.prod_low, previous_prod, prod_anomalies, rule
                )
        self.detectors, self.prod_detectors = anomalies, prod_anomalies
        return anomalies, prod_anomalies

    # --- eviction ---------------------------------------------------------------------------------------

    def _balance(self, pool: PoolSettings, views: Sequence[NodeView], prod: bool) -> None:
        what = "prod hotspot" if prod else "hotspot"
        # Koordinator's node sets (``classifyNodes``): the load pass moves pods to low nodes whose prod
        # usage is not over (a low node over on prod is a prod source); the prod pass moves prod pods to
        # nodes low on their prod thresholds that are not over overall, low or normal (its prod-low and
        # both-low sets), so prod thresholds work with node thresholds of 0/100.
        if prod:
            sources = [v for v in views if v.prod_hotspot and not v.over]
            targets = [v for v in views if v.prod_low and not v.over]
        else:
            sources = [v for v in views if v.hotspot]
            targets = [v for v in views if v.low and not v.prod_over]
        if not sources:
            return
        if not targets:
            kind = "node low on its prod thresholds and not over overall" if prod else "low node"
            message = f"no {kind} in pool {pool.name} to move pods to"
            self._stop_all(sources, message)
            self.notes.append(f"pool {pool.name}: {len(sources)} {what}(s) but {message}: nothing to do")
            return
        if len(targets) <= self.settings.number_of_nodes:
            message = (
                f"only {len(targets)} low node(s) in pool {pool.name}, not more than numberOfNodes "
                f"({self.settings.number_of_nodes})"
            )
            self._stop_all(sources, message)
            self.notes.append(f"pool {pool.name}: {message}: nothing to do")
            return
        for view in targets:
            if view.requested is None:
                # What ``NodeView.requested_now`` sums (the view's pods are the index's), kept across cycles.
                view.requested = dict(self.parts.requested(self.index, view.name))
        destinations = self.parts.destinations(
            targets,
            pool.weights,
            self.settings.node_fit,
            prod,
            devices=self.devices,
            neighbours=self.neighbours,
        )
        headroom = destinations.headroom()

        def heat(view: NodeView) -> tuple[float, str]:
            levels = view.prod if prod and view.prod is not None else view.levels
            return -weighted_score(levels.usage, levels.base, pool.weights), view.name

        for source in sorted(sources, key=heat):
            if self.global_stop:
                source.stop(reasons.STOP_GLOBAL_LIMIT, self.global_stop)
                continue
            self._drain(pool, source, destinations, headroom, prod)

    def _stop_all(self, sources: Sequence[NodeView], message: str) -> None:
        for view in sources:
            view.stop(reasons.STOP_NOTHING_TO_DO, message)

    def _pod_usage(self, pod: Pod, resources: Sequence[str]) -> tuple[dict[str, int] | None, str]:
        """The pod's usage over ``resources`` (``pods`` is 1), or None and why it cannot be trusted."""
        sample = self.usage.pods.get(pod.key)
        if sample is None:
            return None, _NO_SAMPLE
        age = self.now - sample.timestamp
        if age > self.settings.metric_expiration:
            return None, _stale_sample(age)
        measured = sample.resources
        return {name: 1 if name == "pods" else int(measured.get(name, 0)) for name in resources}, ""

    def _rank_key(self, pod: Pod) -> RankKey:
        entry = self._rank_keys.get(pod.uid)
        if entry is not None and entry[0] is pod:
            key: RankKey = entry[1]
            return key
        key = rank_key(pod)
        self._rank_keys[pod.uid] = (pod, key)
        return key

    def _verdict_by_uid(self, pod: Pod) -> Rejection | None:
        """The filters' verdict, the first one of its uid this cycle (what two pods sharing a uid get)."""
        found = self._rejections.get(pod.uid, _UNSEEN)
        if found is _UNSEEN:
            found = self._rejections[pod.uid] = self.filter.check(pod)
        return found

    def _skip(self, pod: Pod, node: str, code: str, message: str, prod: bool) -> None:
        self.skips.append(PodSkip(pod=pod.key, node=node, code=code, message=message, prod=prod))

    def _drain(
        self,
        pool: PoolSettings,
        source: NodeView,
        destinations: DestinationSet,
        headroom: dict[str, int],
        prod: bool,
    ) -> None:
        """Evict from one hotspot, best candidate first, while it is over and the low nodes have room; every
        pod passed over gets its reason (the filtered ones possibly summarised), and the node its stop
        reason."""
        waits = self._cure_waits(pool, source, prod)
        if waits:
            source.stop(reasons.STOP_CURE_IN_MOTION, waits)
            return
        levels = source.prod if prod and source.prod is not None else source.levels
        drain = _Drain(pool, source, levels, destinations, headroom, prod)
        start = len(self.skips)
        candidates, refused = self._candidates(drain)
        self._evict_from(drain, candidates)
        self._report_refused(drain, start, refused)

    def _cure_waits(self, pool: PoolSettings, source: NodeView, prod: bool) -> str:
        """Why a hotspot kept confirmed by its own previous round waits for that round (``cure.py``)."""
        count = (self.prod_detectors if prod else self.detectors).get(source.name)
        rule = self._rule(pool)
        if count is None or not continuing(count, rule):
            return ""
        return self._round_in_motion(source.name, count, rule)

    def _round_in_motion(self, node: str, count: AnomalyCount, rule: Rule) -> str:
        """``cure.in_motion`` for a confirmed node's latest round ("" when over or unconfirmed)."""
        if count.confirmed is None:
            return ""
        since = count.confirmed - rule.timeout
        return in_motion(node, self._matched(self.state.migrations), self.index, since)

    def _rule(self, pool: PoolSettings) -> Rule:
        """The pool's anomaly detector rule (``anomaly.py``)."""
        return Rule(
            pool.consecutive_abnormalities,
            pool.consecutive_normalities,
            pool.anomaly_timeout,
            self.settings.detector_timeout,
            self.settings.usage_window,
        )

    def _report_refused(self, drain: _Drain, start: int, refused: list[_Refused]) -> None:
        """The hotspot's filtered pods, in the node's order before the loop's own skips: one ``PodSkip``
        each, or, in the summarised form on a hotspot that stopped for its own reason (not still over
        with its candidates exhausted), one ``SkipSummary`` per code."""
        if not refused:
            return
        source, prod = drain.source, drain.prod
        node, stop = source.name, source.stop_code
        if self.skip_form == DETAILED or stop == reasons.STOP_CANDIDATES_EXHAUSTED:
            # Positional (in field order), as the reports: thousands a cycle in the stress shapes.
            self.skips[start:start] = [PodSkip(pod.key, node, code, why, prod) for pod, code, why in refused]
            return
        by_code: dict[str, list[_Refused]] = {}
        for item in refused:
            by_code.setdefault(item[1], []).append(item)
        for code, group in by_code.items():
            examples = tuple(pod.key for pod, _, _ in group[:_EXAMPLES])
            # node, code, count, examples, message, stop, prod
            self.summaries.append(SkipSummary(node, code, len(group), examples, group[0][2], stop, prod))

    def _evict_from(self, drain: _Drain, candidates: list[Candidate]) -> None:
        """The loop over one hotspot's ranked candidates, which ends with the hotspot's stop reason."""
        pool, source, levels, destinations, prod = (
            drain.pool,
            drain.source,
            drain.levels,
            drain.destinations,
            drain.prod,
        )
        resources = pool.prod_resources if prod else pool.resources
        ranking = self.parts.ranking(candidates, resources, pool.weights, levels.excess, self._rank_key)
        high = levels.high
        for pod, vector in ranking:
            # ``levels.over_resources()`` inlined: it also answers ``is_over``, once per candidate.
            over = [name for name, used in levels.usage.items() if used > high[name]]
            if not over:
                break
            if self._out_of_room(drain):
                return
            prod_vector = self._prod_vector(pool, pod, vector) if pool.prod_resources else None
            freed = prod_vector if prod and prod_vector is not None else vector
            if not any(freed.get(name, 0) > 0 for name in over):
                # Moving it would spend a disruption and a limit slot and leave the node exactly as hot.
                self._skip(
                    pod,
                    source.name,
                    reasons.FREES_NOTHING,
                    f"its {'prod usage' if prod else 'usage'} of {', '.join(over)} is 0: evicting it frees "
                    f"nothing of what {source.name} is over on",
                    prod,
                )
                continue
            if self.attempted and pod.key in self.attempted:
                self._skip(pod, source.name, reasons.ATTEMPTED, self.attempted[pod.key], prod)
                continue
            workload = self.index.workload_of(pod)
            backoff = self.cooling.get(workload.identity) if workload is not None and self.cooling else None
            if backoff is not None:
                self._skip(pod, source.name, reasons.PING_PONG_BACKOFF, backoff.message(), prod)
                continue
            restart = self.filter.restarts(pod, workload)
            if restart and workload is not None:
                recent = self._restarting(workload)
                if recent:
                    self._skip(pod, source.name, reasons.SURGE_RESTARTING, recent, prod)
                    continue
            # A restart surges: its new pod is Ready before the old goes, and the patch bypasses the
            # Eviction API, so it neither needs nor spends a PodDisruptionBudget's disruption.
            hit = self.limits.check(pod, source.name, workload) or (None if restart else self.pdbs.check(pod))
            if hit is not None:
                self._skip(pod, source.name, hit.code, hit.message, prod)
                if self._limit_stops(source, hit):
                    return
                continue
            destination, why = destinations.find(pod, vector, prod_vector)
            if destination is None:
                self._skip(pod, source.name, reasons.NO_DESTINATION, why, prod)
                continue
            self._evict(drain, pod, vector, prod_vector, workload, destination, RESTART if restart else EVICT)
            # The excess shrank: the pod that now best covers what is left may be another one.
            ranking.rerank()
        if levels.is_over():
            source.stop(
                reasons.STOP_CANDIDATES_EXHAUSTED,
                f"still over after {source.evicted} eviction(s): no other pod here can move now "
                "(see skipped pods)",
            )
        else:
            source.stop(
                reasons.STOP_NO_LONGER_OVER,
                f"no longer over after {source.evicted} eviction(s)",
            )

    def _candidates(self, drain: _Drain) -> tuple[list[Candidate], list[_Refused]]:
        """The hotspot's pods that pass the filters and have a fresh usage sample, with their usage over
        the pool's resources; and each other pod with its reason (``_report_refused`` reports them once the
        hotspot's outcome is known)."""
        prod = drain.prod
        candidates: list[Candidate] = []
        # ``_pod_usage`` inlined: this runs for every pod of every hotspot.
        # A pod's verdict is the first one of its uid this cycle; with every uid unique, simply its own.
        verdict = self.filter.check if self.index.unique_uids else self._verdict_by_uid
        samples, resources = self.usage.pods, drain.pool.resources
        skips: list[_Refused] = []
        now, expiration = self.now, self.settings.metric_expiration
        for pod in drain.source.pods:
            if prod and not is_prod(pod):
                continue
            rejected = verdict(pod)
            if rejected is not None:
                skips.append((pod, rejected.code, rejected.message))
                continue
            if pod.resource_claims and self.devices is not None:
                # Not a remembered verdict: a claim changes (allocated, shared) while its pod does not.
                claim_problem = self.devices.check(pod)
                if claim_problem is not None:
                    skips.append((pod, claim_problem.code, claim_problem.message))
                    continue
            sample = samples.get(f"{pod.namespace}/{pod.name}")  # pod.key, without the property call
            if sample is None or now - sample.timestamp > expiration:
                _, problem = self._pod_usage(pod, resources)
                skips.append((pod, reasons.NO_POD_USAGE, problem))
                continue
            measured = sample.resources
            candidates.append(
                (pod, {name: 1 if name == "pods" else int(measured.get(name, 0)) for name in resources})
            )
        return candidates, skips

    def _out_of_room(self, drain: _Drain) -> bool:
        """Whether the low nodes are full (below their high thresholds, or of pod slots): then the hotspot
        stops with that reason."""
        headroom, prod = drain.headroom, drain.prod
        if headroom and min(headroom.values()) <= 0:
            used_up = sorted(name for name, room in headroom.items() if room <= 0)
            drain.source.stop(
                reasons.STOP_HEADROOM_USED,
                f"the low nodes have no room left below their {'prod ' if prod else ''}high "
                f"threshold for {', '.join(used_up)}",
            )
            return True
        if drain.destinations.no_slots():
            drain.source.stop(
                reasons.STOP_HEADROOM_USED,
                f"the {'prod-' if prod else ''}low nodes have no pod slot left",
            )
            return True
        return False

    def _evict(
        self,
        drain: _Drain,
        pod: Pod,
        vector: dict[str, int],
        prod_vector: dict[str, int] | None,
        workload: WorkloadRef | None,
        destination: NodeView,
        action: str = EVICT,
    ) -> None:
        """Plan the pod's eviction and account for it: limits, budgets, the destination's room, the
        hotspot's usage and the pool's headroom."""
        source, levels, prod = drain.source, drain.levels, drain.prod
        reason = reasons.overutilized_reason(
            levels.over_resources(), levels.usage_percent(), levels.high_percent, prod
        )
        self.evictions.append(
            PlannedEviction(
                pod=pod,
                node=source.name,
                destination=destination.name,
                reason=reason,
                usage=dict(vector),
                workload=workload.identity if workload is not None else "",
                workload_kind=workload.kind if workload is not None else "",
                workload_name=workload.name if workload is not None else "",
                pool=drain.pool.name,
                prod=prod,
                action=action,
                devices=self.devices.describe(pod, destination.node) if self.devices is not None else "",
            )
        )
        self.limits.record(pod, source.name, workload)
        if action != RESTART:
            self.pdbs.record(pod)
        drain.destinations.reserve(destination, pod, vector, prod_vector)
        for name in source.levels.usage:
            source.levels.usage[name] -= vector.get(name, 0)
        if source.prod is not None and prod_vector is not None:
            for name in source.prod.usage:
                source.prod.usage[name] -= prod_vector.get(name, 0)
        moved = prod_vector if prod and prod_vector is not None else vector
        for name in drain.headroom:
            drain.headroom[name] -= moved.get(name, 0)
        source.evicted += 1

    def _prod_vector(self, pool: PoolSettings, pod: Pod, vector: dict[str, int]) -> dict[str, int] | None:
        """The pod's share of prod usage (None for non-prod pods or when the prod pass is off)."""
        if not pool.prod_resources or not is_prod(pod):
            return None
        sample = self.usage.pods.get(pod.key)
        out: dict[str, int] = {}
        for name in pool.prod_resources:
            if name == "pods":
                out[name] = 1
            elif name in vector:
                out[name] = vector[name]
            else:
                out[name] = int(sample.resources.get(name, 0)) if sample is not None else 0
        return out

    def _restarting(self, workload: WorkloadRef) -> str:
        """Why a restart of ``workload`` would overlap one of ours (``surge.recent_restart``), or ``""``:
        one this cycle, or a recorded one in flight or inside the objectLimiters window."""
        if any(e.workload == workload.identity for e in self.evictions):
            return f"{workload.describe()} is being restarted by this cycle already"
        limit = self.settings.object_limit
        window = limit.duration if limit is not None else 0.0
        found = recent_restart(
            self.state.migrations,
            workload.identity,
            window,
            self.now,
            lambda m: self.index.pod_exists(m.uid, m.pod),
        )
        if found is None:
            return ""
        if found.restart == FAILED:
            return (
                f"{workload.describe()} was restarted by us at {found.started:.0f} and that restart failed; "
                f"its old pod {found.pod} still runs: it is not restarted again while that pod runs"
            )
        return (
            f"{workload.describe()} was moved by us at {found.started:.0f} (pod {found.pod}) and that move "
            f"is in flight or inside the objectLimiters window ({window:g}s): restarts never overlap"
        )

    def _limit_stops(self, source: NodeView, hit: LimitHit) -> bool:
        if hit.scope == NODE:
            source.stop(reasons.STOP_NODE_LIMIT, hit.message)
            return True
        if hit.scope == GLOBAL:
            self.global_stop = hit.message
            source.stop(reasons.STOP_GLOBAL_LIMIT, hit.message)
            return True
        return False

    # --- reporting --------------------------------------------------------------------------------------

    def _pool_note(self, pool: PoolSettings) -> None:
        views = self.views[pool.name]
        counts: dict[str, int] = {}
        for view in views:
            counts[view.node_class] = counts.get(view.node_class, 0) + 1
        skipped = sum(1 for r in self.skipped_nodes if r.pool == pool.name)
        parts = ", ".join(f"{counts[c]} {c}" for c in ("low", "normal", "over", "hotspot") if c in counts)
        evicted = sum(1 for e in self.evictions if e.pool == pool.name)
        self.notes.append(
            f"pool {pool.name}: {len(views)} nodes ({parts or 'none'}), {skipped} skipped, "
            f"{evicted} eviction(s)"
        )

    def _reports(self) -> tuple[NodeReport, ...]:
        reports = list(self.skipped_nodes)
        for pool in self.settings.pools:
            for view in self.views[pool.name]:
                # Positional (in field order): a frozen dataclass is built twice as fast so, 5,000 a cycle.
                reports.append(
                    NodeReport(
                        view.node.name,  # node
                        view.node_class,
                        pool.name,  # pool
                        view.anomaly_count,
                        pool.consecutive_abnormalities,
                        view.node.unschedulable,  # cordoned
                        view.levels.report(view.measured, view.sampled, view.other, view.running),
                        "",  # skip_code
                        "",  # skip_message
                        view.prod_class,
                        view.prod_anomaly_count,
                        view.prod.report(view.prod_measured) if view.prod is not None else (),
                        view.evicted,
                        view.stop_code,
                        view.stop_message,
                        *_detector_fields(
                            pool, self.detectors.get(view.name), self.prod_detectors.get(view.name)
                        ),
                    )
                )
        return tuple(sorted(reports, key=lambda r: r.node))


def _detector_fields(
    pool: PoolSettings, overall: AnomalyCount | None, prod: AnomalyCount | None
) -> tuple[int, int, bool, int, bool]:
    """``NodeReport``'s detector fields after ``stop_message``, in field order."""
    return (
        overall.normal if overall is not None else 0,
        pool.consecutive_normalities,
        overall is not None and overall.confirmed is not None,
        prod.normal if prod is not None else 0,
        prod is not None and prod.confirmed is not None,
    )
