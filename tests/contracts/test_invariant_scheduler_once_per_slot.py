"""Invariant: each schedule slot is enqueued exactly once, however many scheduler replicas run.

The `(entry_name, slot_time)` primary key of `schedule_slots` is written in the same
transaction as the job; a replica enqueues only when its row landed. The multi-process tests
run real `python -m queue_workflows.scheduler` processes on a compressed clock
(QW_SCHEDULE_TIME_SCALE: one scheduled minute every few real seconds, from a shared
QW_SCHEDULE_TIME_ORIGIN) with the every-minute schedule of `tests/apps/qw_sched_app.py`; the
outage of every replica is in test_invariant_scheduler_catch_up.py, so that the two long
multi-process tests run side by side under `--dist loadfile`.
"""

from __future__ import annotations

import signal
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from procs import query, service_env, wait_exit, wait_for_log
from schedule_slots import MINUTE, assert_each_slot_once_with_its_job, minutes_between, scaled_env, slots, wait_slots

import queue_workflows
from queue_workflows.schedule import ScheduleEntry, SlotStore
from queue_workflows.schedule.slots import Fire


@pytest.mark.multiprocess
@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_two_replicas_enqueue_each_slot_once_through_a_kill_9(database_url, procs):
    env = scaled_env(database_url, scale=20)  # a scheduled minute every 3 real seconds
    a, b = procs.scheduler(env), procs.scheduler(env)
    for p in (a, b):
        wait_for_log(p, "scheduler running", timeout=30)
    first = wait_slots(database_url, "each-minute", 3, timeout=60)
    a.send_signal(signal.SIGKILL)
    assert a.wait(timeout=10) == -signal.SIGKILL
    killed_at = first[-1]["slot_time"]
    wait_slots(database_url, "each-minute", len(first) + 3, timeout=60)
    b.send_signal(signal.SIGTERM)
    assert wait_exit(b, 10, procs) == 0, procs.logs()

    assert_each_slot_once_with_its_job(database_url)
    for entry in ("each-minute", "each-minute-skip"):
        rows = slots(database_url, entry)
        assert minutes_between(rows) == [1] * (len(rows) - 1), f"{entry}: a slot missed or repeated: {[r['slot_time'] for r in rows]}"
        after_kill = {r["enqueued_by"].rsplit(":", 1)[1] for r in rows if r["slot_time"] > killed_at + MINUTE}
        assert after_kill == {str(b.pid)}, "only the survivor enqueues after the kill"
    boots = query(database_url, "SELECT * FROM schedule_slots WHERE kind = 'boot'")
    assert [r["entry_name"] for r in boots] == ["boot-kick"], "two replicas booting together kick once"


@pytest.mark.multiprocess
def test_sigterm_ends_a_sleeping_scheduler_at_once(database_url, procs):
    p = procs.scheduler(service_env(database_url, QW_APP="qw_sched_app"))  # real clock: sleeping up to a minute
    wait_for_log(p, "scheduler running", timeout=30)
    time.sleep(0.5)
    began = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert wait_exit(p, 10, procs) == 0
    assert time.monotonic() - began < 2.0


def test_replicas_racing_on_one_slot_enqueue_it_once(database_url):
    queue_workflows.register_ingest_task("noop", lambda reason: {})
    entry = ScheduleEntry.cron("* * * * *", "race", "noop", "fetch")
    slot = Fire(datetime(2024, 5, 1, 12, 37, tzinfo=UTC), "slot")
    boot = Fire(datetime(2024, 5, 1, 12, 0, 1, tzinfo=UTC), "boot")
    barrier = threading.Barrier(8)
    results: list[object] = []

    def replica(n: int) -> None:
        store = SlotStore(replica=f"r{n}")
        try:
            barrier.wait()
            results.append(store.fire(entry, slot))
            results.append(store.boot(entry, Fire(boot.slot + timedelta(seconds=n), "boot"), 300))
        finally:
            store.close()

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sum(r is not None for r in results) == 2, "one slot job and one boot kick among 8 replicas"
    rows = query(database_url, "SELECT kind, count(*) AS n FROM schedule_slots GROUP BY kind ORDER BY kind")
    assert [(r["kind"], r["n"]) for r in rows] == [("boot", 1), ("slot", 1)]
    assert query(database_url, "SELECT count(*) AS n FROM ingest_jobs")[0]["n"] == 2
