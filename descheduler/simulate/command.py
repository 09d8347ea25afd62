"""``descheduler simulate``: run the planner offline over a snapshot, cycle after cycle."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from descheduler.config.load import ConfigError, load_config
from descheduler.report.options import add_report_options, skip_form
from descheduler.report.text import render_html, render_json, render_text
from descheduler.simulate.inputs import InputError, load_cluster, load_usage
from descheduler.simulate.runner import run

EXIT_OK = 0
EXIT_INPUT = 2

DESCRIPTION = """\
Run the LowNodeLoad planner offline over a cluster snapshot and measured usage, cycle after cycle,
and print what it would evict and why: node classes, anomaly counts, evictions with Koordinator's
reason text, and every pod left alone with its reason code. Nothing talks to a cluster.
A hotspot that stopped for its own reason (cured, a limit, no room left) reports its filtered pods as one
line per reason with a count and a few names; --explain all lists each of them.

CONFIG   the configuration the service reads (DeschedulerConfiguration or a ConfigMap holding it)
CLUSTER  Kubernetes objects as `kubectl get nodes,pods,pdb,rs,deploy,sts -A -o json` (or -o yaml) prints
         them, gzipped or not (Node, Pod, PodDisruptionBudget, ReplicaSet, Deployment, StatefulSet,
         ReplicationController, Namespace, and for DRA ResourceSlice, ResourceClaim, DeviceClass: add
         resourceslices,resourceclaims,deviceclasses; other kinds ignored); `descheduler snapshot` writes one
USAGE    YAML or JSON: nodes: {NODE: SAMPLE or [SAMPLE per cycle]}, pods: {NAMESPACE/NAME: SAMPLE};
         SAMPLE is {cpu: QUANTITY, memory: QUANTITY, age: DURATION?}; memory excludes page cache.
         A node without an entry uses the sum of its pods' samples; a node with neither has no usage
         and is skipped, as the live service skips it. Samples the live usage sources would not trust
         (negative, NaN, more than 4x the node's allocatable) are refused the same way here.

Between cycles an evicted pod is gone (its usage leaves its node); with --reschedule a simple
least-loaded scheduler re-creates it on a node that fits. Every limit and churnBudget applies;
evictionWindows do not (they gate only live sending): it shows what a run inside a window would evict."""

EPILOG = """\
example:
  descheduler simulate --config config/examples/hotspot/config.yaml \\
    --cluster config/examples/hotspot/cluster.yaml --usage config/examples/hotspot/usage.yaml \\
    --cycles 6 --output text"""


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of cycles, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"--cycles must be at least 1, got {number}")
    return number


def cmd_simulate(args: argparse.Namespace) -> int:
    """Every mistake in the three files is reported in one go (configuration first), then exit 2."""
    errors: list[str] = []
    effective = None
    try:
        effective = load_config(args.config)  # what validate, run and once check, no less
    except ConfigError as exc:
        errors.append(str(exc))
    snapshot = series = None
    try:
        snapshot = load_cluster(args.cluster)
        series = load_usage(args.usage, snapshot)
    except InputError as exc:
        errors += exc.problems
    if errors or effective is None or snapshot is None or series is None:
        for line in errors:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_INPUT
    for notice in effective.notices:
        print(f"notice: {notice}", file=sys.stderr)
    for warning in (w for node in snapshot.nodes for w in node.warnings):  # a fallback (raw-allocatable)
        print(f"warning: {warning}", file=sys.stderr)
    if effective.low_node_load is None:
        print(
            "notice: LowNodeLoad is not enabled in any profile's balance plugins: nothing will move",
            file=sys.stderr,
        )
    form = skip_form(args.explain)
    results = run(effective, snapshot, series, args.cycles, reschedule=args.reschedule, skip_form=form)
    renderers = {"json": render_json, "html": render_html, "text": render_text}
    output = renderers[args.output](results)
    sys.stdout.write(output)
    return EXIT_OK


def add_simulate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``simulate`` on the CLI's subparsers (called by ``descheduler.cli``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="run the planner offline over a snapshot and show what it would evict, and why",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", required=True, metavar="CONFIG", help="configuration file or ConfigMap manifest"
    )
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="CLUSTER",
        help="Kubernetes objects: kubectl get nodes,pods,pdb,rs,deploy,sts -A -o json (or -o yaml), "
        "gzipped or not; for DRA add resourceslices,resourceclaims,deviceclasses",
    )
    parser.add_argument(
        "--usage",
        required=True,
        metavar="USAGE",
        help="measured usage of nodes and pods (YAML or JSON, gzipped or not)",
    )
    parser.add_argument(
        "--cycles", type=_positive, default=1, metavar="N", help="number of cycles (default 1)"
    )
    parser.add_argument(
        "--reschedule",
        action="store_true",
        help="re-create each evicted pod on the least-loaded node that fits, carrying its usage",
    )
    add_report_options(
        parser,
        "output",
        "summary (default): the filtered pods of a hotspot that stopped for its own reason as one "
        "line per reason with a count; all: one line per pod (JSON says which: skipForm)",
    )
    parser.set_defaults(func=cmd_simulate)
    return parser
