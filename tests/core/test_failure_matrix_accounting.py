"""The failure matrix's double-run count (benchmarks/failure_load.py): overlapping live spans are concurrent, a frozen gap is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def accounting(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import failure_load

    return failure_load


def _log(path: Path, key: str, execution: str, times: list[float]) -> None:
    with open(path, "a") as out:
        for i, t in enumerate(times):
            phase = "s" if i == 0 else ("e" if i == len(times) - 1 else "t")
            out.write(json.dumps({"k": key, "e": execution, "p": 1, "ph": phase, "t": t}) + "\n")


def _ticks(start: float, end: float) -> list[float]:
    return [round(start + 0.1 * i, 3) for i in range(int(round((end - start) / 0.1)) + 1)]


def test_overlapping_executions_are_concurrent_and_later_ones_sequential(accounting, tmp_path: Path) -> None:
    log = tmp_path / "executions.jsonl"
    _log(log, "both", "a", _ticks(0.0, 2.0))
    _log(log, "both", "b", _ticks(1.5, 3.0))  # started while a still ticked
    _log(log, "after", "a", _ticks(0.0, 1.0))
    _log(log, "after", "b", _ticks(1.5, 2.0))  # a kill -9 and a takeover: one after the other
    runs = accounting.executions(log)
    assert accounting.double_runs(runs["both"]) == (1, 0)
    assert accounting.double_runs(runs["after"]) == (0, 1)
    assert accounting.tally({"both", "after", "never-ran"}, runs) == (1, 1)


def test_a_frozen_execution_is_not_running_through_its_gap(accounting, tmp_path: Path) -> None:
    log = tmp_path / "executions.jsonl"
    # Frozen at 1.0 s, thawed at 6.0 s (its code then returns at once); the taker ran the job from 4.0 to 4.2 s.
    _log(log, "frozen", "a", [*_ticks(0.0, 1.0), 6.0, 6.01])
    _log(log, "frozen", "b", _ticks(4.0, 4.2))
    assert accounting.executions(log)["frozen"][0] == [(0.0, 1.0), (6.0, 6.01)]
    assert accounting.double_runs(accounting.executions(log)["frozen"]) == (0, 1)
    # ...but a thawed execution that ticks on while the taker runs is a concurrent double run.
    _log(log, "thawed", "a", [*_ticks(0.0, 1.0), *_ticks(6.0, 7.0)])
    _log(log, "thawed", "b", _ticks(6.5, 6.7))
    assert accounting.double_runs(accounting.executions(log)["thawed"]) == (1, 0)


def test_a_line_cut_by_a_kill_is_skipped(accounting, tmp_path: Path) -> None:
    log = tmp_path / "executions.jsonl"
    _log(log, "cut", "a", [0.0, 0.1])
    with open(log, "a") as out:
        out.write('{"k": "cut", "e": "a", "p": 1, "ph": "t", "t": 0.')
    assert accounting.executions(log)["cut"] == [[(0.0, 0.1)]]
