"""The wrapper modules the control-plane build writes, from go.mod texts shaped like the real ones."""

from __future__ import annotations

import pytest

from tests.controlplane import build

KUBERNETES_GOMOD = """module k8s.io/kubernetes

go 1.25.0

require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // the client
\tk8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20250101000000-abcdef012345
)
"""

STAGING = "v0." + build.KUBERNETES_VERSION.split(".", 1)[1]
"""Kubernetes publishes its staging modules as v0.MINOR.PATCH."""

ETCD_GOMOD = """module go.etcd.io/etcd/server/v3

go 1.26.0

replace (
\tgo.etcd.io/etcd/api/v3 => ../api
\tgo.etcd.io/etcd/pkg/v3 => ../pkg
)

// Bad imports are sometimes causing attempts to pull that code.
replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
"""


def test_every_replace_is_read_from_blocks_and_single_lines_without_placeholders() -> None:
    assert build.replaces(KUBERNETES_GOMOD) == {
        "k8s.io/api": "./staging/src/k8s.io/api",
        "k8s.io/client-go": "./staging/src/k8s.io/client-go",
        "k8s.io/kube-openapi": "k8s.io/kube-openapi v0.0.0-20250101000000-abcdef012345",
    }
    assert build.replaces(ETCD_GOMOD) == {
        "go.etcd.io/etcd/api/v3": "../api",
        "go.etcd.io/etcd/pkg/v3": "../pkg",
    }


@pytest.mark.parametrize(
    ("root", "gomod", "expected"),
    [
        (
            build.KUBERNETES,
            KUBERNETES_GOMOD,
            [
                f"require k8s.io/kubernetes {build.KUBERNETES_VERSION}",
                "replace k8s.io/api => k8s.io/api v0." + build.KUBERNETES_VERSION.split(".", 1)[1],
                "replace k8s.io/client-go => k8s.io/client-go v0."
                + build.KUBERNETES_VERSION.split(".", 1)[1],
                "replace k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20250101000000-abcdef012345",
            ],
        ),
        (
            build.ETCD,
            ETCD_GOMOD,
            [
                f"require go.etcd.io/etcd/server/v3 {build.ETCD_VERSION}",
                f"replace go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 {build.ETCD_VERSION}",
                f"replace go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 {build.ETCD_VERSION}",
            ],
        ),
    ],
    ids=["kubernetes-staging-modules", "etcd-sibling-modules"],
)
def test_the_wrapper_points_local_replaces_at_published_modules(
    root: build.GoBuild, gomod: str, expected: list[str]
) -> None:
    text = build.wrapper_gomod(root, gomod, "1.26.0")
    lines = [line for line in text.splitlines() if line.startswith(("require", "replace"))]
    assert lines == expected
    assert "go 1.26.0" in text and "FORBIDDEN" not in text and "./" not in text


def test_kubernetes_binaries_are_stamped_with_their_version_for_both_version_packages() -> None:
    flags = " ".join(build.KUBERNETES.ldflags)
    minor = build.KUBERNETES_VERSION.split(".")[1]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion={build.KUBERNETES_VERSION}" in flags
        assert f"-X {pkg}.gitMajor=1" in flags and f"-X {pkg}.gitMinor={minor}" in flags


def test_without_go_on_path_the_build_stops_with_one_line_naming_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("DESCHEDULER_TEST_CACHE", str(tmp_path))
    with pytest.raises(build.BuildError) as raised:
        build.build(build.KWOK)
    message = str(raised.value)
    assert "Go is not on PATH" in message and "\n" not in message


def test_binaries_in_the_cache_are_reused_without_go(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("DESCHEDULER_TEST_CACHE", str(tmp_path))
    build.KWOK.bin_dir.mkdir(parents=True)
    for name in (*build.KWOK.packages, *build.KWOK.data_files):
        (build.KWOK.bin_dir / name).write_text("cached\n")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert build.build(build.KWOK) == build.KWOK.bin_dir


def test_a_cache_missing_the_kwok_stage_policy_is_rebuilt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("DESCHEDULER_TEST_CACHE", str(tmp_path))
    build.KWOK.bin_dir.mkdir(parents=True)
    (build.KWOK.bin_dir / "kwok").write_text("cached\n")
    assert not build.KWOK.is_built()
