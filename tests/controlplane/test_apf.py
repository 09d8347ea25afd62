"""API Priority and Fairness on a real kube-apiserver 1.35 (APF on, as by default).

The optional component (``manifests/components/apf``) and the chart's ``flowControl`` value are accepted
by the server and classify the ServiceAccount's requests into our FlowSchema and priority level (the
server's own ``X-Kubernetes-PF-*`` answer headers say so). With a level that rejects (``Reject``, no
concurrency, its one seat held), the descheduler started on a hot cluster evicts nothing on the cache it
cannot list, counts the 429s by the UIDs of the FlowSchema and level that refused it, says so in /readyz,
and, once the level is widened, syncs and acts within a few intervals.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import NOT_INSTALLED, hot_cluster_serving_usage, install_manifests, loop_config
from tests.controlplane.test_operator_marks import seat_held
from tests.helm.build import BuildError, build_helm
from tests.support import service
from tests.support.service import MANIFESTS, NAMESPACE, REPO

pytestmark = pytest.mark.controlplane

ACCOUNT = "load-aware-descheduler"
REJECTING = "lad-test-reject-everything"
INTERVAL = 5.0
"""The test loop's deschedulingInterval (seconds)."""


def _flow_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("FlowSchema", "PriorityLevelConfiguration")]


def _delete(plane: ControlPlane, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        plane.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found")


def _classified(api: KubeApi) -> tuple[str, str]:
    answer = api.request_raw("GET", "/api/v1/namespaces", query={"limit": 1})
    assert answer.status == 200, answer.data[:300]
    headers = {k.lower(): v for k, v in answer.headers.items()}  # Go sends X-Kubernetes-Pf-Flowschema-Uid
    return headers.get("x-kubernetes-pf-flowschema-uid", ""), headers.get(
        "x-kubernetes-pf-prioritylevel-uid", ""
    )


def _uid(plane: ControlPlane, kind: str, name: str) -> str:
    return str(plane.get_json(kind, name)["metadata"]["uid"])


@pytest.fixture
def identity(control_plane: ControlPlane, tmp_path: Path) -> Iterator[KubeApi]:
    """Our client as the shipped ServiceAccount (the shipped manifests applied)."""
    install_manifests(control_plane)
    path = control_plane.token_kubeconfig(NAMESPACE, ACCOUNT, tmp_path / "identity")
    api = connect(str(path), qps=100, burst=100)
    try:
        yield api
    finally:
        api.close()


def test_the_apf_component_is_accepted_and_classifies_every_request_of_the_service_account(
    control_plane: ControlPlane, identity: KubeApi, tmp_path: Path
) -> None:
    copy_of = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy_of)
    (copy_of / "mine").mkdir()
    (copy_of / "mine" / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["../overlays/live"], "components": ["../components/apf"]})
    )
    rendered = control_plane.kubectl("kustomize", str(copy_of / "mine")).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] not in NOT_INSTALLED]
    flow = _flow_objects(docs)
    assert len(flow) == 2
    try:
        control_plane.apply(docs)  # kubectl apply: the real server validates every object
        schema = next(d["metadata"]["name"] for d in flow if d["kind"] == "FlowSchema")
        level = next(d["metadata"]["name"] for d in flow if d["kind"] == "PriorityLevelConfiguration")
        ours = (
            _uid(control_plane, "flowschema", schema),
            _uid(control_plane, "prioritylevelconfiguration", level),
        )
        classified = control_plane.wait_for(  # the server's APF config controller picks new objects up
            "a request of the ServiceAccount classified into our FlowSchema",
            lambda: c if (c := _classified(identity)) == ours else None,
            timeout_s=30,
        )
        conditions = control_plane.get_json("flowschema", schema)["status"]["conditions"]
        dangling = next(c for c in conditions if c["type"] == "Dangling")
    finally:
        _delete(control_plane, flow)
    assert classified == ours
    assert dangling["status"] == "False", dangling


def test_the_charts_flow_control_objects_are_accepted_by_the_server(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    try:
        helm = build_helm()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
    chart = REPO / "charts" / "load-aware-descheduler"
    done = subprocess.run(
        [str(helm), "template", "pool-c", str(chart), "-n", "lad-apf", "--set", "flowControl.enabled=true"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    flow = _flow_objects([d for d in yaml.safe_load_all(done.stdout) if d])
    assert len(flow) == 2
    try:
        control_plane.apply(flow)
        schema = next(d for d in flow if d["kind"] == "FlowSchema")["metadata"]["name"]
        stored = control_plane.get_json("flowschema", schema)
        dangling = control_plane.wait_for(
            "the FlowSchema's Dangling condition",
            lambda: next(
                (c for c in stored_conditions(control_plane, schema) if c["type"] == "Dangling"), None
            ),
        )
    finally:
        _delete(control_plane, flow)
    subject = stored["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    assert subject == {"name": "pool-c-load-aware-descheduler", "namespace": "lad-apf"}
    assert dangling["status"] == "False", dangling


def stored_conditions(plane: ControlPlane, schema: str) -> list[dict[str, Any]]:
    return list(plane.get_json("flowschema", schema).get("status", {}).get("conditions") or [])


def rejecting_everything() -> list[dict[str, Any]]:
    """Every request of the shipped ServiceAccount goes to a level that rejects."""
    every = {
        "verbs": ["*"],
        "apiGroups": ["*"],
        "resources": ["*"],
        "clusterScope": True,
        "namespaces": ["*"],
    }
    account = {"kind": "ServiceAccount", "serviceAccount": {"name": ACCOUNT, "namespace": NAMESPACE}}
    rule = {
        "subjects": [account],
        "resourceRules": [every],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    }
    return objects.rejecting_flow(REJECTING, rule)


WIDENED = {
    "spec": {
        "limited": {
            "nominalConcurrencyShares": 10,
            "limitResponse": {
                "type": "Queue",
                "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 50},
            },
        }
    }
}


def rejections(proc: service.Descheduler) -> dict[tuple[str, str], float]:
    status, text = proc.get("/metrics")
    if status != 200:  # not serving yet
        return {}
    samples = service.metric_samples(text, "descheduler_api_flowcontrol_rejected_total")
    return {(labels["flow_schema_uid"], labels["priority_level_uid"]): value for labels, value in samples}


def test_under_apf_rejection_nothing_is_evicted_it_is_reported_and_a_widened_level_recovers(
    control_plane: ControlPlane,
    usage_backend: service.UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    plane = control_plane
    install_manifests(plane)
    identity = plane.token_kubeconfig(NAMESPACE, ACCOUNT, tmp_path / "identity")
    admin = connect(str(plane.kubeconfig), qps=1000, burst=1000)
    flow = rejecting_everything()
    timeline: dict[str, float] = {}
    plane.apply(flow)
    try:
        ours = (_uid(plane, "flowschema", REJECTING), _uid(plane, "prioritylevelconfiguration", REJECTING))
        ours_api = connect(str(identity), qps=10, burst=10)
        try:  # the seat holder below must land in the rejecting level: wait until the server uses it
            plane.wait_for(
                "the rejecting FlowSchema in use", lambda: _classified(ours_api) == ours, timeout_s=30
            )
        finally:
            ours_api.close()
        with (
            hot_cluster_serving_usage(plane, admin, namespace, usage_backend) as cluster,
            seat_held(identity, namespace),
        ):
            ports = service.Ports.free()
            doc = loop_config(usage_backend.url, ports, namespace, dry_run=False, interval=f"{INTERVAL:g}s")
            config = service.write_config(tmp_path / "config.yaml", doc)
            with service.run_descheduler(config, identity, ports, tmp_path) as proc:
                started = time.monotonic()
                proc.wait_for(lambda: rejections(proc).get(ours, 0) >= 3, timeout=60, what="counted 429s")
                timeline["first rejections counted"] = time.monotonic() - started
                time.sleep(2 * INTERVAL)  # two intervals under rejection: the hot node would be confirmed
                status, readyz = proc.get("/readyz")
                held = {
                    "readyz": (status, readyz),
                    "evictions": proc.events("eviction"),
                    "pods": {p["metadata"]["name"] for p in plane.running_pods(namespace, "app=busy")},
                    "rejections": rejections(proc),
                    "waits": [e["retry_in"] for e in proc.events("watch_failed") if "429" in str(e["error"])],
                }
                plane.kubectl(
                    "patch",
                    "prioritylevelconfiguration",
                    REJECTING,
                    "--type=merge",
                    "-p",
                    json.dumps(WIDENED),
                )
                widened = time.monotonic()
                timeline["widened"] = widened - started
                proc.wait_ready(timeout=60)
                timeline["ready again"] = time.monotonic() - started
                proc.wait_for(lambda: proc.events("eviction"), timeout=60, what="an eviction once widened")
                timeline["first eviction"] = time.monotonic() - started
                recovered = time.monotonic() - widened
                proc.terminate()
    finally:
        _delete(plane, list(reversed(flow)))
        admin.close()
    rounded = {k: round(v, 1) for k, v in timeline.items()}
    print(f"\nAPF rejection timeline (s since start): {json.dumps(rounded)}")
    status, readyz = held["readyz"]
    assert status == 503 and "cache not synced" in readyz, readyz
    assert "API server flow control rejected" in readyz and ours[0] in readyz and ours[1] in readyz, readyz
    assert held["evictions"] == [], "nothing is evicted on a cache that could not sync"
    assert held["pods"] == set(cluster.initial_pods), "every busy pod still runs"
    assert set(held["rejections"]) == {ours}, held["rejections"]
    assert held["waits"] and min(held["waits"]) >= 1.0, "each 429 waits at least the server's Retry-After"
    assert recovered < 3 * INTERVAL + 36.0, f"recovered {recovered:.0f}s after the level was widened"
