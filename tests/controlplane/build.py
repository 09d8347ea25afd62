"""Build the pinned control-plane binaries from their official Go modules, cached outside the repo.

Run ``python -m tests.controlplane.build`` to build (or just check) everything; the pytest fixtures call
``ensure_all()`` which is a no-op when the cache holds the binaries.

``k8s.io/kubernetes`` and etcd's server module both ``replace`` sibling modules with local folders, which
``go install module@version`` refuses. Each is built from a small wrapper module that requires the real
module and points every such replace at the published module of the matching version; the list is read
from the go.mod the proxy serves, never typed by hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
DESCHEDULER_VERSION = "v0.36.0"


class BuildError(RuntimeError):
    """A binary could not be built; the message says which and why in one line."""


def cache_root() -> Path:
    """Where binaries live: ``$DESCHEDULER_TEST_CACHE`` or ``~/.cache/load-aware-descheduler``."""
    env = os.environ.get("DESCHEDULER_TEST_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "load-aware-descheduler"
    return base / "go-bin"


@dataclass(frozen=True)
class GoBuild:
    """One wrapper module: a root module at a version, the packages to build and how to stamp them."""

    name: str
    module: str
    version: str
    packages: dict[str, str]  # binary name -> import path
    ldflags: tuple[str, ...] = ()
    rewrite_replaces: bool = True
    env: dict[str, str] = field(default_factory=dict)
    data_files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Files to keep beside the binaries: name -> paths inside the root module, concatenated as YAML."""

    @property
    def bin_dir(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def is_built(self) -> bool:
        return all(self.binary(b).is_file() for b in (*self.packages, *self.data_files))


def _kube_ldflags(version: str) -> tuple[str, ...]:
    major, minor = re.match(r"v(\d+)\.(\d+)\.", version).groups()  # type: ignore[union-attr]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


KUBERNETES = GoBuild(
    name="kubernetes",
    module="k8s.io/kubernetes",
    version=KUBERNETES_VERSION,
    packages={
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    },
    ldflags=_kube_ldflags(KUBERNETES_VERSION),
)
ETCD = GoBuild(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    version=ETCD_VERSION,
    packages={"etcd": "go.etcd.io/etcd/server/v3"},
)
KWOK = GoBuild(
    name="kwok",
    module="sigs.k8s.io/kwok",
    version=KWOK_VERSION,
    packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
    # kwok's own "fast" stage policy (nodes Ready at once, pods Running once bound, deleted pods removed);
    # node heartbeats are left out because the node-lifecycle controller is off.
    data_files={
        "stages.yaml": (
            "kustomize/stage/node/fast/node-initialize.yaml",
            "kustomize/stage/pod/fast/pod-ready.yaml",
            "kustomize/stage/pod/fast/pod-complete.yaml",
            "kustomize/stage/pod/fast/pod-delete.yaml",
        )
    },
)
# The Kubernetes descheduler, for the side-by-side benchmark only (not used by the tests).
PEER_DESCHEDULER = GoBuild(
    name="k8s-descheduler",
    module="sigs.k8s.io/descheduler",
    version=DESCHEDULER_VERSION,
    packages={"descheduler": "sigs.k8s.io/descheduler/cmd/descheduler"},
)

HELM_VERSION = "v3.22.0"
"""A Helm 3 release whose go.mod asks for Go 1.26 at most, for the chart tests."""
HELM = GoBuild(
    name="helm",
    module="helm.sh/helm/v3",
    version=HELM_VERSION,
    packages={"helm": "helm.sh/helm/v3/cmd/helm"},
    ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
    rewrite_replaces=False,  # Helm's go.mod replaces nothing
)

CONTROL_PLANE: tuple[GoBuild, ...] = (ETCD, KWOK, KUBERNETES)
TEST_TOOLS: tuple[GoBuild, ...] = (*CONTROL_PLANE, HELM)
"""Everything the test suite runs: ``python -m tests.controlplane.build`` builds it all up front."""


def _log(msg: str) -> None:
    # One write a line: components resolve in threads at once (print writes the newline apart).
    sys.stderr.write(f"[controlplane-build {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "Go is not on PATH: the control-plane tests build etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler and kwok from Go modules; install Go >= 1.26 (https://go.dev/dl) and retry"
        )
    return go


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BuildError(f"`{' '.join(cmd[:4])} ...` failed in {cwd}:\n{tail}")
    return proc.stdout


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-buildvcs=false")
    env["CGO_ENABLED"] = "0"
    env["GOTOOLCHAIN"] = "local"
    return env


def replaces(gomod_text: str) -> dict[str, str]:
    """Every ``replace`` of a go.mod: module path -> target (``./dir``, ``../dir`` or ``module version``).

    A dependency's replaces are ignored when it is built as a dependency, so a wrapper must restate them.
    Targets that are forbidden placeholders (etcd's ``./FORBIDDEN_DEPENDENCY``) are left out.
    """
    found: dict[str, str] = {}
    in_block = False
    for raw in gomod_text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if line.startswith("replace ("):
            in_block = True
            continue
        if in_block and line == ")":
            in_block = False
            continue
        if line.startswith("replace "):
            line = line[len("replace ") :].strip()
        elif not in_block:
            continue
        m = re.match(r"^(\S+)(?:\s+\S+)?\s*=>\s*(\S+(?:\s+\S+)?)$", line)
        if m and "FORBIDDEN" not in m.group(2):
            found[m.group(1)] = m.group(2)
    return found


def is_local(target: str) -> bool:
    return target.startswith(("./", "../"))


def staging_version(module: str, root: GoBuild) -> str:
    """The published version of a module the root replaces locally.

    Kubernetes publishes its staging modules as ``v0.MINOR.PATCH`` for ``v1.MINOR.PATCH``; etcd publishes
    its sibling modules at the same version as the server.
    """
    if root.module == "k8s.io/kubernetes" and module.startswith("k8s.io/"):
        return "v0." + root.version.split(".", 1)[1]
    return root.version


def wrapper_gomod(root: GoBuild, gomod_text: str, go_version: str) -> str:
    """The go.mod of the wrapper module that builds ``root``."""
    lines = [
        f"module example.invalid/{root.name}-wrapper",
        "",
        f"go {go_version}",
        "",
        f"require {root.module} {root.version}",
        "",
    ]
    if root.rewrite_replaces:
        for mod, target in sorted(replaces(gomod_text).items()):
            published = f"{mod} {staging_version(mod, root)}" if is_local(target) else target
            lines.append(f"replace {mod} => {published}")
    return "\n".join(lines) + "\n"


def _download(go: str, root: GoBuild, work: Path, env: dict[str, str]) -> tuple[str, str, Path]:
    """The root module's go.mod text, its go version and the folder of its sources in the module cache."""
    out = _run([go, "mod", "download", "-json", f"{root.module}@{root.version}"], work, env)
    info = json.loads(out)
    text = Path(info["GoMod"]).read_text()
    m = re.search(r"^go (\d+\.\d+(?:\.\d+)?)", text, re.M)
    return text, m.group(1) if m else "1.24", Path(info["Dir"])


@dataclass(frozen=True)
class _Resolved:
    """A wrapper module whose dependencies are downloaded and resolved: what compiling it needs."""

    work: Path
    source: Path
    started: float


def _toolchain(root: GoBuild) -> tuple[str, dict[str, str]]:
    """The go binary and the environment ``root`` builds in."""
    return _go(), _go_env() | root.env


def _resolve(root: GoBuild) -> _Resolved:
    """Download ``root`` and resolve its wrapper module: network and disk bound, no compiling."""
    go, env = _toolchain(root)
    work = cache_root() / "wrappers" / f"{root.name}-{root.version}"
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _log(f"building {root.name} {root.version} ({', '.join(root.packages)}); a cold build takes minutes")
    (work / "go.mod").write_text(f"module example.invalid/{root.name}-wrapper\n\ngo 1.24\n")
    gomod_text, go_version, source = _download(go, root, work, env)
    (work / "go.mod").write_text(wrapper_gomod(root, gomod_text, go_version))
    (work / "go.sum").unlink(missing_ok=True)
    _log(f"{root.name}: resolving modules")
    _run([go, "get", *[f"{pkg}@{root.version}" for pkg in root.packages.values()]], work, env)
    return _Resolved(work, source, started)


def _compile(root: GoBuild, resolved: _Resolved) -> Path:
    """Compile ``root``'s resolved wrapper into its cache folder (CPU bound)."""
    (go, env), work = _toolchain(root), resolved.work
    tmp_dir = root.bin_dir.with_name(root.bin_dir.name + ".partial")
    tmp_dir.mkdir(parents=True, exist_ok=True)
    # One `go build` for all of a module's binaries: the cores stay busy across the packages they share
    # and the links overlap (the binaries are byte-identical to one build each). With `-o DIR/` a binary
    # is named after its package, so a lone one (etcd's package ends in /v3) gets its name explicitly.
    _log(f"{root.name}: compiling {', '.join(root.packages)}")
    ldflags = " ".join(("-s", "-w", *root.ldflags))
    out = str(tmp_dir / next(iter(root.packages))) if len(root.packages) == 1 else f"{tmp_dir}/"
    _run([go, "build", "-trimpath", "-ldflags", ldflags, "-o", out, *root.packages.values()], work, env)
    unnamed = [binary for binary in root.packages if not (tmp_dir / binary).is_file()]
    if unnamed:
        raise BuildError(f"{root.name}: go build wrote no {', '.join(unnamed)} (named after the package)")
    for name, parts in root.data_files.items():
        texts = [(resolved.source / part).read_text().strip() for part in parts]
        (tmp_dir / name).write_text("\n---\n".join(texts) + "\n")
    if root.bin_dir.exists():
        shutil.rmtree(root.bin_dir)
    tmp_dir.rename(root.bin_dir)
    _log(f"{root.name}: done in {time.monotonic() - resolved.started:.0f}s -> {root.bin_dir}")
    return root.bin_dir


def build(root: GoBuild, force: bool = False) -> Path:
    """Build ``root``'s binaries into its cache folder unless they are already there."""
    if root.is_built() and not force:
        return root.bin_dir
    return _compile(root, _resolve(root))


def ensure_all(components: tuple[GoBuild, ...] = CONTROL_PLANE) -> dict[str, Path]:
    """Every control-plane binary by name, building what the cache lacks. The missing components' modules
    are all resolved at once, in threads (mostly downloads), while the first ones compile one at a time."""
    missing = [comp for comp in components if not comp.is_built()]
    if missing:
        with ThreadPoolExecutor(max_workers=len(missing)) as pool:
            resolving = [pool.submit(_resolve, comp) for comp in missing]
            for comp, resolved in zip(missing, resolving, strict=True):
                _compile(comp, resolved.result())
    paths: dict[str, Path] = {}
    for comp in components:
        for binary in (*comp.packages, *comp.data_files):
            paths[binary] = comp.binary(binary)
    return paths


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    components = TEST_TOOLS + ((PEER_DESCHEDULER,) if "--peers" in args else ())
    try:
        started = time.monotonic()
        paths = ensure_all(components)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}\t{path.stat().st_size / 2**20:.1f} MiB\t{path}")
    _log(f"all binaries ready in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
