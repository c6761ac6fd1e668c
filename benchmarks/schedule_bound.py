"""The least makespan any schedule of a gpu backlog could have, for affinity.py.

The model: each worker holds one model at a time, a load takes `load` seconds during which the
worker runs nothing, and a model's jobs may be split between the workers that load it. Every
assignment of models to workers is tried; for each, the least makespan with the jobs split
freely follows from Hall's condition on the flow of each model's work to its workers. Splitting
jobs into fractions makes this a lower bound of every real schedule, short of it by at most one
job's length, and with zero overhead per job.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from itertools import product

MAX_ASSIGNMENTS = 2_000_000


def best_makespan(work: Mapping[str, float], load: float, workers: int,
                  may_load: Mapping[str, Set[int]] | None = None) -> float:
    """Least makespan over all schedules; `work` is each model's total job seconds, `may_load`
    limits a model to some workers (by index; default any)."""
    models = [m for m, seconds in work.items() if seconds > 0]
    if not models:
        return 0.0
    allowed = {m: set(range(workers)) if may_load is None or m not in may_load else set(may_load[m]) for m in models}
    if any(not allowed[m] for m in models):
        raise ValueError("a model no worker may load has no schedule")
    full = (1 << len(models)) - 1
    subsets = [[mask for mask in range(full + 1) if all(w in allowed[m] for i, m in enumerate(models) if mask >> i & 1)]
               for w in range(workers)]
    count = 1
    for options in subsets:
        count *= len(options)
    if count > MAX_ASSIGNMENTS:
        raise ValueError(f"{count:,} model-to-worker assignments: too many to try")
    work_of = [sum(work[m] for i, m in enumerate(models) if mask >> i & 1) for mask in range(full + 1)]
    loads_of = [bin(mask).count("1") for mask in range(full + 1)]
    best = float("inf")
    for assignment in product(*subsets):
        union = 0
        for mask in assignment:
            union |= mask
        if union != full:
            continue
        span = max(loads_of[mask] for mask in assignment) * load
        for x in range(1, full + 1):  # Hall: the work of models X fits the time their workers have left
            holders = [mask for mask in assignment if mask & x]
            span = max(span, (work_of[x] + load * sum(loads_of[mask] for mask in holders)) / len(holders))
            if span >= best:
                break
        best = min(best, span)
    return best
