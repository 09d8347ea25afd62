"""Surge-first restarts in the service: verified from the server, journaled before the patch, sent with the
verified resourceVersion, followed until the old pod is gone, and counted against every limit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from descheduler.cluster.types import ClusterSnapshot, Pod
from descheduler.planner import reasons
from descheduler.planner.verify import ServerView
from descheduler.service.cycle import CycleRunner
from descheduler.service.unknown import Unconfirmed, resolve
from tests.unit.builders import NOW, World, cpu, cycle_runner, settings
from tests.unit.fakes import Cluster, FakeEvictor, FakeJournal, Usage, server_view

OLD = "default/web-1"


def world(**spec: Any) -> World:
    """One hot node whose load is a single-replica Deployment's pod (``spec``: more of its spec); room on
    ``cool``."""
    w = World().node("hot", cpu="10", usage=cpu("9")).node("cool", cpu="10", usage=cpu("1"))
    w.deployment("web", 1, rolled_out=True, spec_extra=spec)
    return w.pod("web-1", on="hot", owner="web", usage=cpu("3"))


@dataclass
class Server:
    """The API server's copy: the cache's snapshot unless a test changes it; Deployments at version 42."""

    snapshot: ClusterSnapshot
    reads: list[str] = field(default_factory=list)

    def read(self, pod: Pod, deadline: float, hint: object = None) -> ServerView:
        self.reads.append(pod.key)
        workloads = tuple(
            replace(w, rollout=replace(w.rollout, resource_version="42")) if w.rollout is not None else w
            for w in self.snapshot.workloads
        )
        return server_view(self.snapshot, pod.key, workloads=workloads, requests=5)

    def resync(self, resources: Sequence[str]) -> object:
        return None


def runner(
    w: World,
    *,
    dry_run: bool = False,
    wall: list[float] | None = None,
    migration: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[CycleRunner, FakeEvictor, Cluster, Server]:
    cluster = Cluster(w.snapshot())
    server = Server(cluster.value)
    evictor = FakeEvictor()
    now = wall if wall is not None else [NOW]
    config = settings(migration={"surgeSingleReplica": True, **(migration or {})}, top={"dryRun": dry_run})
    run = cycle_runner(
        config, cluster, Usage(w), evictor, wall_clock=lambda: now[0], verifier=server, **options
    )
    return run, evictor, cluster, server


@pytest.mark.parametrize(("dry_run", "result"), [(False, "restarted"), (True, "would-restart")])
def test_a_restart_is_verified_then_sent_with_the_verified_version(dry_run: bool, result: str) -> None:
    run, evictor, _, server = runner(world(), dry_run=dry_run)
    evictor.results = [result]  # what the server answers (a dry run: server-side dryRun=All)
    record = run.run_cycle()
    assert record is not None
    assert server.reads == [OLD], "read from the server right before"
    assert evictor.restarts == [(OLD, "web", "42")]
    assert evictor.order == ["verify"]
    (call,) = record.evictions
    assert (call.result, call.workload_kind, call.workload_name) == (result, "Deployment", "web")
    (audited,) = record.to_dict()["evictions"]
    assert (audited["action"], audited["result"]) == ("restart", result)
    counted = [m.pod for m in run.state.migrations]
    assert counted == ([] if dry_run else [OLD]), "a live restart is a migration for every limit"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"paused": True}, reasons.SURGE_PAUSED),
        ({"max_unavailable": 1}, reasons.SURGE_UNAVAILABLE),
        ({"updated_replicas": 0}, reasons.SURGE_ROLLING_OUT),
    ],
)
def test_a_deployment_that_stopped_surging_on_the_server_is_not_restarted(
    change: dict[str, Any], code: str
) -> None:
    run, evictor, cluster, server = runner(world())
    server.snapshot = replace(
        cluster.value,
        workloads=tuple(
            replace(w, rollout=replace(w.rollout, **change)) if w.rollout is not None else w
            for w in cluster.value.workloads
        ),
    )
    record = run.run_cycle()
    assert record is not None
    assert evictor.sent == [] and evictor.restarts == []
    (call,) = record.evictions
    assert call.result == "not-verified" and code in call.message


def test_the_intent_record_is_written_before_the_patch() -> None:
    journal = FakeJournal()
    seen: list[list[tuple[str, str]]] = []
    run, evictor, _, _ = runner(world(), journal=journal)
    evictor.on_call = lambda: seen.append([(e.pod, e.status) for e in journal.entries])
    run.request_restore()
    run.run_cycle()
    assert seen == [[(OLD, "intent")]]
    assert [(e.pod, e.status, e.workload_kind) for e in journal.entries] == [(OLD, "evicted", "Deployment")]


def test_a_restart_is_followed_until_the_old_pod_is_gone_and_the_new_one_ready() -> None:
    wall = [NOW]
    w = world()
    run, evictor, cluster, _ = runner(w, wall=wall)
    run.run_cycle()
    # The new pod surges on the cool node; the old one still runs: in flight, nothing to report.
    surged = replace(cluster.value.pods[0], name="web-2", uid="uid-web-2", node_name="cool", ready=False)
    cluster.value = replace(cluster.value, pods=(*cluster.value.pods, surged))
    wall[0] += 20
    second = run.run_cycle()
    assert second is not None and second.restarts == ()
    assert evictor.restarts == [(OLD, "web", "42")], "never a second restart while the first is in flight"
    # Ready; the controller removed the old pod.
    cluster.change_pod("default/web-2", ready=True)
    cluster.remove_pod(OLD)
    wall[0] += 20
    third = run.run_cycle()
    assert third is not None
    (done,) = third.restarts
    assert done.result == "completed"
    assert "new pod default/web-2 Ready on node cool (off hot) 40s after the restart" in done.message
    assert third.restart_seconds == (40.0,)
    assert (OLD, "RestartCompleted") in evictor.reported
    assert third.to_dict()["followedRestarts"][0]["result"] == "completed"


def test_a_restart_whose_old_pod_is_gone_before_its_rollout_shows_is_still_followed_to_its_end() -> None:
    """The cache may show the old pod gone a cycle before the Deployment's status says it rolled out (two
    watches, no order between them), and by then the objectLimiters window has passed. The restart is
    still in flight: it is kept until its rollout shows, then told completed."""
    wall = [NOW]
    run, evictor, cluster, _ = runner(
        world(), wall=wall, migration={"objectLimiters": {"workload": {"duration": "2s"}}}
    )
    run.run_cycle()
    assert evictor.restarts == [(OLD, "web", "42")]
    rolled_out = cluster.value.workloads
    rolling = tuple(
        replace(w, rollout=replace(w.rollout, observed_generation=w.rollout.generation - 1))
        if w.rollout is not None
        else w
        for w in rolled_out
    )
    surged = replace(cluster.value.pods[0], name="web-2", uid="uid-web-2", node_name="cool", ready=True)
    cluster.value = replace(cluster.value, pods=(*cluster.value.pods, surged), workloads=rolling)
    cluster.remove_pod(OLD)
    wall[0] += 10
    lagging = run.run_cycle()
    assert lagging is not None and lagging.restarts == ()
    assert [m.pod for m in run.state.migrations] == [OLD], "in flight until its rollout shows"
    cluster.value = replace(cluster.value, workloads=rolled_out)
    wall[0] += 1
    shown = run.run_cycle()
    assert shown is not None
    (done,) = shown.restarts
    assert done.result == "completed" and "new pod default/web-2 Ready on node cool" in done.message
    assert (OLD, "RestartCompleted") in evictor.reported


@pytest.mark.parametrize(
    ("spec", "after", "failed"),
    [
        ({"progressDeadlineSeconds": 100, "minReadySeconds": 20}, 121, True),
        ({"progressDeadlineSeconds": 100, "minReadySeconds": 20}, 119, False),  # minReadySeconds counts
        ({}, 599, False),  # Kubernetes' default progressDeadlineSeconds: 600
        ({}, 601, True),
    ],
)
def test_a_restart_past_its_deployments_deadline_is_reported_failed_once_and_its_pod_stays(
    spec: dict[str, Any], after: float, failed: bool
) -> None:
    wall = [NOW]
    journal = FakeJournal()
    run, evictor, _, _ = runner(world(**spec), wall=wall, journal=journal)
    run.request_restore()
    run.run_cycle()
    wall[0] += after
    record = run.run_cycle()
    assert record is not None
    if not failed:
        assert record.restarts == () and record.plan.evictions == ()
        assert [e.outcome for e in journal.entries] == [""]
        return
    (late,) = record.restarts
    assert late.result == "failed" and "the old pod default/web-1 still runs" in late.message
    assert record.to_dict()["followedRestarts"][0]["result"] == "failed"
    assert (OLD, "RestartFailed") in evictor.reported
    assert [(e.pod, e.outcome) for e in journal.entries] == [(OLD, "failed")]
    assert OLD not in {d.pod for d in run.state.departures}, "the old pod stays: its load is its node's"
    assert len(evictor.restarts) == 1, "a failed restart is not tried again while its old pod runs"
    wall[0] += 60
    again = run.run_cycle()
    assert again is not None and again.restarts == (), "told once"


@pytest.mark.parametrize(
    ("after", "old_gone", "result", "event"),
    [
        (30, True, "completed", "RestartCompleted"),  # the new pod came up while nobody was running
        (601, False, "failed", "RestartFailed"),  # the old pod never left: told by the successor
    ],
)
def test_a_successor_follows_a_restart_in_flight_to_its_outcome_from_the_journal(
    after: float, old_gone: bool, result: str, event: str
) -> None:
    journal = FakeJournal()
    wall = [NOW]
    first, _, _, _ = runner(world(), journal=journal, wall=wall)
    first.request_restore()
    first.run_cycle()  # the patch is sent; then the process is killed
    successor, evictor, cluster, _ = runner(world(), journal=journal, wall=wall)
    if old_gone:
        ready = replace(cluster.value.pods[0], name="web-2", uid="uid-web-2", node_name="cool")
        cluster.value = replace(cluster.value, pods=(ready,))
    wall[0] += after
    successor.request_restore()
    record = successor.run_cycle()
    assert record is not None
    (done,) = record.restarts
    assert done.result == result
    if old_gone:
        assert "new pod default/web-2 Ready on node cool (off hot) 30s after the restart" in done.message
        assert record.restart_seconds == (30.0,)
    assert evictor.reported == [(OLD, event)]
    assert [(e.pod, e.outcome) for e in journal.entries] == [(OLD, result)]
    third, told, _, _ = runner(world(), journal=journal, wall=wall)
    third.request_restore()
    later = third.run_cycle()
    assert later is not None and later.restarts == () and told.reported == [], "told once, across takeovers"


@pytest.mark.parametrize(
    ("restart", "after", "expected"),
    [
        (False, 61.0, "failed"),  # an eviction: the pod still there after the server's own deadline
        (True, 61.0, "unknown"),  # a restart: the old pod waits for its replacement, maybe applied
        (True, 601.0, "failed"),  # past the rollout's progress deadline as well
    ],
)
def test_an_unknown_restart_is_not_confirmed_failed_while_its_rollout_may_still_be_running(
    restart: bool, after: float, expected: str
) -> None:
    pod = world().snapshot().pods[0]
    item = Unconfirmed(pod, "hot", "cool", "r", NOW, restart)
    settled, still = resolve([item], {pod.key: pod}, heard=NOW + after, settle=60.0, restart_settle=600.0)
    assert (settled[0].result if settled else "unknown") == expected
    assert len(still) == (0 if settled else 1)


@pytest.mark.parametrize(
    ("stamped", "after", "expected"),
    [
        (True, 5, "evicted"),  # the template carries our restartedAt: applied, known at once
        (True, 601, "evicted"),  # applied, its new pod still starting: never "failed" by a fixed rule
        (False, 61, "failed"),  # past the server's own deadline and the template lacks it: not applied
        (False, 30, "unknown"),  # the server may still apply it
    ],
)
def test_an_unknown_restart_is_settled_by_its_deployments_pod_template(
    stamped: bool, after: float, expected: str
) -> None:
    wall = [NOW]
    run, evictor, cluster, _ = runner(world(), wall=wall)
    evictor.results = ["unknown"]
    run.run_cycle()
    if stamped:  # what our patch wrote, to the second
        cluster.value = replace(
            cluster.value,
            workloads=tuple(
                replace(w, rollout=replace(w.rollout, restarted_at=float(int(NOW))))
                if w.rollout is not None
                else w
                for w in cluster.value.workloads
            ),
        )
    wall[0] += after
    record = run.run_cycle()
    assert record is not None
    resolved = {e.pod: e.result for e in record.resolved}
    assert resolved.get(OLD, "unknown") == expected
    # Applied or maybe: the first restart is followed on; not applied: the cycle restarted it afresh.
    first = [m.restart for m in run.state.migrations if m.pod == OLD and m.started <= NOW + 60]
    assert first == ([] if expected == "failed" else ["restarting"])
    assert len(evictor.restarts) == (2 if expected == "failed" else 1)


def test_a_restart_of_unknown_outcome_is_remembered_as_a_restart_by_a_successor() -> None:
    journal = FakeJournal()
    run, evictor, _, _ = runner(world(), journal=journal)
    evictor.results = ["unknown"]
    run.request_restore()
    run.run_cycle()
    assert [(e.pod, e.status, e.action) for e in journal.entries] == [(OLD, "unknown", "restart")]
    successor, _, _, _ = runner(world(), journal=journal)
    successor.request_restore()
    successor.run_cycle()
    assert successor.unconfirmed[OLD].restart
