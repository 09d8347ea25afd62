"""How ``tests/conftest.py`` shares the tests out among pytest-xdist workers: control-plane tests are
spread over the workers (each starts its own control plane), while the tests that share a costly
setup stay together, and the longest work is handed out first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import first_ordered, shared_setup

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("path", "group"),
    [
        # no module-scoped fixture: each test may run on any worker, with that worker's control plane
        ("tests/controlplane/test_soak.py", None),
        ("tests/controlplane/test_lost_journal.py", None),
        # a module-scoped fixture (a service, an identity set up once): the module stays on one worker
        ("tests/controlplane/test_hotspot_taint.py", "tests/controlplane/test_hotspot_taint.py"),
        ("tests/controlplane/test_surge_restart.py", "tests/controlplane/test_surge_restart.py"),
        # the image folder builds one image: together
        ("tests/image/test_image.py", "tests/image"),
        # one Prometheus series for two modules: together, under the second's name
        ("tests/integration/test_service_controls.py", "tests/integration/test_service_restart.py"),
        ("tests/unit/test_units.py", None),
    ],
)
def test_each_module_is_grouped_only_when_its_tests_share_a_setup(path: str, group: str | None) -> None:
    assert (ROOT / path).is_file(), f"{path} moved: update this table"
    assert shared_setup(ROOT, path) == group


def test_the_soak_is_handed_out_first_then_the_other_control_plane_work_in_its_order() -> None:
    scopes = [
        "tests/unit/test_units.py::test_a",
        "tests/controlplane/test_hotspot_taint.py",
        "tests/controlplane/test_lost_journal.py::test_b",
        "tests/image",
        "tests/controlplane/test_soak.py::test_c",
        "tests/integration/test_service_restart.py",
    ]
    assert first_ordered(scopes) == [
        "tests/controlplane/test_soak.py::test_c",
        "tests/controlplane/test_hotspot_taint.py",
        "tests/controlplane/test_lost_journal.py::test_b",
        "tests/image",
    ]
