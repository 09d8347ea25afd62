"""Prometheus source pieces that need no server: node-name mapping, query templating, credentials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from descheduler.cluster.types import Node
from descheduler.config.providers import DEFAULT_NODE_RELABEL, PrometheusSettings, Relabel
from descheduler.usage.prometheus import (
    QUERY_NAMES,
    PrometheusSource,
    batches,
    node_matcher,
    relabel_function,
)


@pytest.mark.parametrize(
    ("relabel", "value", "expected"),
    [
        (None, "node-a:9100", "node-a:9100"),
        (DEFAULT_NODE_RELABEL, "node-a:9100", "node-a"),
        (DEFAULT_NODE_RELABEL, "node-a", "node-a"),  # no match: unchanged
        (DEFAULT_NODE_RELABEL, "10.0.0.7:9100", "10.0.0.7"),
        (Relabel(regex="ip-([0-9-]+)", replacement="${1}.eu-west-1.compute.internal"), "ip-10-0-0-7",
         "10-0-0-7.eu-west-1.compute.internal"),
        (Relabel(regex="(?P<host>[^.]+)\\..*", replacement="$host"), "node-b.example.com", "node-b"),
        (Relabel(regex="(.*)", replacement="$1x"), "node-c", ""),  # Go reads "$1x" as group "1x": empty
        (Relabel(regex="(.*)", replacement="$$$1"), "node-d", "$node-d"),
        (Relabel(regex="node", replacement="$1"), "node-e", "node-e"),  # anchored: "node" != "node-e"
    ],
)  # fmt: skip
def test_the_node_label_value_is_relabelled_like_prometheus_replace(
    relabel: Relabel | None, value: str, expected: str
) -> None:
    assert relabel_function(relabel)(value) == expected


def test_queries_get_the_window_and_node_label_filled_in() -> None:
    source = PrometheusSource(PrometheusSettings.model_validate({"window": "10m", "nodeLabel": "node"}))
    assert tuple(source.queries) == QUERY_NAMES
    assert "[600s]" in source.queries["nodeCpu"] and "[600s]" in source.queries["podMemory"]
    assert source.queries["nodeMemory"].count("sum by (node)") == 2
    assert all("${" not in query for name, query in source.queries.items() if name.startswith("node"))
    # pod queries keep one placeholder, filled per batch with the nodes whose pods are wanted
    assert all(
        query.count("${") == query.count("${podNodeMatcher}") == 1
        for name, query in source.queries.items()
        if name.startswith("pod")
    )
    source.close()


@pytest.mark.parametrize(
    ("names", "matcher"),
    [
        (["node-b", "node-a"], ', node=~"node-a|node-b"'),
        (["ip-10-0-0-7.ec2.internal"], ', node=~"ip-10-0-0-7\\\\.ec2\\\\.internal"'),  # "." is literal
        (['a"b'], ', node=~"a\\"b"'),  # a quote ends no string
    ],
)
def test_a_node_matcher_names_exactly_the_wanted_nodes(names: list[str], matcher: str) -> None:
    assert node_matcher("node", names) == matcher


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(1, [4]), (2, [2, 2]), (4, [1, 1, 1, 1]), (3, [2, 1, 1]), (100, [1, 1, 1, 1])],
)
def test_node_names_are_split_into_at_most_the_given_number_of_batches(count: int, sizes: list[int]) -> None:
    split = batches(["d", "c", "b", "a"], count)
    assert [len(b) for b in split] == sizes
    assert [name for batch in split for name in batch] == ["a", "b", "c", "d"]


def test_an_overridden_query_keeps_its_own_text_with_placeholders_filled() -> None:
    custom = "avg by (${nodeLabel}) (my_cpu[${window}])"
    source = PrometheusSource(PrometheusSettings.model_validate({"queries": {"nodeCpu": custom}}))
    assert source.queries["nodeCpu"] == "avg by (instance) (my_cpu[300s])"
    source.close()


@pytest.mark.parametrize(
    ("auth", "reason"),
    [
        ({"authToken": {"bearerTokenFile": "missing-token"}}, "cannot read bearer token file"),
        ({"basicAuth": {"username": "u", "passwordFile": "empty"}}, "basic auth password file"),
    ],
)
def test_an_unreadable_secret_skips_every_node_without_sending_a_query(
    tmp_path: Path, auth: dict[str, dict[str, str]], reason: str
) -> None:
    (tmp_path / "empty").write_text("\n")
    for value in auth.values():
        for key, name in list(value.items()):
            if key.endswith("File"):
                value[key] = str(tmp_path / name)
    nodes = [Node(name=n, labels={}, allocatable={"cpu": 1000}) for n in ("a", "b")]
    source = PrometheusSource(PrometheusSettings.model_validate({"url": "http://127.0.0.1:9", **auth}))
    snapshot = source.fetch(nodes, [])
    source.close()
    assert snapshot.nodes == {}
    assert set(snapshot.node_errors) == {"a", "b"}
    assert reason in snapshot.node_errors["a"]
    assert source.queries_sent == 0


@pytest.mark.parametrize(
    ("tls", "reason"),
    [
        ({"caFile": "/nonexistent/ca.crt"},
         "prometheus TLS files: Could not find a suitable TLS CA certificate bundle"),
        ({"certFile": "/nonexistent/c.crt", "keyFile": "/nonexistent/c.key"},
         "prometheus TLS files: Could not find the TLS certificate file"),
    ],
)  # fmt: skip
def test_missing_tls_files_skip_every_node_after_one_attempt(tls: dict[str, str], reason: str) -> None:
    source = PrometheusSource(PrometheusSettings.model_validate({"url": "https://127.0.0.1:9", "tls": tls}))
    snapshot = source.fetch([Node(name="a", labels={}, allocatable={"cpu": 1000})], [])
    source.close()
    assert snapshot.node_errors["a"].startswith(reason)
    assert source.queries_sent == 1


def test_a_relabel_function_answers_each_value_as_afresh_however_often_and_past_its_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Relabelled values are kept between calls (every node series of every cycle asks again); what is kept
    must be the answer for that very value, also once the table has been started afresh."""
    monkeypatch.setattr("descheduler.usage.prometheus._RELABEL_MEMORY", 3)
    values = [f"node-{i % 5}:9100" for i in range(20)] + ["10.0.0.7:9100", "node-a", "node-0:9100"]
    kept = relabel_function(DEFAULT_NODE_RELABEL)
    for value in values:
        assert kept(value) == relabel_function(DEFAULT_NODE_RELABEL)(value) == value.split(":")[0]


def _answer(result: object, result_type: str = "vector", stats: object = None) -> bytes:
    data: dict[str, object] = {"resultType": result_type, "result": result}
    if stats is not None:
        data["stats"] = stats
    return json.dumps({"status": "success", "data": data}).encode()


def _series(value: object, **labels: object) -> dict[str, object]:
    return {"metric": {"__name__": "x", "job": "kubelet", **labels}, "value": value}


@pytest.mark.parametrize(
    ("node_level", "body", "typed"),
    [
        (True, _answer([_series([1.5, "0.25"], instance="node-a:9100"), _series([1.5, "2"], instance="b")]),
         True),
        (False, _answer([_series([1.5, "0.25"], namespace="ns", pod="p", container="c")]), True),
        (False, _answer([_series([1.5, "1"], namespace="ns", pod="p"), _series([1.5, "2"], namespace="ns",
                                                                              pod="p")]), True),  # two series
        # series that do not name a pod: left out
        (False, _answer([_series([1.5, "1"], namespace="ns"), _series([1.5, "2"], pod="p")]), True),
        (False, _answer([_series([1.5, "1"], namespace=None, pod="p")]), True),  # a null label: unnamed
        (False, _answer([_series([1.5, "NaN"], namespace="ns", pod="p")]), True),  # NaN is judged later
        (True, _answer([], stats={"samples": {"totalQueryableSamples": 42}}), True),
        (True, _answer([_series([1.5, "abc"], instance="a")]), False),  # not a number: general path
        (True, _answer([_series([1.5], instance="a")]), False),  # short sample
        (True, _answer([{"metric": {"instance": "a"}, "values": [[1.5, "1"]]}], "matrix"), False),
        (True, _answer({}, "matrix"), False),
        (True, _answer([_series(["1.5", "1"], instance="a")]), False),  # a time as text: read as before
        (False, _answer([_series([1.5, "1"], namespace=7, pod="p")]), False),  # a label that is no text
        (True, b"<html>Sign in</html>", False),
    ],
)  # fmt: skip
def test_the_typed_decode_reads_an_answer_as_the_general_path_does_or_leaves_it_to_it(
    node_level: bool, body: bytes, typed: bool
) -> None:
    """The C decode is a shortcut: where it answers, the vector and the samples counted are the general
    path's; anything unusual it leaves to the general path, which words the problem."""
    settings = PrometheusSettings(url="http://127.0.0.1:1", node_relabel=DEFAULT_NODE_RELABEL)
    fast, general = PrometheusSource(settings), PrometheusSource(settings)
    vector = fast._typed_vector(body, node_level=node_level)
    assert (vector is not None) == typed
    if vector is None:
        assert fast.samples_touched == 0
        return
    response = requests.Response()
    response._content, response.status_code = body, 200
    expected = general._parse_vector(general._general_result(response), node_level=node_level)
    assert json.dumps(vector) == json.dumps(expected)  # NaN compares equal as text
    assert fast.samples_touched == general.samples_touched
