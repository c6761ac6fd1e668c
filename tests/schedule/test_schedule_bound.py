"""The affinity benchmark's best possible makespan (benchmarks/schedule_bound.py): hand-worked
cases, and never below the plain bound of one load per model."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("schedule_bound", Path(__file__).resolve().parents[2] / "benchmarks" / "schedule_bound.py")
assert _spec and _spec.loader
schedule_bound = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(schedule_bound)
best_makespan = schedule_bound.best_makespan


def test_as_many_models_as_workers_one_each():
    assert best_makespan({"a": 5, "b": 5, "c": 5}, 1.5, 3) == pytest.approx(6.5)


def test_one_model_more_than_workers_is_split_over_three_copies():
    # W1: a + a third of d, W2: b + a third, W3: c + a third: 1.5 + 3.75 + 1.5 + 1.25 = 8.0, six loads.
    # Five loads leave one worker on one model (5.25 s) and the rest 8.625 s; four, 10.5 s.
    assert best_makespan({"a": 3.75, "b": 3.75, "c": 3.75, "d": 3.75}, 1.5, 3) == pytest.approx(8.0)


def test_one_model_over_every_worker():
    assert best_makespan({"a": 9}, 1.5, 3) == pytest.approx(4.5)


def test_a_model_only_one_worker_may_load_bounds_the_span():
    assert best_makespan({"big": 10, "a": 1}, 1.5, 3, may_load={"big": {0}}) == pytest.approx(11.5)


def test_the_benchmarks_uniform_mix_counts():
    counts = {"m0": 82, "m1": 72, "m2": 68, "m3": 78}
    assert best_makespan({m: n * 0.05 for m, n in counts.items()}, 1.5, 3) == pytest.approx(8.0)


def test_never_below_the_plain_bound():
    rng = random.Random(3)
    for _ in range(40):
        workers = rng.randint(1, 3)
        work = {f"m{i}": rng.uniform(0.5, 6) for i in range(rng.randint(1, 4))}
        load = rng.uniform(0.1, 2)
        plain = (sum(work.values()) + load * len(work)) / workers
        assert best_makespan(work, load, workers) >= plain - 1e-9


def test_refuses_what_it_cannot_schedule():
    with pytest.raises(ValueError, match="no worker"):
        best_makespan({"a": 1}, 1.0, 2, may_load={"a": set()})
