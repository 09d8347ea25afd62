"""Events on workloads (the ping-pong guard's Warning) as the API server receives them."""

from __future__ import annotations

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.events import EventRecorder, Regarding
from tests.apiserver import ApiServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [("Deployment", "apps/v1"), ("StatefulSet", "apps/v1"), ("ReplicationController", "v1")],
)
def test_a_workload_event_names_the_workload_in_its_namespace(
    apiserver: ApiServer, kube_api: KubeApi, kind: str, api_version: str
) -> None:
    recorder = EventRecorder(kube_api)
    try:
        recorder.record_object(
            Regarding.workload(kind, "shop", "web", "uid-1"),
            "Warning",
            "PingPongBackoff",
            "not moved until ...",
            action="Descheduling",
        )
        assert recorder.flush(5)
    finally:
        recorder.close()
    (event,) = apiserver.list("events", "shop", group="events.k8s.io")
    assert event["regarding"] == {
        "apiVersion": api_version,
        "kind": kind,
        "name": "web",
        "namespace": "shop",
        "uid": "uid-1",
    }
    assert (event["type"], event["reason"], event["note"]) == (
        "Warning",
        "PingPongBackoff",
        "not moved until ...",
    )
