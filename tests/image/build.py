"""Build the container image from the repository's unchanged Dockerfile with Debian's podman, as root.

No base image can be pulled here, so the base is made locally: ``debootstrap --variant=minbase`` plus the
Python the Dockerfile expects, imported with ``podman import`` as ``localhost/...``. It is cached under
``~/.cache/load-aware-descheduler/image/`` (beside the Go binaries) keyed by a hash of its recipe, so
only a change to the recipe rebuilds it. Podman runs with a temporary containers.conf: the ``runc``
runtime (crun refuses hybrid cgroups) and a ``nofile`` ulimit within this machine's hard limit.

Run ``python -m tests.image.build`` to build (or reuse) the base and the image and print the figures
(``--base``: the base alone).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.controlplane.build import cache_root as go_cache_root

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/load-aware-descheduler:test"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


class ImageError(RuntimeError):
    """The base or the image could not be built; the message says which step and why."""


@dataclass(frozen=True)
class BaseRecipe:
    """What the local base holds: a Debian suite and the packages the Dockerfile's stages run."""

    suite: str = "bookworm"
    mirror: str = os.environ.get("DESCHEDULER_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    # python-is-python3: the Dockerfile calls `python`, as the official python images name it.
    packages: tuple[str, ...] = (
        "python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates", "tzdata",
    )  # fmt: skip

    @property
    def digest(self) -> str:
        text = json.dumps([self.suite, self.mirror, sorted(self.packages), "minbase"])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"localhost/load-aware-descheduler-base:{self.digest}"


def cache_dir() -> Path:
    """Beside the Go binaries: ``$DESCHEDULER_TEST_CACHE`` or ``~/.cache/load-aware-descheduler``."""
    return go_cache_root().parent / "image"


def containers_conf(folder: Path) -> Path:
    """A containers.conf for podman on this machine: runc, and ulimits within the hard limits (podman's
    defaults are higher, which runc cannot set; nproc at the hard limit was refused too, so it is capped)."""
    nofile, nproc = (
        min(resource.getrlimit(kind)[1] & 0xFFFFFFFF, cap)
        for kind, cap in ((resource.RLIMIT_NOFILE, 1_048_576), (resource.RLIMIT_NPROC, 4096))
    )
    path = folder / "containers.conf"
    path.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        '[engine]\nruntime = "runc"\nevents_logger = "file"\ncgroup_manager = "cgroupfs"\n'
    )
    return path


class Podman:
    """podman as a child process with the temporary containers.conf."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("podman") is None:
            raise ImageError("podman is not installed (apt-get install podman runc debootstrap)")
        self.env = {**os.environ, "CONTAINERS_CONF": str(containers_conf(folder))}

    def argv(self, *args: str) -> list[str]:
        return ["podman", *args]

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.argv(*args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise ImageError(f"podman {args[0]} exited {result.returncode}: {result.stderr[-3000:]}")
        return result

    def exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0


def _bootstrap(recipe: BaseRecipe, tarball: Path) -> None:
    """debootstrap the base into a temporary folder and pack it as ``tarball`` (apt's caches left out)."""
    with tempfile.TemporaryDirectory(prefix="base-", dir=tarball.parent) as work:
        root = Path(work) / "root"
        cmd = [
            "debootstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}",
            recipe.suite, str(root), recipe.mirror,
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
        if done.returncode != 0:
            raise ImageError(
                f"debootstrap exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-1000:]}"
            )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(root / junk, ignore_errors=True)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True, timeout=600)
        partial.rename(tarball)


def ensure_base(podman: Podman, recipe: BaseRecipe = BaseRecipe()) -> str:
    """The base image's tag, imported from the cache (made first if the cache lacks it)."""
    if podman.exists(recipe.tag):
        return recipe.tag
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    tarball = folder / f"base-{recipe.digest}.tar"
    if not tarball.is_file():
        _bootstrap(recipe, tarball)
    podman.run("import", str(tarball), recipe.tag)
    return recipe.tag


def build_image(podman: Podman, base: str, tag: str = IMAGE) -> str:
    """``podman build`` of the unchanged Dockerfile on ``base``. The host's CA bundle is mounted for the
    build's downloads only (a host behind a TLS-inspecting proxy), never copied into a layer."""
    volumes = [f"--volume={HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"] if HOST_CA_BUNDLE.is_file() else []
    podman.run(
        "build", "--network=host", f"--build-arg=PYTHON_IMAGE={base}", *volumes,
        "--tag", tag, "--file", str(REPO / "Dockerfile"), str(REPO), timeout=1200,
    )  # fmt: skip
    return tag


def image_size_mb(podman: Podman, tag: str = IMAGE) -> float:
    out = podman.run("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip()
    return int(out) / 1e6


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the base and the image, printing how long each took and the image's size.
    ``--base`` stops after the base: CI makes it ahead, beside the Go build, since it is mostly I/O."""
    base_only = "--base" in (sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as folder:
        podman = Podman(Path(folder))
        started = time.monotonic()
        base = ensure_base(podman)
        built = time.monotonic()
        if base_only:
            print(f"base {base}: {built - started:.1f}s")
            return 0
        build_image(podman, base)
        done = time.monotonic()
        print(
            f"base {base}: {built - started:.1f}s, image {IMAGE}: {done - built:.1f}s, "
            f"{image_size_mb(podman):.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
