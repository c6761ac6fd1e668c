"""Losing a worker for real: kill -9, a frozen host (SIGSTOP), and graceful SIGTERM hand-back."""

from __future__ import annotations

import os
import signal
import time

import pytest
import qw_test_app
from procs import (
    Procs,
    log_text,
    pid_of,
    query,
    service_env,
    wait_exit,
    wait_for_log,
    wait_until,
    wait_workers_ready,
)

from queue_workflows import node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess


@pytest.fixture(autouse=True)
def _test_tasks(database_url: str) -> None:
    register_ingest_task("record", qw_test_app.record)


def _job(url: str, job_id: int) -> dict:
    rows = query(url, "SELECT *, extract(epoch FROM lease_expires_at - now())::float AS lease_left FROM ingest_jobs WHERE id = %s", (job_id,))
    assert rows, f"job {job_id} vanished"
    return rows[0]


def _executions(url: str, token: str) -> list[dict]:
    return query(url, "SELECT worker_pid FROM test_executions WHERE token = %s ORDER BY id", (token,))


def _wait_running_with_body_started(url: str, job_id: int, token: str, procs: Procs, timeout: float = 15) -> dict:
    """The job is `running` and its task body has logged its execution (it is now sleeping)."""

    def started() -> dict | None:
        job = _job(url, job_id)
        return job if job["status"] == "running" and _executions(url, token) else None

    return wait_until(started, timeout=timeout, what=f"job {job_id} running its body\n{procs.logs()}")



def test_kill_9_mid_job_is_recovered_through_the_session_lock(database_url: str, procs: Procs) -> None:
    # A 60 s lease: if recovery took seconds, it came from the dead session's lock, not the lease.
    env = service_env(database_url, QW_LEASE_SECONDS="60", QW_LEASE_RENEW_SECONDS="20")
    orchestrator = procs.orchestrator(env)
    workers = {w.pid: w for w in (procs.worker(env, "fetch"), procs.worker(env, "fetch"))}
    wait_workers_ready(database_url, list(workers.values()))
    wait_for_log(orchestrator, "orchestrator running", timeout=30)

    token = "kill9"
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": token, "first_run_sleep": 60, "sleep": 0.5})["id"]
    running = _wait_running_with_body_started(database_url, job_id, token, procs)
    victim_id = running["claimed_by"]
    victim = workers[pid_of(victim_id)]
    assert running["lease_left"] > 50, running

    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.monotonic()

    def running_elsewhere() -> dict | None:
        job = _job(database_url, job_id)
        return job if job["claimed_by"] not in (None, victim_id) else None

    taken = wait_until(running_elsewhere, timeout=15, interval=0.01, what=f"job {job_id} reclaimed and re-claimed\n{procs.logs()}")
    latency = time.monotonic() - killed_at
    print(f"kill -9 -> running on another worker: {latency:.3f}s (status {taken['status']}, lease left {taken['lease_left']})")
    assert latency < 5.0, f"recovery took {latency:.2f}s\n{procs.logs()}"
    assert victim.wait(timeout=5) == -signal.SIGKILL

    done = wait_until(
        lambda: (j := _job(database_url, job_id))["status"] == "completed" and j,
        timeout=15, what=f"job {job_id} completed\n{procs.logs()}",
    )
    survivor_pid = pid_of(done["claimed_by"])
    assert survivor_pid != victim.pid and workers[survivor_pid].poll() is None, procs.logs()
    assert done["attempts"] == 2, (done, procs.logs())
    assert done["result"]["pid"] == survivor_pid and done["result"]["previous_runs"] == 1, done["result"]
    assert [r["worker_pid"] for r in _executions(database_url, token)] == [victim.pid, survivor_pid]
    assert f"reclaimed job {job_id}" in log_text(orchestrator), procs.logs()


def test_frozen_worker_loses_its_job_when_the_lease_lapses_and_stops_with_77_on_thaw(
    database_url: str, procs: Procs
) -> None:
    env = service_env(database_url, QW_LEASE_SECONDS="3", QW_LEASE_RENEW_SECONDS="1")
    orchestrator = procs.orchestrator(env)
    first = procs.worker(env, "fetch")
    wait_workers_ready(database_url, [first])
    wait_for_log(orchestrator, "orchestrator running", timeout=30)

    token = "frozen"
    first_run_sleep = 6.0
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": token, "first_run_sleep": first_run_sleep})["id"]
    running = _wait_running_with_body_started(database_url, job_id, token, procs)
    frozen_id = running["claimed_by"]
    assert pid_of(frozen_id) == first.pid

    # The second worker starts only now, so it cannot have taken the job first.
    second = procs.worker(env, "fetch")
    os.kill(first.pid, signal.SIGSTOP)  # connection stays open, advisory lock stays held
    frozen_at = time.monotonic()
    try:
        wait_workers_ready(database_url, [second])
        held = query(
            database_url,
            "SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database AND d.datname = current_database() "
            "WHERE locktype = 'advisory' AND granted AND classid = 20823 AND objid = %s AND objsubid = 2",
            (running["claim_lock_key"],),
        )
        assert held, "the frozen worker's session lock should still be held"

        done = wait_until(
            lambda: (j := _job(database_url, job_id))["status"] == "completed" and j,
            timeout=15, what=f"job {job_id} reclaimed by lease and completed elsewhere\n{procs.logs()}",
        )
        recovered_in = time.monotonic() - frozen_at
        print(f"SIGSTOP -> completed on another worker: {recovered_in:.2f}s (lease 3s)")
        assert pid_of(done["claimed_by"]) == second.pid, (done, procs.logs())
        assert done["attempts"] == 2
        assert recovered_in >= 1.5, "reclaimed before the lease could lapse: the live lock was ignored"
        assert f"reclaimed job {job_id}" in log_text(orchestrator)
    finally:
        os.kill(first.pid, signal.SIGCONT)

    # The thawed worker finds its lease gone and stops at once (exit 77) instead of finishing a duplicate.
    thawed_at = time.monotonic()
    assert wait_exit(first, 10, procs) == 77, procs.logs()
    assert time.monotonic() - thawed_at < first_run_sleep / 2, "it should stop at once, not finish the job first"
    assert "no longer ours" in log_text(first)
    after = _job(database_url, job_id)
    assert after["status"] == "completed" and after["claimed_by"] == done["claimed_by"], (after, procs.logs())
    assert after["result"] == done["result"] and after["result"]["pid"] == second.pid, after["result"]
    assert after["finished_at"] == done["finished_at"] and after["updated_at"] == done["updated_at"] and after["attempts"] == 2
    assert [r["worker_pid"] for r in _executions(database_url, token)] == [first.pid, second.pid]


def test_sigterm_lets_the_running_job_finish_then_exits_cleanly(database_url: str, procs: Procs) -> None:
    worker = procs.worker(service_env(database_url), "fetch")
    ready = wait_workers_ready(database_url, [worker])
    worker_id = ready[worker.pid]["worker_id"]

    token = "term-finish"
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": token, "sleep": 1.0})["id"]
    _wait_running_with_body_started(database_url, job_id, token, procs)
    worker.send_signal(signal.SIGTERM)
    termed_at = time.monotonic()

    rc = wait_exit(worker, 15, procs)
    print(f"SIGTERM -> exit while finishing a 1s job: {time.monotonic() - termed_at:.2f}s")
    assert rc == 0, procs.logs()
    job = _job(database_url, job_id)
    assert job["status"] == "completed" and job["claimed_by"] == worker_id and job["attempts"] == 1, (job, procs.logs())
    assert job["result"]["pid"] == worker.pid
    assert query(database_url, "SELECT * FROM worker_heartbeats WHERE worker_id = %s", (worker_id,)) == []
    assert len(_executions(database_url, token)) == 1


def test_sigterm_past_the_grace_period_hands_the_job_back_uncharged(database_url: str, procs: Procs) -> None:
    grace = 1.0
    worker = procs.worker(service_env(database_url, QW_SHUTDOWN_GRACE_SECONDS=str(grace)), "fetch")
    wait_workers_ready(database_url, [worker])

    token = "term-release"
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": token, "first_run_sleep": 60})["id"]
    running = _wait_running_with_body_started(database_url, job_id, token, procs)
    assert running["attempts"] == 1
    worker.send_signal(signal.SIGTERM)
    termed_at = time.monotonic()

    rc = wait_exit(worker, grace + 10, procs)
    took = time.monotonic() - termed_at
    print(f"SIGTERM -> job handed back and exit with a {grace}s grace: {took:.2f}s")
    assert rc == 0, procs.logs()
    assert took < grace + 4, f"exit took {took:.2f}s with a {grace}s grace\n{procs.logs()}"
    job = _job(database_url, job_id)
    assert job["status"] == "queued" and job["attempts"] == 0, (job, procs.logs())
    assert job["claimed_by"] is None and job["claim_lock_key"] is None and job["lease_expires_at"] is None, job
    assert len(_executions(database_url, token)) == 1
