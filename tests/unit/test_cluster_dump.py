"""Cluster dumps as kubectl writes them: JSON (gzipped or not) read item by item, YAML through libyaml."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.cluster import dump
from descheduler.cluster.types import ClusterSnapshot
from descheduler.simulate.inputs import InputError, load_cluster

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "hotspot" / "cluster.yaml"


def example_objects() -> list[dict[str, Any]]:
    """The bundled example cluster as a flat list of objects."""
    objects: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        if doc is None:
            continue
        objects.extend(doc["items"] if str(doc.get("kind", "")).endswith("List") else [doc])
    return objects


def kubectl_json(objects: list[dict[str, Any]]) -> str:
    """What ``kubectl get nodes,pods,... -A -o json`` prints: one List, items first, kind after them."""
    return json.dumps({"apiVersion": "v1", "items": objects, "kind": "List", "metadata": {}}, indent=4)


def typed_lists(objects: list[dict[str, Any]]) -> str:
    """What the API server returns per resource: ``PodList`` and friends, items without ``kind``."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        item = {k: v for k, v in obj.items() if k != "kind"}
        by_kind.setdefault(obj["kind"], []).append(item)
    return "\n".join(
        json.dumps({"apiVersion": "v1", "items": items, "kind": f"{kind}List"})
        for kind, items in by_kind.items()
    )


WRITERS: dict[str, Callable[[Path, list[dict[str, Any]]], Path]] = {
    "json": lambda d, o: _write(d / "cluster.json", kubectl_json(o).encode()),
    "json.gz": lambda d, o: _write(d / "cluster.json.gz", gzip.compress(kubectl_json(o).encode())),
    "gzip without .gz": lambda d, o: _write(d / "dump", gzip.compress(kubectl_json(o).encode())),
    "typed lists, concatenated": lambda d, o: _write(d / "lists.json", typed_lists(o).encode()),
    "json array": lambda d, o: _write(d / "array.json", json.dumps(o).encode()),
    "yaml": lambda d, o: _write(d / "cluster.yaml", yaml.safe_dump({"kind": "List", "items": o}).encode()),
    "yaml.gz": lambda d, o: _write(d / "cluster.yaml.gz", gzip.compress(yaml.safe_dump_all(o).encode())),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("chunk", [dump.CHUNK, 4096, 7])
@pytest.mark.parametrize("form", list(WRITERS))
def test_every_form_of_dump_gives_the_same_snapshot_as_the_yaml_file(
    form: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = load_cluster(EXAMPLE)
    monkeypatch.setattr(dump, "CHUNK", chunk)  # values cut at chunk ends are read again whole
    path = WRITERS[form](tmp_path, example_objects())
    assert in_order(load_cluster(path)) == in_order(expected)
    assert len(expected.pods) > 100


def in_order(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The same snapshot with every kind sorted (typed lists group objects by kind)."""
    return ClusterSnapshot(
        nodes=tuple(sorted(snapshot.nodes, key=lambda n: n.name)),
        pods=tuple(sorted(snapshot.pods, key=lambda p: p.key)),
        pdbs=tuple(sorted(snapshot.pdbs, key=lambda p: (p.namespace, p.name))),
        workloads=tuple(sorted(snapshot.workloads, key=lambda w: (w.kind, w.namespace, w.name))),
        namespaces=tuple(sorted(snapshot.namespaces, key=lambda n: n.name)),
    )


def test_json_items_are_handed_over_one_by_one_as_they_are_decoded() -> None:
    text = '{"apiVersion": "v1", "items": [{"kind": "Node", "n": 1}, {"kind": "Pod", "broken": }]}'
    items = dump.iter_json_items("dump.json", text)
    assert next(items) == {"kind": "Node", "n": 1}  # before the second item was even read
    with pytest.raises(
        dump.DumpError, match=r"dump.json: not valid JSON \(line 1, column 84\): Expecting value"
    ):
        next(items)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"kind": "List", "items": [{"kind": "Node"}\n,, ]}', "not valid JSON (line 2, column 2)"),
        (
            b'\xef\xbb\xbf{"kind": "List",\r\n "items": [{"kind": "Node"},\n\n  {"kind": "Pod"} {}]}',
            "not valid JSON (line 4, column 19): expected ']', found '{'",
        ),
        (b'{"kind": "List", "items": [', "not valid JSON (line 1, column 28): Expecting value"),
        (b'{"kind": "Pod", "items": []}', "an object of kind 'Pod' has items; only a List may"),
        (b"\x1f\x8b\x08\x00garbage", "not a valid gzip file"),
        (gzip.compress(b"\xff\xfe", mtime=0), "not UTF-8 text: byte 0xff"),
        (b"items: [", "not valid YAML (line 1, column 9)"),
    ],
)
@pytest.mark.parametrize("chunk", [dump.CHUNK, 7])
def test_a_broken_dump_is_refused_naming_the_file_and_where(
    content: bytes, message: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dump, "CHUNK", chunk)  # the error may lie many chunks into the file
    path = _write(tmp_path / "dump", content)
    with pytest.raises(InputError) as error:
        load_cluster(path)
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)


def test_yaml_dumps_are_read_strictly_a_duplicate_key_naming_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "dump.yaml", b"kind: Node\nmetadata:\n  name: a\n  name: b\n")
    with pytest.raises(InputError) as error:
        load_cluster(path)
    assert str(error.value) == (
        f"{path}: not valid YAML (line 4, column 3): duplicate key 'name' at line 4 (first at line 3)"
    )
