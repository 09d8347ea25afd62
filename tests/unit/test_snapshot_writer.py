"""``snapshot.write_cluster`` copies LIST items as the server sent them, named, and leaves out orphans."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, cast

import pytest

from descheduler.cluster.parse import parse_node, parse_pod
from descheduler.kube.api import KubeApi
from descheduler.kube.errors import DecodeError
from descheduler.snapshot import _ITEM, _named, write_cluster


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"metadata":{"name":"a"}}', {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}),
        ("{}", {"apiVersion": "v1", "kind": "Pod"}),
        ("  { \n }", {"apiVersion": "v1", "kind": "Pod"}),
        ('{"kind":"Pod","apiVersion":"v9"}', {"apiVersion": "v9", "kind": "Pod"}),
        ('{"kind":"Other"}', {"apiVersion": "v1", "kind": "Other"}),
        (
            '{"apiVersion":"v2","x":[1,{"kind":"no"}]}',
            {"apiVersion": "v2", "kind": "Pod", "x": [1, {"kind": "no"}]},
        ),
    ],
    ids=["bare item", "empty object", "empty with spaces", "names itself", "own kind wins", "nested kind"],
)
def test_an_item_gets_the_list_s_api_version_and_kind_only_where_it_lacks_them(
    raw: str, expected: dict[str, Any]
) -> None:
    data = raw.encode()
    written = _named(data, _ITEM.decode(data), json.dumps("v1"), "Pod")
    assert json.loads(written, object_pairs_hook=_no_duplicates) == expected


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys: {keys}"
    return dict(pairs)


class _Pages:
    """Answers LISTs from canned pages per path (continue tokens index the pages)."""

    def __init__(self, pages: dict[str, list[bytes]]) -> None:
        self.pages = pages
        self.asked: list[tuple[str, object]] = []

    def request_bytes(
        self, method: str, path: str, *, query: dict[str, Any], accept: str = "application/json"
    ) -> bytes:
        self.asked.append((path, query.get("continue")))
        pages = self.pages.get(path, [b'{"items": []}'])
        return pages[int(query.get("continue") or 0)]


def _page(items: list[dict[str, Any]], more: str = "", version: str = "v1") -> bytes:
    return json.dumps({"apiVersion": version, "items": items, "metadata": {"continue": more}}).encode()


def _pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node}}


def test_pages_are_followed_and_every_item_is_written_named_except_pods_on_nodes_not_listed(
    tmp_path: Path,
) -> None:
    api = _Pages(
        {
            "/api/v1/nodes": [_page([{"metadata": {"name": "n1"}}])],
            "/api/v1/pods": [_page([_pod("a", "n1")], more="1"), _page([_pod("b", "gone"), _pod("c", "")])],
            "/apis/apps/v1/replicasets": [_page([{"metadata": {"name": "rs"}}], version="apps/v1")],
        }
    )
    path = tmp_path / "cluster.json.gz"
    written = write_cluster(cast(KubeApi, api), path)
    document = json.loads(gzip.decompress(path.read_bytes()))
    assert document["kind"] == "List"
    assert [(i["kind"], i["apiVersion"], i["metadata"]["name"]) for i in document["items"]] == [
        ("Node", "v1", "n1"),
        ("Pod", "v1", "a"),
        ("Pod", "v1", "c"),
        ("ReplicaSet", "apps/v1", "rs"),
    ]
    assert written.left_out == ["default/b on gone"]
    assert written.counts["Pod"] == 2 and written.counts["Node"] == 1 and written.counts["Deployment"] == 0
    assert ("/api/v1/pods", "1") in api.asked
    assert written.nodes == [] and written.pods == []  # parsed only when asked to (collect)


def _full_pod(name: str, node: str, cpu: str = "250m") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


def _full_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }


def test_with_collect_the_nodes_and_pods_kept_are_parsed_as_parse_py_would_and_bad_ones_reported(
    tmp_path: Path,
) -> None:
    pods = [_full_pod("a", "n1"), _full_pod("bad", "n1", cpu="lots"), _full_pod("b", "gone")]
    api = _Pages({"/api/v1/nodes": [_page([_full_node("n1")])], "/api/v1/pods": [_page(pods)]})
    written = write_cluster(cast(KubeApi, api), tmp_path / "cluster.json.gz", collect=True)
    assert written.nodes == [parse_node({"kind": "Node", **_full_node("n1")})]
    assert written.pods == [parse_pod({"kind": "Pod", **_full_pod("a", "n1")})]
    assert len(written.problems) == 1 and "default/bad" in written.problems[0]
    assert written.counts["Pod"] == 2  # the bad pod is in the dump all the same: simulate says what is wrong
    assert written.left_out == ["default/b on gone"]


@pytest.mark.parametrize(
    ("page", "says"),
    [
        (b"<html>proxy error</html>", "GET /api/v1/nodes: not a list of nodes"),
        (b'{"items": {"a": 1}}', "GET /api/v1/nodes: not a list of nodes"),
        (b'{"items": [1]}', "GET /api/v1/nodes: item 1: Expected `object`"),
        (
            b'{"items": [{"metadata": {"name": 5}}]}',
            r"GET /api/v1/nodes: item 1: Expected `str \| null`, got `int`",
        ),
    ],
    ids=["not json", "items not a list", "item not an object", "name not a string"],
)
def test_a_page_that_is_not_a_list_of_objects_fails_naming_the_request(
    page: bytes, says: str, tmp_path: Path
) -> None:
    api = _Pages({"/api/v1/nodes": [page]})
    with pytest.raises(DecodeError, match=says):
        write_cluster(cast(KubeApi, api), tmp_path / "cluster.json.gz")
