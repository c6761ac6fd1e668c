"""The failure matrix's steady load (a producer process) and its bookkeeping: what was acknowledged, what ran, what overlapped.

The producer enqueues a plain `load` job every 1/rate seconds (retried under its dedup key
until acknowledged, as docs/poolers.md tells producers to) and starts a three-node DAG run every
1/dag_rate seconds, logging each acknowledgement to a file and the first line of every distinct
error it meets to its stdout: what the application sees.
"""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from pathlib import Path

DAG = {"name": "failure_matrix", "nodes": [
    {"id": "a", "call": "failure_app:step", "inputs": {"key": {"$from": "context.key"}, "node": "a"}},
    {"id": "b", "call": "failure_app:step", "deps": ["a"], "inputs": {"key": {"$from": "context.key"}, "node": "b"}},
    {"id": "c", "call": "failure_app:step", "deps": ["a"], "inputs": {"key": {"$from": "context.key"}, "node": "c"}},
]}
GAP = 1.0  # seconds without a sign of life (ticks come every 0.1 s) = the execution's process was not running


def produce(url: str, rate: float, dag_rate: float, acked_path: str) -> int:
    """The producer process's body; runs until SIGTERM."""
    import psycopg

    import queue_workflows
    from queue_workflows import node_queue, start_run

    queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch", "probe"}), node_packages=frozenset({"failure_app"}))
    import failure_app  # noqa: F401 - registers `load`, so enqueue validates it

    # OperationalError is what docs/poolers.md tells producers to retry; through PgBouncer, a Postgres restart can
    # also surface as InternalError ("received 2 results from command 'BEGIN'"): retried too, and logged as seen.
    retried = (psycopg.OperationalError, psycopg.InternalError)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    logged: dict[str, float] = {}

    def note(exc: BaseException) -> None:
        """Log an error's first line, each kind once per fault (not within 5 s of its last line)."""
        first = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        kind = first[:60]
        if time.monotonic() - logged.get(kind, -60.0) > 5.0:
            print(f"enqueue failed, retrying: {first}", flush=True)
        logged[kind] = time.monotonic()

    with open(acked_path, "a", buffering=1) as acked:
        started, jobs, runs = time.monotonic(), 0, 0
        while not stopping:
            now = time.monotonic() - started
            if runs < now * dag_rate:
                key = f"r{runs}"
                runs += 1
                try:  # not retried: a run whose commit's answer was lost may exist; every run in the table is checked
                    acked.write(json.dumps({"run": start_run(DAG, {"key": key}), "k": key}) + "\n")
                except retried as exc:
                    note(exc)
            elif jobs < now * rate:
                key = f"p{jobs}"
                while not stopping:
                    try:
                        job = node_queue.enqueue_ingest_job("load", "fetch", {"key": key}, dedup_key=key)
                        acked.write(json.dumps({"job": job["id"], "k": key}) + "\n")
                        break
                    except retried as exc:
                        note(exc)
                        time.sleep(0.05)
                jobs += 1
            else:
                time.sleep(min(1 / rate, 1 / dag_rate) / 2)
    print(f"stopped after {jobs} jobs and {runs} runs", flush=True)
    return 0


def acknowledged(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(plain job key -> id, run key -> id) the producer was told were committed."""
    jobs: dict[str, int] = {}
    runs: dict[str, int] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        (jobs if "job" in entry else runs)[entry["k"]] = int(entry.get("job", entry.get("run", 0)))
    return jobs, runs


def executions(path: Path) -> dict[str, list[list[tuple[float, float]]]]:
    """Job key -> its executions, each a list of live spans (start to end, split where its ticks stopped for > GAP)."""
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill -9 mid-write
            continue
        samples[(entry["k"], entry["e"])].append(float(entry["t"]))
    found: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
    for (key, _), times in samples.items():
        times.sort()
        spans, start = [], times[0]
        for before, after in zip(times, times[1:]):
            if after - before > GAP:
                spans.append((start, before))
                start = after
        spans.append((start, times[-1]))
        found[key].append(spans)
    return found


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    return any(s1 <= e2 and s2 <= e1 for s1, e1 in a for s2, e2 in b)


def double_runs(runs: list[list[tuple[float, float]]]) -> tuple[int, int]:
    """(concurrent, sequential): executions beyond the first that overlapped an earlier one's live spans, and those that did not."""
    ordered = sorted(runs, key=lambda spans: spans[0][0])
    concurrent = sequential = 0
    for i, spans in enumerate(ordered[1:], start=1):
        if any(_overlap(spans, earlier) for earlier in ordered[:i]):
            concurrent += 1
        else:
            sequential += 1
    return concurrent, sequential


def tally(keys: set[str], execs: dict[str, list[list[tuple[float, float]]]]) -> tuple[int, int]:
    """Concurrent double runs and sequential re-runs over the executions of `keys`."""
    concurrent = sequential = 0
    for key in keys:
        c, s = double_runs(execs.get(key, []))
        concurrent += c
        sequential += s
    return concurrent, sequential


def main(argv: list[str]) -> int:
    """Started by failures.py as `python -c` (not a script of its own, so run_all does not take it for a benchmark)."""
    url, rate, dag_rate, acked = argv
    return produce(url, float(rate), float(dag_rate), acked)
