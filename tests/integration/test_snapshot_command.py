"""``descheduler snapshot`` of a server that does not serve ``resource.k8s.io/v1`` (a cluster before
Kubernetes 1.34 answers 404): the stand-in can be made to, the control plane of tests/controlplane (1.35)
cannot. The other snapshot tests run on the real control plane (tests/controlplane/test_snapshot_command.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from descheduler.cli import main
from descheduler.simulate.inputs import load_cluster
from tests.apiserver import ApiServer, Fault, objects

pytestmark = pytest.mark.integration

PODS = [f"default/web-{i}" for i in range(4)]


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    apiserver.create(objects.node("node-hot"))
    apiserver.create(objects.node("node-cool"))
    apiserver.create(objects.deployment("web", replicas=4))
    apiserver.create(objects.replicaset("web-rs", replicas=4, deployment="web"))
    for i in range(4):
        apiserver.create(objects.pod(f"web-{i}", node="node-hot"))
    return apiserver


def test_a_server_without_the_dra_api_still_gets_a_dump_with_a_notice(
    cluster: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.inject(Fault(group="resource.k8s.io", resource="resourceslices", status=404))
    out = tmp_path / "incident"
    assert main(["snapshot", "--kubeconfig", str(cluster.kubeconfig_path), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "notice: not in the dump: ResourceSlice:" in err
    assert "ResourceSlice," not in err.splitlines()[0] and "0 ResourceClaim" in err
    snapshot = load_cluster(out / "cluster.json.gz")
    assert sorted(p.key for p in snapshot.pods) == PODS
