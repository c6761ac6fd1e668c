"""The HA failover test's bookkeeping: executions read from the probe's log, overlaps, and the failure matrix's rows (docs/ha.md)."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

ROW_KEYS = ("fault", "trials", "recovery_measures", "recovery_p50_s", "recovery_p99_s", "lost", "concurrent_double_runs",
            "sequential_reruns", "operator_sees", "stage", "command")
COMMAND = ("QW_IMAGE_TAG=ha QW_E2E_PROJECT_PREFIX=qwha PYTHONPATH=engine:services:examples "
           "pytest -n 0 -m e2e tests/e2e/test_ha_failover.py -s")


def executions(log: Path) -> dict[str, list[tuple[float, float]]]:
    """Each unit of work's runs as (start, last sign of life): its end, or its last tick if its worker stopped mid-way."""
    runs: dict[str, tuple[str, float, float]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        key = str(entry["n"])
        _, start, last = runs.get(entry["run"], (key, entry["t"], entry["t"]))
        runs[entry["run"]] = (key, entry["t"] if entry["phase"] == "start" else start, max(last, entry["t"]))
    found: dict[str, list[tuple[float, float]]] = {}
    for key, start, last in runs.values():
        found.setdefault(key, []).append((start, last))
    return found


def overlapping(runs: list[tuple[float, float]]) -> bool:
    ordered = sorted(runs)
    return any(later[0] < earlier[1] for earlier, later in zip(ordered, ordered[1:]))


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank: with three trials p50 is the middle one and p99 the worst."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)], 2)


@dataclass
class Trial:
    fault: str  # "kill" or "switchover"
    fault_at: float
    promoted_s: float = 0.0
    first_completion_s: float = 0.0
    first_ack_s: float = 0.0
    rejoined_s: float | None = None


@dataclass
class Outcome:
    lost: int
    doubled: int
    reruns: int
    trials: list[Trial] = field(default_factory=list)


def tally(runs: dict[str, list[tuple[float, float]]], wanted: list[str]) -> tuple[list[str], dict[str, list[tuple[float, float]]], int]:
    """What was acknowledged but never ran, what ran twice at once, and how many sequential re-runs."""
    lost = [key for key in wanted if key not in runs]
    doubled = {key: r for key, r in runs.items() if overlapping(r)}
    reruns = sum(len(r) - 1 for key, r in runs.items() if key not in doubled)
    return lost, doubled, reruns


def rows(outcome: Outcome) -> list[dict[str, Any]]:
    kills = [t for t in outcome.trials if t.fault == "kill"]
    switches = [t for t in outcome.trials if t.fault == "switchover"]

    def row(fault: str, trials: list[Trial], measures: str, values: list[float], sees: str) -> dict[str, Any]:
        return {"fault": fault, "trials": len(trials), "recovery_measures": measures, "recovery_p50_s": percentile(values, 50),
                "recovery_p99_s": percentile(values, 99), "lost": outcome.lost, "concurrent_double_runs": outcome.doubled,
                "sequential_reruns": outcome.reruns, "operator_sees": sees, "stage": "container", "command": COMMAND}

    return [
        row("Postgres primary lost (Patroni failover)", kills,
            "docker kill of the primary's container -> first job completed on the promoted standby (host wall clock, which the "
            "containers and Postgres share: one kernel)", [t.first_completion_s for t in kills],
            "patronictl list: the standby becomes Leader on a new timeline after ~ttl (10 s); services log 'session is read-only' "
            "then 'database session restored'; the old primary, started again, rewinds and streams as Sync Standby"),
        row("Postgres primary lost: producers' enqueue outage", kills,
            "docker kill -> first enqueue acknowledged by the new primary, through the engine's pool (host wall clock)",
            [t.first_ack_s for t in kills],
            "enqueues in the gap fail with OperationalError (not acknowledged: the client retries); none acknowledged is lost"),
        row("Planned switchover (patronictl switchover)", switches,
            "patronictl switchover issued -> first job completed on the new primary (host wall clock)",
            [t.first_completion_s for t in switches],
            "patronictl list: Leader and Sync Standby swap within seconds; the old primary streams from the new one at once"),
    ]


def machine() -> str:
    return f"{platform.node()}: {os.cpu_count()} cores, {platform.machine()}, both Postgres nodes and etcd on this one machine"


def write(outcome: Outcome, directory: Path) -> Path:
    """`<directory>/ha.json` in the failure matrix's schema (benchmarks/results/failures-ha-*.json)."""
    document = {"date": date.today().isoformat(), "machine": machine(), "stage": "container", "rows": rows(outcome)}
    for found in document["rows"]:
        assert tuple(found) == ROW_KEYS, f"a matrix row has keys {tuple(found)}, not {ROW_KEYS}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ha.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path
