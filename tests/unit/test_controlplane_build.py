"""The wrapper modules the control-plane build writes, from go.mod texts shaped like the real ones."""

from __future__ import annotations

import threading

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


def _go_naming_by_package(commands: list[list[str]]) -> object:
    """A stand-in for ``_run`` that records each command and, for ``go build``, writes what Go would:
    ``-o FILE`` for one package, else one binary per package in ``-o DIR/``, named after its last element."""

    def run(cmd: list[str], cwd: object, env: object) -> str:
        commands.append(cmd)
        if cmd[1] == "build":
            out = cmd[cmd.index("-o") + 1]
            packages = cmd[cmd.index("-o") + 2 :]
            names = [out] if not out.endswith("/") else [out + p.rsplit("/", 1)[1] for p in packages]
            for name in names:
                with open(name, "w") as binary:
                    binary.write("binary\n")
        return ""

    return run


@pytest.mark.parametrize("root", [build.KUBERNETES, build.ETCD, build.HELM], ids=lambda r: r.name)
def test_a_modules_binaries_come_from_one_go_build_each_under_its_own_name(
    root: build.GoBuild, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("DESCHEDULER_TEST_CACHE", str(tmp_path))
    commands: list[list[str]] = []
    monkeypatch.setattr(build, "_go", lambda: "go")
    monkeypatch.setattr(build, "_download", lambda go, r, work, env: ("module m\n", "1.24", tmp_path))
    monkeypatch.setattr(build, "_run", _go_naming_by_package(commands))
    assert build.build(root) == root.bin_dir and root.is_built()
    go_builds = [cmd for cmd in commands if cmd[1] == "build"]
    assert len(go_builds) == 1 and go_builds[0][-len(root.packages) :] == list(root.packages.values())


def test_a_go_build_that_names_a_binary_otherwise_stops_with_its_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("DESCHEDULER_TEST_CACHE", str(tmp_path))
    renamed = build.GoBuild(
        "two", "example.com/m", "v1", {"left": "example.com/m/cmd/a", "b": "example.com/m/cmd/b"}
    )
    monkeypatch.setattr(build, "_go", lambda: "go")
    monkeypatch.setattr(build, "_download", lambda go, r, work, env: ("module m\n", "1.24", tmp_path))
    monkeypatch.setattr(build, "_run", _go_naming_by_package([]))
    with pytest.raises(build.BuildError, match="wrote no left"):
        build.build(renamed)
    assert not renamed.bin_dir.exists()


def test_every_missing_component_is_resolved_while_the_first_one_compiles(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """Resolving is mostly downloads: the later components' must not wait for the first one's compile."""
    monkeypatch.setenv("DESCHEDULER_TEST_CACHE", str(tmp_path))
    components = build.CONTROL_PLANE
    resolved: list[str] = []
    all_resolved = threading.Event()
    seen_at_compile: list[list[str]] = []

    def resolve(root: build.GoBuild) -> str:
        resolved.append(root.name)
        if len(resolved) == len(components):
            all_resolved.set()
        return root.name

    def compile_(root: build.GoBuild, name: str) -> object:
        if not seen_at_compile:
            all_resolved.wait(timeout=5)
        seen_at_compile.append(sorted(resolved))
        root.bin_dir.mkdir(parents=True)
        for binary in (*root.packages, *root.data_files):
            (root.bin_dir / binary).write_text("binary\n")
        return root.bin_dir

    monkeypatch.setattr(build, "_resolve", resolve)
    monkeypatch.setattr(build, "_compile", compile_)
    paths = build.ensure_all(components)
    assert seen_at_compile[0] == sorted(c.name for c in components)
    assert all(path.is_file() for path in paths.values())
