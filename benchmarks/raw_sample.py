"""``descheduler`` as it was before the migration-aware estimate: nodes judged on their raw usage sample.

For benchmarks only (the "as today" row of issue 13): ``python -m benchmarks.raw_sample run --config ...``
runs the real command line with ``planner/estimate.py``'s estimator replaced by the raw sample, so the same
cluster can be run with and without the estimate. The product has no such switch.
"""

from __future__ import annotations

import sys
from unittest import mock

from benchmarks.closedloop_variants import RawSample
from descheduler.cli import main
from descheduler.planner.estimate import UsageEstimator

if __name__ == "__main__":
    # The live service has no ``parts`` to pass (in process, ``closedloop_variants.RAW_SAMPLES`` is passed
    # to ``plan``): the estimator's one method is replaced for this process instead.
    with mock.patch.object(UsageEstimator, "estimate", RawSample.estimate):
        sys.exit(main(sys.argv[1:]))
