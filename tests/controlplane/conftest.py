"""Fixtures for tests against a real control plane: one per test session, a namespace and a node group
per test. The control plane's binaries are built (or taken from the cache) on first use."""

from __future__ import annotations

import re
import time
from collections.abc import Generator, Iterator

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.build import BuildError
from tests.controlplane.cluster import ControlPlane, ControlPlaneError
from tests.controlplane.move43a_fixtures import AUDITED_NAMESPACE, audited  # noqa: F401 (a fixture)

_PLANE: list[ControlPlane] = []
AUDITED = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {
            "level": "Metadata",
            "users": ["system:serviceaccount:load-aware-descheduler:load-aware-descheduler"],
        },
        {"level": "Request", "userGroups": [f"system:serviceaccounts:{AUDITED_NAMESPACE}"]},
        {"level": "None"},
    ],
}
"""The audit log keeps the shipped ServiceAccount's requests (what the request-count tests read) and those
of the identities in ``AUDITED_NAMESPACE`` (what the moved stand-in tests read), nothing else."""
STARTUP: dict[str, float] = {}


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1."""
    yield from session_plane(tmp_path_factory)


def session_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """This session's (under xdist: this worker's) one control plane: the one already running, which
    the other folder's ``control_plane`` fixture (``tests/image``) started, else a new one on free ports
    in its own folder, stopped by whoever started it."""
    if _PLANE:
        yield _PLANE[0]
        return
    started = time.monotonic()
    try:
        plane = ControlPlane.start(tmp_path_factory.mktemp("controlplane"), audit_policy=AUDITED)
    except (BuildError, ControlPlaneError) as exc:
        pytest.fail(f"the real control plane could not start: {exc}", pytrace=False)
    STARTUP["total_seconds"] = time.monotonic() - started
    STARTUP.update({f"{k}_seconds": v for k, v in plane.startup_seconds.items()})
    _PLANE.append(plane)
    try:
        yield plane
    finally:
        STARTUP.update({f"{k}_rss_mib": v for k, v in plane.rss_mib().items()})
        plane.stop()
        _PLANE.clear()


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (named after the test) with its default ServiceAccount; deleted afterwards,
    with every node of the test's group."""
    name = (
        re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
        + f"-{time.monotonic_ns() % 100000}"
    )
    control_plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
    control_plane.wait_for(
        f"ServiceAccount default in {name}",
        lambda: control_plane.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
        control_plane.kubectl(
            "delete", "nodes", "-l", f"{objects.GROUP_LABEL}={name}", "--wait=false", check=False
        )


def _admin_client(plane: ControlPlane) -> Iterator[KubeApi]:
    api = connect(str(plane.kubeconfig), qps=1000, burst=1000)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def admin_api(control_plane: ControlPlane) -> Iterator[KubeApi]:
    """Our client as the cluster admin."""
    yield from _admin_client(control_plane)


@pytest.fixture(scope="module")
def admin_api_module(control_plane: ControlPlane) -> Iterator[KubeApi]:
    """``admin_api`` for a module's shared setup."""
    yield from _admin_client(control_plane)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report carries the tail of every component's log."""
    report = yield
    if report.failed and _PLANE:
        report.sections.append(("control plane logs", _PLANE[0].logs()))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if STARTUP:
        figures = " ".join(f"{k}={v:.1f}" for k, v in sorted(STARTUP.items()))
        terminalreporter.write_line(f"control plane: {figures}")


@pytest.hookimpl(trylast=True)  # after the session's fixtures, the control plane's included, are torn down
def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands the figures to the controller, which prints them (tests/conftest.py)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None and STARTUP:
        output["controlplane_startup"] = dict(STARTUP)
