"""DRA objects (resource.k8s.io/v1) become snapshot values; what the API server would refuse is refused."""

from __future__ import annotations

import copy
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from descheduler.cluster.build import build_snapshot
from descheduler.cluster.dra import parse_device_class, parse_resource_claim, parse_resource_slice
from descheduler.cluster.parse import ObjectError, parse_pod
from descheduler.cluster.types import AllocatedDevice, DeviceRequest, PodClaimRef, Taint, Toleration
from tests.unit.mutation import edit_places
from tests.unit.test_fuzz_cluster import HOSTILE, paths

Obj = dict[str, Any]


def slice_obj() -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpu.example.com-abcde"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "n1", "generation": 3, "resourceSliceCount": 1},
            "nodeName": "n1",
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "model": {"string": "a100"},
                        "index": {"int": 0},
                        "healthy": {"bool": True},
                        "driverVersion": {"version": "1.2.3-rc.1"},
                        "pci.example.com/root": {"string": "0000:00"},
                    },
                    "capacity": {"memory": {"value": "40Gi"}, "example.com/slots": {"value": 7}},
                },
                {
                    "name": "gpu-1",
                    "consumesCounters": [
                        {"counterSet": "gpu-0-mem", "counters": {"memory": {"value": "20Gi"}}}
                    ],
                    "taints": [{"key": "example.com/maintenance", "value": "soon", "effect": "NoSchedule"}],
                },
            ],
        },
    }


def claim_obj() -> Obj:
    return {
        "kind": "ResourceClaim",
        "metadata": {
            "name": "web-0-gpu-x7k2",
            "namespace": "ml",
            "uid": "c-uid",
            "ownerReferences": [{"kind": "Pod", "name": "web-0", "uid": "p-uid", "controller": True}],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "selectors": [
                                {"cel": {"expression": "device.attributes['gpu.example.com'].healthy"}}
                            ],
                            "count": 2,
                            "tolerations": [{"key": "example.com/maintenance", "operator": "Exists"}],
                        },
                    },
                    {
                        "name": "any",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "big", "allocationMode": "All"},
                            {"name": "small", "deviceClassName": "small"},
                        ],
                    },
                ],
                "constraints": [
                    {"requests": ["gpu"], "matchAttribute": "pci.example.com/root"},
                    {"distinctAttribute": "gpu.example.com/index"},
                ],
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"},
                        {
                            "request": "any/small",
                            "driver": "d",
                            "pool": "p",
                            "device": "x",
                            "adminAccess": False,
                        },
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": "web-0", "uid": "p-uid"}],
        },
    }


def test_a_slice_qualifies_names_converts_capacity_and_marks_partitionable_devices() -> None:
    parsed = parse_resource_slice(slice_obj())
    assert (parsed.driver, parsed.pool, parsed.pool_generation, parsed.slice_count) == (
        "gpu.example.com",
        "n1",
        3,
        1,
    )
    assert (parsed.node_name, parsed.all_nodes, parsed.node_selector) == ("n1", False, ())
    gpu, partitioned = parsed.devices
    assert gpu.attributes == {
        "gpu.example.com/model": "a100",
        "gpu.example.com/index": 0,
        "gpu.example.com/healthy": True,
        "gpu.example.com/driverVersion": "1.2.3-rc.1",
        "pci.example.com/root": "0000:00",
    }
    assert gpu.versions == {"gpu.example.com/driverVersion"}
    assert gpu.capacity == {"gpu.example.com/memory": 40 * 2**30, "example.com/slots": 7}
    assert gpu.unsupported == "" and (gpu.consumes, gpu.taints) == ((), ())
    assert partitioned.unsupported == ""
    assert partitioned.consumes == (("gpu-0-mem", {"memory": 20 * 2**30}),)
    assert partitioned.taints == (Taint("example.com/maintenance", "soon", "NoSchedule"),)


def test_a_counter_slice_keeps_its_counter_sets_as_exact_quantities() -> None:
    obj = slice_obj()
    del obj["spec"]["devices"]
    obj["spec"]["sharedCounters"] = [
        {"name": "gpu-0-mem", "counters": {"memory": {"value": "40Gi"}, "slices": {"value": "7"}}}
    ]
    parsed = parse_resource_slice(obj)
    assert parsed.devices == ()
    assert parsed.counter_sets == {"gpu-0-mem": {"memory": 40 * 2**30, "slices": 7}}


@pytest.mark.parametrize(
    ("value", "exact"),
    [
        ("500m", Fraction(1, 2)),
        ("1500m", Fraction(3, 2)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1e-10", Fraction(1, 10**9)),  # below a nano: rounded up, as resource.Quantity does
        (3, Fraction(3)),
    ],
)
def test_device_capacities_stay_exact_quantities(value: object, exact: Fraction) -> None:
    obj = copy.deepcopy(slice_obj())
    obj["spec"]["devices"][0]["capacity"] = {"share": {"value": value}}
    (device, _) = parse_resource_slice(obj).devices
    assert device.capacity == {"gpu.example.com/share": exact}


def test_slices_for_all_nodes_or_a_node_selector_keep_their_reach() -> None:
    everywhere = slice_obj()
    del everywhere["spec"]["nodeName"]
    everywhere["spec"]["allNodes"] = True
    assert parse_resource_slice(everywhere).all_nodes
    selected = slice_obj()
    del selected["spec"]["nodeName"]
    selected["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]
    }
    terms = parse_resource_slice(selected).node_selector
    assert [(r.key, r.values) for t in terms for r in t.match_expressions] == [("rack", ("r1",))]
    per_device = slice_obj()
    del per_device["spec"]["nodeName"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    assert all("per-device" in d.unsupported for d in parse_resource_slice(per_device).devices)


def test_a_claim_keeps_requests_constraints_allocation_and_consumers() -> None:
    parsed = parse_resource_claim(claim_obj())
    assert parsed.key == "ml/web-0-gpu-x7k2"
    assert parsed.requests == (
        DeviceRequest(
            name="gpu",
            device_class="gpu.example.com",
            selectors=("device.attributes['gpu.example.com'].healthy",),
            count=2,
            tolerations=(Toleration("example.com/maintenance", "Exists", "", ""),),
        ),
        DeviceRequest(
            name="any",
            first_available=(
                DeviceRequest(name="big", device_class="big", allocation_mode="All"),
                DeviceRequest(name="small", device_class="small"),
            ),
        ),
    )
    assert parsed.constraints == (
        ("matchAttribute", "pci.example.com/root", ("gpu",)),
        ("distinctAttribute", "gpu.example.com/index", ()),
    )
    assert parsed.allocated and parsed.node_name == "n1"
    assert parsed.results[0] == AllocatedDevice("gpu", "gpu.example.com", "n1", "gpu-0")
    assert parsed.reserved_for == ("p-uid",)
    assert parsed.owner is not None and parsed.owner.uid == "p-uid"


def test_an_unallocated_claim_and_a_device_class() -> None:
    claim = claim_obj()
    del claim["status"]
    parsed = parse_resource_claim(claim)
    assert (parsed.allocated, parsed.results, parsed.reserved_for, parsed.node_name) == (False, (), (), "")
    cls = parse_device_class(
        {
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
        }
    )
    assert cls.selectors == ("device.driver == 'gpu.example.com'",)


def put(path: tuple[Any, ...], value: Any) -> Callable[[Obj], None]:
    def edit(obj: Obj) -> None:
        parent = obj
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = value

    return edit


DEVICE = ("spec", "devices", 0)
REQUEST = ("spec", "devices", "requests", 0, "exactly")
COUNTERS = ("spec", "devices", 1, "consumesCounters")
TOLERATION = (*REQUEST, "tolerations", 0)
BAD: list[tuple[str, Callable[[], Obj], Callable[[Obj], None], str]] = [
    ("no driver", slice_obj, put(("spec", "driver"), ""), "spec.driver"),
    ("a negative generation", slice_obj, put(("spec", "pool", "generation"), -1), "spec.pool.generation"),
    ("no slice count", slice_obj, put(("spec", "pool", "resourceSliceCount"), None), "resourceSliceCount"),
    ("two reaches", slice_obj, put(("spec", "allNodes"), True), "exactly one of nodeName"),
    ("two attribute kinds", slice_obj, put((*DEVICE, "attributes", "model", "int"), 1), "exactly one"),
    (
        "a bad version",
        slice_obj,
        put(
            (
                *DEVICE,
                "attributes",
                "v",
            ),
            {"version": "v1.2"},
        ),
        "semantic version",
    ),
    ("a long string", slice_obj, put((*DEVICE, "attributes", "s"), {"string": "x" * 65}), "longer than 64"),
    ("a bool int", slice_obj, put((*DEVICE, "attributes", "i"), {"int": True}), ".int must be an integer"),
    ("a bad name", slice_obj, put((*DEVICE, "attributes", "a b"), {"int": 1}), "not a valid attribute"),
    ("a bad capacity", slice_obj, put((*DEVICE, "capacity", "memory"), {"value": "lots"}), "capacity"),
    ("a negative capacity", slice_obj, put((*DEVICE, "capacity", "memory"), {"value": "-1"}), "negative"),
    ("too many devices", slice_obj, put(("spec", "devices"), [{"name": f"d{i}"} for i in range(129)]), "129"),
    ("duplicate devices", slice_obj, put(("spec", "devices"), [{"name": "d"}, {"name": "d"}]), "duplicate"),
    ("devices not a list", slice_obj, put(("spec", "devices"), {}), "spec.devices must be a list"),
    (
        "an empty counter set",
        slice_obj,
        put(("spec", "sharedCounters"), [{"name": "s", "counters": {}}]),
        "sharedCounters[0].counters is required",
    ),
    (
        "both counters and devices",
        slice_obj,
        put(("spec", "sharedCounters"), [{"name": "s", "counters": {"c": {"value": "1"}}}]),
        "must not have both sharedCounters and devices",
    ),
    ("no counters consumed", slice_obj, put((*COUNTERS, 0, "counters"), {}), "consumesCounters[0].counters"),
    (
        "a counter set twice",
        slice_obj,
        put(COUNTERS, [{"counterSet": "s", "counters": {"c": {"value": 1}}}] * 2),
        "duplicated",
    ),
    ("a bad counter", slice_obj, put((*COUNTERS, 0, "counters", "memory"), {"value": "x"}), "memory.value"),
    ("a bad counter set name", slice_obj, put((*COUNTERS, 0, "counterSet"), "A B"), "DNS label"),
    ("a bad taint effect", slice_obj, put(("spec", "devices", 1, "taints", 0, "effect"), "Later"), "effect"),
    ("a taint without key", slice_obj, put(("spec", "devices", 1, "taints", 0, "key"), ""), "taints[0].key"),
    ("a bad toleration operator", claim_obj, put((*TOLERATION, "operator"), "In"), "tolerations[0].operator"),
    ("a value with Exists", claim_obj, put((*TOLERATION, "value"), "x"), "must be empty for operator Exists"),
    (
        "both constraint kinds",
        claim_obj,
        put(("spec", "devices", "constraints", 1, "matchAttribute"), "gpu.example.com/index"),
        "only one of matchAttribute, distinctAttribute",
    ),
    ("no class", claim_obj, put((*REQUEST, "deviceClassName"), None), "deviceClassName"),
    ("a zero count", claim_obj, put((*REQUEST, "count"), 0), ".count"),
    ("a bad mode", claim_obj, put((*REQUEST, "allocationMode"), "Some"), "allocationMode"),
    ("a long CEL", claim_obj, put((*REQUEST, "selectors"), [{"cel": {"expression": "x" * 10241}}]), "longer"),
    ("no CEL", claim_obj, put((*REQUEST, "selectors"), [{}]), "selectors[0].cel is required"),
    ("a claim without spec", claim_obj, put(("spec",), None), "spec is required"),
    (
        "both request forms",
        claim_obj,
        put(("spec", "devices", "requests", 0, "firstAvailable"), [{"name": "a", "deviceClassName": "c"}]),
        "exactly one of exactly, firstAvailable",
    ),
    (
        "a result without device",
        claim_obj,
        put(("status", "allocation", "devices", "results", 0, "device"), 1),
        "device",
    ),
    (
        "a consumer without uid",
        claim_obj,
        put(("status", "reservedFor", 0, "uid"), None),
        "reservedFor[0].uid",
    ),
]


@pytest.mark.parametrize(("case", "build", "edit", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_fields_raise_an_error_naming_the_object_and_field(
    case: str, build: Callable[[], Obj], edit: Callable[[Obj], None], needle: str
) -> None:
    obj = copy.deepcopy(build())
    edit(obj)
    parser = parse_resource_slice if obj["kind"] == "ResourceSlice" else parse_resource_claim
    with pytest.raises(ObjectError) as error:
        parser(obj)
    assert needle in str(error.value)
    assert obj["metadata"]["name"] in str(error.value)


def test_objects_nested_too_deeply_are_an_object_error() -> None:
    deep: Any = {}
    for _ in range(5000):
        deep = {"x": deep}
    obj = slice_obj()
    obj["spec"]["devices"][0]["attributes"]["model"] = deep
    with pytest.raises(ObjectError):
        parse_resource_slice(obj)


def test_pods_join_their_claims_with_the_generated_claim_names() -> None:
    obj = {
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "ml"},
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
                {"name": "shared", "resourceClaimName": "team-gpu"},
                {"name": "none", "resourceClaimTemplateName": "t"},
            ]
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": "gpu", "resourceClaimName": "web-0-gpu-x7k2"},
                {"name": "none"},
            ]
        },
    }
    assert parse_pod(obj).resource_claims == (
        PodClaimRef("gpu", template_name="gpu-template", generated_claim_name="web-0-gpu-x7k2"),
        PodClaimRef("shared", claim_name="team-gpu"),
        PodClaimRef("none", template_name="t"),
    )
    obj["spec"]["resourceClaims"].append({"resourceClaimName": "x"})
    with pytest.raises(ObjectError, match=r"spec.resourceClaims\[3\] needs a name"):
        parse_pod(obj)


def test_a_dump_with_dra_objects_fills_the_snapshot_and_reports_bad_ones() -> None:
    broken = slice_obj()
    broken["spec"]["driver"] = 5
    problems: list[str] = []
    snapshot = build_snapshot(
        [slice_obj(), broken, claim_obj(), {"kind": "DeviceClass", "metadata": {"name": "c"}}], problems
    )
    assert [len(snapshot.resource_slices), len(snapshot.resource_claims), len(snapshot.device_classes)] == [
        1,
        1,
        1,
    ]
    assert len(problems) == 1 and "spec.driver" in problems[0]


def class_obj() -> Obj:
    return {
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
    }


DRA_PARSERS: dict[str, Callable[[Any], Any]] = {
    "ResourceSlice": parse_resource_slice,
    "ResourceClaim": parse_resource_claim,
    "DeviceClass": parse_device_class,
}


@st.composite
def hostile_dra_objects(draw: st.DrawFn) -> tuple[str, Obj]:
    """A realistic DRA object with one to four values (or added keys) made hostile (``test_fuzz_cluster``)."""
    obj = copy.deepcopy(draw(st.sampled_from([slice_obj, claim_obj, class_obj]))())
    kind = obj["kind"]
    for parent, key in edit_places(draw, obj, paths):
        if isinstance(parent[key], dict) and draw(st.booleans()):
            added = draw(st.sampled_from(["name", "value", "int", "string", "version", "count", "x"]))
            parent[key][added] = draw(HOSTILE)
        else:
            parent[key] = draw(HOSTILE)
    return kind, obj


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_dra_objects())
def test_hostile_dra_objects_raise_only_object_errors(case: tuple[str, Obj]) -> None:
    kind, obj = case
    try:
        DRA_PARSERS[kind](obj)
    except ObjectError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 2000
