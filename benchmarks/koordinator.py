"""Koordinator's own descheduler (``koord-descheduler``) as a peer: build it, configure it, feed it usage.

Issue 31: our reference is Koordinator's LowNodeLoad with its MigrationController; until it runs beside ours
on the same control plane, what we say it does is what we read in its code. This module holds the parts a
side-by-side run needs, each usable alone:

- ``build``: from a checkout of github.com/koordinator-sh/koordinator at ``KOORD_COMMIT`` (a user clones the
  repository at that commit; nothing of it is committed here), verified, built with the module proxy
  (``CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath ./cmd/koord-descheduler``) and cached by commit.
- ``crd_paths``: the three CRDs it needs (NodeMetric, PodMigrationJob, Reservation), from the checkout.
- ``node_metric_status``: the NodeMetric status koordlet would write, from the numbers the benchmark's
  usage exporter serves to Prometheus for us. At this commit LowNodeLoad takes a node's usage as
  ``status.nodeMetric.systemUsage`` plus the sum of every ``status.podsMetric[].podUsage``, and trusts
  it while ``status.updateTime`` is within ``nodeMetricExpirationSeconds`` (180 s by default).
- ``koord_config``: the ACK guide's ConfigMap (our fixture, ``tests/fixtures``) as a file koord-descheduler
  reads, with what running it outside a cluster needs (kubeconfig, no leader election, local ports) and
  ``defaultJobMode: EvictDirectly``: with the guide's default (``ReservationFirst``, which needs
  koord-scheduler) it evicts nothing in a cluster scheduled by the stock scheduler.

    python -m benchmarks.koordinator build --source ~/src/koordinator
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

KOORD_REPO = "https://github.com/koordinator-sh/koordinator"
KOORD_COMMIT = "a7a1b76bbf81abd26f9c377de1f31a60dd965f6e"
"""v1.8.0-61 (2026-07-24): the commit whose LowNodeLoad tests issue 27 translated."""
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "load-aware-descheduler" / "go-bin"
CRDS = (
    "slo.koordinator.sh_nodemetrics.yaml",
    "scheduling.koordinator.sh_podmigrationjobs.yaml",
    "scheduling.koordinator.sh_reservations.yaml",
)
GUIDE_CONFIGMAP = (
    Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "koordinator-guide-configmap.yaml"
)


class BuildError(RuntimeError):
    """The checkout is not the expected commit, or the build failed: the message says which and how."""


@dataclass(frozen=True)
class Built:
    binary: Path
    seconds: float
    """Build time (0 when the cached binary was used)."""
    size: int
    cached: bool


def checkout_commit(source: Path) -> str:
    """The commit ``source`` has checked out (``git rev-parse HEAD``)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"{source}: not a git checkout of {KOORD_REPO} ({exc})") from None
    return done.stdout.strip()


def binary_path(commit: str = KOORD_COMMIT, cache: Path = CACHE) -> Path:
    return cache / f"koordinator-{commit[:12]}" / "koord-descheduler"


def build(source: Path, *, commit: str = KOORD_COMMIT, cache: Path = CACHE) -> Built:
    """koord-descheduler of ``commit`` built from ``source`` (verified to be at that commit), or the binary
    cached for that commit."""
    found = checkout_commit(source)
    if found != commit:
        raise BuildError(f"{source} is at {found}, not {commit}: git -C {source} checkout {commit}")
    target = binary_path(commit, cache)
    if target.is_file():
        return Built(target, 0.0, target.stat().st_size, cached=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    started = time.monotonic()
    command = ["go", "build", "-trimpath", "-o", str(target) + ".tmp", "./cmd/koord-descheduler"]
    done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"go build of koord-descheduler failed:\n{done.stderr[-4000:]}")
    Path(str(target) + ".tmp").replace(target)
    return Built(target, time.monotonic() - started, target.stat().st_size, cached=False)


def crd_paths(source: Path) -> list[Path]:
    """The CRDs koord-descheduler needs, from the checkout's ``config/crd/bases``."""
    paths = [source / "config" / "crd" / "bases" / name for name in CRDS]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise BuildError(f"missing CRDs in the checkout: {', '.join(missing)}")
    return paths


@dataclass(frozen=True)
class PodUsage:
    namespace: str
    name: str
    cores: float
    memory: int
    """Bytes, without reclaimable page cache (what both deschedulers read)."""


def _resources(cores: float, memory: int) -> dict[str, dict[str, str]]:
    return {"resources": {"cpu": f"{max(0, round(cores * 1000))}m", "memory": str(max(0, int(memory)))}}


def node_metric_status(
    system_cores: float, system_memory: int, pods: Sequence[PodUsage], now: datetime
) -> dict[str, Any]:
    """A NodeMetric ``status`` as koordlet reports it: the node's own (system) usage and each pod's. The
    node's total, as LowNodeLoad computes it, is the system usage plus every listed pod's."""
    return {
        "updateTime": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "nodeMetric": {"systemUsage": _resources(system_cores, system_memory)},
        "podsMetric": [
            {"namespace": p.namespace, "name": p.name, "podUsage": _resources(p.cores, p.memory)}
            for p in sorted(pods, key=lambda p: (p.namespace, p.name))
        ],
    }


def node_metric(node: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """The NodeMetric object of ``node`` (one per node, named after it) with ``status``."""
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": node},
        "spec": {},
        "status": dict(status),
    }


def guide_configuration(text: str | None = None) -> dict[str, Any]:
    """The DeschedulerConfiguration inside the ACK guide's ConfigMap (our test fixture by default)."""
    configmap = yaml.safe_load(text if text is not None else GUIDE_CONFIGMAP.read_text())
    (inner,) = configmap["data"].values()
    config = yaml.safe_load(inner)
    if not isinstance(config, dict) or config.get("kind") != "DeschedulerConfiguration":
        raise ValueError("the guide's ConfigMap holds no DeschedulerConfiguration")
    return config


def koord_config(
    kubeconfig: Path,
    *,
    dry_run: bool,
    interval: str = "60s",
    health_port: int = 0,
    metrics_port: int = 0,
    low_node_load: Mapping[str, Any] | None = None,
    migration: Mapping[str, Any] | None = None,
    guide_text: str | None = None,
) -> dict[str, Any]:
    """koord-descheduler's configuration: the guide's, run outside a cluster, evicting directly.

    ``low_node_load`` and ``migration`` replace fields of the two plugins' args (a comparison sets the
    limits on purpose, the same for both deschedulers: Koordinator's defaults are 2 migrating per node and
    one migration per workload per 5 minutes)."""
    config = guide_configuration(guide_text)
    config["deschedulingInterval"] = interval
    config["clientConnection"] = {"kubeconfig": str(kubeconfig), "qps": 100, "burst": 200}
    config["leaderElection"] = {"leaderElect": False}
    config["healthzBindAddress"] = f"127.0.0.1:{health_port}"
    config["metricsBindAddress"] = f"127.0.0.1:{metrics_port}"
    config["dryRun"] = dry_run
    for profile in config.get("profiles", []):
        configs = profile.setdefault("pluginConfig", [])
        names = {pc.get("name") for pc in configs}
        if "MigrationController" not in names:
            configs.append({"name": "MigrationController", "args": {}})
        for pc in configs:
            args = pc.setdefault("args", {})
            if pc.get("name") == "LowNodeLoad":
                args.update(low_node_load or {})
            elif pc.get("name") == "MigrationController":
                args.setdefault("apiVersion", "descheduler/v1alpha2")
                args.setdefault("kind", "MigrationControllerArgs")
                args["defaultJobMode"] = "EvictDirectly"
                args["dryRun"] = dry_run
                args.update(migration or {})
    return config


def command(binary: Path, config_path: Path, *, verbosity: int = 4) -> list[str]:
    """How to start it: no HTTPS server, our configuration file, logs verbose enough to read decisions."""
    return [str(binary), f"--config={config_path}", "--secure-port=0", f"--v={verbosity}"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.koordinator", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build", help="build (or reuse) koord-descheduler from a checkout at KOORD_COMMIT")
    b.add_argument("--source", type=Path, required=True, help=f"a clone of {KOORD_REPO} at {KOORD_COMMIT}")
    c = sub.add_parser("config", help="print the configuration koord-descheduler runs with")
    c.add_argument("--kubeconfig", type=Path, required=True)
    c.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.what == "build":
        try:
            built = build(args.source)
            crds = crd_paths(args.source)
        except BuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        how = "cached" if built.cached else f"built in {built.seconds:.0f} s"
        print(f"koord-descheduler {KOORD_COMMIT[:12]}: {built.binary} ({built.size / 2**20:.0f} MiB, {how})")
        print("CRDs: " + ", ".join(str(p) for p in crds))
        return 0
    print(yaml.safe_dump(koord_config(args.kubeconfig, dry_run=args.dry_run), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
