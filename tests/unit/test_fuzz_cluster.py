"""Fuzzing the cluster readers with hostile values (issue 25): only the product's own errors escape.

Realistic objects (those of ``test_fastparse``) get values an attacker or a broken tool would write put
anywhere in them: absurd quantities (``1e999999999``, beyond int64, a thousand digits), out-of-range or
garbage times, control and bidirectional characters, values nested past the recursion limit, wrong
types. Then:

- ``parse.py`` raises ``ObjectError`` or returns a value, nothing else;
- the fast decoder (``fastparse``, the live cache's) never accepts what ``parse.py`` refuses, and what
  it accepts equals ``parse.py``'s value; the cache's page path keeps exactly the objects ``parse.py``
  accepts and names the others in its errors;
- a JSON or YAML dump and a usage file, mutated byte by byte or value by value, load or raise
  ``InputError``.

Bounded: a fixed number of examples each, no deadline (the point is what escapes, not how fast).
"""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from descheduler.cluster.fastparse import FAST_KINDS
from descheduler.cluster.parse import (
    ObjectError,
    parse_namespace,
    parse_pdb,
)
from descheduler.kube.cache import Interner
from descheduler.simulate.inputs import InputError, load_cluster, load_usage
from tests.unit import mutation
from tests.unit.mutation import edit_places
from tests.unit.test_fastparse import PARSERS as FAST_PARSERS
from tests.unit.test_fastparse import REALISTIC, reflector, stored

PARSERS = {**FAST_PARSERS, "PodDisruptionBudget": parse_pdb, "Namespace": parse_namespace}


def without_qos(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """The pod as written by hand for ``simulate``: no ``status.qosClass``, so ``parse.py`` derives it
    from the containers (a path of its own, which a pod from the API server never takes)."""

    def built() -> dict[str, Any]:
        obj = build()
        obj.get("status", {}).pop("qosClass", None)
        return obj

    return built


BASES = [(kind, build) for _, kind, build, _ in REALISTIC] + [
    (kind, without_qos(build)) for _, kind, build, _ in REALISTIC if kind == "Pod"
]
RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


HOSTILE_TEXT = [
    "1e999999999",
    "1e400",
    "-1e400",
    "1E-999999999",
    "99999999999999999999Ei",
    "9223372036854775808",
    "9223372036854775807m",
    "-1",
    "0.000000000000000000000000000001",
    "1" * 70,
    "9" * 5000,
    "1e64",
    "1e65",
    "8Ei",
    "2999-12-31T23:59:59Z",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "2026-13-45T99:00:00Z",
    "2026-01-01T00:00:00+25:00",
    "\u202eevil",
    "a\x00b",
    "\x1b[2J",
    "NaN",
    "Infinity",
    '{"cpu":"1e999999999"}',
    '{"cpu": 1e400}',
    '{"cpu":"-5"}',
    "[" * 3000,
    "",
]
HOSTILE = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 10**300]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([True, False, None, [], {}, nested(300), {"a": nested(300)}]).map(copy.deepcopy),
    st.text(max_size=12),
)


def paths(value: Any) -> list[tuple[Any, ...]]:
    """Every place a value sits, down to a depth of 8 (not into a hostile value nested hundreds deep)."""
    return mutation.paths(value, max_depth=8)


@st.composite
def hostile_objects(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A realistic object with one to four of its values (or added keys) made hostile."""
    kind, build = draw(st.sampled_from(BASES))
    obj = copy.deepcopy(build())
    if kind == "Node" and draw(st.booleans()):
        obj.setdefault("metadata", {}).setdefault("annotations", {})[RAW_ALLOCATABLE] = draw(
            st.sampled_from(HOSTILE_TEXT)
        )
    for parent, key in edit_places(draw, obj, paths):
        if isinstance(parent[key], dict) and draw(st.booleans()):
            parent[key][draw(st.sampled_from(["cpu", "memory", "x", "name", "key"]))] = draw(HOSTILE)
        else:
            parent[key] = draw(HOSTILE)
    return kind, obj


def wire(obj: Any) -> Any:
    """The object as the JSON decoder gives it (what the API server or a dump sends)."""
    return json.loads(json.dumps(obj))


def exact(kind: str, obj: Any) -> Any:
    """``parse.py``'s value or its ``ObjectError``; anything else escaping fails the test."""
    decoded = wire(obj)
    if isinstance(decoded, dict):
        decoded.setdefault("kind", kind)
    try:
        return PARSERS[kind](decoded)
    except ObjectError as exc:
        return exc


def fast(kind: str, obj: Any) -> Any:
    """The fast path's value, or None where it hands the object to ``parse.py``."""
    decoded = FAST_KINDS[kind].decode_page(json.dumps({"items": [obj]}).encode())
    if decoded is None:
        return None
    try:
        return FAST_KINDS[kind].convert(decoded[0][0], Interner())
    except Exception:  # the cache catches every exception of the fast path and falls back
        return None


@FUZZ
@given(hostile_objects())
def test_parse_raises_only_object_error_and_the_fast_path_never_accepts_what_it_refuses(
    case: tuple[str, dict[str, Any]],
) -> None:
    kind, obj = case
    expected = exact(kind, obj)
    if isinstance(expected, ObjectError):
        message = str(expected)
        assert "\n" not in message and len(message) < 1000, message
    got = fast(kind, obj)
    if got is not None:
        assert not isinstance(expected, ObjectError), f"fast path accepted what parse.py refuses: {expected}"
        assert got == expected


@FUZZ
@given(st.lists(hostile_objects(), min_size=1, max_size=4))
def test_the_cache_keeps_what_parse_accepts_and_names_the_rest(
    cases: list[tuple[str, dict[str, Any]]],
) -> None:
    kind = cases[0][0]
    objs = []
    for i, (_, obj) in enumerate(c for c in cases if c[0] == kind):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta["name"] = f"o{i}"  # distinct keys, so each object's fate can be checked
        objs.append(obj)
    r = reflector(kind, fast=True)
    body = json.dumps({"kind": f"{kind}List", "metadata": {"resourceVersion": "1"}, "items": objs}).encode()
    items, errors, _ = stored(r, body)
    for obj in objs:
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") is None:
            continue
        namespace = meta.get("namespace") or "default"
        key = f"{namespace}/{meta['name']}" if kind != "Node" else str(meta["name"])
        expected = exact(kind, obj)
        if isinstance(expected, ObjectError):
            assert key not in items and key in errors
        else:
            assert items.get(key) == expected and key not in errors


# -- files -------------------------------------------------------------------------------------------------


@st.composite
def dump_texts(draw: st.DrawFn) -> bytes:
    """A dump of hostile objects as JSON (plain or gzipped) or YAML, maybe with bytes changed after."""
    objs = [obj for _, obj in draw(st.lists(hostile_objects(), min_size=1, max_size=3))]
    form = draw(st.sampled_from(["json", "gzip", "yaml"]))
    if form == "yaml":
        try:
            data = yaml.safe_dump_all(wire(objs)).encode()
        except (yaml.YAMLError, RecursionError):
            data = json.dumps(objs).encode()
    else:
        data = json.dumps({"kind": "List", "items": objs}).encode()
    edits = draw(
        st.lists(st.tuples(st.integers(0, max(0, len(data) - 1)), st.binary(max_size=3)), max_size=3)
    )
    for at, replacement in edits:
        data = data[:at] + replacement + data[at + 1 :]
    return gzip.compress(data) if form == "gzip" else data


@FUZZ
@given(dump_texts())
def test_a_mutated_dump_loads_or_is_refused_with_input_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("dump") / "cluster"
    path.write_bytes(data)
    try:
        load_cluster(path)
    except InputError as exc:
        assert exc.problems and all(line.startswith(f"{path}: ") for line in exc.problems)


CLUSTER = json.dumps(
    {
        "kind": "List",
        "items": [
            {
                "kind": "Node",
                "metadata": {"name": "n1"},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
            },
            {"kind": "Pod", "metadata": {"name": "p1", "namespace": "default"}, "spec": {"nodeName": "n1"}},
        ],
    }
)
SAMPLE_KEYS = st.sampled_from(["cpu", "memory", "age", "nvidia.com/gpu", "\u202e"])


@st.composite
def usage_texts(draw: st.DrawFn) -> bytes:
    sample = st.dictionaries(SAMPLE_KEYS, HOSTILE, max_size=4)
    entry = sample | st.lists(sample, max_size=3) | HOSTILE
    doc: Any = {
        "nodes": draw(st.dictionaries(st.sampled_from(["n1", "n2", "\x00"]), entry, max_size=2)),
        "pods": draw(st.dictionaries(st.sampled_from(["default/p1", "p1", "a/b/c"]), entry, max_size=2)),
    }
    if draw(st.booleans()):
        doc = draw(HOSTILE)
    if draw(st.booleans()):
        try:
            text = yaml.safe_dump(wire(doc)).encode()
        except (yaml.YAMLError, RecursionError):
            text = json.dumps(doc).encode()
    else:
        text = json.dumps(doc).encode()
    edits = draw(
        st.lists(st.tuples(st.integers(0, max(0, len(text) - 1)), st.binary(max_size=3)), max_size=2)
    )
    for at, replacement in edits:
        text = text[:at] + replacement + text[at + 1 :]
    return text


@FUZZ
@given(usage_texts())
def test_a_hostile_usage_file_loads_or_is_refused_with_input_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    workdir: Path = tmp_path_factory.mktemp("usage")
    (workdir / "cluster.json").write_text(CLUSTER)
    snapshot = load_cluster(workdir / "cluster.json")
    (workdir / "usage").write_bytes(data)
    try:
        series = load_usage(workdir / "usage", snapshot)
    except InputError as exc:
        assert exc.problems
        return
    for samples in (*series.nodes.values(), *series.pods.values()):
        for sample in samples:
            assert all(abs(amount) <= 2**63 - 1 for amount in sample.resources.values())
            assert sample.age >= 0
