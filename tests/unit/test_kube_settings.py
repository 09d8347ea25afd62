"""Settings the Kubernetes layer refuses up front, with messages that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from descheduler.kube.connection import connect
from descheduler.kube.errors import KubeconfigError
from descheduler.kube.leader import LeaderElector


def test_no_kubeconfig_and_no_service_account_is_a_clear_error_listing_every_place_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config there
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(
        KubeconfigError, match=r"--kubeconfig, set KUBECONFIG, write ~/.kube/config, or run in a pod"
    ):
        connect(None, 10, 10)


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match=r"kubeconfig .*missing\.yaml: file not found"):
        connect(str(tmp_path / "missing.yaml"), 10, 10)


def test_a_kubeconfig_without_a_context_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(KubeconfigError, match=r"kubeconfig .*empty\.yaml"):
        connect(str(path), 10, 10)


def test_in_cluster_without_a_token_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeconfigError, match=r"in-cluster service account: .*token"):
        connect(None, 10, 10, token_file=str(tmp_path / "token"), ca_file=str(tmp_path / "ca.crt"))


@pytest.mark.parametrize(("qps", "burst"), [(0, 10), (10, 0)])
def test_client_rate_limits_must_be_positive(qps: float, burst: int, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="clientConnection: qps must be > 0 and burst >= 1"):
        connect(str(tmp_path / "x"), qps, burst)


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10, 10, 2), (15, 10, 10), (15, 10, 0), (5, 10, 2)],
)
def test_leader_election_timings_must_be_strictly_ordered(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError, match="leaseDuration > renewDeadline > retryPeriod > 0"):
        LeaderElector(
            None,  # type: ignore[arg-type]
            namespace="kube-system",
            name="x",
            identity="me",
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
            on_started_leading=lambda: None,
            on_stopped_leading=lambda: None,
        )
