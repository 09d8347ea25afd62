"""``descheduler snapshot``: write a live cluster (and its usage) to files ``simulate`` replays.

An operator who saw an odd decision can capture the cluster as the descheduler sees it and replay it
offline, change the configuration and replay again. The cluster file is what
``kubectl get nodes,pods,pdb,rs,deploy,sts,rc,ns,resourceslices,resourceclaims,deviceclasses -A -o json``
prints (one ``List``, objects as the API server returns them), gzipped; the DRA kinds only where the
server serves them and lets us list them (a notice says when not). It is written page by page, each item
copied as it came, never decoded into dicts. With ``--prometheus`` the nodes and pods are also turned into
snapshot values as their pages go by (the live cache's decoder), and the usage file holds every node's and
pod's usage as the live service reads it (the same queries), with each sample's age, as JSON: ``simulate``
reads it like YAML (JSON is YAML), and at 150,000 pods PyYAML's emitter would take some 40 s where
``json`` takes under one.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from descheduler.cluster.fastparse import FAST_KINDS, exact_item
from descheduler.cluster.parse import ObjectError, parse_node, parse_pod
from descheduler.cluster.types import Node, Pod, UsageSample
from descheduler.kube.api import KubeApi
from descheduler.kube.cache import DRA_RESOURCES, RESOURCES, Interner
from descheduler.kube.errors import ApiStatusError, DecodeError, KubeError

EXIT_OK = 0
EXIT_FAILED = 1
PAGE_SIZE = 500


class _PageMeta(Struct, gc=False, rename={"continue_": "continue"}):
    continue_: str | None = None


class _Page(Struct, gc=False, rename="camel"):
    """A LIST page with its items left as the server's bytes: they go to the file as they came."""

    api_version: str | None = None
    items: list[msgspec.Raw] | None = None
    metadata: _PageMeta | None = None


class _Name(Struct, gc=False):
    name: str | None = None
    namespace: str | None = None


class _Placement(Struct, gc=False, rename="camel"):
    node_name: str | None = None


class _Item(Struct, gc=False, rename="camel"):
    """What the writer reads of an item: whether it names its kind, its name, and a pod's node."""

    api_version: str | None = None
    kind: str | None = None
    metadata: _Name | None = None
    spec: _Placement | None = None


_PAGE = msgspec.json.Decoder(_Page)
_ITEM = msgspec.json.Decoder(_Item)


@dataclass
class Written:
    """What ``write_cluster`` wrote: objects per kind, and the pods left out (``namespace/name on node``).
    With ``collect``, also the nodes and pods as snapshot values (what the usage fetch reads) and the
    objects ``parse.py`` refuses (``simulate`` will refuse them too: the operator is told)."""

    counts: dict[str, int] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    not_listed: list[str] = field(default_factory=list)
    """DRA kinds the server would not list (an API it does not serve, or no permission), and why:
    the dump holds none of them, so ``simulate`` sees no devices."""


def write_cluster(api: KubeApi, path: Path, page_size: int = PAGE_SIZE, *, collect: bool = False) -> Written:
    """Every object the descheduler reads, as one gzipped kubectl-style JSON ``List``.

    Items are copied as the API server sent them (typed lists leave ``kind`` and ``apiVersion`` out of
    their items, so those are written in front), never decoded into dicts and encoded again.

    Nodes are listed before pods, and the two LISTs are not one moment: a node deleted (or created) in
    between leaves pods bound to a node the file does not hold, which ``simulate`` rightly refuses. Such
    pods are left out (they are leaving with their node, or arrived after the picture was taken), and
    named so the operator knows. With ``collect`` the nodes and pods kept are also parsed (``Written``)."""
    written = Written()
    nodes: set[str] = set()
    interner = Interner()
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(b'{"apiVersion": "v1", "items": [\n')
        separator = b""
        for spec in RESOURCES:
            token: str | None = None
            seen = written.counts[spec.kind] = 0
            kept = collect and spec.kind in ("Node", "Pod")
            while True:
                query = {"limit": page_size, "continue": token}
                where = f"GET {spec.path}"
                try:
                    body = api.request_bytes("GET", spec.path, query=query)
                except ApiStatusError as exc:
                    if spec.name not in DRA_RESOURCES or token is not None or exc.status not in (403, 404):
                        raise
                    written.not_listed.append(f"{spec.kind}: {exc}")
                    del written.counts[spec.kind]
                    break
                try:
                    page = _PAGE.decode(body)
                except msgspec.MsgspecError as exc:
                    raise DecodeError(f"{where}: not a list of {spec.name}: {exc}") from None
                typed = FAST_KINDS[spec.kind].decode_page(body) if kept else None
                version = json.dumps(page.api_version or "v1")
                for index, raw in enumerate(page.items or ()):
                    seen += 1
                    try:
                        item = _ITEM.decode(raw)
                    except msgspec.MsgspecError as exc:
                        raise DecodeError(f"{where}: item {seen}: {exc}") from None
                    name = item.metadata.name if item.metadata is not None else None
                    if spec.kind == "Node":
                        nodes.add(name or "")
                    elif spec.kind == "Pod":
                        node = item.spec.node_name if item.spec is not None else None
                        if node and node not in nodes:
                            namespace = item.metadata.namespace if item.metadata is not None else None
                            written.left_out.append(f"{namespace or ''}/{name or ''} on {node}")
                            continue
                    data = bytes(raw)
                    out.write(separator + _named(data, item, version, spec.kind))
                    separator = b",\n"
                    written.counts[spec.kind] += 1
                    if kept:
                        _keep(written, spec.kind, data, typed[0][index] if typed else None, interner)
                token = page.metadata.continue_ if page.metadata is not None else None
                if not token:
                    break
        out.write(b'\n], "kind": "List", "metadata": {}}\n')
    return written


def _keep(written: Written, kind: str, raw: bytes, struct: Any, interner: Interner) -> None:
    """Add a node or pod to ``written`` as the live cache would parse it: the fast converter, else (an
    object it does not reproduce exactly) ``parse.py``, whose refusal becomes one of ``problems``."""
    value: Node | Pod | None = FAST_KINDS[kind].try_convert(struct, interner) if struct is not None else None
    if value is None:
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # the server's bytes; nested too deeply for Python
            written.problems.append(f"{kind}: an item that cannot be decoded: {str(exc)[:200]}")
            return
        if not isinstance(obj, dict):
            written.problems.append(f"{kind}: an item that is not a JSON object")
            return
        obj = exact_item(obj, kind)
        try:
            value = parse_node(obj) if kind == "Node" else parse_pod(obj)
        except ObjectError as exc:
            written.problems.append(str(exc))
            return
    if isinstance(value, Node):
        written.nodes.append(value)
    else:
        written.pods.append(value)


def _named(raw: bytes, item: _Item, version: str, kind: str) -> bytes:
    """The item's JSON with ``apiVersion`` and ``kind`` in front where it lacks them."""
    missing = []
    if item.api_version is None:
        missing.append(f'"apiVersion":{version}')
    if item.kind is None:
        missing.append(f'"kind":{json.dumps(kind)}')
    if not missing:
        return raw
    body = raw.lstrip()[1:]  # after the object's "{"
    joiner = "" if body.lstrip().startswith(b"}") else ","
    return ("{" + ",".join(missing) + joiner).encode() + body


def _amount(resource: str, value: int) -> str | int:
    return f"{value}m" if resource == "cpu" else value


def _sample(sample: UsageSample, now: float) -> dict[str, Any]:
    out: dict[str, Any] = {name: _amount(name, value) for name, value in sorted(sample.resources.items())}
    out["age"] = f"{max(0, round(now - sample.timestamp))}s"
    return out


def usage_document(
    nodes: Mapping[str, UsageSample], pods: Mapping[str, UsageSample], now: float
) -> dict[str, Any]:
    """The ``simulate`` USAGE document: ``nodes`` and ``pods`` samples with their age at ``now``."""
    return {
        "nodes": {name: _sample(s, now) for name, s in sorted(nodes.items())},
        "pods": {key: _sample(s, now) for key, s in sorted(pods.items())},
    }


def cmd_snapshot(args: argparse.Namespace) -> int:
    from descheduler.kube.connection import connect

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    cluster_path = out / "cluster.json.gz"
    api = connect(args.kubeconfig, qps=args.qps, burst=int(args.qps * 2), context=args.context)
    try:
        written = write_cluster(api, cluster_path, collect=bool(args.prometheus))
    except KubeError as exc:
        print(f"error: reading the cluster: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        api.close()
    counts, left_out = written.counts, written.left_out
    print(f"wrote {cluster_path}: " + ", ".join(f"{n} {k}" for k, n in counts.items()), file=sys.stderr)
    for problem in written.problems:
        print(
            f"notice: {problem} (simulate refuses this object until it is fixed or removed)", file=sys.stderr
        )
    for why in written.not_listed:
        print(f"notice: not in the dump: {why}", file=sys.stderr)
    if left_out:
        shown = ", ".join(left_out[:10]) + (f" and {len(left_out) - 10} more" if len(left_out) > 10 else "")
        print(
            f"notice: left out {len(left_out)} pod(s) bound to a node that was not in the node list (a node "
            f"went away or came while the cluster was read): {shown}",
            file=sys.stderr,
        )
    if not args.prometheus:
        return EXIT_OK
    from descheduler.config.providers import PrometheusSettings
    from descheduler.usage.prometheus import PrometheusSource

    now = time.time()
    source = PrometheusSource(PrometheusSettings.model_validate({"url": args.prometheus}), clock=lambda: now)
    try:
        usage = source.fetch(written.nodes, written.pods)
        document = usage_document(usage.nodes, dict(usage.pods), now)
    finally:
        source.close()
    usage_path = out / "usage.json"
    usage_path.write_text(json.dumps(document, indent=1) + "\n")
    for node, reason in sorted(usage.node_errors.items()):
        print(f"notice: no usage for node {node}: {reason}", file=sys.stderr)
    print(
        f"wrote {usage_path}: {len(document['nodes'])} nodes, {len(document['pods'])} pods "
        f"({source.cycle_samples} samples touched in Prometheus)",
        file=sys.stderr,
    )
    return EXIT_OK


def add_snapshot_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``snapshot`` on the CLI's subparsers (called by ``descheduler.cli``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "snapshot",
        help="write a live cluster (and its usage) to files simulate can replay",
        description=__doc__,
        epilog="example: descheduler snapshot --kubeconfig ~/.kube/config --output incident/ "
        "--prometheus http://localhost:9090\n"
        "         descheduler simulate --config config.yaml --cluster incident/cluster.json.gz "
        "--usage incident/usage.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)"
    )
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.add_argument(
        "--output", required=True, metavar="DIR", help="directory for cluster.json.gz and usage.json"
    )
    parser.add_argument(
        "--prometheus", default=None, metavar="URL", help="also write usage.json from this Prometheus"
    )
    parser.add_argument("--qps", type=float, default=20.0, help="client-side request rate limit (default 20)")
    parser.set_defaults(func=cmd_snapshot)
    return parser
