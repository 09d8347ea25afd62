"""Hostile or broken cluster data (issue 25): each object is handled by its stated rule, never a traceback.

- a node whose raw-allocatable annotation cannot be read keeps ``status.allocatable``, with the reason;
- a node whose allocatable is absurd, a pod whose requests, priority or creation time are, is refused
  naming the object and the field (the live cache leaves it out and distrusts the pod's node);
- dumps and usage files: size, gzip ratio, nesting, NUL bytes, duplicate and alias tricks are refused
  with one line naming the file, in bounded memory (a gzip bomb is read in a subprocess that reports its
  peak RSS);
- values at the edge of what is accepted go through the planner and the renderer without a crash;
- names with control or bidirectional characters are escaped in text output, exact in JSON.
"""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from descheduler.cli import main
from descheduler.cluster import dump
from descheduler.cluster.build import build_snapshot
from descheduler.cluster.fastparse import FAST_KINDS
from descheduler.cluster.parse import (
    INT64_MAX,
    RAW_ALLOCATABLE_ANNOTATION,
    ObjectError,
    parse_node,
    parse_pod,
)
from descheduler.report.text import escape
from descheduler.simulate.inputs import InputError, load_cluster, load_usage
from tests.support.configs import low_node_load_yaml
from tests.unit import mutation
from tests.unit.mutation import parent_of
from tests.unit.test_cluster_dra import DRA_PARSERS, claim_obj, class_obj, slice_obj
from tests.unit.test_fastparse import REALISTIC
from tests.unit.test_fuzz_cluster import PARSERS, fast, wire, without_qos

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]


def node(**annotations: str) -> Obj:
    return {
        "kind": "Node",
        "metadata": {"name": "n1", "annotations": annotations},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str = "p1", node_name: str = "n1", cpu: Any = "100m") -> Obj:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


# -- nodes: raw-allocatable falls back -----------------------------------------------------------------

NESTED = "[" * 5000 + "]" * 5000  # within the length bound, past the recursion limit


@pytest.mark.parametrize(
    ("annotation", "why"),
    [
        ('{"cpu":"1e999999999"}', "cpu: '1e999999999'"),
        ('{"cpu":"1e400"}', "cpu: '1e400'"),
        ('{"cpu": 1e400}', "quantity must be finite"),
        ('{"memory":"99999999999999999999Ei"}', "memory"),
        ('{"cpu":"-2"}', "must not be negative"),
        ('{"cpu":"lots"}', "cpu: 'lots' is not a Kubernetes quantity"),
        ('{"cpu": "8", memory', "is not JSON"),
        ("", "is not JSON"),
        (NESTED, "is not JSON"),
        ('["cpu", "8"]', "must be a JSON object of quantities"),
        ('{"cpu":"' + "9" * 20_000 + '"}', "longer than 16384 characters"),
        ('{"cpu":"' + "1" * 65 + '"}', "longer than any quantity"),
    ],
)
def test_an_unreadable_raw_allocatable_annotation_falls_back_to_allocatable(
    annotation: str, why: str
) -> None:
    parsed = parse_node(node(**{RAW_ALLOCATABLE_ANNOTATION: annotation}))
    assert parsed.raw_allocatable is None
    assert parsed.threshold_base == {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}
    (warning,) = parsed.warnings
    assert warning.startswith(f"Node n1: annotation {RAW_ALLOCATABLE_ANNOTATION}")
    assert why in warning
    assert warning.endswith("ignored, thresholds use status.allocatable")
    assert len(warning) < 400  # one readable line, whatever the annotation held


def test_a_readable_raw_allocatable_annotation_still_wins_and_warns_nothing() -> None:
    parsed = parse_node(node(**{RAW_ALLOCATABLE_ANNOTATION: '{"cpu": "6"}'}))
    assert parsed.threshold_base["cpu"] == 6000
    assert parsed.warnings == ()


# -- objects refused, naming the object and the field --------------------------------------------------


def edit(path: tuple[Any, ...], value: Any) -> Callable[[Obj], None]:
    def apply(obj: Obj) -> None:
        target: Any = obj
        for part in path[:-1]:
            target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
        target[path[-1]] = value

    return apply


def both(*changes: Callable[[Obj], None]) -> Callable[[Obj], None]:
    def apply(obj: Obj) -> None:
        for change in changes:
            change(obj)

    return apply


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


REQUESTS = ("spec", "containers", 0, "resources", "requests", "cpu")
REFUSED: list[tuple[str, Callable[[], Obj], Callable[[Obj], None], str]] = [
    (
        "absurd cpu allocatable",
        node,
        edit(("status", "allocatable", "cpu"), "1e400"),
        "status.allocatable.cpu",
    ),
    (
        "allocatable beyond int64",
        node,
        edit(("status", "allocatable", "memory"), str(INT64_MAX + 1)),
        "out of range",
    ),
    ("negative allocatable", node, edit(("status", "allocatable", "cpu"), "-1"), "must not be negative"),
    ("allocatable as JSON infinity", node, edit(("status", "allocatable", "cpu"), float("inf")), "finite"),
    (
        "a request of 1e999999999",
        pod,
        edit(REQUESTS, "1e999999999"),
        "spec.containers[0].resources.requests.cpu",
    ),
    ("a request of 1e400 as a number", pod, edit(REQUESTS, 1e300), "out of range"),
    ("a 1,000-character quantity", pod, edit(REQUESTS, "1" * 1000), "longer than any quantity"),
    (
        "a created year 9999",
        pod,
        edit(("metadata", "creationTimestamp"), "9999-12-31T23:59:59Z"),
        "year 9999 is outside 1970..2999",
    ),
    (
        "a created year 1",
        pod,
        edit(("metadata", "creationTimestamp"), "0001-01-01T00:00:00Z"),
        "metadata.creationTimestamp",
    ),
    ("a garbage creation time", pod, edit(("metadata", "creationTimestamp"), "yesterday"), "not an RFC 3339"),
    ("a creation time as a number", pod, edit(("metadata", "creationTimestamp"), 12), "not an RFC 3339"),
    (
        "a megabyte creation time",
        pod,
        edit(("metadata", "creationTimestamp"), "2" * 2**20),
        "not an RFC 3339",
    ),
    ("a priority beyond int32", pod, edit(("spec", "priority"), 2**31), "spec.priority must be an integer"),
    ("a priority of true", pod, edit(("spec", "priority"), True), "spec.priority must be an integer"),
    ("a label value that is a map", pod, edit(("metadata", "labels"), {"a": {"b": 1}}), "metadata.labels.a"),
    ("a label nested 5,000 deep", pod, edit(("metadata", "labels"), {"a": deep(5000)}), "metadata.labels.a"),
    (
        "a taint key nested 5,000 deep",
        node,
        edit(("spec", "taints"), [{"key": deep(5000)}]),
        "spec.taints[0].key must be a string",
    ),
    ("a name that is a list", pod, edit(("metadata", "name"), ["x"] * 10_000), "metadata.name is required"),
    # issue 37, point 17: a field of the wrong type is refused, never a traceback, never taken for nothing
    (
        "container resources as a string, no qosClass to spare deriving it",
        pod,
        both(edit(("status", "qosClass"), None), edit(("spec", "containers", 0, "resources"), "cpu: 2")),
        "Pod default/p1: spec.containers[0].resources must be an object, got 'cpu: 2'",
    ),
    (
        "container resources as a string (not a pod that asks for nothing)",
        pod,
        edit(("spec", "containers", 0, "resources"), "cpu: 2"),
        "spec.containers[0].resources must be an object",
    ),
    (
        "a container that is a string",
        pod,
        edit(("spec", "containers", 0), "app"),
        "spec.containers[0] must be",
    ),
    ("init containers as a map", pod, edit(("spec", "initContainers"), {"a": 1}), "spec.initContainers must"),
    ("pod-level resources as a list", pod, edit(("spec", "resources"), ["cpu"]), "spec.resources must be"),
    ("a volume that is a string", pod, edit(("spec", "volumes"), ["scratch"]), "spec.volumes[0] must be"),
    ("container statuses as a string", pod, edit(("status", "containerStatuses"), "x"), "containerStatuses"),
    (
        "a nodeName that is a map",
        pod,
        edit(("spec", "nodeName"), {"n1": 1}),
        "spec.nodeName must be a string",
    ),
    (
        "a toleration key that is a list",
        pod,
        edit(("spec", "tolerations"), [{"key": []}]),
        "tolerations[0].key",
    ),
    (
        "an owner's controller flag as text",
        pod,
        edit(("metadata", "ownerReferences"), [{"kind": "ReplicaSet", "name": "r", "controller": "false"}]),
        "metadata.ownerReferences[0].controller must be a boolean",
    ),
    ("a node condition that is a string", node, edit(("status", "conditions"), ["Ready"]), "conditions[0]"),
]


@pytest.mark.parametrize(("case", "build", "change", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_an_absurd_object_is_refused_naming_the_object_and_field(
    case: str, build: Callable[[], Obj], change: Callable[[Obj], None], message: str
) -> None:
    obj = build()
    change(obj)
    problems: list[str] = []
    snapshot = build_snapshot([obj], problems)
    assert (snapshot.nodes, snapshot.pods) == ((), ())
    (problem,) = problems
    assert problem.startswith(("Node ", "Pod ")), problem
    assert message in problem
    assert len(problem) < 600 and "\n" not in problem


def test_values_at_the_edge_are_accepted() -> None:
    edge = pod(cpu=f"{INT64_MAX}m")
    edge["spec"]["priority"] = 2**31 - 1
    edge["metadata"]["creationTimestamp"] = "2999-12-31T23:59:59Z"
    parsed = parse_pod(edge)
    assert (parsed.requests["cpu"], parsed.priority) == (INT64_MAX, 2**31 - 1)


# -- every field, every wrong type (issue 37, point 17) ---------------------------------------------------


ALL_PARSERS: dict[str, Callable[[Any], Any]] = {**PARSERS, **DRA_PARSERS}
EVERY_FIELD_BASES = [
    *((case, kind, build) for case, kind, build, _ in REALISTIC),
    *(
        (f"{case}, no qosClass", kind, without_qos(build))
        for case, kind, build, _ in REALISTIC
        if kind == "Pod"
    ),
    ("a ResourceSlice", "ResourceSlice", slice_obj),
    ("a ResourceClaim", "ResourceClaim", claim_obj),
    ("a DeviceClass", "DeviceClass", class_obj),
]
WRONG_TYPES: list[Any] = ["text", 7, 2.5, True, ["x"], {"x": "y"}]
"""One value of each JSON type: whatever a field holds, at least five of these are of the wrong type."""
NAMING_FIELDS = {("kind",), ("metadata",), ("metadata", "name"), ("metadata", "namespace")}
"""Fields that name the object: replaced, the message names what is left of it."""


@pytest.mark.parametrize(("case", "kind", "build"), EVERY_FIELD_BASES, ids=[b[0] for b in EVERY_FIELD_BASES])
def test_any_field_of_a_valid_object_given_a_wrong_type_is_refused_naming_it_or_read_alike_by_both_parsers(
    case: str, kind: str, build: Callable[[], Obj]
) -> None:
    base = wire(build())
    base.setdefault("kind", kind)
    meta = base["metadata"]
    named = (
        f"{kind} {meta['namespace']}/{meta['name']}" if meta.get("namespace") else f"{kind} {meta['name']}"
    )
    escaped = []
    for path in mutation.paths(base):
        for wrong in WRONG_TYPES:
            obj = copy.deepcopy(base)
            parent_of(obj, path)[path[-1]] = copy.deepcopy(wrong)
            try:
                expected = ALL_PARSERS[kind](obj)
            except ObjectError as exc:
                expected = exc
                message = str(exc)
                assert "\n" not in message and len(message) < 1000, message
                assert path[:2] in NAMING_FIELDS or message.startswith(f"{named}: "), (path, message)
            except Exception as exc:  # what the test is for: nothing else may escape
                escaped.append(f"{path} = {wrong!r}: {type(exc).__name__}: {exc}")
                continue
            if kind in FAST_KINDS:
                got = fast(kind, obj)
                assert got is None or got == expected, (path, wrong, expected)
    assert not escaped, "\n".join(escaped[:20])


# -- the planner and the renderer on the largest accepted values ---------------------------------------

CONFIG = low_node_load_yaml(
    "{lowThresholds: {cpu: 20, memory: 20}, highThresholds: {cpu: 50, memory: 50},\n"
    "           anomalyCondition: {consecutiveAbnormalities: 1}}"
)


def _cluster(pods: list[Obj], hot_cpu: str = "4", cool_cpu: str = "64") -> str:
    nodes = []
    for name, cpu in (("hot", hot_cpu), ("cool", cool_cpu)):
        item = node()
        item["metadata"]["name"] = name
        item["status"]["allocatable"] = {"cpu": cpu, "memory": "9223372036854775807", "pods": "110"}
        nodes.append(item)
    return json.dumps({"kind": "List", "items": nodes + pods})


def _simulate(
    tmp_path: Path, cluster: str, usage: Obj, output: str, capsys: pytest.CaptureFixture[str]
) -> str:
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "cluster.json").write_text(cluster)
    (tmp_path / "usage.json").write_text(json.dumps(usage))
    code = main([
        "simulate", "--config", str(tmp_path / "config.yaml"), "--cluster", str(tmp_path / "cluster.json"),
        "--usage", str(tmp_path / "usage.json"), "--output", output, "--cycles", "2",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_simulate_names_a_container_whose_resources_are_a_string_instead_of_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37, point 17, as reported: a hand-written dump (no ``status.qosClass``) with a string."""
    bad = pod()
    bad["spec"]["containers"][0]["resources"] = "requests: {cpu: 2}"
    del bad["status"]["qosClass"]
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "cluster.json").write_text(_cluster([bad]))
    (tmp_path / "usage.json").write_text(json.dumps({"nodes": {}, "pods": {}}))
    code = main([
        "simulate", "--config", str(tmp_path / "config.yaml"), "--cluster", str(tmp_path / "cluster.json"),
        "--usage", str(tmp_path / "usage.json"), "--cycles", "1",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0
    assert "Pod default/p1: spec.containers[0].resources must be an object" in err
    assert "Traceback" not in err and "AttributeError" not in err


def _edge_pods(name: str) -> list[Obj]:
    big = pod(name, "hot", cpu="1")
    big["metadata"]["creationTimestamp"] = "2999-12-31T23:59:59Z"
    big["spec"]["priority"] = -(2**31)
    big["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "9" * 5000}
    huge = pod("huge", "hot", cpu=f"{INT64_MAX}m")
    huge["spec"]["priority"] = 2**31 - 1
    return [big, huge]


def test_the_largest_accepted_values_plan_and_render_without_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    usage = {
        "nodes": {"hot": {"cpu": "3900m", "memory": "1Gi"}, "cool": {"cpu": "1", "memory": "1Gi"}},
        "pods": {
            "default/p1": {"cpu": "3", "memory": "1Gi"},
            "default/huge": {"cpu": "1", "memory": str(INT64_MAX)},
        },
    }
    text = _simulate(tmp_path, _cluster(_edge_pods("p1")), usage, "text", capsys)
    assert "2 cycle(s)" in text
    assert "3000-01-01" in text  # simulate's clock starts after the newest pod, still a date
    assert json.loads(_simulate(tmp_path, _cluster(_edge_pods("p1")), usage, "json", capsys))["cycles"]


# -- text output: names cannot rewrite a line ----------------------------------------------------------

RLO_NAME = "invoice-\u202egnp.exe"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain-name", "plain-name"),
        (RLO_NAME, "invoice-\\u202egnp.exe"),
        ("a\u2066b\u2069c\u200e\u200f", "a\\u2066b\\u2069c\\u200e\\u200f"),
        ("line\nbreak\r\x1b[2J\x85", "line\\u000abreak\\u000d\\u001b[2J\\u0085"),
        ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("ünïcode names stay", "ünïcode names stay"),
    ],
)
def test_escape_shows_control_and_bidi_characters_as_escapes(text: str, shown: str) -> None:
    assert escape(text) == shown


def test_simulate_text_escapes_a_right_to_left_override_and_json_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [pod(RLO_NAME, "hot", cpu="3")]
    pods[0]["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}
    ]
    workload = {"kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": "default", "uid": "u"}}
    workload["spec"] = {"replicas": 3}
    usage = {
        "nodes": {"hot": {"cpu": "3900m", "memory": "1Gi"}, "cool": {"cpu": "1", "memory": "1Gi"}},
        "pods": {f"default/{RLO_NAME}": {"cpu": "3", "memory": "1Gi"}},
    }
    cluster = _cluster([*pods, workload])
    text = _simulate(tmp_path, cluster, usage, "text", capsys)
    assert "\u202e" not in text
    assert "default/invoice-\\u202egnp.exe" in text
    document = json.loads(_simulate(tmp_path, cluster, usage, "json", capsys))
    assert document["cycles"][0]["evictions"][0]["pod"] == f"default/{RLO_NAME}"


# -- dumps and usage files -----------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"kind": "List", "items": [' + b"[" * 100_000, "nested too deeply"),
        (b'{"kind": "List", "items": [{"kind": "Node", "x": ' + b"9" * 5000 + b"}]}", "4300"),
        (b'{"kind": "List", "kind": "PodList", "items": []}', "duplicate key 'kind'"),
        (b'{"kind": "List", "items": [], "items": []}', "duplicate key 'items'"),
        (b'{"kind": "List", "items": []}\x00\x00', "a NUL character at offset 29"),
        (b"\x00" * 4096, "a NUL character at offset 0"),
        (gzip.compress(b"\x00" * 2**20), "a NUL character"),
        (b"a: &x [1]\nb: *x\n", "aliases"),
        (b"kind: Node\nkind: Pod\n", "duplicate key 'kind'"),
        (b"a:\n" + b"".join(b"  " * i + b"- \n" for i in range(1, 200)), "nesting deeper than"),
    ],
    ids=[
        "deep-json",
        "huge-int",
        "dup-kind",
        "dup-items",
        "nul-after",
        "zeros",
        "gzip-zeros",
        "alias",
        "dup-yaml",
        "deep-yaml",
    ],
)
def test_a_hostile_dump_is_refused_with_one_line_naming_the_file(
    content: bytes, message: str, tmp_path: Path
) -> None:
    path = _write(tmp_path / "dump", content)
    with pytest.raises(InputError) as error:
        load_cluster(path)
    (line,) = error.value.problems
    assert line.startswith(f"{path}: ") and message in line


def test_size_limits_are_checked_on_disk_and_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = ",".join(json.dumps(pod(f"p{i}")) for i in range(50))
    path = _write(tmp_path / "dump.json", f'{{"kind": "List", "items": [{items}]}}'.encode())
    monkeypatch.setattr(dump, "MAX_DUMP_BYTES", 1000)
    with pytest.raises(InputError, match=r"bytes, more than the limit of 1000 bytes for a cluster file"):
        load_cluster(path)
    monkeypatch.setattr(dump, "MAX_DUMP_BYTES", 2**30)
    monkeypatch.setattr(dump, "MAX_ITEM_CHARS", 100)
    monkeypatch.setattr(dump, "CHUNK", 64)
    with pytest.raises(InputError, match=r"one value is larger than the limit of 100 characters"):
        load_cluster(path)


def test_a_yaml_dump_over_the_document_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dump, "MAX_DOCUMENT_BYTES", 4096)
    monkeypatch.setattr(dump, "CHUNK", 1024)
    path = _write(
        tmp_path / "dump.yaml", b"kind: List\nitems:\n" + b"- {kind: Namespace, metadata: {name: n}}\n" * 200
    )
    with pytest.raises(InputError, match="a YAML cluster file larger than 4096 bytes"):
        load_cluster(path)


@pytest.mark.parametrize(
    ("usage", "message"),
    [
        ("nodes:\n  n1: &s {cpu: 1, memory: 1Gi}\n  n2: *s\n", "aliases"),
        ("nodes:\n  n1: {cpu: 1, memory: 1Gi}\nnodes: {}\n", "duplicate key 'nodes'"),
        ("nodes:\n  n1: {cpu: 1e999999999, memory: 1Gi}\n", "nodes.n1.cpu"),
        ("nodes:\n  n1: {cpu: '1e400', memory: 1Gi}\n", "nodes.n1.cpu"),
        ('{"nodes": {"n1": {"cpu": 1e400, "memory": "1Gi"}}}', "nodes.n1.cpu"),
        (f"nodes:\n  n1: {{cpu: 1, memory: '{INT64_MAX + 1}'}}\n", "out of range"),
        ("nodes:\n  n1: {cpu: 1, memory: 1Gi, age: 999999999999999999h}\n", "nodes.n1.age"),
    ],
)
def test_a_hostile_usage_file_is_refused_naming_the_entry(usage: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(
        "kind: List\nitems:\n"
        "- {kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: '4', memory: 8Gi}}}\n"
    )
    (tmp_path / "usage.yaml").write_text(usage)
    snapshot = load_cluster(tmp_path / "cluster.yaml")
    with pytest.raises(InputError) as error:
        load_usage(tmp_path / "usage.yaml", snapshot)
    assert any(message in line for line in error.value.problems), error.value.problems


# -- gzip bombs: refused in bounded memory -------------------------------------------------------------

MEMBER = 2**20
"""Each gzip member expands to 1 MiB (about 1 KB compressed): 2,000 of them make a 2 MB bomb of 2 GiB."""


def _bomb(path: Path, head: bytes, filler: bytes, members: int = 2000) -> Path:
    """A multi-member gzip file (each member a valid gzip stream; readers concatenate them)."""
    member = gzip.compress(filler * (MEMBER // len(filler)), compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(head))
        for _ in range(members):
            out.write(member)
    return path


PEAK_RSS_BOUND = 400 * 2**20
"""Far below the 2 GiB the bomb expands to; the JSON path needs a few 16 Mi-character chunks, the YAML
path at most ``MAX_DOCUMENT_BYTES`` (128 MiB) before refusing."""
READ_IN_CHILD = """
import json, resource, sys
from descheduler.simulate.inputs import InputError, load_cluster
try:
    load_cluster(sys.argv[1])
    error = None
except InputError as exc:
    error = str(exc)
print(json.dumps({"error": error, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


@pytest.mark.parametrize(
    ("head", "filler", "message"),
    [
        (b'{"kind": "List", "items": [', b" ", "gzip expands more than 200 times"),
        (b'{"kind": "List", "items": [', b"[", "nested too deeply"),
        (b"kind: List\nitems: ", b"a", "a YAML cluster file larger than"),
        (b"", b"\x00", "a NUL character"),
    ],
    ids=["json-spaces", "json-brackets", "yaml-scalar", "zeros"],
)
def test_a_2mb_gzip_bomb_is_refused_in_bounded_memory(
    head: bytes, filler: bytes, message: str, tmp_path: Path
) -> None:
    path = _bomb(tmp_path / "bomb.json.gz", head, filler)
    assert path.stat().st_size < 2_500_000
    done = subprocess.run(
        [sys.executable, "-c", READ_IN_CHILD, str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["error"] is not None and result["error"].startswith(f"{path}: ")
    assert message in result["error"]
    assert result["peak"] < PEAK_RSS_BOUND, result


def test_a_plain_gzip_dump_of_a_usual_ratio_still_reads(tmp_path: Path) -> None:
    items = [pod(f"p{i}") for i in range(2000)]
    first = copy.deepcopy(node())
    text = json.dumps({"kind": "List", "items": [first, *items]}).encode()
    path = _write(tmp_path / "dump.json.gz", gzip.compress(text))
    assert len(text) / path.stat().st_size > 20  # repetitive, yet well inside the ratio
    assert len(load_cluster(path).pods) == 2000


def test_a_truncated_gzip_is_refused(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps({"kind": "List", "items": [node()]}).encode())
    path = _write(tmp_path / "dump.gz", data[: len(data) // 2])
    with pytest.raises(InputError, match="not a valid gzip file"):
        load_cluster(path)


def test_simulate_warns_of_a_node_on_its_allocatable_and_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = json.loads(_cluster([pod("p1", "hot", cpu="3")]))
    cluster["items"][0]["metadata"]["annotations"] = {RAW_ALLOCATABLE_ANNOTATION: '{"cpu":"1e999999999"}'}
    usage = {"nodes": {"hot": {"cpu": "1", "memory": "1Gi"}, "cool": {"cpu": "1", "memory": "1Gi"}}}
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    (tmp_path / "usage.json").write_text(json.dumps(usage))
    code = main([
        "simulate", "--config", str(tmp_path / "config.yaml"), "--cluster", str(tmp_path / "cluster.json"),
        "--usage", str(tmp_path / "usage.json"), "--output", "json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0
    assert captured.err.splitlines() == [
        f"warning: Node hot: annotation {RAW_ALLOCATABLE_ANNOTATION}: cpu: '1e999999999': "
        "exponent beyond +-64, out of range; ignored, thresholds use status.allocatable"
    ]
