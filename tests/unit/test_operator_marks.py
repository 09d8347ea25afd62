"""Marks the ecosystem and operators put on objects: opt-outs, our pause annotation, autoscaler taints.

A hot node ``hot`` (90% cpu) holds two pods of Deployment ``web``; ``cool`` (10%) can take one. Each case
adds one mark and says whether ``web-1`` (the pod that moves without marks) is still evicted, and if not,
with which code and message.
"""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.planner import reasons
from tests.unit.builders import World, cpu, evicted, report, settings, skip_codes

PAUSE = "load-aware-descheduler.io/paused"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
EVICT = "descheduler.alpha.kubernetes.io/evict"


def annotate(world: World, kind: str, name: str, annotations: dict[str, str]) -> None:
    for obj in world.objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            obj["metadata"].setdefault("annotations", {}).update(annotations)
            return
    raise AssertionError(f"no {kind} {name}")


def hot_world(marks: list[tuple[str, str, dict[str, str]]]) -> World:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", 4)
    world.pod("web-0", on="hot", owner="web", usage=cpu("1"))
    world.pod("web-1", on="hot", owner="web", usage=cpu("4"))
    world.objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    for kind, name, values in marks:
        annotate(world, kind, name, values)
    return world


CASES: list[tuple[str, list[tuple[str, str, dict[str, str]]], dict[str, Any], str, str]] = [
    # (case, marks, migration args, expected code for web-1 ("" = evicted), message fragment)
    ("no mark: evicted", [], {}, "", ""),
    (
        "Karpenter's do-not-disrupt",
        [("Pod", "web-1", {DO_NOT_DISRUPT: "true"})],
        {},
        reasons.OPTED_OUT,
        DO_NOT_DISRUPT,
    ),
    (
        "any case of true",
        [("Pod", "web-1", {DO_NOT_DISRUPT: " True "})],
        {},
        reasons.OPTED_OUT,
        DO_NOT_DISRUPT,
    ),
    ("do-not-disrupt false", [("Pod", "web-1", {DO_NOT_DISRUPT: "false"})], {}, "", ""),
    (
        "safe-to-evict false",
        [("Pod", "web-1", {SAFE_TO_EVICT: "false"})],
        {},
        reasons.OPTED_OUT,
        SAFE_TO_EVICT,
    ),
    ("safe-to-evict true", [("Pod", "web-1", {SAFE_TO_EVICT: "true"})], {}, "", ""),
    (
        "an opt-out wins over the evict annotation",
        [("Pod", "web-1", {DO_NOT_DISRUPT: "true", EVICT: "true"})],
        {},
        reasons.OPTED_OUT,
        DO_NOT_DISRUPT,
    ),
    ("opt-outs turned off", [("Pod", "web-1", {DO_NOT_DISRUPT: "true"})], {"optOutAnnotations": {}}, "", ""),
    (
        "a listed opt-out with its own value",
        [("Pod", "web-1", {"descheduler.alpha.kubernetes.io/prefer-no-eviction": "yes"})],
        {"optOutAnnotations": {"descheduler.alpha.kubernetes.io/prefer-no-eviction": "yes"}},
        reasons.OPTED_OUT,
        "prefer-no-eviction",
    ),
    ("the pod paused", [("Pod", "web-1", {PAUSE: "true"})], {}, reasons.PAUSED, "the pod is paused"),
    (
        "the namespace paused, with a why",
        [("Namespace", "default", {PAUSE: "INC-2211"})],
        {},
        reasons.PAUSED,
        "namespace default is paused (load-aware-descheduler.io/paused: 'INC-2211')",
    ),
    ("the node paused", [("Node", "hot", {PAUSE: "true"})], {}, reasons.PAUSED, "node hot is paused"),
    (
        "the Deployment paused",
        [("Deployment", "web", {PAUSE: "yes"})],
        {},
        reasons.PAUSED,
        "Deployment default/web",
    ),
    ("its ReplicaSet paused", [("ReplicaSet", "web-rs", {PAUSE: "true"})], {}, reasons.PAUSED, "is paused"),
    ("pause false is no pause", [("Namespace", "default", {PAUSE: "false"})], {}, "", ""),
    ("another node paused", [("Node", "cool", {PAUSE: "true"})], {}, "", ""),
]


@pytest.mark.parametrize(
    ("case", "marks", "migration", "code", "fragment"), CASES, ids=[case for case, *_ in CASES]
)
def test_a_mark_keeps_the_pod_in_place_and_says_who_set_it(
    case: str,
    marks: list[tuple[str, str, dict[str, str]]],
    migration: dict[str, Any],
    code: str,
    fragment: str,
) -> None:
    result = hot_world(marks).plan(settings(low={"cpu": 20}, high={"cpu": 70}, migration=migration))
    if not code:
        assert "default/web-1" in evicted(result)
        return
    assert "default/web-1" not in evicted(result)
    assert skip_codes(result)["default/web-1"] == code
    message = next(s.message for s in result.pod_skips if s.pod == "default/web-1")
    assert fragment in message


@pytest.mark.parametrize(
    ("taint", "on", "meaning"),
    [
        (
            {"key": "ToBeDeletedByClusterAutoscaler", "value": "1732000000", "effect": "NoSchedule"},
            "hot",
            "deleting",
        ),
        ({"key": "DeletionCandidateOfClusterAutoscaler", "effect": "PreferNoSchedule"}, "hot", "candidate"),
        ({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}, "cool", "Karpenter"),
        (
            {"key": "karpenter.sh/disruption", "value": "disrupting", "effect": "NoSchedule"},
            "cool",
            "Karpenter",
        ),
    ],
)
def test_a_node_an_autoscaler_is_removing_is_neither_source_nor_destination(
    taint: dict[str, str], on: str, meaning: str
) -> None:
    world = hot_world([])
    annotate(world, "Node", on, {})
    node = next(o for o in world.objects if o["kind"] == "Node" and o["metadata"]["name"] == on)
    node["spec"]["taints"] = [taint]
    result = world.plan(settings(low={"cpu": 20}, high={"cpu": 70}))
    assert evicted(result) == []
    skipped = report(result, on)
    assert skipped.skip_code == reasons.NODE_AUTOSCALER
    assert taint["key"] in skipped.skip_message and meaning in skipped.skip_message


def test_an_opt_out_the_parsers_do_not_keep_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(Exception, match=r"optOutAnnotations.*example.com/keep-me"):
        settings(migration={"optOutAnnotations": {"example.com/keep-me": "true"}})
