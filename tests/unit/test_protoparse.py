"""The protobuf reader builds the structs the JSON decoder builds, or raises ``Unhandled``.

Every object goes both ways: as JSON into ``fastparse`` (the path in use), and as the server's protobuf
(``tests/support/protowriter``: the server's field numbers, order and written-when-empty fields) into
``protoparse``. The structs must be equal (resource maps compared as the maps their JSON text holds,
volume sources by presence: that is all ``fastparse`` reads of them), and so must ``try_convert``'s values,
which must also equal ``parse.py``'s. Objects are first put in the form the server returns them in JSON
(whole-second times, ``resources: {}`` on every container, quantities as text, no kind on list items).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from descheduler.cluster.fastparse import FAST_KINDS, Unhandled, exact_item
from descheduler.cluster.parse import parse_node, parse_pod
from descheduler.cluster.protoparse import PROTO_KINDS, error_event_status, status_of
from descheduler.kube.api import Response, status_error
from descheduler.kube.cache import Interner
from tests.support import protowriter as pw
from tests.unit.test_fastparse import REALISTIC

Obj = dict[str, Any]
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "protobuf"
"""A LIST page of pods and one of nodes from a real kube-apiserver 1.35, each in protobuf and in JSON at the
same resourceVersion (``tests/controlplane``: a RuntimeClass's overhead, a sidecar, affinity, host ports,
spread, a terminating pod, kwok's statuses, a tainted cordoned node)."""


def served(obj: Obj, kind: str, item: bool) -> Obj:
    """``obj`` as kube-apiserver would return it in JSON: list items carry no kind, times are whole
    seconds, every container has ``resources``, quantities are text."""
    obj = copy.deepcopy(obj)
    if item:
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
    else:
        obj.update(kind=kind, apiVersion="v1")
    meta = obj.setdefault("metadata", {})
    obj.setdefault("spec", {})  # value structs: JSON writes them even when empty
    obj.setdefault("status", {})
    for key in ("creationTimestamp", "deletionTimestamp"):
        if isinstance(meta.get(key), str):
            meta[key] = meta[key].split(".")[0].rstrip("Z") + "Z"
    spec = obj.get("spec") or {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            container.setdefault("resources", {})
    status = obj.get("status") or {}
    for key in ("allocatable", "capacity"):
        if isinstance(status.get(key), dict):
            status[key] = {k: str(v) for k, v in status[key].items()}
    return obj


def plain(value: Any) -> Any:
    """A struct as nested builtins: resource texts as the maps they hold, volume sources as presence."""
    if isinstance(value, bool):
        return ("bool", value)  # True == 1: a flag read as a number must not pass
    if isinstance(value, msgspec.Raw):
        return ("raw", msgspec.json.decode(bytes(value)))
    if isinstance(value, msgspec.Struct):
        out = {name: plain(getattr(value, name)) for name in value.__struct_fields__}
        if type(value).__name__ == "_Volume":
            out = {name: v != "UNSET" for name, v in out.items()}
        return out
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return "UNSET" if value is msgspec.UNSET else value


def json_page_struct(kind: str, obj: Obj) -> Any:
    body = json.dumps({"kind": f"{kind}List", "metadata": {"resourceVersion": "7"}, "items": [obj]}).encode()
    decoded = FAST_KINDS[kind].decode_page(body)
    assert decoded is not None
    return decoded[0][0]


def proto_page_struct(kind: str, obj: Obj, empties: bool = True) -> Any:
    items, token, version = PROTO_KINDS[kind].decode_page(pw.list_body(kind, [obj], "7", "", empties))
    assert (len(items), token, version) == (1, "", "7")
    return items[0]


PARSE: dict[str, Callable[[Obj], Any]] = {"Pod": parse_pod, "Node": parse_node}
CASES = [(case, kind, build, fast) for case, kind, build, fast in REALISTIC if kind in PROTO_KINDS]


@pytest.mark.parametrize("empties", [True, False], ids=["server-empties", "minimal"])
@pytest.mark.parametrize(("case", "kind", "build", "fast"), CASES, ids=[c[0] for c in CASES])
def test_realistic_objects_read_from_protobuf_give_the_json_structs_and_values(
    case: str, kind: str, build: Callable[[], Obj], fast: bool, empties: bool
) -> None:
    obj = served(build(), kind, item=True)
    from_json, from_proto = json_page_struct(kind, obj), proto_page_struct(kind, obj, empties)
    assert plain(from_proto) == plain(from_json)
    value = FAST_KINDS[kind].try_convert(from_proto, Interner())
    assert value == FAST_KINDS[kind].try_convert(from_json, Interner())
    assert (value is not None) is fast
    if fast:
        assert value == PARSE[kind](exact_item(json.loads(json.dumps(obj)), kind))


@pytest.mark.parametrize("event_type", ["ADDED", "MODIFIED", "DELETED"])
@pytest.mark.parametrize(("case", "kind", "build", "fast"), CASES, ids=[c[0] for c in CASES])
def test_watch_frames_give_the_json_event(
    case: str, kind: str, build: Callable[[], Obj], fast: bool, event_type: str
) -> None:
    obj = served(build(), kind, item=False)
    decoded = FAST_KINDS[kind].decode_event(json.dumps({"type": event_type, "object": obj}).encode())
    assert decoded is not None
    etype, struct = PROTO_KINDS[kind].decode_event(pw.event_frame(event_type, kind, obj))
    assert (etype, plain(struct)) == (decoded[0], plain(decoded[1]))
    assert struct.kind == kind


def test_a_bookmark_gives_its_resource_version_and_annotation() -> None:
    bookmark = {"metadata": {"resourceVersion": "99", "annotations": {"k8s.io/initial-events-end": "true"}}}
    etype, struct = PROTO_KINDS["Pod"].decode_event(pw.event_frame("BOOKMARK", "Pod", bookmark))
    assert etype == "BOOKMARK"
    assert struct.metadata.resource_version == "99"
    assert struct.metadata.annotations == {"k8s.io/initial-events-end": "true"}


POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}}


def pod_with(path: tuple[Any, ...], value: Any) -> Obj:
    pod = copy.deepcopy(POD)
    node: Any = pod
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[path[-1]] = value
    return pod


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "tolerations"), [{"key": "k", "effect": "NoSchedule"}]),  # operator "" -> Equal
        (("spec", "tolerations"), [{"operator": "Exists"}]),
        (("spec", "tolerations"), [{"key": "k", "operator": "Equal", "value": "v", "tolerationSeconds": 5}]),
        (("spec", "priority"), -2147483648),
        (("spec", "priority"), 0),
        (("spec", "nodeName"), "n1"),
        (("spec", "nodeSelector"), {"a": "1", "b": ""}),
        (("spec", "overhead"), {"memory": "120Mi", "cpu": "250m"}),
        (("spec", "resources"), {}),
        (("spec", "resources"), {"limits": {"memory": "1Gi"}, "claims": [{"name": "gpu", "request": "r"}]}),
        (("spec", "containers", 0, "resources"), {"requests": {"cpu": "1", "example.com/dongle": "3"}}),
        (("spec", "containers", 0, "resources"), {"claims": [{"name": "gpu"}]}),
        (("spec", "containers", 0, "restartPolicy"), "Always"),
        (
            ("spec", "containers", 0, "ports"),
            [{"containerPort": 80}, {"name": "h", "containerPort": 1, "hostPort": 2}],
        ),
        (("spec", "volumes"), [{"name": "v", "emptyDir": {}}, {"name": "c", "configMap": {"name": "x"}}]),
        (("spec", "volumes"), [{"name": "v", "persistentVolumeClaim": {"claimName": "x"}}]),
        (("spec", "affinity"), {"nodeAffinity": {}}),
        (("spec", "affinity"), {"podAntiAffinity": {}}),
        (
            ("spec", "affinity"),
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n"]}]},
                            {},
                        ]
                    },
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 1,
                            "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                        }
                    ],
                }
            },
        ),
        (
            ("spec", "affinity"),
            {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "podAffinityTerm": {"topologyKey": "zone", "matchLabelKeys": ["x"]}}
                    ]
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                            "namespaceSelector": {},
                            "topologyKey": "kubernetes.io/hostname",
                            "mismatchLabelKeys": ["y"],
                        }
                    ]
                },
            },
        ),
        (
            ("spec", "topologySpreadConstraints"),
            [
                {
                    "maxSkew": 1,
                    "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "minDomains": 2,
                    "nodeAffinityPolicy": "Honor",
                    "nodeTaintsPolicy": "Ignore",
                    "matchLabelKeys": ["pod-template-hash"],
                    "labelSelector": {"matchLabels": {"app": "w"}},
                }
            ],
        ),
        (("spec", "resourceClaims"), [{"name": "a", "resourceClaimName": ""}, {"name": "b"}]),
        (("metadata", "labels"), {"": "", "a/b": "ü" * 200, "k" * 130: "v"}),
        (("metadata", "annotations"), {"kubernetes.io/config.source": "file", "big": "x" * 70000}),
        (("metadata", "generation"), 3),
        (("metadata", "creationTimestamp"), "1969-12-31T23:59:59Z"),
        (("metadata", "creationTimestamp"), "9999-12-31T23:59:59Z"),
        (("metadata", "deletionTimestamp"), "1970-01-01T00:00:00Z"),
        (
            ("metadata", "ownerReferences"),
            [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "v", "controller": False},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s", "uid": "w", "controller": True},
            ],
        ),
        (
            ("status",),
            {"qosClass": "Guaranteed", "conditions": [{"type": "Ready", "status": ""}]},
        ),
        (
            ("status", "conditions"),
            [
                {"type": "Ready", "status": "False", "reason": "R", "message": "m" * 200},  # a 2-byte length
                {
                    "type": "PodResizePending",
                    "status": "True",
                    "reason": "Infeasible",
                    "observedGeneration": 300,
                },
                {"type": "Ready", "status": "True", "observedGeneration": 2},
                {"type": "DisruptionTarget", "status": "True", "reason": "r" * 130},
            ],
        ),
        (
            ("status",),
            {
                "qosClass": "Burstable",
                "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}],
                "containerStatuses": [
                    {"name": "c", "allocatedResources": {"cpu": "2"}, "resources": {}},
                    {"name": "d", "resources": {"requests": {"cpu": "1"}}},
                ],
                "initContainerStatuses": [{"name": "i"}],
                "resourceClaimStatuses": [{"name": "a", "resourceClaimName": "a-1"}, {"name": "b"}],
            },
        ),
    ],
)
def test_each_field_reads_as_json_holds_it(path: tuple[Any, ...], value: Any) -> None:
    obj = served(pod_with(path, value), "Pod", item=True)
    for empties in (True, False):
        assert plain(proto_page_struct("Pod", obj, empties)) == plain(json_page_struct("Pod", obj))


@pytest.mark.parametrize(
    ("spec", "status"),
    [
        ({}, {}),
        (
            {"unschedulable": False, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            {"allocatable": {"cpu": "1"}},
        ),
        (
            {
                "taints": [
                    {"key": "k", "value": "v", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
                ]
            },
            {},
        ),
        ({}, {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]}),
    ],
)
def test_node_fields_read_as_json_holds_them(spec: Obj, status: Obj) -> None:
    obj = {"metadata": {"name": "n"}, "spec": spec, "status": status}
    for empties in (True, False):
        assert plain(proto_page_struct("Node", obj, empties)) == plain(json_page_struct("Node", obj))


def test_resource_maps_are_the_text_the_server_writes() -> None:
    obj = served(
        pod_with(("spec", "containers", 0, "resources"), {"requests": {"memory": "1Gi", "cpu": "1"}}),
        "Pod",
        True,
    )
    container = proto_page_struct("Pod", obj).spec.containers[0]
    assert (
        bytes(container.resources) == b'{"requests":{"cpu":"1","memory":"1Gi"}}'
    )  # Go: keys sorted, compact


def test_resource_texts_do_not_depend_on_the_wire_order_or_on_an_omitted_empty_message() -> None:
    """Another encoder may order map entries differently or leave an empty message out; JSON would still
    hold the same text (``{}`` for a container's resources, which JSON always writes)."""
    entries = [(b"memory", b"1Gi"), (b"cpu", b"1")]
    requests = b"".join(
        pw.delimited(2, pw.delimited(1, k) + pw.delimited(2, pw.delimited(1, v))) for k, v in entries
    )
    containers = pw.delimited(2, pw.delimited(1, b"a") + pw.delimited(8, requests)) + pw.delimited(
        2, pw.delimited(1, b"b")
    )
    pod = pw.delimited(1, pw.delimited(1, b"p")) + pw.delimited(2, containers)
    body = pw.envelope("PodList", "v1", pw.delimited(2, pod))
    first, second = PROTO_KINDS["Pod"].decode_page(body)[0][0].spec.containers
    assert bytes(first.resources) == b'{"requests":{"cpu":"1","memory":"1Gi"}}'
    assert bytes(second.resources) == b"{}"


def test_pods_of_one_workload_share_one_container_struct() -> None:
    body = pw.list_body(
        "Pod", [served(POD, "Pod", True), served(pod_with(("metadata", "name"), "q"), "Pod", True)]
    )
    first, second = PROTO_KINDS["Pod"].decode_page(body)[0]
    assert first.spec.containers[0] is second.spec.containers[0]
    assert first.metadata is not second.metadata


def frame_of(payload: bytes) -> bytes:
    return pw.delimited(1, b"ADDED") + pw.delimited(2, pw.delimited(1, payload))


GOOD_POD = pw.encode(pw.CORE + "Pod", POD)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (pw.list_body("Pod", [POD])[:-3], "truncated"),
        (b"k8s\x01" + pw.list_body("Pod", [POD])[4:], "another magic"),
        (b"{}", "JSON"),
        (pw.list_body("Node", [{"metadata": {"name": "n"}}]), "another kind of list"),
        (pw.MAGIC + pw.delimited(1, pw.delimited(2, b"PodList")), "no raw"),
        (
            pw.MAGIC
            + pw.delimited(1, pw.delimited(2, b"PodList"))
            + pw.delimited(2, b"")
            + pw.delimited(3, b"gzip"),
            "a content encoding",
        ),
        (
            pw.list_body("Pod", [pod_with(("metadata", "labels"), {"a": "b"})]).replace(
                b"\x01b", b"\x01\xff"
            ),
            "not UTF-8",
        ),
        (pw.envelope("PodList", "v1", pw.delimited(2, GOOD_POD + b"\x0b")), "a group wire type"),
        (
            pw.envelope("PodList", "v1", pw.delimited(2, pw.tag(1, 2) + b"\xff" * 11)),
            "a varint over 10 bytes",
        ),
        (
            pw.envelope("PodList", "v1", pw.delimited(2, pw.tag(1, 2) + pw.varint(500) + b"x")),
            "a length past the end",
        ),
        (
            pw.envelope(
                "PodList",
                "v1",
                pw.delimited(2, pw.delimited(1, pw.delimited(8, pw.tag(1, 0) + pw.varint(10**12)))),
            ),
            "a year past 9999",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_page_not_reproduced_exactly_is_unhandled(body: bytes, why: str) -> None:
    with pytest.raises(Unhandled):
        PROTO_KINDS["Pod"].decode_page(body)


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (pw.event_frame("ERROR", "Pod", POD), "an ERROR event"),
        (
            pw.delimited(1, b"ERROR") + pw.delimited(2, pw.delimited(1, pw.envelope("Status", "v1", b""))),
            "a Status",
        ),
        (pw.event_frame("ADDED", "Node", {"metadata": {"name": "n"}}), "another kind"),
        (pw.delimited(1, b"ADDED"), "no object"),
        (frame_of(GOOD_POD), "no envelope"),
        (pw.event_frame("ADDED", "Pod", POD)[:-2], "truncated"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_watch_frame_not_reproduced_exactly_is_unhandled(frame: bytes, why: str) -> None:
    with pytest.raises(Unhandled):
        PROTO_KINDS["Pod"].decode_event(frame)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (1_798_761_600, "2027-01-01T00:00:00Z"),
        (-1, "1969-12-31T23:59:59Z"),
        (None, None),  # Go's zero time, as the server sends it: an empty message; JSON leaves it out
        (-62135596800, None),  # the same time as seconds
        (-62135596799, "0001-01-01T00:00:01Z"),
    ],
)
def test_times_read_as_the_rfc_3339_text_json_has(seconds: int | None, text: str | None) -> None:
    time = b"" if seconds is None else pw.tag(1, 0) + pw.varint(seconds) + pw.tag(2, 0) + pw.varint(0)
    meta = pw.delimited(8, time)
    body = pw.envelope("PodList", "v1", pw.delimited(2, pw.delimited(1, pw.delimited(1, b"p") + meta)))
    assert PROTO_KINDS["Pod"].decode_page(body)[0][0].metadata.creation_timestamp == text


def status_body(**fields: Any) -> bytes:
    return pw.envelope("Status", "v1", pw.encode(pw.META + "Status", fields))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            status_body(status="Failure", message="too old", reason="Expired", code=410),
            {"kind": "Status", "status": "Failure", "message": "too old", "reason": "Expired", "code": 410},
        ),
        (
            status_body(
                message="slow down", reason="TooManyRequests", code=429, details={"retryAfterSeconds": 3}
            ),
            {
                "kind": "Status",
                "status": "",
                "message": "slow down",
                "reason": "TooManyRequests",
                "code": 429,
                "details": {"retryAfterSeconds": 3},
            },
        ),
        (pw.list_body("Pod", []), None),
        (b'{"kind": "Status"}', None),
        (status_body(code=500)[:-1], None),
    ],
    ids=["410", "429-retry-after", "not-a-status", "json", "truncated"],
)
def test_a_protobuf_status_reads_as_its_json_fields(body: bytes, expected: dict[str, Any] | None) -> None:
    assert status_of(body) == expected


def test_an_error_answer_in_protobuf_names_its_status() -> None:
    body = status_body(message="pods is forbidden", reason="Forbidden", code=403)
    error = status_error("GET", "/api/v1/pods", Response(403, {}, body))
    assert (error.status, error.reason, str(error.message)) == (403, "Forbidden", "pods is forbidden")


def test_only_an_error_event_has_a_status() -> None:
    error = pw.delimited(1, b"ERROR") + pw.delimited(
        2, pw.delimited(1, status_body(code=410, reason="Expired"))
    )
    assert error_event_status(error) == {
        "kind": "Status",
        "status": "",
        "message": "",
        "reason": "Expired",
        "code": 410,
    }
    assert error_event_status(pw.event_frame("ADDED", "Pod", POD)) is None


@pytest.mark.parametrize("kind", ["Pod", "Node"])
def test_the_real_servers_protobuf_pages_read_as_its_json_pages(kind: str) -> None:
    proto = (REAL / f"{kind.lower()}s.pb").read_bytes()
    plain_json = (REAL / f"{kind.lower()}s.json").read_bytes()
    items, token, version = PROTO_KINDS[kind].decode_page(proto)
    decoded = FAST_KINDS[kind].decode_page(plain_json)
    assert decoded is not None and (token, version) == decoded[1:]
    assert len(items) == len(decoded[0]) >= 2
    exact_items = json.loads(plain_json)["items"]
    for from_proto, from_json, obj in zip(items, decoded[0], exact_items, strict=True):
        assert plain(from_proto) == plain(from_json)
        value = FAST_KINDS[kind].try_convert(from_proto, Interner())
        assert value is not None and value == FAST_KINDS[kind].try_convert(from_json, Interner())
        assert value == PARSE[kind](exact_item(obj, kind))
    if kind == "Pod":  # the resource texts are the server's own, byte for byte
        raws = [bytes(c.resources) for p in items for c in p.spec.containers]
        assert raws == [bytes(c.resources) for p in decoded[0] for c in p.spec.containers]
        assert any(p.metadata.deletion_timestamp for p in items)


@pytest.mark.parametrize("kind", ["Pod", "Node"])
def test_the_test_writer_writes_what_the_real_server_sends(kind: str) -> None:
    """The other tests and the benchmark rely on it: byte for byte, envelope included."""
    page = json.loads((REAL / f"{kind.lower()}s.json").read_bytes())
    body = pw.list_body(kind, page["items"], page["metadata"]["resourceVersion"])
    assert body == (REAL / f"{kind.lower()}s.pb").read_bytes()


@pytest.mark.parametrize("kind", ["Pod", "Node"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_damaged_page_is_read_or_unhandled_never_a_crash(kind: str, data: st.DataObject) -> None:
    """A page cut short or with bytes changed (a broken proxy, a bug on the server's side) is either read or
    handed to the JSON path (``Unhandled``): never another exception, which would end the reflector's
    turn without naming the object."""
    body = bytearray((REAL / f"{kind.lower()}s.pb").read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(4, len(body) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(body)))
    with contextlib.suppress(Unhandled):
        PROTO_KINDS[kind].decode_page(bytes(body[:cut]))
