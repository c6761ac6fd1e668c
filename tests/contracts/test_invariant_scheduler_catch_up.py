"""Invariant: each schedule slot is enqueued once through an outage of every scheduler replica,
and a missed slot is run late at most once (`catch_up="latest"`) or never (`"skip"`).

Real `python -m queue_workflows.scheduler` processes on a compressed clock (see
test_invariant_scheduler_once_per_slot.py, whose replicas' kill -9 runs beside this file).
"""

from __future__ import annotations

import signal

import pytest
from procs import query, wait_exit, wait_for_log, wait_until
from schedule_slots import MINUTE, assert_each_slot_once_with_its_job, minutes_between, scaled_env, scaled_now, slots, wait_slots

OUTAGE_MINUTES = 4


@pytest.mark.multiprocess
@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_catch_up_policies_after_an_outage_of_every_replica(database_url, procs):
    # A scheduled minute every 2 real seconds; boots more than two scheduled minutes apart each kick.
    env = scaled_env(database_url, scale=30, QW_SCHEDULE_BOOT_WINDOW_SECONDS="120")
    p = procs.scheduler(env)
    wait_for_log(p, "scheduler running", timeout=30)
    before = wait_slots(database_url, "each-minute", 2, timeout=30)
    p.send_signal(signal.SIGTERM)
    assert wait_exit(p, 10, procs) == 0
    down_from = max(r["slot_time"] for r in slots(database_url, "each-minute") + slots(database_url, "each-minute-skip"))
    wait_until(lambda: scaled_now(database_url, env) >= down_from + OUTAGE_MINUTES * MINUTE, timeout=30, interval=0.1,
               what=f"{OUTAGE_MINUTES} scheduled minutes with no scheduler")
    p = procs.scheduler(env)
    wait_for_log(p, "scheduler running", timeout=30)
    wait_slots(database_url, "each-minute", len(before) + 5, timeout=60)
    p.send_signal(signal.SIGTERM)
    assert wait_exit(p, 10, procs) == 0

    assert_each_slot_once_with_its_job(database_url)
    latest, skip = slots(database_url, "each-minute"), slots(database_url, "each-minute-skip")
    for rows in (latest, skip):
        gaps = [g for g in minutes_between(rows) if g != 1]
        assert len(gaps) == 1 and gaps[0] >= OUTAGE_MINUTES, f"one outage gap, no burst: {minutes_between(rows)}"
    in_gap = [r for r in latest if r["slot_time"] > down_from and r["kind"] == "catch_up"]
    first_back = next(r for r in latest if r["slot_time"] > down_from)
    assert first_back["kind"] in ("catch_up", "slot") and len(in_gap) <= 1, "latest: the most recent missed slot, once"
    assert not [r for r in skip if r["kind"] == "catch_up"], "skip: missed slots are never run late"
    first_skip_back = next(r for r in skip if r["slot_time"] > down_from)
    assert first_skip_back["slot_time"] >= first_back["slot_time"]
    boots = query(database_url, "SELECT * FROM schedule_slots WHERE kind = 'boot'")
    assert len(boots) == 2, f"each start kicks (they are {OUTAGE_MINUTES} scheduled minutes apart, the window 2): {boots}"
