"""The migration journal: records written around each eviction rebuild every limit after a restart."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from descheduler.planner import AnomalyCount, PlannerState, commit, evicted_from, reasons
from descheduler.planner import journal as records
from descheduler.planner.journal import Entry, JournalUnreadable
from descheduler.planner.model import Plan
from tests.unit.builders import NOW, World, cpu, report, settings, skip_codes

WINDOW = 300.0


def crowded() -> World:
    """A 100-core node at 90% (high 50%) full of 5-core pods of one Deployment, and an idle node."""
    world = World().node("hot", cpu="100", usage=cpu("90")).node("cool", cpu="100", usage=cpu("0"))
    world.deployment("web", replicas=20)
    for i in range(8):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("5"))
    return world


def without(world: World, keys: list[str]) -> World:
    """The same cluster once the evicted pods are gone (their controller replaced them elsewhere)."""
    gone = {key.split("/", 1)[1] for key in keys}
    kept = [o for o in world.objects if not (o["kind"] == "Pod" and o["metadata"]["name"] in gone)]
    return World(
        objects=kept,
        node_usage=world.node_usage,
        node_age=world.node_age,
        pod_usage={k: v for k, v in world.pod_usage.items() if k not in keys},
        pod_age=world.pod_age,
    )


def entry(pod: str = "default/web-0", status: str = records.EVICTED, at: float = NOW, **kw: Any) -> Entry:
    values: dict[str, Any] = {
        "pod": pod,
        "uid": f"uid-{pod}",
        "node": "hot",
        "workload": "uid-deployment-default-web",
        "workload_kind": "Deployment",
        "workload_name": "web",
        "at": at,
        "status": status,
    }
    if status in records.UNSETTLED:
        values.update(reason="node is overutilized", destination="cool")
    values.update(kw)
    return Entry(**values)


def first_run(config: Any) -> tuple[Plan, PlannerState]:
    """The process before the crash: one cycle whose planned evictions all happened."""
    result = crowded().plan(config)
    done = [e.pod.key for e in result.evictions]
    return result, commit(result.state, evicted_from(result, done), NOW)


def through_the_configmap(state: PlannerState, status: str) -> tuple[Entry, ...]:
    """What a successor reads: the records as written (with ``status``), encoded and decoded."""
    written = [replace(e, status=status) for e in records.project(state.migrations, {})]
    return records.decode(records.encode(written, writer="old"), "ConfigMap test/records")


OBJECT_LIMIT = {
    "objectLimiters": {"workload": {"duration": f"{WINDOW:g}s", "maxMigrating": 2}},
    "maxMigratingPerWorkload": 0,
    "maxUnavailablePerWorkload": 0,
}

RESTARTS = [
    # (case, migration args, status written, evicted pods still there, seconds after, evictions, skip code)
    ("evicted records inside the window block the workload", OBJECT_LIMIT, records.EVICTED, False, 60, 0,
     reasons.OBJECT_LIMITER),
    ("once the window has passed the workload moves again", OBJECT_LIMIT, records.EVICTED, False, WINDOW + 1,
     2, None),
    ("an intent counts as an eviction (the request may have been sent)", OBJECT_LIMIT, records.INTENT, False,
     60, 0, reasons.OBJECT_LIMITER),
    ("an unknown outcome counts as an eviction", OBJECT_LIMIT, records.UNKNOWN, False, 60, 0,
     reasons.OBJECT_LIMITER),
    ("pods still there are in flight: maxMigratingPerNode", {"maxMigratingPerNode": 2, "objectLimiters": {},
     "maxMigratingPerWorkload": 0, "maxUnavailablePerWorkload": 0}, records.INTENT, True, 60, 0,
     reasons.MIGRATING_PER_NODE),
    ("pods still there are in flight: maxMigratingPerNamespace", {"maxMigratingPerNamespace": 3,
     "objectLimiters": {}, "maxMigratingPerWorkload": 0, "maxUnavailablePerWorkload": 0}, records.EVICTED,
     True, 60, 0, reasons.MIGRATING_PER_NAMESPACE),
]  # fmt: skip


@pytest.mark.parametrize(
    ("migration", "status", "still_there", "after", "expected", "code"),
    [case[1:] for case in RESTARTS],
    ids=[case[0] for case in RESTARTS],
)
def test_a_successor_rebuilt_from_the_records_never_exceeds_a_limit(
    migration: dict[str, Any], status: str, still_there: bool, after: float, expected: int, code: str | None
) -> None:
    config = settings(migration=migration)
    before, state = first_run(config)
    assert before.evictions, "the first run moves pods"
    keys = [e.pod.key for e in before.evictions]
    world = crowded() if still_there else without(crowded(), keys)
    rebuilt = records.rebuild(through_the_configmap(state, status))
    result = world.plan(config, rebuilt.state, NOW + after)
    assert len(result.evictions) == expected
    if code is not None:
        assert code in skip_codes(result).values()
    if expected == 0:  # without the records a successor would have gone over the limit
        assert world.plan(config, PlannerState(), NOW + after).evictions


def test_every_record_becomes_a_migration_and_the_unsettled_ones_are_pending() -> None:
    written = [
        entry("default/web-0", records.EVICTED),
        entry("default/web-1", records.INTENT, at=NOW + 1),
        entry("shop/api-1", records.UNKNOWN, at=NOW + 2, workload="", workload_kind="", workload_name=""),
    ]
    rebuilt = records.rebuild(written)
    assert [(m.pod, m.node, m.workload, m.started) for m in rebuilt.state.migrations] == [
        ("default/web-0", "hot", "uid-deployment-default-web", NOW),
        ("default/web-1", "hot", "uid-deployment-default-web", NOW + 1),
        ("shop/api-1", "hot", "", NOW + 2),
    ]
    assert [m.namespace for m in rebuilt.state.migrations] == ["default", "default", "shop"]
    assert [e.pod for e in rebuilt.pending] == ["default/web-1", "shop/api-1"]
    assert rebuilt.state.anomalies == {}, "a hotspot must be confirmed again after a restart"


def test_a_record_names_its_workload_so_a_pod_long_gone_still_maps_back() -> None:
    config = settings(migration=OBJECT_LIMIT)
    _, state = first_run(config)
    [first, *_] = through_the_configmap(state, records.EVICTED)
    assert (first.workload_kind, first.workload_name, first.workload) == (
        "Deployment",
        "web",
        "uid-deployment-default-web",
    )


@pytest.mark.parametrize("status", records.STATUSES)
def test_the_stored_form_keeps_every_field_the_limits_and_events_need(status: str) -> None:
    original = entry(
        status=status, at=NOW + 0.125, created=NOW - 600, usage=(("cpu", 500), ("memory", 2**30))
    )
    text = records.encode([original], writer="host_1")
    assert json.loads(text)["writer"] == "host_1"
    assert records.decode(text, "x") == (original,)


def test_a_settled_record_drops_its_reason_to_stay_small() -> None:
    text = records.encode([entry(status=records.EVICTED, reason="long text")], writer="w")
    assert "long text" not in text


BAD = [
    ("not JSON", "{", "data: not JSON"),
    ("wrong version", '{"version": 2, "records": []}', "version: must be 1"),
    ("records not a list", '{"version": 1, "records": {}}', "records: must be a list"),
    ("pod without namespace", '{"version":1,"records":[{"pod":"web","uid":"u","node":"n","workload":{},'
     '"at":1,"status":"evicted"}]}', "records[0].pod: must be namespace/name"),
    ("time as text", '{"version":1,"records":[{"pod":"a/b","uid":"u","node":"n","workload":{},'
     '"at":"now","status":"evicted"}]}', "records[0].at: must be seconds since the epoch"),
    ("unknown status", '{"version":1,"records":[{"pod":"a/b","uid":"u","node":"n","workload":{},'
     '"at":1,"status":"gone"}]}', "records[0].status: must be one of intent, unknown, evicted"),
    ("workload kind not text", '{"version":1,"records":[{"pod":"a/b","uid":"u","node":"n",'
     '"workload":{"kind":3},"at":1,"status":"evicted"}]}', "records[0].workload.kind"),
    ("usage not a count", '{"version":1,"records":[{"pod":"a/b","uid":"u","node":"n","workload":{},"at":1,'
     '"status":"evicted","usage":{"cpu":"5"}}]}', "records[0].usage: must map resource names"),
    ("missing node", '{"version":1,"records":[{"pod":"a/b","uid":"u","workload":{},"at":1,'
     '"status":"evicted"}]}', "records[0].node: must be a non-empty string"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "named"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_records_are_refused_naming_the_object_and_the_field(text: str, named: str) -> None:
    with pytest.raises(JournalUnreadable) as caught:
        records.decode(text, "ConfigMap ns/records")
    assert caught.value.reason == "invalid"
    assert str(caught.value).startswith("ConfigMap ns/records: ")
    assert named in str(caught.value)


SAVED = (entry("default/web-0"), entry("default/web-1", records.UNKNOWN, at=NOW + 1))
WRITES = [
    ("nothing changed", SAVED, False),
    ("a new record", (*SAVED, entry("default/web-2", at=NOW + 2)), True),
    ("an unknown outcome settled as evicted", (SAVED[0], entry("default/web-1", at=NOW + 1)), True),
    ("an unknown outcome settled as failed (record gone)", SAVED[:1], True),
    ("a settled record aged out: no write of its own", SAVED[1:], False),
]  # fmt: skip


@pytest.mark.parametrize(("current", "write"), [c[1:] for c in WRITES], ids=[c[0] for c in WRITES])
def test_the_journal_is_written_when_a_record_that_matters_changed(
    current: tuple[Entry, ...], write: bool
) -> None:
    assert records.needs_write(SAVED, current) is write


def test_the_projection_marks_unsettled_evictions_with_their_send_time() -> None:
    config = settings(migration=OBJECT_LIMIT)
    before, state = first_run(config)
    unknown = before.evictions[0].pod.key
    projected = records.project(state.migrations, {unknown: records.Unsettled(NOW + 5, "why", "cool")})
    by_pod = {e.pod: e for e in projected}
    assert (by_pod[unknown].status, by_pod[unknown].at, by_pod[unknown].reason) == ("unknown", NOW + 5, "why")
    assert {e.status for p, e in by_pod.items() if p != unknown} == {"evicted"}


def test_when_two_writers_met_every_record_of_both_is_kept() -> None:
    ours = (entry("default/web-0"), entry("default/web-1", records.INTENT, at=NOW + 1))
    theirs = (entry("default/web-1", records.EVICTED, at=NOW + 1), entry("default/web-2", at=NOW + 3))
    merged = records.merge(ours, theirs)
    assert [(e.pod, e.status) for e in merged] == [
        ("default/web-0", "evicted"),
        ("default/web-1", "intent"),
        ("default/web-2", "evicted"),
    ]


def test_a_successor_still_subtracts_the_load_of_pods_that_left_within_the_metrics_window() -> None:
    config = settings(migration=OBJECT_LIMIT)
    before, state = first_run(config)
    assert state.departures, "the first run remembers what left"
    written = records.project(state.migrations, {}, state.departures)
    rebuilt = records.rebuild(records.decode(records.encode(written, writer="old"), "x"))
    assert {(d.pod, d.node, dict(d.usage)["cpu"]) for d in rebuilt.state.departures} == {
        (e.pod.key, "hot", e.usage["cpu"]) for e in before.evictions
    }
    # The node's sample still holds the evicted pods' load: with the records it is estimated away as
    # the process that evicted them would have done; without them it is counted in full.
    world = without(crowded(), [e.pod.key for e in before.evictions])

    def hot_cpu(state: PlannerState) -> float:
        result = world.plan(config, state, NOW + 30)
        return next(r.usage for r in report(result, "hot").resources if r.resource == "cpu")

    assert hot_cpu(rebuilt.state) == hot_cpu(state) < hot_cpu(PlannerState())


# --- the anomaly detectors ---------------------------------------------------------------------------------

DETECTORS = records.Detectors(
    nodes={
        "hot": AnomalyCount(2, NOW),
        "dipped": AnomalyCount(0, NOW, 1, NOW - 60),
        "curing": AnomalyCount(0, NOW, 2, NOW - 60, cure=True, began=NOW - 600, spent=3, cooled=NOW - 60),
    },
    prod={"prod-hot": AnomalyCount(4, NOW, 0, NOW - 120)},
)


def test_the_detectors_round_trip_through_the_stored_form() -> None:
    text = records.encode([entry()], writer="w", detectors=DETECTORS)
    assert records.decode(text, "x") == (entry(),)
    assert records.decode_detectors(text, "x") == DETECTORS
    state = records.rebuild(records.decode(text, "x"), records.decode_detectors(text, "x")).state
    assert (state.anomalies, state.prod_anomalies) == (DETECTORS.nodes, DETECTORS.prod)


def test_a_journal_written_before_the_detectors_reads_as_none() -> None:
    old = '{"version":1,"writer":"w","records":[]}'
    assert records.decode_detectors(old, "x") == records.Detectors()
    assert "detectors" not in records.encode([], writer="w"), "nothing to keep: the old form exactly"


def test_only_nodes_with_a_count_or_a_confirmed_state_are_kept() -> None:
    state = PlannerState(
        anomalies={"idle": AnomalyCount(0, NOW), **DETECTORS.nodes}, prod_anomalies=dict(DETECTORS.prod)
    )
    assert records.detectors_of(state) == DETECTORS


BAD_DETECTORS = [
    ("not an object", '{"version":1,"records":[],"detectors":[]}', "detectors: must be an object"),
    ("count as text", '{"version":1,"records":[],"detectors":{"nodes":{"a":{"count":"2","updated":1}}}}',
     "detectors.nodes.a: must hold"),
    ("confirmed as text", '{"version":1,"records":[],"detectors":{"prod":{"a":{"count":1,"updated":1,'
     '"confirmed":"now"}}}}', "detectors.prod.a: must hold"),
    ("evictions spent below zero", '{"version":1,"records":[],"detectors":{"nodes":{"a":{"count":0,'
     '"updated":1,"confirmed":1,"spent":-1}}}}', "detectors.nodes.a: must hold"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "named"), [c[1:] for c in BAD_DETECTORS], ids=[c[0] for c in BAD_DETECTORS])
def test_bad_detectors_are_refused_naming_the_field(text: str, named: str) -> None:
    with pytest.raises(JournalUnreadable, match=named):
        records.decode_detectors(text, "ConfigMap ns/records")


# --- compaction near the size limit ----------------------------------------------------------------------


def _grown(i: int) -> Entry:
    name = f"payments-settlement-reconciliation-worker-{i:06d}"
    return Entry(
        f"payments/{name}-7d9f8b6c5d-x2v9k", f"uid-{i}", f"ip-10-0-{i % 250}-1.eu-west-1.compute.internal",
        f"uid-workload-{i}", "Deployment", name, NOW + i, records.EVICTED,
    )  # fmt: skip


DETECTORS = records.Detectors(
    nodes={f"node-{i}": AnomalyCount(1, NOW, 0, NOW if i % 2 else None) for i in range(400)}
)
ENTRIES = tuple(_grown(i) for i in range(200))
FULL = len(records.encode(ENTRIES, writer="x" * 253, detectors=DETECTORS))
CONFIRMED = records.Detectors(nodes={n: c for n, c in DETECTORS.nodes.items() if c.confirmed is not None})
WITHOUT_COUNTING = len(records.encode(ENTRIES, writer="x" * 253, detectors=CONFIRMED))
COMPACTIONS = [
    ("room enough: nothing", FULL, ()),
    ("a little short: counting nodes first", FULL - 100, ("unconfirmed-detectors",)),
    ("still short: then the labels", WITHOUT_COUNTING - 1, ("unconfirmed-detectors", "workload-names")),
    ("records alone too large: they stay", 1000, tuple(name for name, _ in records.COMPACTION)),
]  # fmt: skip


@pytest.mark.parametrize(("limit", "dropped"), [c[1:] for c in COMPACTIONS], ids=[c[0] for c in COMPACTIONS])
def test_a_journal_near_its_limit_drops_the_least_important_data_first_and_never_a_record(
    limit: int, dropped: tuple[str, ...]
) -> None:
    fitted = records.compact(ENTRIES, DETECTORS, limit=limit)
    assert fitted.dropped == dropped
    assert [(e.pod, e.uid, e.node, e.workload, e.at) for e in fitted.entries] == [
        (e.pod, e.uid, e.node, e.workload, e.at) for e in ENTRIES
    ], "every record, with what the limits count by"
    kept = set(fitted.detectors.nodes)
    if "unconfirmed-detectors" in dropped and "confirmed-detectors" not in dropped:
        assert kept == set(CONFIRMED.nodes)
