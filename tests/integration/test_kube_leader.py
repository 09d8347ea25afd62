"""Leader election between real electors over HTTP: one leader, takeover, release, no double eviction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from descheduler.cluster.parse import parse_pod
from descheduler.kube.connection import connect
from descheduler.kube.evict import Evictor
from descheduler.kube.leader import LeaderElector
from tests.apiserver import ApiServer, Fault, objects
from tests.apiserver.waiting import eventually

pytestmark = pytest.mark.integration

LEASE = 1.0
RENEW = 0.6
RETRY = 0.1


@dataclass
class Replica:
    identity: str
    elector: LeaderElector
    evictor: Evictor
    started: list[float] = field(default_factory=list)
    stopped: list[float] = field(default_factory=list)


ReplicaFactory = Callable[[str], Replica]


@pytest.fixture
def replica(apiserver: ApiServer) -> Iterator[ReplicaFactory]:
    """A descheduler replica's Kubernetes side: its own client, elector, and leader-guarded evictor."""
    made: list[Replica] = []

    def make(identity: str) -> Replica:
        assert apiserver.kubeconfig_path is not None
        api = connect(
            str(apiserver.kubeconfig_path), qps=1000, burst=1000, user_agent=f"descheduler/{identity}"
        )
        started: list[float] = []
        stopped: list[float] = []
        elector = LeaderElector(
            api,
            namespace="kube-system",
            name="descheduler",
            identity=identity,
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
            on_started_leading=lambda: started.append(time.monotonic()),
            on_stopped_leading=lambda: stopped.append(time.monotonic()),
        )
        evictor = Evictor(
            api,
            evict_qps=0,
            evict_burst=1,
            dry_run=False,
            events=None,
            delete_options=None,
            guard=elector.is_leader,
        )
        r = Replica(identity, elector, evictor, started, stopped)
        made.append(r)
        return r

    yield make
    for r in made:
        r.elector.stop()


def lease(server: ApiServer) -> dict:  # type: ignore[type-arg]
    obj = server.get("leases", "kube-system", "descheduler")
    assert obj is not None
    return obj["spec"]  # type: ignore[no-any-return]


def leaders(*replicas: Replica) -> list[str]:
    return [r.identity for r in replicas if r.elector.is_leader()]


def a_leading_b_standing_by(replica: ReplicaFactory) -> tuple[Replica, Replica]:
    """Replica a elected first, then b started as its standby: how every takeover below begins."""
    a, b = replica("a"), replica("b")
    a.elector.start()
    eventually(lambda: a.elector.is_leader() and a.started, what="a leading")
    b.elector.start()
    return a, b


def test_two_candidates_elect_exactly_one_leader(apiserver: ApiServer, replica: ReplicaFactory) -> None:
    a, b = replica("a"), replica("b")
    a.elector.start()
    b.elector.start()
    (winner,) = eventually(lambda: leaders(a, b), what="a leader")
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert leaders(a, b) in ([winner], [])  # never two; none only if a renewal is slow under load
        time.sleep(0.01)
    spec = lease(apiserver)
    assert spec["holderIdentity"] == winner and spec.get("leaseTransitions", 0) == 0
    assert spec["leaseDurationSeconds"] == 1
    assert spec["renewTime"].endswith("Z") and "." in spec["renewTime"]
    loser = b if winner == "a" else a
    assert loser.started == [] and len((a if winner == "a" else b).started) == 1


def test_stopping_the_leader_releases_the_lease_so_the_other_takes_over_at_once(
    apiserver: ApiServer, replica: ReplicaFactory
) -> None:
    a, b = a_leading_b_standing_by(replica)
    time.sleep(0.3)
    assert leaders(a, b) == ["a"]
    stopped_at = time.monotonic()
    a.elector.stop(release=True)
    assert a.stopped and not a.elector.is_leader()
    eventually(
        lambda: b.elector.is_leader() and b.started,
        timeout=LEASE,
        what="b taking over before the lease would expire",
    )
    assert b.started[0] - stopped_at < LEASE * 0.8
    spec = lease(apiserver)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1


def test_a_crashed_leader_is_replaced_only_after_its_lease_expires(
    apiserver: ApiServer, replica: ReplicaFactory
) -> None:
    a, b = a_leading_b_standing_by(replica)
    time.sleep(0.3)
    crashed_at = time.monotonic()
    a.elector.stop(release=False)  # no release: as if the process died
    assert lease(apiserver)["holderIdentity"] == "a"
    eventually(
        lambda: b.elector.is_leader() and b.started, timeout=LEASE + 2, what="b taking over an expired lease"
    )
    waited = b.started[0] - crashed_at
    assert LEASE - 2 * RETRY <= waited < LEASE + 1.5
    assert lease(apiserver)["holderIdentity"] == "b"


@pytest.mark.parametrize(
    "outage",
    [
        Fault(resource="leases", user_agent="descheduler/a", status=500),
        Fault(resource="leases", user_agent="descheduler/a", latency=3.0),
    ],
    ids=["renewals-fail", "renewals-hang"],
)
def test_a_leader_that_cannot_renew_stops_leading_before_anyone_else_starts(
    outage: Fault, apiserver: ApiServer, replica: ReplicaFactory
) -> None:
    a, b = a_leading_b_standing_by(replica)
    both: list[float] = []
    done = threading.Event()

    def watch_overlap() -> None:
        while not done.is_set():
            if a.elector.is_leader() and b.elector.is_leader():
                both.append(time.monotonic())
            time.sleep(0.002)

    sampler = threading.Thread(target=watch_overlap, daemon=True)
    sampler.start()
    cut_at = time.monotonic()
    apiserver.inject(outage)
    eventually(lambda: b.elector.is_leader() and b.started, timeout=LEASE + 2, what="b taking over")
    done.set()
    sampler.join(1)
    assert both == []
    # The callback (what the service's cycle guard listens to) also fires before b starts.
    assert a.stopped and a.stopped[0] < b.started[0]
    assert a.stopped[0] - cut_at < RENEW + RETRY + 0.1


def test_no_pod_is_evicted_twice_or_by_a_non_leader_across_a_leadership_change(
    apiserver: ApiServer, replica: ReplicaFactory
) -> None:
    pods = [parse_pod(apiserver.create(objects.pod(f"web-{i:02d}", node="node-1"))) for i in range(16)]
    a, b = a_leading_b_standing_by(replica)
    stop = threading.Event()

    def run(r: Replica) -> None:
        # Each replica keeps trying every pod that it has not seen gone, like successive cycles would.
        remaining = list(pods)
        while remaining and not stop.is_set():
            for pod in list(remaining):
                outcome = r.evictor.evict(pod, "node-1", "hot", time.monotonic() + 5)
                if outcome.result in ("evicted", "not-found"):
                    remaining.remove(pod)
                time.sleep(0.05)

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in (a, b)]
    for t in threads:
        t.start()
    eventually(lambda: len(apiserver.list("pods")) <= 10, what="a few evictions by a")
    apiserver.inject(Fault(resource="leases", user_agent="descheduler/a", status=500))
    eventually(lambda: not apiserver.list("pods"), timeout=10, what="all pods evicted")
    stop.set()
    for t in threads:
        t.join(5)
    evictions = [r for r in apiserver.requests_for(subresource="eviction")]
    succeeded = [r.name for r in evictions if r.status == 201]
    assert sorted(succeeded) == sorted(p.name for p in pods)  # each pod evicted exactly once
    by_a = [r.at for r in evictions if "descheduler/a" in r.user_agent]
    by_b = [r.at for r in evictions if "descheduler/b" in r.user_agent]
    assert by_a and by_b
    assert max(by_a) < min(by_b)  # never both sending evictions: a stopped before b started
    assert min(by_b) >= b.started[0]


def test_a_slow_but_working_server_keeps_a_leader(apiserver: ApiServer, replica: ReplicaFactory) -> None:
    """Every Lease request takes 0.18 s, so acquiring (a GET, then a write) takes 0.36 of the 0.6 s renew
    deadline. Leadership counts from when the write was sent (as other replicas time the Lease from its
    change), so the replica keeps renewing; counted from the GET it expired before its first renewal and
    the replica stepped down and up again and again while its late writes kept the Lease fresh."""
    apiserver.inject(Fault(resource="leases", latency=0.18))
    a = replica("a")
    a.elector.start()
    eventually(a.elector.is_leader, timeout=5, what="a to lead")
    leaderless = 0.0
    until = time.monotonic() + 3.0
    while time.monotonic() < until:
        if not a.elector.is_leader():
            leaderless += 0.02
        time.sleep(0.02)
    assert a.stopped == [], f"stepped down under a slow server (leaderless for {leaderless:.2f}s)"
    assert leaderless == 0.0


def test_a_replica_that_stepped_down_takes_the_lease_again_when_the_server_answers_again(
    apiserver: ApiServer, replica: ReplicaFactory
) -> None:
    a = replica("a")
    a.elector.start()
    eventually(a.elector.is_leader, timeout=5, what="a to lead")
    fault = apiserver.inject(Fault(resource="leases", status=500))
    eventually(lambda: a.stopped != [], timeout=5, what="a to step down")
    apiserver.clear_faults()
    eventually(a.elector.is_leader, timeout=5, what="a to lead again")
    assert fault.hits >= 1 and len(a.started) == 2
