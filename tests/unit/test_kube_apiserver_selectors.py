"""The test API server's selector parsing follows kube-apiserver (labels.Parse / fields.ParseSelector)."""

from __future__ import annotations

import pytest

from tests.apiserver.selectors import (
    SelectorError,
    compile_field_selector,
    labels_match,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "version": "3"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app!=web", False),
        ("app=db", False),
        ("missing!=x", True),
        ("app in (web, db)", True),
        ("app notin (web)", False),
        ("tier,app=web", True),
        ("!tier", False),
        ("!missing", True),
        ("version>2", True),
        ("version<3", False),
        ("app in (db),tier=front", False),
        ("app=", False),
    ],
)
def test_label_selectors_match_like_the_api_server(selector: str, matches: bool) -> None:
    assert labels_match(parse_label_selector(selector), LABELS) is matches


@pytest.mark.parametrize("selector", ["app in (", "app in ()", "=web", "app=we b", "version>x", "bad key=1"])
def test_malformed_label_selectors_are_rejected(selector: str) -> None:
    with pytest.raises(SelectorError, match="unable to parse requirement"):
        parse_label_selector(selector)


POD = {
    "metadata": {"name": "web-1", "namespace": "default"},
    "spec": {"nodeName": "node-1"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("spec.nodeName=node-1", True),
        ("spec.nodeName==node-2", False),
        ("spec.nodeName!=node-2", True),
        ("metadata.name=web-1,status.phase!=Succeeded", True),
        ("status.phase!=Succeeded,status.phase!=Running", False),
        ("spec.nodeName=", False),
    ],
)
def test_pod_field_selectors_match_like_the_api_server(selector: str, matches: bool) -> None:
    assert compile_field_selector("/pods", selector)(POD) is matches


def test_unsupported_field_labels_are_rejected() -> None:
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.priority"):
        compile_field_selector("/pods", "spec.priority=1")


def test_a_field_selector_without_an_operator_is_rejected() -> None:
    with pytest.raises(SelectorError, match="invalid selector"):
        compile_field_selector("/pods", "spec.nodeName")
