"""The ``load`` workload kind: requests arriving over time (open or closed loop), replayed
through the runtime's scheduler by a request-level simulator; latency percentiles,
goodput, SLO attainment and energy with idle power.

Modules: ``arrivals`` (the requests), ``costs`` (step prices on a grid), ``simulator``
(the scheduler), ``metrics`` (what a run reports), ``kind`` (the registered kind),
``cli`` (its command-line options).
"""

from energylens.workloads.load.kind import Load, LoadPrediction
from energylens.workloads.load.metrics import SLO, LoadMetrics

__all__ = ["SLO", "Load", "LoadMetrics", "LoadPrediction"]
