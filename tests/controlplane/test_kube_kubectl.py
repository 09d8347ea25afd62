"""What an operator sees with kubectl after our eviction, on the real API server: the Descheduled Event
our recorder writes, as ``kubectl get events`` prints it, for a pod evicted through the real Eviction API
with a real PodDisruptionBudget.

(The other tests of the stand-in's kubectl file checked the stand-in against kubectl; on the real server
they would check only Kubernetes against itself, so they were not moved.)"""

from __future__ import annotations

import json
import time

import pytest

from descheduler.cluster.parse import parse_pod
from descheduler.kube.api import KubeApi
from descheduler.kube.events import EventRecorder
from descheduler.kube.evict import Evictor
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.move43a_fixtures import placed_replicaset

pytestmark = pytest.mark.controlplane

REPORTER = "load-aware-descheduler"


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()[1:]]


def test_kubectl_get_events_shows_the_descheduled_event_after_an_eviction(
    control_plane: ControlPlane, namespace: str, admin_api: KubeApi
) -> None:
    node = f"{namespace}-node-1"
    control_plane.add_nodes(namespace, [node])
    placed_replicaset(control_plane, namespace, "web", {"web-1": node, "web-2": node})
    control_plane.apply([objects.pdb("web-pdb", "web", max_unavailable=1)], namespace=namespace)
    control_plane.wait_for(
        "the budget allowing one disruption",
        lambda: (
            control_plane.get_json("pdb", "web-pdb", "-n", namespace)
            .get("status", {})
            .get("disruptionsAllowed")
            == 1
        ),
    )
    recorder = EventRecorder(admin_api)
    evictor = Evictor(
        admin_api, evict_qps=0, evict_burst=1, dry_run=False, events=recorder, delete_options=None
    )
    pod = parse_pod(control_plane.get_json("pod", "web-1", "-n", namespace))
    outcome = evictor.evict(pod, node, "node utilization above 80%", time.monotonic() + 10)
    assert outcome.evicted, outcome.message
    assert recorder.flush(5)
    recorder.close()
    ours = ("get", "events", "-n", namespace, "--field-selector", f"reportingComponent={REPORTER}")
    table = rows(control_plane.kubectl(*ours).stdout)
    assert len(table) == 1, table
    _, kind, reason, obj, *message = table[0]
    assert (kind, reason, obj) == ("Normal", "Descheduled", "pod/web-1")
    assert " ".join(message) == f'Pod evicted from node "{node}" by the reason "node utilization above 80%"'
    (listed,) = json.loads(control_plane.kubectl(*ours, "-o", "json").stdout)["items"]
    assert listed["reportingComponent"] == REPORTER
    assert listed["involvedObject"]["uid"] == pod.uid
    names = {p["metadata"]["name"] for p in control_plane.running_pods(namespace, "app=web")}
    assert "web-1" not in names and "web-2" in names
