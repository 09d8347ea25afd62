"""Kubernetes objects become snapshot values with exactly the fields the planner needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.cluster.build import build_snapshot
from descheduler.cluster.parse import (
    ObjectError,
    iter_objects,
    parse_node,
    parse_pdb,
    parse_pod,
)
from descheduler.cluster.selectors import pod_node_affinity_matches, selector_matches, untolerated_taint
from descheduler.cluster.types import LabelSelector, LabelSelectorRequirement

SEED = Path(__file__).resolve().parents[1] / "scenarios" / "seed-stress-demo" / "cluster.yaml"


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def test_the_seed_cluster_parses_into_nodes_pods_and_workloads() -> None:
    snapshot = build_snapshot(iter_objects(yaml.safe_load_all(SEED.read_text())))
    assert [n.name for n in snapshot.nodes] == [
        "cn-beijing.10.0.0.53",
        "cn-beijing.10.0.0.215",
        "cn-beijing.10.0.0.120",
    ]
    assert snapshot.nodes[0].allocatable["cpu"] == 104000
    assert len(snapshot.pods) == 10
    assert {w.kind for w in snapshot.workloads} == {"ReplicaSet", "Deployment"}


def test_a_list_of_items_is_flattened_and_items_take_the_list_kind() -> None:
    doc = {"kind": "PodList", "items": [pod(nodeName="n1")]}
    assert [p.node_name for p in build_snapshot(iter_objects([doc])).pods] == ["n1"]


def test_pod_requests_follow_the_scheduler_rule_for_init_containers_and_overhead() -> None:
    parsed = parse_pod(
        pod(
            containers=[
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "250m"}}},
            ],
            initContainers=[{"resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}],
            overhead={"cpu": "100m"},
        )
    )
    assert parsed.requests == {"cpu": 2100, "memory": 2**30}


def test_pod_flags_for_filters_are_read_from_volumes_annotations_and_claims() -> None:
    obj = pod(
        volumes=[{"name": "a", "emptyDir": {}}, {"name": "b", "persistentVolumeClaim": {"claimName": "c"}}],
        resourceClaims=[{"name": "gpu"}],
    )
    obj["metadata"]["annotations"] = {
        "kubernetes.io/config.mirror": "x",
        "kubernetes.io/config.source": "file",
        "unrelated": "dropped",
    }
    parsed = parse_pod(obj)
    assert (parsed.has_local_storage, parsed.has_pvc, parsed.has_resource_claims) == (True, True, True)
    assert (parsed.is_mirror, parsed.is_static) == (True, True)
    assert "unrelated" not in parsed.annotations


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        ([{}], "BestEffort"),
        ([{"resources": {"requests": {"cpu": "1"}}}], "Burstable"),
        ([{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}], "Guaranteed"),
    ],
)
def test_qos_class_is_derived_when_status_does_not_say(containers: list[dict[str, Any]], qos: str) -> None:
    obj = pod(containers=containers)
    obj["status"] = {}
    assert parse_pod(obj).qos_class == qos


def test_raw_allocatable_annotation_wins_for_thresholds() -> None:
    node = parse_node(
        {
            "kind": "Node",
            "metadata": {
                "name": "n",
                "annotations": {"node.koordinator.sh/raw-allocatable": '{"cpu": "96"}'},
            },
            "status": {"allocatable": {"cpu": "90", "memory": "1Gi"}},
        }
    )
    assert node.threshold_base == {"cpu": 96000, "memory": 2**30}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "lots"}}},
            "Node n: status.allocatable.cpu",
        ),
        ({"kind": "Pod", "metadata": {"namespace": "ns"}}, "metadata.name is required"),
        (
            {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {"priority": "high"}},
            "Pod ns/p: spec.priority must be an integer",
        ),
        (
            {
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "b", "namespace": "ns"},
                "status": {"disruptionsAllowed": "1"},
            },
            "PodDisruptionBudget ns/b: status.disruptionsAllowed",
        ),
    ],
)
def test_bad_objects_are_refused_naming_the_object_and_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ObjectError, match=message.replace(".", r"\.")):
        build_snapshot([obj])


def test_control_characters_in_a_kind_or_name_are_escaped_so_the_message_stays_one_line() -> None:
    obj = {"kind": "\n", "metadata": {"name": "n\x1b"}, "status": {"allocatable": {"cpu": "lots"}}}
    with pytest.raises(ObjectError, match=re.escape(r"'\n' 'n\x1b': status.allocatable.cpu")) as refused:
        parse_node(obj)
    assert str(refused.value).isprintable()


def test_a_pdb_without_selector_selects_nothing_and_an_empty_one_selects_everything() -> None:
    none = parse_pdb(
        {"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "ns"}, "spec": {}}
    )
    empty = parse_pdb(
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {"selector": {}},
        }
    )
    assert not selector_matches(none.selector, {"app": "x"})
    assert selector_matches(empty.selector, {"app": "x"})


@pytest.mark.parametrize(
    ("operator", "values", "labels", "matches"),
    [
        ("In", ("a", "b"), {"k": "a"}, True),
        ("In", ("a",), {}, False),
        ("NotIn", ("a",), {}, True),
        ("NotIn", ("a",), {"k": "a"}, False),
        ("Exists", (), {"k": ""}, True),
        ("DoesNotExist", (), {"k": ""}, False),
    ],
)
def test_selector_operators(
    operator: str, values: tuple[str, ...], labels: dict[str, str], matches: bool
) -> None:
    selector = LabelSelector(match_expressions=(LabelSelectorRequirement("k", operator, values),))
    assert selector_matches(selector, labels) is matches


def test_node_affinity_and_taints_decide_where_a_pod_may_go() -> None:
    node = parse_node(
        {
            "kind": "Node",
            "metadata": {"name": "n", "labels": {"zone": "a"}},
            "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
        }
    )
    picky = parse_pod(
        pod(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                        ]
                    }
                }
            }
        )
    )
    tolerant = parse_pod(pod(tolerations=[{"key": "gpu", "operator": "Exists"}], nodeSelector={"zone": "a"}))
    assert not pod_node_affinity_matches(picky, node)
    assert pod_node_affinity_matches(tolerant, node)
    assert untolerated_taint(picky, node) is not None
    assert untolerated_taint(tolerant, node) is None
