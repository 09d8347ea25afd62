"""The planner is pure: the same inputs give the same plan whatever else was planned in the process.

The cluster index a caller carries from cycle to cycle (``IndexCache``) only saves work. Two clusters
planned alternately, through one shared cache, through a cache each, or through none, must get exactly
the plans each gets when planned alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import pytest

from descheduler.cluster.types import ClusterSnapshot, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.planner import Plan, PlannerState, commit, plan, pod_usage_nodes
from descheduler.planner.index import IndexCache
from descheduler.planner.order import DELETION_COST
from tests.unit.builders import NOW, World, cpu, settings

INTERVAL = 60.0
CYCLES = 5


def cluster(seed: int) -> World:
    """Hot nodes crowded with pods of a few workloads, cool nodes to move them to, busy nodes between."""
    rng = random.Random(seed)
    w = World()
    for name in ("web", "api", "db"):
        w.deployment(name, replicas=rng.choice((3, 8, 20)))
    w.pdb("api-pdb", "api", rng.randint(0, 2))
    for i in range(rng.randint(2, 3)):
        w.node(f"hot{i}", usage=cpu(f"{rng.uniform(8, 9.8):.1f}"))
        for j in range(rng.randint(8, 14)):
            w.pod(
                f"h{i}-{j}",
                on=f"hot{i}",
                owner=rng.choice(("web", "api", "db", None)),
                usage=cpu(f"{rng.uniform(0.1, 1.5):.2f}"),
                requests={"cpu": f"{rng.choice((100, 250, 500))}m"},
                priority=rng.choice((None, 0, 1000)),
            )
    for i in range(3):
        w.node(f"cool{i}", usage=cpu(f"{rng.uniform(0.5, 2):.1f}"), pods=rng.choice((5, 30)))
    for i in range(2):
        w.node(f"busy{i}", usage=cpu("5"))
        for j in range(20):
            w.pod(f"b{i}-{j}", on=f"busy{i}", owner="db", usage=cpu("0.2"))
    return w


@dataclass
class Run:
    """One cluster's cycles: its snapshot evolves as a watch cache's would (evicted pods terminating, then
    gone; one pod changed per cycle as a new object; every other pod the same object), its state is
    committed."""

    world: World
    config: EffectiveConfig
    snapshot: ClusterSnapshot
    state: PlannerState
    step: int = 0

    @classmethod
    def of(cls, seed: int) -> Run:
        world = cluster(seed)
        config = settings(low={"cpu": 30}, high={"cpu": 60}, consecutive=1)
        return cls(world, config, world.snapshot(), PlannerState())

    def cycle(self, cache: IndexCache | None) -> dict[str, Any]:
        """A live cycle's two planner calls (pod usage wanted, then the plan), then the commit."""
        now = NOW + self.step * INTERVAL
        usage = self.world.usage(now)
        node_only = UsageSnapshot(nodes=usage.nodes, node_errors=usage.node_errors)
        wanted = pod_usage_nodes(self.snapshot, node_only, self.config, self.state, now, cache=cache)
        decided: Plan = plan(self.snapshot, usage, self.config, self.state, now, cache=cache)
        self.state = commit(decided.state, decided.evictions, now)
        evicted = {e.pod.key for e in decided.evictions}
        pods = [p for p in self.snapshot.pods if not p.terminating]  # the last cycle's evictions have left
        pods = [replace(p, terminating=True) if p.key in evicted else p for p in pods]
        changed = self.step % len(pods)
        pods[changed] = replace(pods[changed], annotations={DELETION_COST: str(self.step)})
        self.snapshot = replace(self.snapshot, pods=tuple(pods))
        self.step += 1
        return {"wanted": sorted(wanted) if wanted is not None else None, "plan": decided.to_dict()}


def alone(seed: int) -> list[dict[str, Any]]:
    run, cache = Run.of(seed), IndexCache()
    return [run.cycle(cache) for _ in range(CYCLES)]


@pytest.mark.parametrize("caches", ["shared", "one each", "none"])
@pytest.mark.parametrize("seeds", [(1, 2), (3, 4), (5, 5)])
def test_two_clusters_planned_alternately_get_the_plans_each_gets_alone(
    seeds: tuple[int, int], caches: str
) -> None:
    first, second = Run.of(seeds[0]), Run.of(seeds[1])
    shared = IndexCache()
    own = {id(first): IndexCache(), id(second): IndexCache()}

    def cache_of(run: Run) -> IndexCache | None:
        return {"shared": shared, "one each": own[id(run)], "none": None}[caches]

    interleaved: dict[int, list[dict[str, Any]]] = {id(first): [], id(second): []}
    for _ in range(CYCLES):
        for run in (first, second):
            interleaved[id(run)].append(run.cycle(cache_of(run)))
    assert interleaved[id(first)] == alone(seeds[0])
    assert interleaved[id(second)] == alone(seeds[1])
    assert any(cycle["plan"]["evictions"] for cycle in interleaved[id(first)]), "nothing moved: proves little"


def test_a_cache_carries_the_index_from_cycle_to_cycle_and_only_its_callers_see_it() -> None:
    run, cache, other = Run.of(1), IndexCache(), IndexCache()
    run.cycle(cache)
    first = cache.last
    assert first is not None and other.last is None
    run.cycle(cache)
    assert cache.last is not None and cache.last is not first
    assert cache.last.workloads_version is first.workloads_version  # derived (``updated``), not built
    assert other.last is None
