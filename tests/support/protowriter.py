"""A test-side protobuf writer: Kubernetes objects (their JSON dicts) encoded as kube-apiserver sends them
in ``application/vnd.kubernetes.protobuf``, to check ``descheduler.cluster.protoparse`` against.

Driven by the field numbers of k8s.io/api and apimachinery's ``generated.proto``, kept in
``tests/fixtures/k8s-proto-schema.json`` (``python -m tests.support.protowriter`` rebuilds it from the Go
module cache). Fields are written in field-number order, as Go's generated marshallers do; a field absent
from the dict is not written, except that the fields Go holds as values (not pointers, slices or maps)
are written empty, as the server's marshallers do.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import sys
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-proto-schema.json"
GO_MOD = Path.home() / "go" / "pkg" / "mod" / "k8s.io"
VERSION = "v0.35.6"
GO_TYPES = {
    "k8s.io.api.core.v1": f"api@{VERSION}/core/v1/types.go",
    "k8s.io.apimachinery.pkg.apis.meta.v1": f"apimachinery@{VERSION}/pkg/apis/meta/v1/types.go",
}
PROTOS = {
    "k8s.io.api.core.v1": f"api@{VERSION}/core/v1/generated.proto",
    "k8s.io.apimachinery.pkg.apis.meta.v1": f"apimachinery@{VERSION}/pkg/apis/meta/v1/generated.proto",
    "k8s.io.apimachinery.pkg.runtime": f"apimachinery@{VERSION}/pkg/runtime/generated.proto",
}
CORE = "k8s.io.api.core.v1."
META = "k8s.io.apimachinery.pkg.apis.meta.v1."
MAGIC = b"k8s\x00"
SPECIAL = {
    "k8s.io.apimachinery.pkg.api.resource.Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
    META + "Time",
    META + "MicroTime",
    META + "Duration",
    META + "FieldsV1",
    "k8s.io.apimachinery.pkg.runtime.RawExtension",
}

Schema = dict[str, dict[str, list[Any]]]
"""message -> JSON field name -> [number, kind ('string', 'int', 'bool', 'bytes', 'double', 'message',
'map'), message type or map value type, repeated, always]. ``always``: the Go field is neither a pointer,
a slice nor a map, so the server's marshaller writes it even when empty."""


def build_schema() -> Schema:
    """Every message of the three generated.proto files, read from the Go module cache."""
    schema: Schema = {}
    field_re = re.compile(r"^\s*(optional|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+);", re.M)
    map_re = re.compile(r"^\s*map<\s*string\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+);", re.M)
    for package, rel in PROTOS.items():
        text = (GO_MOD / rel).read_text()
        for m in re.finditer(r"^message (\w+) \{(.*?)^\}", text, re.S | re.M):
            fields: dict[str, list[Any]] = {}
            for label, ftype, name, number in field_re.findall(m.group(2)):
                fields[name] = [int(number), *_kind(ftype, package), label == "repeated"]  # always: below
            for vtype, name, number in map_re.findall(m.group(2)):
                kind, ref = _kind(vtype, package)
                fields[name] = [int(number), "map", ref if kind == "message" else kind, False]
            schema[f"{package}.{m.group(1)}"] = fields
    for package, rel in GO_TYPES.items():
        _mark_always(schema, package, (GO_MOD / rel).read_text())
    for fields in schema.values():
        for field in fields.values():
            if len(field) == 4:
                field.append(False)  # runtime's messages, and fields no Go struct names
    return _reachable(schema, [CORE + "Pod", CORE + "Node", META + "ListMeta", META + "Status"])


def _reachable(schema: Schema, roots: list[str]) -> Schema:
    """Only the messages a pod, a node, a list's metadata or a Status contain: a smaller fixture."""
    kept: Schema = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in kept or name not in schema:
            continue
        kept[name] = schema[name]
        todo.extend(f[2] for f in schema[name].values() if f[2] and "." in f[2])
    return kept


def _mark_always(schema: Schema, package: str, source: str) -> None:
    """Flag the fields whose Go type is a value (not ``*T``, ``[]T`` or ``map``): written when empty."""
    for m in re.finditer(r"^type (\w+) struct \{(.*?)^\}", source, re.S | re.M):
        fields = schema.get(f"{package}.{m.group(1)}")
        if fields is None:
            continue
        by_number = {f[0]: f for f in fields.values()}
        for gotype, number in re.findall(r"^\s*\w+\s+(\S+)\s+`[^`]*protobuf:\"\w+,(\d+),", m.group(2), re.M):
            field = by_number.get(int(number))
            if field is not None and len(field) == 4:
                field.append(not gotype.startswith(("*", "[]", "map[")))


def _kind(ftype: str, package: str) -> tuple[str, str | None]:
    scalars = {"string": "string", "int32": "int", "int64": "int", "bool": "bool", "bytes": "bytes"}
    if ftype in scalars:
        return scalars[ftype], None
    if ftype in ("double", "float"):
        return "double", None
    return "message", ftype.lstrip(".") if ftype.startswith(".") else f"{package}.{ftype}"


@cache
def schema() -> Schema:
    loaded: Schema = json.loads(SCHEMA_PATH.read_text())
    return loaded


# -- wire -----------------------------------------------------------------------------------------------
def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def delimited(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


def _seconds(text: str) -> tuple[int, int]:
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(parsed.timestamp() // 1), parsed.microsecond * 1000


def special(name: str, value: Any) -> bytes:
    """The messages whose JSON form is not an object."""
    if name.endswith("Quantity"):
        return delimited(1, str(value).encode())
    if name.endswith("IntOrString"):
        if isinstance(value, int):
            return tag(1, 0) + varint(0) + tag(2, 0) + varint(value)
        return tag(1, 0) + varint(1) + delimited(3, str(value).encode())
    if name.endswith(".Time"):  # seconds and nanos (always 0: JSON has whole seconds)
        seconds, _ = _seconds(value)
        return tag(1, 0) + varint(seconds) + tag(2, 0) + varint(0)
    if name.endswith("MicroTime"):
        seconds, nanos = _seconds(value)
        return tag(1, 0) + varint(seconds) + (tag(2, 0) + varint(nanos) if nanos else b"")
    if name.endswith("Duration"):
        raise NotImplementedError("Duration")
    return delimited(1, json.dumps(value, separators=(",", ":")).encode())  # FieldsV1, RawExtension


def _scalar(number: int, kind: str, value: Any) -> bytes:
    if kind == "string":
        return delimited(number, str(value).encode())
    if kind == "int":
        return tag(number, 0) + varint(int(value))
    if kind == "bool":
        return tag(number, 0) + varint(1 if value else 0)
    if kind == "bytes":
        return delimited(number, base64.b64decode(value))
    if kind == "double":
        return tag(number, 1) + struct.pack("<d", float(value))
    raise ValueError(kind)


def encode(name: str, obj: Any, strict: bool = True, empties: bool = True) -> bytes:
    """``obj`` (a JSON dict) as the message ``name``, as the server writes it: fields in number order,
        and the value fields (``always``) the dict lacks written empty. ``strict``: a key the schema lacks
        is an error (a typo in a test would otherwise encode nothing and pass). ``empties=False``: write only
    what the dict has (another encoder's choice, equally valid protobuf)."""
    if name in SPECIAL:
        raise ValueError(f"{name} is not an object message")
    fields = schema()[name]
    given = _inlined(fields, obj)
    out = []
    for key, (number, kind, ref, repeated, always) in fields.items():
        if given.get(key) is not None:
            out.append((number, _field(number, kind, ref, repeated, given[key], strict, empties)))
        elif empties and always and kind != "map" and not repeated:  # a named map or slice type is still one
            out.append((number, _empty(number, kind, ref)))
    unknown = [k for k in given if k not in fields and k not in ("kind", "apiVersion")]
    if unknown and strict:
        raise KeyError(f"{name} has no field {unknown[0]!r}")
    return b"".join(chunk for _, chunk in sorted(out, key=lambda item: item[0]))


def _empty(number: int, kind: str, ref: str | None) -> bytes:
    """What Go's marshaller writes for a value field left at its zero value."""
    if kind == "message":
        assert ref is not None
        if ref.endswith(".Time"):
            return delimited(number, b"")  # Go's zero time: an empty message
        if ref in SPECIAL:
            return delimited(number, special(ref, 0 if ref.endswith("IntOrString") else "0"))
        return delimited(number, encode(ref, {}))
    return _scalar(number, kind, 0 if kind in ("int", "bool", "double") else "")


def _inlined(fields: dict[str, list[Any]], obj: dict[str, Any]) -> dict[str, Any]:
    """Keys of an embedded struct (``json:",inline"``: a Volume's source, a Probe's handler) moved under
    the message field that holds them in protobuf."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key in fields or key in ("kind", "apiVersion"):
            out[key] = value
            continue
        for fname, (_, kind, ref, repeated, _always) in fields.items():
            if kind == "message" and not repeated and ref not in SPECIAL and key in schema().get(ref, {}):
                out.setdefault(fname, {})[key] = value
                break
        else:
            out[key] = value
    return out


def _one(number: int, kind: str, ref: str | None, value: Any, strict: bool, empties: bool) -> bytes:
    if kind == "message":
        assert ref is not None
        payload = special(ref, value) if ref in SPECIAL else encode(ref, value, strict, empties)
        return delimited(number, payload)
    return _scalar(number, kind, value)


def _field(
    number: int, kind: str, ref: str | None, repeated: bool, value: Any, strict: bool, empties: bool
) -> bytes:
    if value is None:
        return b""
    if kind == "map":
        chunks = []
        for key in sorted(value):  # Go's marshallers sort map keys
            vkind = "message" if ref and "." in ref else str(ref)
            entry = delimited(1, key.encode()) + _one(
                2, vkind, ref if vkind == "message" else None, value[key], strict, empties
            )
            chunks.append(delimited(number, entry))
        return b"".join(chunks)
    if repeated:
        return b"".join(_one(number, kind, ref, item, strict, empties) for item in value)
    return _one(number, kind, ref, value, strict, empties)


def envelope(kind: str, api_version: str, raw: bytes) -> bytes:
    """The ``k8s\\x00`` + ``runtime.Unknown`` wrapper the server puts around every object."""
    type_meta = delimited(1, api_version.encode()) + delimited(2, kind.encode())
    return MAGIC + delimited(1, type_meta) + delimited(2, raw) + delimited(3, b"") + delimited(4, b"")


def list_body(
    kind: str, items: list[Any], resource_version: str = "7", token: str = "", empties: bool = True
) -> bytes:
    """A LIST page (PodList, NodeList) as the server sends it."""
    meta = {"resourceVersion": resource_version, **({"continue": token} if token else {})}
    raw = delimited(1, encode(META + "ListMeta", meta)) + b"".join(
        delimited(2, encode(CORE + kind, item, empties=empties)) for item in items
    )
    return envelope(f"{kind}List", "v1", raw)


def event_frame(event_type: str, kind: str, obj: Any, empties: bool = True) -> bytes:
    """One watch event (without its 4-byte length prefix)."""
    inner = envelope(kind, "v1", encode(CORE + kind, obj, empties=empties))
    return delimited(1, event_type.encode()) + delimited(2, delimited(1, inner))


def main() -> int:
    """Rebuild the schema fixture from the Go module cache."""
    SCHEMA_PATH.write_text(json.dumps(build_schema(), sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {SCHEMA_PATH} ({SCHEMA_PATH.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
