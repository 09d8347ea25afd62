"""DRA-aware moves: a device-holding pod moves only to a low node with free devices its claims match.

Every scenario: one hot node ``hot`` (its pod ``p`` holds ``hot/gpu-0``) and low nodes ``a`` (cooler)
and ``b``; the pod goes to the coolest low node that has what its claim asks for, or stays with a reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from descheduler.cluster.build import build_snapshot
from descheduler.cluster.parse import iter_objects
from descheduler.planner import PlannerState, allocate, cel, plan, reasons
from descheduler.planner import devices as memo_module
from descheduler.planner.reference import REFERENCE, REFERENCE_BOUNDED
from tests.unit.builders import GPU_DRIVER, NOW, World, cpu, evicted, exactly, gpu, settings, skip_codes
from tests.unit.guards import within

MIGRATION = {"evictResourceClaimPods": True}
A = f"device.attributes['{GPU_DRIVER}']"
C = f"device.capacity['{GPU_DRIVER}']"
CEL_ERROR = f"{reasons.RESOURCE_CLAIM_CEL_ERROR}: request p-gpu/gpu: selector of the request"


def cluster() -> World:
    """``hot`` over (high 5 cores of 10), ``a`` coolest and ``b`` next, both with room for any pod here
    (40 cores); the class ``gpu`` selects the driver's devices."""
    world = World().node("hot", usage=cpu("9.9"))
    world.node("a", cpu="40", usage=cpu("1")).node("b", cpu="40", usage=cpu("2"))
    world.deployment("gpu-app", replicas=4)
    world.device_class("gpu", f"device.driver == '{GPU_DRIVER}'")
    world.resource_slice("hot-gpus", [gpu("gpu-0")], node="hot")
    return world


def moved_pod(world: World, **options: Any) -> World:
    options.setdefault("requests", [exactly("gpu")])
    options.setdefault("allocated", ["gpu-0"])
    return world.device_pod("p", on="hot", usage=cpu("4"), **options)


def fate(world: World, migration: dict[str, Any] | None = None) -> str:
    """Where ``p`` went ("-> node") or its skip code and message."""
    result = world.plan(settings(migration=MIGRATION if migration is None else migration))
    for eviction in result.evictions:
        if eviction.pod.name == "p":
            return f"-> {eviction.destination}"
    skip = next(s for s in result.pod_skips if s.pod == "default/p")
    return f"{skip.code}: {skip.message}"


Scenario = Callable[[World], World]


def slices(**per_node: list[dict[str, Any]]) -> Scenario:
    def build(world: World) -> World:
        for node, devices in per_node.items():
            world.resource_slice(f"{node}-gpus", devices, node=node)
        return moved_pod(world)

    return build


def both(world: World) -> World:
    for node in ("a", "b"):
        world.resource_slice(f"{node}-gpus", [gpu("gpu-0"), gpu("gpu-1", model="h100")], node=node)
    return world


def pod_with(**options: Any) -> Scenario:
    return lambda world: moved_pod(both(world), **options)


def taken_on_a(world: World) -> World:
    """``a``'s only device is held by another pod's claim: not free."""
    world.resource_slice("a-gpus", [gpu("gpu-0")], node="a").resource_slice(
        "b-gpus", [gpu("gpu-0")], node="b"
    )
    world.device_pod(
        "other", on="a", owner="gpu-app", requests=[exactly("gpu")], allocated=["gpu-0"], usage=cpu("0.1")
    )
    return moved_pod(world)


def generations(world: World) -> World:
    """``a``'s pool has an old generation with a device and a newer one without: the newest counts."""
    world.resource_slice("a-old", [gpu("gpu-0")], node="a", pool="a", generation=1)
    world.resource_slice("a-new", [], node="a", pool="a", generation=2)
    world.resource_slice("b-gpus", [gpu("gpu-0")], node="b")
    return moved_pod(world)


def incomplete(world: World) -> World:
    """``a``'s pool says two slices but only one is published: not usable."""
    world.resource_slice("a-1", [gpu("gpu-0")], node="a", count=2)
    world.resource_slice("b-gpus", [gpu("gpu-0")], node="b")
    return moved_pod(world)


def selected_slice(world: World) -> World:
    """A network-attached pool for the nodes labelled ``rack=r2`` (``c`` only)."""
    world.node("c", cpu="40", usage=cpu("3"), labels={"rack": "r2"})
    world.resource_slice("fabric", [gpu("gpu-9")], node_labels={"rack": "r2"}, pool="fabric")
    return moved_pod(world)


def shared_pool(world: World) -> World:
    """One device for all nodes, in a pool the whole cluster reaches: free."""
    world.resource_slice("fabric", [gpu("gpu-9")], all_nodes=True, pool="fabric")
    return moved_pod(world)


def two_pods_one_device(world: World) -> World:
    """Two device pods leave ``hot``; ``a`` has one free device: the second goes to ``b``, although ``a``
    is still the cooler (``b`` at 7 cores of 40)."""
    world.set_node_usage("b", cpu("7"))
    world.resource_slice("a-gpus", [gpu("gpu-0")], node="a").resource_slice(
        "b-gpus", [gpu("gpu-0")], node="b"
    )
    world.resource_slice("hot-more", [gpu("gpu-1")], node="hot", pool="hot-more")
    world.device_pod(
        "q", on="hot", usage=cpu("4.5"), requests=[exactly("gpu")], allocated=["gpu-1"], slice_pool="hot-more"
    )
    return moved_pod(world)


def no_class(world: World) -> World:
    return moved_pod(both(world), requests=[exactly("tpu")])


def all_mode_shareable(world: World) -> World:
    """``All`` on ``a``: one of its matching devices is shareable, which this check never hands out."""
    world.resource_slice("a-gpus", [gpu("gpu-0"), gpu("gpu-1", allowMultipleAllocations=True)], node="a")
    world.resource_slice("b-gpus", [gpu("gpu-0"), gpu("gpu-1")], node="b")
    return moved_pod(world, requests=[exactly("gpu", mode="All")])


def first_available(world: World) -> World:
    """Prefers two h100s, else one a100: ``a`` has one h100 and one a100, so it takes the a100."""
    request = {
        "name": "gpu",
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": "gpu",
                "count": 2,
                "selectors": [{"cel": {"expression": f"{A}.model == 'h100'"}}],
            },
            {
                "name": "small",
                "deviceClassName": "gpu",
                "selectors": [{"cel": {"expression": f"{A}.model == 'a100'"}}],
            },
        ],
    }
    return moved_pod(both(world), requests=[request])


def all_mode_taken(world: World) -> World:
    """``All`` on ``a``: one of its two devices is held by another claim, so ``a`` cannot give all."""
    world.resource_slice("a-gpus", [gpu("gpu-0"), gpu("gpu-1")], node="a")
    world.resource_slice("b-gpus", [gpu("gpu-0"), gpu("gpu-1")], node="b")
    world.device_pod("other", on="a", requests=[exactly("gpu")], allocated=["gpu-1"], usage=cpu("0.1"))
    return moved_pod(world, requests=[exactly("gpu", mode="All")])


SCENARIOS: list[tuple[str, Scenario, str]] = [
    ("a free matching device on the coolest node", pod_with(), "-> a"),
    ("no device on the coolest node", slices(b=[gpu("gpu-0")]), "-> b"),
    (
        "no device anywhere",
        slices(),
        f"{reasons.NO_DESTINATION}: no low node fits (2 checked): 2 lack free devices",
    ),
    (
        "a selector true on b only",
        lambda w: moved_pod(
            slices(a=[gpu("x", model="t4")], b=[gpu("y")])(w) and w,
            requests=[exactly("gpu", f"{A}.model == 'a100'")],
        ),
        "-> b",
    ),
    (
        "a selector false everywhere",
        pod_with(requests=[exactly("gpu", f"{A}.model == 'v100'")]),
        f"{reasons.NO_DESTINATION}:",
    ),
    (
        "a capacity selector",
        pod_with(requests=[exactly("gpu", f"{C}.memory.isGreaterThan(quantity('80Gi'))")]),
        f"{reasons.NO_DESTINATION}:",
    ),
    ("two devices where a has two", pod_with(requests=[exactly("gpu", count=2)]), "-> a"),
    (
        "three devices where nodes have two",
        pod_with(requests=[exactly("gpu", count=3)]),
        f"{reasons.NO_DESTINATION}:",
    ),
    ("All of a's devices", pod_with(requests=[exactly("gpu", mode="All")]), "-> a"),
    ("All, one of a's devices taken", all_mode_taken, "-> b"),
    ("All, one of a's devices shareable", all_mode_shareable, "-> b"),
    ("firstAvailable falls back to its second choice", first_available, "-> a"),
    ("a's device held by another claim", taken_on_a, "-> b"),
    ("the newest pool generation only", generations, "-> b"),
    ("an incomplete pool", incomplete, "-> b"),
    ("a slice selecting nodes by label", selected_slice, "-> c"),
    ("a slice for all nodes", shared_pool, "-> a"),
    (
        "an error in a request selector",
        pod_with(requests=[exactly("gpu", f"{A}.memoryType == 'hbm'")]),
        f"{CEL_ERROR} `{A}.memoryType == 'hbm'` cannot be evaluated on device gpu.example.com/a/gpu-0: "
        "no such member in mapping: 'memoryType'",
    ),
    (
        "an unknown function",
        pod_with(requests=[exactly("gpu", "gpuCount(device) > 0")]),
        f"{CEL_ERROR} `gpuCount(device) > 0` cannot be evaluated on device",
    ),
    (
        "a syntax error",
        pod_with(requests=[exactly("gpu", "device.driver ==")]),
        f"{CEL_ERROR} `device.driver ==` cannot be evaluated: syntax error",
    ),
    (
        "a class not found",
        no_class,
        f"{reasons.RESOURCE_CLAIM_UNSUPPORTED}: request p-gpu/gpu: DeviceClass tpu not found",
    ),
    (
        "a claim shared with another pod",
        pod_with(reserved_for=["uid-pod-default-p", "uid-other"]),
        f"{reasons.RESOURCE_CLAIM_SHARED}: ResourceClaim default/p-gpu is reserved for",
    ),
    (
        "a claim not allocated",
        pod_with(allocated=[]),
        f"{reasons.RESOURCE_CLAIM_UNALLOCATED}: ResourceClaim default/p-gpu is not allocated",
    ),
    (
        "a claim not generated yet",
        pod_with(claim=""),
        f"{reasons.RESOURCE_CLAIM_UNALLOCATED}: claim gpu: no ResourceClaim generated",
    ),
    (
        "admin access",
        pod_with(requests=[{"name": "gpu", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}]),
        f"{reasons.RESOURCE_CLAIM_UNSUPPORTED}: ResourceClaim default/p-gpu request gpu asks for admin",
    ),
    (
        "a constraint of an unknown kind",
        pod_with(constraints=[{"requests": ["gpu"]}]),
        f"{reasons.RESOURCE_CLAIM_UNSUPPORTED}: ResourceClaim default/p-gpu has a constraint of a kind not",
    ),
]


@pytest.mark.parametrize(("case", "build", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_device_pods_move_only_where_their_claims_find_free_devices(
    case: str, build: Scenario, expected: str
) -> None:
    assert fate(build(cluster())).startswith(expected)


@pytest.mark.parametrize(("case", "build", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_the_reference_parts_decide_device_pods_alike(case: str, build: Scenario, expected: str) -> None:
    world = build(cluster())
    config = settings(migration=MIGRATION)
    fast = world.plan(config)
    assert world.plan(config, parts=REFERENCE_BOUNDED) == fast
    reference = world.plan(config, parts=REFERENCE)
    assert [(e.pod.key, e.destination, e.devices) for e in reference.evictions] == [
        (e.pod.key, e.destination, e.devices) for e in fast.evictions
    ]


def test_devices_taken_earlier_in_the_cycle_are_not_free() -> None:
    result = two_pods_one_device(cluster()).plan(settings(migration=MIGRATION))
    assert [(e.pod.name, e.destination) for e in result.evictions] == [("q", "a"), ("p", "b")]
    assert result.evictions[0].devices == "1 device(s) on a (gpu.example.com/a/gpu-0) of 1 free matching"


def test_without_the_switch_device_pods_stay_filtered() -> None:
    assert fate(pod_with()(cluster()), migration={}).startswith(reasons.FILTERED_RESOURCE_CLAIMS)


def test_a_pod_with_a_claim_by_name_is_never_moved() -> None:
    world = both(cluster()).pod("p", on="hot", owner="gpu-app", usage=cpu("4"), resource_claims=True)
    assert fate(world).startswith(
        f"{reasons.RESOURCE_CLAIM_SHARED}: uses ResourceClaim default/gpu-claim by name"
    )


def test_the_audit_names_the_devices_a_destination_gives() -> None:
    result = pod_with(requests=[exactly("gpu", count=2)])(cluster()).plan(settings(migration=MIGRATION))
    (eviction,) = result.evictions
    assert (
        eviction.devices
        == "2 device(s) on a (gpu.example.com/a/gpu-0, gpu.example.com/a/gpu-1) of 2 free matching"
    )
    assert eviction.to_dict()["devices"] == eviction.devices


def test_a_replan_counts_the_devices_of_the_cycles_earlier_evictions() -> None:
    """After a refusal the service plans again with ``already``: q's device on ``a`` stays taken."""
    world = two_pods_one_device(cluster())
    config = settings(migration=MIGRATION)
    first = world.plan(config)
    sent = [e for e in first.evictions if e.pod.name == "q"]
    again = plan(world.snapshot(), world.usage(), config, PlannerState(), NOW, already=sent)
    assert [(e.pod.name, e.destination) for e in again.evictions] == [("p", "b")]


# --- issue 37: device capacities, the verdict memo, the evict annotation, reach, incomplete pools ------


def shares(**per_node: str) -> Scenario:
    """One device per node with a ``share`` capacity of the given quantity."""

    def build(world: World) -> World:
        for node, share in per_node.items():
            device = gpu("gpu-0", capacity={"share": {"value": share}})
            world.resource_slice(f"{node}-gpus", [device], node=node)
        return world

    return build


def flags(world: World) -> World:
    """``a``'s device has a bool attribute ``flag: true``, ``b``'s (same name) an int ``flag: 1``."""
    for node, value in (("a", {"bool": True}), ("b", {"int": 1})):
        world.resource_slice(f"{node}-gpus", [gpu("gpu-0", attributes={"flag": value})], node=node)
    return world


def orphan_device(node: str | None = "gone", **taints: str) -> Scenario:
    """Both low nodes have a100s; one more device, without a ``model``, is on ``node`` (a node that does
    not exist, by default), or on a node ``c`` carrying ``taints``."""

    def build(world: World) -> World:
        both(world)
        odd = {"name": "odd-0", "attributes": {"kind": {"string": "fpga"}}}
        if node is None:
            tainted = [{**taints, "effect": "NoSchedule"}] if taints else []
            world.node("c", cpu="40", usage=cpu("3"), taints=tainted)
        world.resource_slice("odd", [odd], node=node or "c", pool="odd")
        return moved_pod(world, requests=[exactly("gpu", f"{A}.model == 'a100'")])

    return build


def all_with_incomplete_pool(world: World) -> World:
    """``a``: a complete pool with one free device, and a second pool of two slices with one published;
    for ``All`` the allocator then returns an error on ``a``, which aborts the whole scheduling attempt
    (not a refusal of ``a``): the replacement would stay Pending, so the pod stays."""
    world.resource_slice("a-gpus", [gpu("gpu-0")], node="a")
    world.resource_slice("a-extra-1", [gpu("gpu-5")], node="a", pool="a-extra", count=2)
    world.resource_slice("b-gpus", [gpu("gpu-0")], node="b")
    return moved_pod(world, requests=[exactly("gpu", mode="All")])


def all_beside_a_tainted_incomplete_pool(world: World) -> World:
    """The incomplete pool is on ``c``, whose taint the pod does not tolerate: the scheduler never tries
    ``c``, so ``All`` is judged on ``a`` and ``b`` alone."""
    world.node("c", cpu="40", usage=cpu("3"), taints=[{"key": "x", "effect": "NoSchedule"}])
    world.resource_slice("c-1", [gpu("gpu-0")], node="c", count=2)
    return moved_pod(both(world), requests=[exactly("gpu", mode="All")])


def all_with_invalid_counter_pool(world: World) -> World:
    """``c``'s pool (the pod may not go to ``c``) has a partition consuming a counter set it lacks: the
    pool is invalid, and its counter slice reaches every node in the allocator's eyes."""
    world.node("c", cpu="40", usage=cpu("3"), taints=[{"key": "x", "effect": "NoSchedule"}])
    world.resource_slice("c-counters", [], node="c", count=2, shared_counters={"gpu0": {"slices": "2"}})
    world.resource_slice("c-parts", [part("whole", "2g", "2", "gpu9")], node="c", pool="c", count=2)
    return moved_pod(both(world), requests=[exactly("gpu", mode="All")])


ISSUE_37: list[tuple[str, Scenario, str]] = [
    (
        "500m is not greater than 600m",
        lambda w: moved_pod(
            shares(a="500m", b="500m")(w),
            requests=[exactly("gpu", f"has({C}.share) && {C}.share.isGreaterThan(quantity('600m'))")],
        ),
        f"{reasons.NO_DESTINATION}: no low node fits (2 checked): 2 lack free devices",
    ),
    (
        "1500m is less than 1600m",
        lambda w: moved_pod(
            shares(a="1500m", b="2")(w),
            requests=[exactly("gpu", f"has({C}.share) && {C}.share.isLessThan(quantity('1600m'))")],
        ),
        "-> a",
    ),
    (
        "a cached verdict for true is not reused for 1",  # a bool is never equal to an int in CEL
        lambda w: moved_pod(flags(w), requests=[exactly("gpu", f"has({A}.flag) && {A}.flag == 1")]),
        "-> b",
    ),
    ("an error on a device no node reaches", orphan_device(), "-> a"),
    ("an error on a device of a node the pod cannot go to", orphan_device(None, key="fpga"), "-> a"),
    (
        "an error on a device of a node the pod may go to",
        orphan_device(None),
        f"{CEL_ERROR} `{A}.model == 'a100'` cannot be evaluated on device gpu.example.com/odd/odd-0",
    ),
    (
        "All where a node the pod may go to reaches an incomplete pool",
        all_with_incomplete_pool,
        f"{reasons.RESOURCE_CLAIM_UNSUPPORTED}: request p-gpu/gpu asks for All devices and node a sees pool "
        "gpu.example.com/a-extra being updated",
    ),
    ("All where only a node the pod may not go to does", all_beside_a_tainted_incomplete_pool, "-> a"),
    (
        "All where a pool publishing counters everywhere is invalid",
        all_with_invalid_counter_pool,
        f"{reasons.RESOURCE_CLAIM_UNSUPPORTED}: request p-gpu/gpu asks for All devices and node",
    ),
]


@pytest.mark.parametrize(("case", "build", "expected"), ISSUE_37, ids=[s[0] for s in ISSUE_37])
def test_device_pods_are_judged_as_the_scheduler_would_allocate(
    case: str, build: Scenario, expected: str
) -> None:
    assert fate(build(cluster())).startswith(expected)


def test_the_evict_annotation_never_skips_the_device_check() -> None:
    """With ``evictResourceClaimPods`` off the annotation lets the pod through the filter, but it still
    needs a free matching device: here there is none."""
    world = moved_pod(
        slices()(cluster()) and cluster(), annotations={"descheduler.alpha.kubernetes.io/evict": "true"}
    )
    assert fate(world, migration={}).startswith(
        f"{reasons.NO_DESTINATION}: no low node fits (2 checked): 2 lack free devices"
    )


def test_the_evict_annotation_moves_a_device_pod_where_a_free_device_is() -> None:
    world = moved_pod(both(cluster()), annotations={"descheduler.alpha.kubernetes.io/evict": "true"})
    assert fate(world, migration={}) == "-> a"


def test_a_claim_without_spec_is_refused_by_name_and_its_pod_stays() -> None:
    world = moved_pod(both(cluster()))
    claim = next(o for o in world.objects if o["kind"] == "ResourceClaim")
    del claim["spec"]
    problems: list[str] = []
    snapshot = build_snapshot(iter_objects(world.objects), problems)
    assert problems == ["ResourceClaim default/p-gpu: spec is required"]
    result = plan(snapshot, world.usage(), settings(migration=MIGRATION), PlannerState(), NOW)
    assert evicted(result) == []
    assert skip_codes(result)["default/p"] == reasons.RESOURCE_CLAIM_UNALLOCATED


HEAVY = "[" + ", ".join(str(i) for i in range(85)) + f"].all(x, !has({A}.uuid) || {A}.uuid != string(x))"
"""Just under the estimated cost limit, and not remembered from one device to the next: each device has
its own ``uuid``, as real drivers publish."""


def uuid_gpus(world: World, per_node: int, tag: str) -> World:
    """``per_node`` devices on each of ``a`` and ``b``, each with its own ``uuid`` (``tag`` keeps them
    apart from other tests' in the process-wide verdict memo), in slices of 128."""
    for node in ("a", "b"):
        devices = [
            gpu(f"gpu-{i}", attributes={"model": {"string": "a100"}, "uuid": {"string": f"{tag}-{node}-{i}"}})
            for i in range(per_node)
        ]
        for start in range(0, per_node, 128):
            chunk = devices[start : start + 128]
            world.resource_slice(f"{node}-{start}", chunk, node=node, pool=f"{node}-{start}")
    return world


def test_a_costly_selector_over_many_devices_stops_at_the_cycle_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,280 devices: the cycle's CEL budget stops the work after a few evaluations and the pod stays."""
    monkeypatch.setattr(cel, "CYCLE_COST", 40_000)
    calls = []
    real = cel.selects
    monkeypatch.setattr(cel, "selects", lambda *a: calls.append(1) or real(*a))
    world = moved_pod(uuid_gpus(cluster(), 640, f"budget-{uuid.uuid4()}"), requests=[exactly("gpu", HEAVY)])
    with within(60):
        outcome = fate(world)
    assert outcome.startswith(CEL_ERROR) and outcome.endswith("the CEL cost budget of this cycle is spent")
    assert 0 < len(calls) <= 40_000 // cel.EVALUATION_COST


def test_what_a_spent_budget_left_undone_the_next_cycles_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verdicts are remembered across cycles, a spent budget is not: each cycle goes further."""
    monkeypatch.setattr(cel, "CYCLE_COST", 600)
    world = moved_pod(
        uuid_gpus(cluster(), 6, f"progress-{uuid.uuid4()}"),
        requests=[exactly("gpu", f"!has({A}.uuid) || {A}.uuid != 'none'")],
    )
    outcomes = [fate(world) for _ in range(6)]
    assert outcomes[0].endswith("the CEL cost budget of this cycle is spent")
    assert outcomes[-1] == "-> a"


def test_a_full_verdict_memo_forgets_its_oldest_verdicts_not_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over its size the memo drops its oldest quarter: what the last cycle learnt is kept, so a cluster
    with more verdicts than the memo holds is not evaluated afresh every cycle."""
    monkeypatch.setattr(memo_module, "_VERDICTS", {})
    monkeypatch.setattr(memo_module, "MAX_VERDICTS", 40)
    calls = []
    real = cel.selects
    monkeypatch.setattr(cel, "selects", lambda *a: calls.append(1) or real(*a))
    selector = f"!has({A}.uuid) || {A}.uuid != 'none'"
    first, second = (
        moved_pod(uuid_gpus(cluster(), 6, f"memo-{uuid.uuid4()}"), requests=[exactly("gpu", selector)])
        for _ in range(2)
    )
    assert fate(first) == fate(second) == "-> a"  # 26 verdicts each: the second overflows the memo
    calls.clear()
    assert fate(second) == "-> a"
    assert calls == []


def test_a_deviceclass_naming_its_driver_costs_no_cel_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """``device.driver == "<name>"``, how DeviceClasses select, is decided without the interpreter: with
    no budget at all the pod still moves, and a class selecting another driver still matches nothing."""
    monkeypatch.setattr(cel, "CYCLE_COST", 0)
    assert fate(pod_with()(cluster())) == "-> a"
    other = both(cluster()).device_class("other", "device.driver == 'other.example.com'")
    assert fate(moved_pod(other, requests=[exactly("other")])).startswith(reasons.NO_DESTINATION)


# --- issue 42: partitionable devices, device taints and constraints, as the allocator sees them ---------

ANY = exactly("gpu")
"""One device of the class, whatever it is."""
HAS_PROFILE = f"has({A}.profile)"


def part(name: str, profile: str, slices: str, counter_set: str = "gpu0") -> dict[str, Any]:
    """A MIG-style partition of one GPU: a ``profile`` attribute, consuming ``slices`` of its counters."""
    return gpu(
        name,
        attributes={"model": {"string": "a100"}, "profile": {"string": profile}},
        consumesCounters=[{"counterSet": counter_set, "counters": {"slices": {"value": slices}}}],
    )


def mig(*held: str, counter_set: str = "gpu0", published: int = 2, taint: str = "") -> Scenario:
    """``a``'s GPU is published as partitions of 2 counter slices: ``whole`` (2) or ``half-0``, ``half-1``
    (1 each), in a pool of two slices (counters, devices; ``published=1``: the counters not yet); the
    partitions in ``held`` are allocated to another pod. ``b`` has one plain a100."""

    def build(world: World) -> World:
        if published == 2:
            world.resource_slice(
                "a-counters", [], node="a", count=2, shared_counters={"gpu0": {"slices": "2"}}
            )
        parts = [part("whole", "2g", "2", counter_set), part("half-0", "1g", "1"), part("half-1", "1g", "1")]
        for device in parts:
            if device["name"] == taint:
                device["taints"] = [
                    {"key": "example.com/maintenance", "value": "yes", "effect": "NoSchedule"}
                ]
        world.resource_slice("a-parts", parts, node="a", pool="a", count=2)
        if held:
            world.device_pod("other", on="a", requests=[ANY], allocated=list(held), usage=cpu("0.1"))
        return world.resource_slice("b-gpus", [gpu("gpu-0")], node="b")

    return build


def duplicate_names(world: World) -> World:
    """``a``'s pool publishes ``gpu-0`` in both of its slices: the allocator takes nothing from it."""
    world.resource_slice("a-1", [gpu("gpu-0")], node="a", pool="a", count=2)
    world.resource_slice("a-2", [gpu("gpu-0"), gpu("gpu-1")], node="a", pool="a", count=2)
    world.resource_slice("b-gpus", [gpu("gpu-0")], node="b")
    return moved_pod(world, requests=[ANY])


def profile(name: str, count: int = 1) -> dict[str, Any]:
    return exactly("gpu", f"{HAS_PROFILE} && {A}.profile == '{name}'", count=count)


def tainted(effect: str, *tolerations: dict[str, str]) -> Scenario:
    """``a``'s only device carries the taint ``example.com/maintenance=yes:<effect>``; ``b``'s none; the
    pod's request tolerates ``tolerations``."""

    def build(world: World) -> World:
        taint = {"key": "example.com/maintenance", "value": "yes", "effect": effect}
        world.resource_slice("a-gpus", [gpu("gpu-0", taints=[taint])], node="a")
        world.resource_slice("b-gpus", [gpu("gpu-0")], node="b")
        request = exactly("gpu")
        request["exactly"]["tolerations"] = list(tolerations)
        return moved_pod(world, requests=[request])

    return build


def numa(
    a: list[Any], b: list[Any], *constraints: dict[str, Any], requests: list[dict[str, Any]] | None = None
) -> Scenario:
    """Each low node's devices carry a ``numa`` attribute (an int, or a string given as such; ``None``:
    none) and model a100 (``h100`` for ``a``'s third device); the pod asks for one device in each of
    ``g1`` and ``g2`` (or ``requests``) under ``constraints``."""

    def device(i: int, value: Any) -> dict[str, Any]:
        attributes: dict[str, Any] = {"model": {"string": "h100" if i == 2 else "a100"}}
        if value is not None:
            attributes["numa"] = {"string": value} if isinstance(value, str) else {"int": value}
        return gpu(f"gpu-{i}", attributes=attributes)

    def build(world: World) -> World:
        for node, values in (("a", a), ("b", b)):
            world.resource_slice(f"{node}-gpus", [device(i, v) for i, v in enumerate(values)], node=node)
        asked = requests or [{**exactly("gpu"), "name": "g1"}, {**exactly("gpu"), "name": "g2"}]
        return moved_pod(world, requests=asked, constraints=list(constraints))

    return build


MATCH = {"matchAttribute": f"{GPU_DRIVER}/numa"}
DISTINCT = {"distinctAttribute": f"{GPU_DRIVER}/numa"}
H100 = {
    "name": "g2",
    "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": f"{A}.model == 'h100'"}}]},
}
UNSUPPORTED = f"{reasons.RESOURCE_CLAIM_UNSUPPORTED}: ResourceClaim default/p-gpu"
TOLERANT = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
            "tolerations": [{"key": "example.com/maintenance", "operator": "Exists"}]}}  # fmt: skip
NONE_FREE = f"{reasons.NO_DESTINATION}: no low node fits (2 checked): 2 lack free devices"

ISSUE_42: list[tuple[str, Scenario, str]] = [
    ("a free partition", lambda w: moved_pod(mig()(w), requests=[profile("1g")]), "-> a"),
    ("the whole GPU held: no partition left", lambda w: moved_pod(mig("whole")(w), requests=[ANY]), "-> b"),
    (
        "one half held: the other half is free",
        lambda w: moved_pod(mig("half-0")(w), requests=[profile("1g")]),
        "-> a",
    ),
    (
        "one half held: the whole GPU is not",
        lambda w: moved_pod(mig("half-0")(w), requests=[profile("2g")]),
        NONE_FREE,
    ),
    ("two halves of a free GPU", lambda w: moved_pod(mig()(w), requests=[profile("1g", count=2)]), "-> a"),
    (
        "two partitions of any size: the halves, not the whole",
        lambda w: moved_pod(mig()(w), requests=[exactly("gpu", HAS_PROFILE, count=2)]),
        "-> a",
    ),
    (
        "a partition consuming a counter set the pool lacks makes the pool invalid",
        lambda w: moved_pod(mig(counter_set="gpu9")(w), requests=[ANY]),
        "-> b",
    ),
    ("counters not published yet", lambda w: moved_pod(mig(published=1)(w), requests=[ANY]), "-> b"),
    ("a device name twice in one pool makes the pool invalid", duplicate_names, "-> b"),
    ("a NoSchedule device taint", tainted("NoSchedule"), "-> b"),
    ("a NoExecute device taint", tainted("NoExecute"), "-> b"),
    ("a taint of effect None", tainted("None"), "-> a"),
    (
        "a taint tolerated by key",
        tainted("NoSchedule", {"key": "example.com/maintenance", "operator": "Exists"}),
        "-> a",
    ),
    (
        "a taint tolerated by key and value",
        tainted("NoExecute", {"key": "example.com/maintenance", "operator": "Equal", "value": "yes"}),
        "-> a",
    ),
    (
        "a toleration of another value",
        tainted("NoSchedule", {"key": "example.com/maintenance", "operator": "Equal", "value": "no"}),
        "-> b",
    ),
    (
        "a toleration of another effect",
        tainted("NoSchedule", {"operator": "Exists", "effect": "NoExecute"}),
        "-> b",
    ),
    ("a toleration of every taint", tainted("NoExecute", {"operator": "Exists"}), "-> a"),
    ("matchAttribute across requests", numa([0, 1], [0, 0], MATCH), "-> b"),
    ("distinctAttribute across requests", numa([0, 0], [0, 1], DISTINCT), "-> b"),
    ("matchAttribute on devices without it", numa([None, None], [1, 1], MATCH), "-> b"),
    ("matchAttribute on one request only", numa([0, 1], [], {**MATCH, "requests": ["g1"]}), "-> a"),
    ("an int 0 does not match a string 0", numa([0, "0"], [1, 1], MATCH), "-> b"),
    (
        "distinctAttribute within one request",
        numa([0, 0], [0, 1], DISTINCT, requests=[exactly("gpu", count=2)]),
        "-> b",
    ),
    (
        "matchAttribute found by backtracking",
        numa([0, 1, 1], [0, 0], MATCH, requests=[{**exactly("gpu"), "name": "g1"}, H100]),
        "-> a",
    ),
    (
        "a tainted whole GPU the scheduler tries first spends the counters the halves need",
        lambda w: moved_pod(mig(taint="whole")(w), requests=[exactly("gpu", count=2)]),
        NONE_FREE,
    ),
    (
        "a tolerated taint on the whole GPU spends nothing",
        lambda w: moved_pod(
            mig(taint="whole")(w), requests=[{**TOLERANT, "exactly": {**TOLERANT["exactly"], "count": 2}}]
        ),
        "-> a",
    ),
    (
        "a constraint over partitions: a partition it refuses may keep its counters (conservative)",
        lambda w: moved_pod(
            mig()(w),
            requests=[{**profile("1g"), "name": "g1"}, {**profile("1g"), "name": "g2"}],
            constraints=[{"matchAttribute": f"{GPU_DRIVER}/model"}],
        ),
        NONE_FREE,
    ),
    (
        "All selecting a partition: kube-scheduler 1.35 crashes on it",
        lambda w: moved_pod(mig()(w), requests=[exactly("gpu", mode="All")]),
        f"{reasons.RESOURCE_CLAIM_UNSUPPORTED}: request p-gpu/gpu asks for All devices and device "
        f"{GPU_DRIVER}/a/half-0 consumes shared counters",
    ),
    (
        "All whose selector leaves the partitions out",
        lambda w: moved_pod(mig()(w), requests=[exactly("gpu", f"!has({A}.profile)", mode="All")]),
        "-> b",
    ),
    (
        "a constraint on an All request",
        numa([0, 0], [0, 0], MATCH, requests=[exactly("gpu", mode="All")]),
        f"{UNSUPPORTED}: matchAttribute {GPU_DRIVER}/numa applies to request gpu, which asks for All",
    ),
    (
        "more devices than an allocation holds",
        pod_with(requests=[exactly("gpu", count=33)]),
        f"{UNSUPPORTED} asks for at least 33 devices, more than the 32",
    ),
    (
        "admin access is never moved",
        pod_with(requests=[{"name": "gpu", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}]),
        f"{UNSUPPORTED} request gpu asks for admin access (it watches devices other claims hold): such a pod "
        "is never moved",
    ),
]


@pytest.mark.parametrize(("case", "build", "expected"), ISSUE_42, ids=[s[0] for s in ISSUE_42])
def test_partitions_taints_and_constraints_are_judged_as_the_allocator_does(
    case: str, build: Scenario, expected: str
) -> None:
    assert fate(build(cluster())).startswith(expected)


def test_a_pod_moved_to_a_gpu_of_partitions_leaves_its_counters_to_no_other_pod_that_cycle() -> None:
    """q and p each want a half of ``a``'s GPU; two are free, but the scheduler picks q's half, not us:
    after q, ``a``'s partitions are taken for the cycle and p goes to ``b``'s plain a100."""
    world = mig()(cluster())
    world.set_node_usage("b", cpu("7"))
    world.resource_slice("hot-more", [gpu("gpu-1")], node="hot", pool="hot-more")
    world.device_pod(
        "q", on="hot", usage=cpu("4.5"), requests=[ANY], allocated=["gpu-1"], slice_pool="hot-more"
    )
    result = moved_pod(world, requests=[ANY]).plan(settings(migration=MIGRATION))
    assert [(e.pod.name, e.destination) for e in result.evictions] == [("q", "a"), ("p", "b")]
    assert result.evictions[0].devices == "1 device(s) on a (gpu.example.com/a/half-0) of 3 free matching"


def test_the_search_gives_up_past_its_step_bound_and_the_pod_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 devices on ``a`` with 7 ``numa`` values, 8 distinct ones asked: no solution, and tens of
    thousands of subsets to rule out; the search stops at its bound and the pod stays."""
    monkeypatch.setattr(allocate, "MAX_STEPS", 500)
    calls = []
    real = allocate.Search._add
    monkeypatch.setattr(allocate.Search, "_add", lambda *a: calls.append(1) or real(*a))
    world = numa([i % 7 for i in range(16)], [], DISTINCT, requests=[exactly("gpu", count=8)])(cluster())
    with within(10):
        assert fate(world).startswith(reasons.NO_DESTINATION)
    assert len(calls) == 501  # every node check stops at the bound: a alone has devices
