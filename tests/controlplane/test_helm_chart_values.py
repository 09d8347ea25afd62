"""Every value set of ``tests/integration/test_helm_chart.py`` renders objects the real kube-apiserver
accepts: a server-side dry-run of the whole render, so the API's own validation, defaulting and
admission (the ValidatingAdmissionPolicies' CEL compiled by the server) judge it, not only the offline
schema. Nothing is stored. The ServiceMonitor's CRD is not installed here; the offline test checks it."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.controlplane.cluster import ControlPlane
from tests.helm.build import BuildError, build_helm
from tests.integration.test_helm_chart import CHART, RELEASE, VALUE_SETS

pytestmark = pytest.mark.controlplane

NOT_BUILT_IN = {"ServiceMonitor"}


def test_every_value_set_renders_objects_the_real_api_server_accepts(
    control_plane: ControlPlane, namespace: str
) -> None:
    try:
        helm = build_helm()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
    refused: dict[str, str] = {}
    for name, values in VALUE_SETS.items():
        done = subprocess.run(
            [str(helm), "template", RELEASE, str(CHART), "--namespace", namespace, *values],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{name}: {done.stderr}"
        docs = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] not in NOT_BUILT_IN]
        applied = control_plane.kubectl(
            "apply", "--server-side", "--force-conflicts", "--dry-run=server", "--field-manager=values-test",
            "-n", namespace, "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}), check=False,
        )  # fmt: skip
        if applied.returncode != 0:
            refused[name] = applied.stderr.strip()
        else:
            assert applied.stdout.count("(server dry run)") == len(docs), f"{name}: {applied.stdout}"
    assert refused == {}
