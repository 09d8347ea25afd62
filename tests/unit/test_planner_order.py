"""Which pod on a hotspot goes first: Koordinator's keys, the usage score, then newest first."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.planner.order import koord_priority_class, koord_qos, usage_score
from tests.unit.builders import NOW, World, cpu, evicted, settings

PROD_LABEL = {"koordinator.sh/priority-class": "koord-prod"}
BATCH_LABEL = {"koordinator.sh/priority-class": "koord-batch"}


def first_evicted(first: dict[str, Any], second: dict[str, Any]) -> str:
    """Two deployment pods on one hotspot; only one eviction is allowed: which one goes?"""
    world = World().node("hot", cpu="100", usage=cpu("90")).node("cool", cpu="100", usage=cpu("1"))
    world.deployment("web", replicas=10)
    for name, options in (("a", first), ("b", second)):
        base: dict[str, Any] = {"on": "hot", "owner": "web", "usage": cpu("10")}
        base.update(options)
        world.pod(name, **base)
    result = world.plan(settings(top={"maxNoOfPodsToEvictTotal": 1}))
    assert len(result.evictions) == 1
    return evicted(result)[0].split("/")[1]


@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        (
            {"labels": {"koordinator.sh/priority-class": "koord-free"}},
            {"labels": BATCH_LABEL},
            "koord-free first",
        ),
        (
            {"labels": BATCH_LABEL},
            {"labels": {"koordinator.sh/priority-class": "koord-mid"}},
            "batch before mid",
        ),
        (
            {"labels": {"koordinator.sh/priority-class": "koord-mid"}},
            {"labels": PROD_LABEL},
            "mid before prod",
        ),
        ({"priority": 5500}, {"priority": 9500}, "spec.priority bands give the class (batch before prod)"),
        ({"qos": "BestEffort"}, {"qos": "Burstable"}, "BestEffort derives koord-batch, before prod"),
        (
            {"labels": PROD_LABEL, "priority": 10},
            {"labels": PROD_LABEL, "priority": 20},
            "lower spec.priority",
        ),
        ({"labels": PROD_LABEL, "qos": "Burstable"}, {"labels": PROD_LABEL, "qos": "Guaranteed"}, "kube QoS"),
        (
            {"labels": {**PROD_LABEL, "koordinator.sh/qosClass": "LS"}},
            {"labels": {**PROD_LABEL, "koordinator.sh/qosClass": "LSR"}},
            "Koordinator QoS",
        ),
        (
            {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-5"}},
            {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "7"}},
            "lower pod-deletion-cost",
        ),
        (
            {"annotations": {"scheduling.koordinator.sh/eviction-cost": "1"}},
            {"annotations": {"scheduling.koordinator.sh/eviction-cost": "2"}},
            "lower eviction-cost",
        ),
        ({"usage": cpu("40")}, {"usage": cpu("20")}, "usage covering the 40-core excess exactly"),
        ({"usage": cpu("20")}, {"usage": cpu("10")}, "more usage when both cover less than the excess"),
        ({"usage": cpu("45")}, {"usage": cpu("48")}, "less overshoot when both cover more than the excess"),
        ({"created": NOW - 60}, {"created": NOW - 3600}, "newest first"),
    ],
)
def test_pods_on_a_hotspot_are_evicted_in_koordinator_order(
    first: dict[str, Any], second: dict[str, Any], why: str
) -> None:
    assert first_evicted(first, second) == "a", why
    assert first_evicted(second, first) == "b", why


def test_higher_keys_win_over_lower_ones() -> None:
    # A batch pod with huge deletion cost still goes before a prod pod with none.
    batch = {"labels": BATCH_LABEL, "annotations": {"controller.kubernetes.io/pod-deletion-cost": "1000"}}
    assert first_evicted(batch, {"labels": PROD_LABEL}) == "a"


def test_equal_pods_are_ordered_by_name_so_plans_are_reproducible() -> None:
    same = {"created": NOW - 100}
    assert first_evicted(same, same) == "a"


def test_an_invalid_cost_annotation_counts_as_zero() -> None:
    bad = {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "high"}}
    good = {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "1"}}
    assert first_evicted(bad, good) == "a"


def parsed_pod(**options: Any) -> Any:
    world = World().node("n")
    world.pod("p", on="n", owner="web", **options)
    return world.snapshot().pods[0]


@pytest.mark.parametrize(
    ("options", "priority_class", "qos"),
    [
        ({"qos": "Guaranteed"}, "koord-prod", "LSR"),
        ({"qos": "Burstable"}, "koord-prod", "LS"),
        ({"qos": "BestEffort"}, "koord-batch", "BE"),
        ({"qos": "Burstable", "priority": 7100}, "koord-mid", "LS"),
        ({"qos": "Burstable", "priority": 3500}, "koord-free", "LS"),
        ({"qos": "Burstable", "priority": 100}, "koord-prod", "LS"),
        ({"qos": "Burstable", "labels": {"koordinator.sh/qosClass": "BE"}}, "koord-batch", "BE"),
        ({"qos": "Burstable", "labels": {"koordinator.sh/priority-class": "koord-free"}}, "koord-free", "LS"),
        ({"qos": "BestEffort", "labels": {"koordinator.sh/priority-class": "bogus"}}, "koord-batch", "BE"),
        # An unknown or empty Koordinator QoS label is no label: the Kubernetes QoS class decides
        # (Koordinator's GetPodQoSClassWithDefault), so such a pod is still prod and sorts by its class.
        ({"qos": "Guaranteed", "labels": {"koordinator.sh/qosClass": "bogus"}}, "koord-prod", "LSR"),
        ({"qos": "BestEffort", "labels": {"koordinator.sh/qosClass": ""}}, "koord-batch", "BE"),
        ({"qos": "Guaranteed", "labels": {"koordinator.sh/qosClass": "ls"}}, "koord-prod", "LSR"),
        ({"qos": "Burstable", "labels": {"koordinator.sh/qosClass": "SYSTEM"}}, "koord-prod", "SYSTEM"),
    ],
)
def test_koordinator_classes_are_derived_as_koordinator_does(
    options: dict[str, Any], priority_class: str, qos: str
) -> None:
    pod = parsed_pod(**options)
    assert (koord_priority_class(pod), koord_qos(pod)) == (priority_class, qos)


@pytest.mark.parametrize(
    ("usage", "excess", "expected"),
    [
        ({"cpu": 500}, {"cpu": 1000}, 0.5),  # x below 1 scores x
        ({"cpu": 1000}, {"cpu": 1000}, 2.0),  # covering exactly scores best
        ({"cpu": 4000}, {"cpu": 1000}, 1.25),  # 1/x + 1 from 1
        ({"cpu": 1000, "memory": 5}, {"cpu": 1000}, 1.0),  # weights average over resources
        ({"cpu": 1000}, {}, 0.0),  # nothing over: nothing to cover
    ],
)
def test_the_usage_score_is_koordinators_piecewise_function(
    usage: dict[str, int], excess: dict[str, int], expected: float
) -> None:
    assert usage_score(usage, excess, {"cpu": 1, "memory": 1}) == pytest.approx(expected)
