"""The LowNodeLoad planner: pure decisions over a snapshot, usage, configuration, state and a clock.

``plan`` decides a cycle; ``commit`` records what the executor really evicted (see ``record.py`` for how
the two share the work). The live service, ``once --dry-run`` and ``simulate`` all call exactly these.
"""

from descheduler.planner.model import (
    DETAILED,
    SUMMARISED,
    NodeReport,
    Plan,
    PlannedEviction,
    PodSkip,
    ResourceReport,
    SkipForm,
    SkipSummary,
)
from descheduler.planner.plan import after_evictions, plan, pod_usage_nodes
from descheduler.planner.record import add_departures, add_migrations, commit, evicted_from
from descheduler.planner.settings import loop_warnings
from descheduler.planner.state import (
    AnomalyCount,
    Departure,
    Migration,
    PlannerState,
    forget,
    refuse,
    reset_anomalies,
    settle_migrations,
)

__all__ = [
    "DETAILED",
    "SUMMARISED",
    "AnomalyCount",
    "Departure",
    "Migration",
    "NodeReport",
    "Plan",
    "PlannedEviction",
    "PlannerState",
    "PodSkip",
    "ResourceReport",
    "SkipForm",
    "SkipSummary",
    "add_departures",
    "add_migrations",
    "after_evictions",
    "commit",
    "evicted_from",
    "forget",
    "loop_warnings",
    "plan",
    "pod_usage_nodes",
    "refuse",
    "reset_anomalies",
    "settle_migrations",
]
