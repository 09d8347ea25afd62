"""The runner reads what each eviction rests on from the server right before the request, after the rate
limiter and the journal's intent record: a disagreement skips the pod, says why, and re-lists the stale
resources."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from descheduler.cluster.types import ClusterSnapshot, Pod
from descheduler.planner import reasons
from descheduler.planner.index import ClusterIndex, WorkloadRef
from descheduler.planner.verify import ServerView
from descheduler.service.cycle import CycleRunner
from tests.unit import fakes
from tests.unit.builders import NOW, World, cycle_runner, settings
from tests.unit.fakes import Cluster, FakeEvictor, Usage, server_view


def hot_world() -> World:
    return fakes.hot_world(cool=["cool"])


@dataclass
class Server:
    """The API server's copy of the cluster, which may have moved on from the cache."""

    snapshot: ClusterSnapshot
    reads: list[str] = field(default_factory=list)
    resynced: list[str] = field(default_factory=list)
    hints: list[WorkloadRef | None] = field(default_factory=list)

    def read(self, pod: Pod, deadline: float, hint: WorkloadRef | None = None) -> ServerView:
        self.reads.append(pod.key)
        self.hints.append(hint)
        return server_view(self.snapshot, pod.key, requests=5)

    def resync(self, resources: Sequence[str]) -> object:
        self.resynced.extend(resources)
        return None


def scaled(snapshot: ClusterSnapshot, replicas: int) -> ClusterSnapshot:
    return replace(snapshot, workloads=tuple(replace(w, replicas=replicas) for w in snapshot.workloads))


def runner(server: Server, *, dry_run: bool = False) -> tuple[CycleRunner, FakeEvictor]:
    world = hot_world()
    config = settings(low={"cpu": 20}, high={"cpu": 50}, top={"dryRun": dry_run})
    evictor = FakeEvictor()
    run = cycle_runner(
        config,
        Cluster(world.snapshot()),
        Usage(world),
        evictor,
        wall_clock=lambda: NOW,
        verifier=server,
    )
    return run, evictor


@pytest.mark.parametrize("dry_run", [False, True], ids=["live", "dry-run"])
def test_a_workload_scaled_to_one_on_the_server_is_not_evicted_from_a_cache_that_says_six(
    dry_run: bool,
) -> None:
    server = Server(scaled(hot_world().snapshot(), 1))
    run, evictor = runner(server, dry_run=dry_run)
    record = run.run_cycle()
    assert record is not None
    assert evictor.sent == []
    assert {e.result for e in record.evictions} == {"not-verified"}
    skips = {s.code for s in record.plan.pod_skips}
    assert reasons.VERIFY_WORKLOAD_CHANGED in skips, "the audit says why the pod was not moved"
    assert set(server.resynced) == {"deployments", "replicasets"}
    assert record.verify_requests == 5 * len(server.reads)


def test_the_server_agreeing_lets_each_eviction_through_after_its_own_read() -> None:
    server = Server(hot_world().snapshot())
    run, evictor = runner(server)
    record = run.run_cycle()
    assert record is not None
    assert [e.result for e in record.evictions] == ["evicted", "evicted"]
    assert evictor.sent == server.reads, "one read per eviction, none per candidate"
    assert server.resynced == []


def test_each_read_is_given_the_pods_workload_as_the_cache_resolved_it_as_a_hint() -> None:
    """The hint chooses the reads (``kube/verify.py``): the cycle's own index, not a new lookup."""
    server = Server(hot_world().snapshot())
    run, evictor = runner(server)
    record = run.run_cycle()
    assert record is not None and evictor.sent == server.reads
    index = ClusterIndex(hot_world().snapshot())
    pods = {p.key: p for p in hot_world().snapshot().pods}
    assert server.hints == [index.workload_of(pods[key]) for key in server.reads]
    assert {h.kind for h in server.hints if h is not None} == {"Deployment"}


def test_without_a_verifier_nothing_is_read() -> None:
    world = hot_world()
    evictor = FakeEvictor()
    run = cycle_runner(
        settings(low={"cpu": 20}, high={"cpu": 50}),
        Cluster(world.snapshot()),
        Usage(world),
        evictor,
        wall_clock=lambda: NOW,
    )
    record = run.run_cycle()
    assert record is not None and evictor.order == [] and evictor.sent
