"""An idle worker and an idle leading orchestrator wake only when there is something to do.

Counted as their threads' voluntary context switches: each return from a blocking wait is one,
so a wait that polls (psycopg's LISTEN wait wakes every 0.1 s, a 50 ms job guard, a 0.25 s
beat, a sweep of nine round trips) shows up as a rate, whatever the machine's speed.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from procs import Procs, query, service_env, wait_for_log, wait_until, wait_workers_ready

from queue_workflows.worker.idle_baton import BATON_NAMESPACE

WINDOW_SECONDS = 3.0
LEADER_WINDOW_SECONDS = 6.0
# Today's and the days-ahead partitions of ingest_jobs_history, made by the history mover's first step.
PARTITIONS = ("SELECT count(*) AS n FROM pg_inherits WHERE inhparent = 'ingest_jobs_history'::regclass"
              " AND inhrelid::regclass::text <> 'ingest_jobs_history_default'")
HELD = ("SELECT count(*) AS n FROM pg_locks WHERE database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND locktype = 'advisory' AND classid = %s AND granted")


def wakeups(pid: int) -> int:
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            found = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status.read_text(), re.MULTILINE)
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
        total += int(found.group(1)) if found else 0
    return total


def wakeups_per_second(pid: int, window: float = WINDOW_SECONDS) -> float:
    before = wakeups(pid)
    time.sleep(window)  # the quantity measured is a rate over time
    return (wakeups(pid) - before) / window


def test_an_idle_worker_holding_its_queues_baton_wakes_only_for_its_safety_poll(database_url, procs: Procs):
    worker = procs.worker(service_env(database_url, QW_POLL_SECONDS="1"), "fetch")
    wait_workers_ready(database_url, [worker])
    wait_until(lambda: query(database_url, HELD, (BATON_NAMESPACE,))[0]["n"] == 1, timeout=20, what="the worker to hold the baton")
    rate = wakeups_per_second(worker.pid)
    print(f"\nidle worker: {rate:.1f} wake-ups a second")
    # One claim a second (a few round trips) and a chore every few seconds; polling waits made ~40.
    assert rate <= 8, f"an idle worker woke {rate:.1f} times a second"


def test_an_idle_leader_wakes_a_few_times_a_second(database_url, procs: Procs):
    orchestrator = procs.orchestrator(service_env(database_url))
    wait_for_log(orchestrator, "orchestrator running: leading term", timeout=30)
    # A new term's first steps (each service connects and looks once: ~60 wake-ups in all) are not
    # idling: the window opens after the history mover, the last service started, made its partitions,
    # and spans one of the input keeper's 5 s reconciles, so the periodic chores are in it too.
    wait_until(lambda: query(database_url, PARTITIONS)[0]["n"] >= 4, timeout=30, what="the history mover's first step")
    rate = wakeups_per_second(orchestrator.pid, window=LEADER_WINDOW_SECONDS)
    print(f"\nidle leader: {rate:.1f} wake-ups a second")
    # The sweep's one look every 0.25 s and the outbox's and input keeper's ticks; polling waits made ~80.
    assert rate <= 30, f"an idle leader woke {rate:.1f} times a second"
