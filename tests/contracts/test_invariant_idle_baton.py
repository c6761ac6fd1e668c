"""Futile claims per job stay bounded as workers per queue grow (the idle baton), and the baton
never stops work: a killed holder hands it on through its closed session, a stalled one costs at
most a poll. Real worker processes on one queue; empty claims counted by each worker itself."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_exit, wait_until, wait_workers_ready

from queue_workflows import node_queue
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE
from queue_workflows.tasks import register_ingest_task
from queue_workflows.worker.idle_baton import BATON_NAMESPACE, IdleBaton, Turn

pytestmark = pytest.mark.multiprocess
WORKERS = 6
JOBS = 15
# Locks of this test's database only: on a shared server other databases' workers hold their own.
THIS_DB = "(SELECT oid FROM pg_database WHERE datname = current_database())"
LINE = f"SELECT granted, pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND database = {THIS_DB}"
# The holder's worker process: its session connection also holds the worker's own lock (0x5157).
HOLDER = """
SELECT h.pid FROM pg_locks b JOIN pg_database d ON d.oid = b.database AND d.datname = current_database()
  JOIN pg_locks w ON w.pid = b.pid AND w.locktype = 'advisory' AND w.classid = %s AND w.granted
  JOIN worker_heartbeats h ON h.lock_key = w.objid::integer
 WHERE b.locktype = 'advisory' AND b.classid = %s AND b.granted"""


def _line(url: str) -> tuple[list[int], int]:
    """The baton holder's backend pid(s) and how many wait in line."""
    rows = query(url, LINE, (BATON_NAMESPACE,))
    return [r["pid"] for r in rows if r["granted"]], sum(1 for r in rows if not r["granted"])


def _holder(url: str, workers: list):
    [row] = query(url, HOLDER, (WORKER_LOCK_NAMESPACE, BATON_NAMESPACE))
    return next(w for w in workers if w.pid == row["pid"])


def _one_at_a_time(url: str, jobs: int) -> None:
    """Each job enqueued once the one before completed, so every enqueue finds the workers idle."""
    for i in range(jobs):
        job = node_queue.enqueue_ingest_job("record", "fetch", {"token": f"j{i}"})["id"]
        wait_until(lambda: query(url, "SELECT status FROM ingest_jobs WHERE id = %s", (job,))[0]["status"] == "completed",
                   timeout=20, interval=0.01, what=f"job {i}")


def _empty_claims(procs: Procs, workers: list) -> int:
    total = 0
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        assert wait_exit(worker, 20, procs) == 0
        said = re.search(r"stopped after \d+ job\(s\) and (\d+) empty claim", worker.log_path.read_text())
        assert said, worker.log_path.read_text()[-2000:]
        total += int(said.group(1))
    return total


def _run(database_url: str, procs: Procs, *, baton: bool) -> int:
    register_ingest_task("record", qw_test_app.record)
    # A long poll, so every claim counted was caused by a NOTIFY or the baton, not by the clock.
    env = service_env(database_url, QW_POLL_SECONDS="30", QW_IDLE_BATON="1" if baton else "0")
    workers = [procs.worker(env, "fetch") for _ in range(WORKERS)]
    wait_workers_ready(database_url, workers)
    if baton:
        wait_until(lambda: (lambda held, waiting: len(held) == 1 and waiting == WORKERS - 1)(*_line(database_url)),
                   timeout=20, what="one holder and the rest in line")
    else:
        time.sleep(0.5)  # nothing to poll for: the workers' start-up claims settle
    _one_at_a_time(database_url, JOBS)
    return _empty_claims(procs, workers)


@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_futile_claims_per_job_stay_bounded_with_many_idle_workers(database_url, procs: Procs):
    with_baton = _run(database_url, procs, baton=True)
    # At most two start-up claims per worker, then at most one per job: the catch-up claim of
    # the next in line as it takes the baton. Without it, every idle worker claims for every job.
    assert with_baton <= JOBS + 2 * WORKERS, with_baton
    without = _run(database_url, procs, baton=False)
    print(f"\nempty claims for {JOBS} jobs, {WORKERS} idle workers: {with_baton} with the baton, {without} without")
    assert without >= JOBS * (WORKERS - 1) // 2 > with_baton, (without, with_baton)


def test_a_killed_holder_hands_the_baton_on_at_once(database_url, procs: Procs):
    register_ingest_task("record", qw_test_app.record)
    env = service_env(database_url, QW_POLL_SECONDS="30")
    workers = [procs.worker(env, "fetch") for _ in range(3)]
    wait_workers_ready(database_url, workers)
    held = wait_until(lambda: (h := _line(database_url))[0] and h[1] == 2 and h[0], timeout=20, what="a holder and two in line")
    holder_backend = held[0]
    holder = _holder(database_url, workers)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    # The next in line takes it when the dead session ends, long before a 30 s poll.
    wait_until(lambda: (h := _line(database_url))[0] and h[0] != [holder_backend] and h[1] == 1, timeout=10, what="a new holder")
    started = time.monotonic()
    _one_at_a_time(database_url, 3)
    assert time.monotonic() - started < 10


def test_a_stalled_holder_costs_at_most_a_poll(database_url, procs: Procs):
    register_ingest_task("record", qw_test_app.record)
    env = service_env(database_url, QW_POLL_SECONDS="1")
    workers = [procs.worker(env, "fetch") for _ in range(2)]
    wait_workers_ready(database_url, workers)
    wait_until(lambda: (h := _line(database_url))[0] and h[1] == 1, timeout=20, what="a holder and one in line")
    holder = _holder(database_url, workers)
    os.kill(holder.pid, signal.SIGSTOP)  # alive, holding the baton, hearing nothing
    try:
        started = time.monotonic()
        _one_at_a_time(database_url, 1)  # the other worker's wait in line times out, and it polls
        assert time.monotonic() - started < 5
    finally:
        os.kill(holder.pid, signal.SIGCONT)


def test_releasing_on_a_lost_session_neither_raises_nor_leaves_the_lock(database_url):
    from queue_workflows import db

    mine, other = IdleBaton("fetch", "ingest_jobs", wait_seconds=0.2), IdleBaton("fetch", "ingest_jobs", wait_seconds=0.2)
    with db.connect(autocommit=True, url=database_url) as conn, db.connect(autocommit=True, url=database_url) as second:
        assert mine.wait_turn(conn) is Turn.HELD and mine.held_on(conn)
        assert other.wait_turn(second) is not Turn.HELD  # in line behind it
        query(database_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s AND datname = current_database()", (conn.info.backend_pid,))
        wait_until(lambda: not query(database_url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND datname = current_database()", (conn.info.backend_pid,)),
                   timeout=5, what="the backend to end")
        mine.release(conn)  # the claim before it succeeded: this must not raise and retry the claim
        assert not mine.held_on(conn)
        assert other.wait_turn(second) is Turn.HELD  # the lock ended with the session


def test_waiting_in_line_writes_nothing_to_the_server_log(private_database_url, private_pg):
    """Idle workers wait in line all day: a timed-out wait must not log an ERROR each time."""
    from queue_workflows import db

    log = private_pg.server.log
    before = log.read_text(errors="replace") if log.exists() else ""
    holder, waiter = IdleBaton("fetch", "ingest_jobs", wait_seconds=0.02), IdleBaton("fetch", "ingest_jobs", wait_seconds=0.02)
    with db.connect(autocommit=True, url=private_database_url) as conn, db.connect(autocommit=True, url=private_database_url) as second:
        assert holder.wait_turn(conn) is Turn.HELD
        assert not any(waiter.wait_turn(second) is Turn.HELD for _ in range(5))  # five waits run out, in line behind it
        holder.release(conn)
        assert waiter.wait_turn(second) is Turn.HELD  # and the line still moves
        second.execute("SELECT 1")
    logged = (log.read_text(errors="replace") if log.exists() else "")[len(before):]
    assert "ERROR" not in logged, logged


def test_a_wait_in_line_says_whether_the_queue_has_work(database_url):
    """A worker in line claims only when its wait ran out and the queue has work a claim could take."""
    from queue_workflows import db

    register_ingest_task("record", qw_test_app.record)
    holder, waiter = IdleBaton("fetch", "ingest_jobs", wait_seconds=0.02), IdleBaton("fetch", "ingest_jobs", wait_seconds=0.02)
    with db.connect(autocommit=True, url=database_url) as conn, db.connect(autocommit=True, url=database_url) as second:
        assert holder.wait_turn(conn) is Turn.HELD
        assert waiter.wait_turn(second) is Turn.WAIT  # an empty queue: nothing to claim
        other = node_queue.enqueue_ingest_job("record", "load", {"token": "elsewhere"})["id"]
        job = node_queue.enqueue_ingest_job("record", "fetch", {"token": "later"})["id"]
        delay = "UPDATE ingest_jobs SET status = 'scheduled', run_after = now() + make_interval(secs => %s) WHERE id = %s"
        query(database_url, delay, (3600, job))
        assert waiter.wait_turn(second) is Turn.WAIT  # another queue's job, and one of ours not yet due
        query(database_url, delay, (-1, job))
        assert waiter.wait_turn(second) is Turn.WORK  # due: a claim promotes it
        query(database_url, "UPDATE ingest_jobs SET status = 'queued' WHERE id = %s", (job,))
        assert waiter.wait_turn(second) is Turn.WORK
        query(database_url, "DELETE FROM ingest_jobs WHERE id IN (%s, %s)", (job, other))
        assert waiter.wait_turn(second) is Turn.WAIT and not waiter.held_on(second)
        holder.release(conn)
        assert waiter.wait_turn(second) is Turn.HELD and waiter.held_on(second)


def test_an_idle_worker_in_line_makes_no_claims(database_url, procs: Procs):
    """Five waits in line a second, each asking whether there is work: none is, so it claims nothing
    (it used to claim after every wait that ran out: ~5 empty claims a second here)."""
    register_ingest_task("record", qw_test_app.record)
    workers = [procs.worker(service_env(database_url, QW_POLL_SECONDS="0.2"), "fetch") for _ in range(2)]
    wait_workers_ready(database_url, workers)
    wait_until(lambda: (h := _line(database_url))[0] and h[1] == 1, timeout=20, what="a holder and one in line")
    in_line = next(w for w in workers if w is not _holder(database_url, workers))
    time.sleep(2)  # the quantity guarded is claims over idle time
    # Its start-up drain's claim and promotion (at most two), and none while it waited.
    assert _empty_claims(procs, [in_line]) <= 2


def test_a_look_behind_a_ddl_lock_waits_instead_of_failing_at_the_lines_timeout(database_url):
    """A wait that takes the baton leaves its short lock_timeout set (one that runs out rolls it back with
    its exception block); the look after it in the same transaction must not inherit it, or a
    migration holding the job table would drop the new holder's session, and the baton with it."""
    from queue_workflows import db

    holder, waiter = IdleBaton("fetch", "ingest_jobs", wait_seconds=0.02), IdleBaton("fetch", "ingest_jobs", wait_seconds=0.02)
    with db.connect(autocommit=True, url=database_url) as conn, db.connect(autocommit=True, url=database_url) as second, \
            db.connect(autocommit=True, url=database_url) as ddl:
        assert holder.wait_turn(conn) is Turn.HELD
        holder.release(conn)
        ddl.execute("BEGIN")
        ddl.execute("LOCK TABLE ingest_jobs IN ACCESS EXCLUSIVE MODE")
        unlock = threading.Timer(0.5, ddl.execute, args=("COMMIT",))
        unlock.start()
        try:
            started = time.monotonic()
            assert waiter.wait_turn(second) is Turn.HELD  # the look waited for the lock
            assert time.monotonic() - started >= 0.4
        finally:
            unlock.join()
