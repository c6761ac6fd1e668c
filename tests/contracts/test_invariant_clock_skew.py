"""Contract 4 on a host whose clock is 30 s ahead or behind: leases, deadlines and stored times
come from the database's clock, so the skewed worker is neither reclaimed early nor keeps a job
past its lease. The skew is real: libfaketime (Debian `faketime`) shifts the worker process's
wall clock, as a host with a wrong clock would (its monotonic clock, which NTP does not step, stays).
"""

from __future__ import annotations

import glob
import subprocess
import sys
import time
from datetime import datetime, timedelta

import psycopg
import pytest
import qw_fault_tasks
from procs import Procs, log_text, pid_of, query, service_env, wait_exit, wait_until, wait_workers_ready

from queue_workflows import db, node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess

LEASE = 3.0
# The library itself, preloaded: the `faketime` command forks, and the test needs the worker's own pid.
FAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))), None)


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("hold_first", qw_fault_tasks.hold_first)


def _skewed_worker(procs: Procs, url: str, skew: int) -> subprocess.Popen[bytes]:
    env = service_env(url, QW_APP="qw_fault_tasks", QW_LEASE_SECONDS=str(LEASE), QW_LEASE_RENEW_SECONDS="0.5",
                      QW_HEARTBEAT_SECONDS="0.5", LD_PRELOAD=str(FAKETIME), FAKETIME=f"{skew:+d}s", FAKETIME_DONT_FAKE_MONOTONIC="1")
    return procs._spawn(f"worker-fetch-skew{skew:+d}", [sys.executable, "-m", "qw_services.worker", "--queue=fetch"], env)


def _clock_of(worker: subprocess.Popen[bytes]) -> float:
    """How far the worker's wall clock is from ours: its log line's stamp against when we saw it."""
    line = next(line for line in log_text(worker).splitlines() if "ready on queue" in line)
    stamped = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return (stamped - datetime.now()).total_seconds()


def _job(url: str, job_id: int) -> dict:
    [row] = query(url, "SELECT *, now() AS db_now FROM ingest_jobs WHERE id = %s", (job_id,))
    return row


@pytest.mark.skipif(FAKETIME is None, reason="needs libfaketime (apt-get install faketime)")
@pytest.mark.soak  # 15 s a direction: the soak stage runs both (.ci/run)
@pytest.mark.parametrize("skew", [30, -30])
def test_a_worker_with_a_skewed_clock_keeps_its_lease_and_stops_before_it_lapses(database_url: str, procs: Procs, skew: int) -> None:
    url = database_url
    procs.orchestrator(service_env(url, QW_APP="qw_fault_tasks", QW_LEASE_SECONDS=str(LEASE), QW_LEASE_RENEW_SECONDS="0.5"))
    worker = _skewed_worker(procs, url, skew)
    wait_workers_ready(url, [worker])
    assert abs(_clock_of(worker) - skew) < 5, f"the worker's clock is {_clock_of(worker):+.1f}s off, not {skew:+d}s"
    [beat] = query(url, "SELECT now() - last_seen AS behind FROM worker_heartbeats WHERE pid = %s", (worker.pid,))
    assert abs(beat["behind"].total_seconds()) < 5, f"its heartbeat is stamped by its own clock: {beat}"

    # A job three leases long: renewed on the database's clock throughout, never reclaimed.
    with db.connect(url=url) as conn, conn.transaction():
        job_id = node_queue.enqueue_ingest_job("hold_first", "fetch", {"token": f"skew{skew}", "hold": 3 * LEASE}, conn=conn)["id"]
    done = wait_until(lambda: (r := _job(url, job_id))["status"] == "completed" and r, timeout=6 * LEASE, what=f"job done\n{procs.logs()}")
    assert done["attempts"] == 1 and pid_of(done["claimed_by"]) == worker.pid, (done, procs.logs())
    assert timedelta(seconds=3 * LEASE - 1) < done["finished_at"] - done["started_at"] < timedelta(seconds=3 * LEASE + 5), done
    assert abs((done["db_now"] - done["finished_at"]).total_seconds()) < 5, f"finished_at is the database's time: {done}"

    # Its renewals blocked: it stops (exit 77) before the lease lapses by the database's clock.
    with db.connect(url=url) as conn, conn.transaction():
        job_id = node_queue.enqueue_ingest_job("hold_first", "fetch", {"token": f"skew{skew}-blocked", "hold": 60}, conn=conn)["id"]
    wait_until(lambda: _job(url, job_id)["status"] == "running", timeout=10, what=f"second job running\n{procs.logs()}")
    time.sleep(1.0)  # renewed a few times
    running = _job(url, job_id)
    ahead = (running["lease_expires_at"] - running["db_now"]).total_seconds()
    assert 0 < ahead <= LEASE + 0.5, f"its lease ends {ahead:.1f}s from now by the database's clock: read from the worker's clock"
    blocker = psycopg.connect(url)
    try:
        blocker.execute("LOCK TABLE ingest_jobs IN EXCLUSIVE MODE")  # renewals (and the reclaim) block; reads still work
        locked_at = time.monotonic()
        assert wait_exit(worker, 4 * LEASE, procs) == 77, procs.logs()
        stopped_after = time.monotonic() - locked_at
        row = _job(url, job_id)
        assert (row["status"], pid_of(row["claimed_by"])) == ("running", worker.pid)
        margin = (row["lease_expires_at"] - row["db_now"]).total_seconds()
    finally:
        blocker.close()
    print(f"clock {skew:+d}s: job of 3 leases kept; renewals blocked -> stopped after {stopped_after:.2f}s, {margin:.2f}s before its lease lapsed")
    assert margin > 0, f"the worker stopped {-margin:.2f}s after its lease lapsed on the database's clock"
    assert "lease could not be renewed" in log_text(worker), procs.logs()
