"""How many migration records fit in the journal's ConfigMap, with long real-world names.

A record's size depends on the names it carries: EKS node names (``ip-10-123-45-67.eu-west-1.compute.
internal``), pods of Deployments with long names (up to 63 characters, plus the ReplicaSet hash and the
pod suffix), namespaces, uids, the reason text. It grows after the eviction: the departed pod's usage,
then the matched replacement and its node, then the ping-pong guard's bounce time. This script builds
records at each stage with such names (each different, as in a real journal), encodes them exactly as the
service writes them (``planner/journal.encode``), and prints bytes per record and how many fit in
``MAX_BYTES``; then the anomaly detectors beside them, and what compaction frees.

    python -m benchmarks.journal_capacity [--records 2000] [--nodes 5000]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from descheduler.config.migration import JOURNAL_RECORDS
from descheduler.planner.journal import (
    COMPACT_AT,
    EVICTED,
    MAX_BYTES,
    UNKNOWN,
    Detectors,
    Entry,
    compact,
    encode,
)
from descheduler.planner.state import AnomalyCount

NOW = 1_800_000_000.123
WRITER = "load-aware-descheduler-7d9f8b6c5d-x2v9k_4242"
REASON = (
    "node is overutilized, node cpu usage(98.53%)>threshold(65.00%), memory usage(91.20%)>threshold(85.00%)"
)


def node(i: int) -> str:
    return f"ip-10-{100 + i % 150}-{i // 150 % 250}-{i % 250}.eu-west-1.compute.internal"


def deployment(i: int) -> str:
    """63 characters, the longest a Deployment name can be and still name its pods' hostnames."""
    return f"payments-settlement-reconciliation-worker-{i:06d}-eu-west-1-prod"[:63]


def uid(i: int) -> str:
    return f"{i:08x}-1b2c-4d3e-8f9a-0b1c2d3e4f5a"


def record(i: int, stage: str) -> Entry:
    """Record ``i`` at ``stage``: ``intent``/``unknown`` (reason and destination kept), ``evicted`` (with
    the departed pod's usage), ``matched`` (its replacement found), ``bounced`` (the guard's evidence)."""
    name = deployment(i)
    base = Entry(
        pod=f"payments-settlement-prod/{name}-7d9f8b6c5d-x2v9k",
        uid=uid(i),
        node=node(i),
        workload=uid(i + 10**7),
        workload_kind="Deployment",
        workload_name=name,
        at=NOW + i,
        status=UNKNOWN if stage == "unknown" else EVICTED,
        sent=NOW + i - 60,  # an answer a minute late: the journal keeps the send time (sentBefore)
    )
    if stage == "unknown":
        return replace(base, reason=REASON, destination=node(i + 1))
    grown = replace(base, created=NOW - 86_400, usage=(("cpu", 1_250), ("memory", 2_147_483_648)))
    if stage == "evicted":
        return grown
    matched = replace(
        grown,
        replacement=f"payments-settlement-prod/{name}-7d9f8b6c5d-q7w2e",
        landed=node(i + 7),
        landed_at=NOW + i + 45,
    )
    return matched if stage == "matched" else replace(matched, bounced=NOW + i + 120)


def size(entries: list[Entry], detectors: Detectors | None = None) -> int:
    return len(encode(entries, writer=WRITER, detectors=detectors).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=5000)
    args = parser.parse_args()
    n = args.records
    empty = size([])
    print(f"ConfigMap data limit used: MAX_BYTES={MAX_BYTES:,} (compaction starts at {COMPACT_AT:,})")
    print(f"{'stage':<10} {'bytes/record':>12} {'records in MAX_BYTES':>21}")
    per: dict[str, float] = {}
    for stage in ("unknown", "evicted", "matched", "bounced"):
        entries = [record(i, stage) for i in range(n)]
        per[stage] = (size(entries) - empty) / n
        print(f"{stage:<10} {per[stage]:>12.1f} {int((MAX_BYTES - empty) // per[stage]):>21,}")
    worst = max(per.values())
    fits = int((MAX_BYTES - empty) // worst)
    growth = per["bounced"] - per["evicted"]
    print(f"a record grows by {growth:.0f} B once its replacement is matched and bounced")
    ok = fits >= JOURNAL_RECORDS
    print(f"config bound JOURNAL_RECORDS={JOURNAL_RECORDS:,} fully grown: {'fits' if ok else 'DOES NOT FIT'}")

    counts = {node(i): AnomalyCount(2, NOW, 0, None) for i in range(args.nodes)}
    detectors = Detectors(nodes=counts)
    per_detector = (size([], detectors) - empty) / args.nodes
    print(
        f"detectors: {per_detector:.1f} B per node, {args.nodes:,} nodes = {size([], detectors) - empty:,} B"
    )

    full = [record(i, "bounced") for i in range(JOURNAL_RECORDS)]
    before = size(full, detectors)
    fitted = compact(full, detectors, writer=WRITER)
    after = size(list(fitted.entries), fitted.detectors)
    print(
        f"compaction: {JOURNAL_RECORDS:,} fully grown records + {args.nodes:,} detectors = {before:,} B -> "
        f"{after:,} B (dropped: {', '.join(fitted.dropped) or 'nothing'}; every record kept: "
        f"{len(fitted.entries) == len(full)})"
    )
    print(
        f"SUMMARY worst_bytes_per_record={worst:.0f} capacity_records={fits} "
        f"journal_records_bound={JOURNAL_RECORDS} bound_fits={int(ok)} compacted_bytes={after} "
        f"compacted_fits={int(after <= MAX_BYTES)}"
    )


if __name__ == "__main__":
    main()
