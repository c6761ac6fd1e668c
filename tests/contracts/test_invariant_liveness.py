"""Contract 4: a live worker keeps its job through the loss of any one connection and through a
Postgres restart; a worker whose job is taken away stops (exit 77) and leaves the row alone.

Real worker and orchestrator processes, real backends terminated, a real Postgres restarted.
Leases are long wherever only the lock path is under test, so a pass cannot come from the lease.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
import qw_test_app
from procs import (
    PrivatePostgres,
    Procs,
    log_text,
    query,
    query_or_none,
    service_env,
    wait_exit,
    wait_for_log,
    wait_until,
    wait_workers_ready,
)

from queue_workflows import db, node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess


@pytest.fixture(autouse=True)
def _test_tasks() -> None:
    register_ingest_task("record", qw_test_app.record)

HOLDERS = (
    "SELECT pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database AND d.datname = current_database() "
    "WHERE locktype = 'advisory' AND granted AND classid = 20823 "
    "AND objsubid = 2 AND objid = %s ORDER BY pid"
)


def _holders(url: str, key: int) -> list[int]:
    return [r["pid"] for r in query_or_none(url, HOLDERS, (key,)) or []]


def _job(url: str, job_id: int) -> dict:
    [row] = query(url, "SELECT * FROM ingest_jobs WHERE id = %s", (job_id,))
    return row


def _executions(url: str, token: str) -> list[int]:
    return [r["worker_pid"] for r in query(url, "SELECT worker_pid FROM test_executions WHERE token = %s ORDER BY id", (token,))]


def _start_long_job(url: str, procs: Procs, token: str, seconds: float = 0, until_file: Path | None = None) -> dict:
    """Enqueue a job whose body runs `seconds`, or until the file `until_file` exists, and wait until it runs."""
    args: dict[str, object] = {"token": token, "sleep": seconds}
    if until_file is not None:
        args["first_run_wait_file"] = str(until_file)
    with db.connect(url=url) as conn, conn.transaction():  # not the pool: a private server may go away
        job_id = node_queue.enqueue_ingest_job("record", "fetch", args, conn=conn)["id"]

    def body_running() -> dict | None:
        job = _job(url, job_id)
        return job if job["status"] == "running" and _executions(url, token) else None

    return wait_until(body_running, timeout=20, what=f"job {job_id} running its body\n{procs.logs()}")


def _wait_two_holders(url: str, key: int, procs: Procs, *, besides: set[int], timeout: float = 5.0) -> tuple[list[int], float]:
    """Wait until two backends other than `besides` hold the worker's lock; returns them and the wait."""
    started = time.monotonic()
    try:
        holders = wait_until(
            lambda: (h := _holders(url, key)) and len(h) == 2 and not set(h) & besides and h,
            timeout=timeout, interval=0.01, what=f"lock {key} held by two fresh backends",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{procs.logs()}") from None
    return holders, time.monotonic() - started



def test_terminating_each_backend_of_a_busy_worker_in_turn_never_runs_its_job_twice(database_url: str, procs: Procs, tmp_path: Path) -> None:
    env = service_env(database_url, QW_LEASE_SECONDS="120", QW_LEASE_RENEW_SECONDS="40")
    orchestrator = procs.orchestrator(env)
    busy, spare = procs.worker(env, "fetch"), procs.worker(env, "fetch")  # `spare` would take a reclaimed job
    wait_workers_ready(database_url, [busy, spare])
    wait_for_log(orchestrator, "orchestrator running", timeout=30)

    token, release = "terminate-in-turn", tmp_path / "release"
    job = _start_long_job(database_url, procs, token, until_file=release)  # busy until every backend was cut off
    owner = busy if str(busy.pid) in job["claimed_by"] else spare
    key = job["claim_lock_key"]
    holders = _holders(database_url, key)
    assert len(holders) == 2, f"a busy worker holds its lock on two connections: {holders}"

    restore_times = []
    terminated: set[int] = set()
    for _round in range(2):
        for victim in list(holders):
            query(database_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s AND datname = current_database()", (victim,))
            terminated.add(victim)
            holders, took = _wait_two_holders(database_url, key, procs, besides=terminated)
            restore_times.append(took)
            assert _job(database_url, job["id"])["claimed_by"] == job["claimed_by"], procs.logs()
    print(f"lock restored after terminating one backend: {', '.join(f'{t:.3f}s' for t in restore_times)}")
    assert max(restore_times) < 1.5, restore_times

    release.touch()
    done = wait_until(lambda: (j := _job(database_url, job["id"]))["status"] == "completed" and j, timeout=30, what=f"job done\n{procs.logs()}")
    assert done["attempts"] == 1 and done["claimed_by"] == job["claimed_by"], (done, procs.logs())
    assert _executions(database_url, token) == [owner.pid], "the job ran exactly once, on its first worker"
    assert busy.poll() is None and spare.poll() is None, procs.logs()
    assert "reclaimed job" not in log_text(orchestrator), procs.logs()


@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_postgres_restart_during_a_job_three_times_the_lease_runs_it_once(
    private_pg: PrivatePostgres, private_database_url: str, procs: Procs
) -> None:
    url = private_database_url
    lease = 6.0
    env = service_env(url, QW_LEASE_SECONDS=str(lease), QW_LEASE_RENEW_SECONDS="1")
    orchestrator = procs.orchestrator(env)
    worker, spare = procs.worker(env, "fetch"), procs.worker(env, "fetch")
    wait_workers_ready(url, [worker, spare])
    wait_for_log(orchestrator, "orchestrator running", timeout=30)

    token = "restart-long"
    job = _start_long_job(url, procs, token, seconds=3 * lease)
    owner_pid = int(job["claimed_by"].rsplit(":", 2)[1])
    private_pg.stop()
    time.sleep(1.0)  # the outage itself
    private_pg.start()
    up_at = time.monotonic()
    _, restored = _wait_two_holders(url, job["claim_lock_key"], procs, besides=set(), timeout=10)
    print(f"worker lock held on two connections again {time.monotonic() - up_at:.2f}s after Postgres came back")

    done = wait_until(
        lambda: (rows := query_or_none(url, "SELECT * FROM ingest_jobs WHERE id = %s AND status <> 'running'", (job["id"],))) and rows[0],
        timeout=4 * lease, what=f"job finished\n{procs.logs()}",
    )
    assert (done["status"], done["attempts"], done["claimed_by"]) == ("completed", 1, job["claimed_by"]), (done, procs.logs())
    assert _executions(url, token) == [owner_pid], procs.logs()
    assert worker.poll() is None and spare.poll() is None and orchestrator.poll() is None, procs.logs()


@pytest.mark.parametrize("taken_by", ["reclaim", "another worker"])
def test_a_worker_whose_job_is_taken_away_exits_77_and_leaves_the_row_alone(database_url: str, procs: Procs, taken_by: str) -> None:
    worker = procs.worker(service_env(database_url, QW_LEASE_SECONDS="120", QW_LEASE_RENEW_SECONDS="40"), "fetch")
    wait_workers_ready(database_url, [worker])
    token = f"taken-{taken_by}"
    job = _start_long_job(database_url, procs, token, seconds=30)

    if taken_by == "reclaim":
        change = "status = 'queued', claimed_by = NULL, claim_lock_key = NULL, lease_expires_at = NULL"
    else:
        change = "claimed_by = 'elsewhere:fetch:1:abc', claim_lock_key = 1"
    [taken] = query(database_url, f"UPDATE ingest_jobs SET {change}, updated_at = now() WHERE id = %s RETURNING *", (job["id"],))
    taken_at = time.monotonic()
    assert wait_exit(worker, 10, procs) == 77, procs.logs()
    print(f"job taken away -> worker exited 77 after {time.monotonic() - taken_at:.3f}s")
    assert time.monotonic() - taken_at < 3, "it learns at once (revocation notice), not at its next renewal"
    assert _job(database_url, job["id"]) == taken, "the loser must not touch the row"
    assert _executions(database_url, token) == [worker.pid]
    assert "no longer ours" in log_text(worker)


def test_a_lease_that_cannot_be_renewed_stops_the_job_before_it_lapses(database_url: str, procs: Procs) -> None:
    lease = 3.0
    worker = procs.worker(service_env(database_url, QW_LEASE_SECONDS=str(lease), QW_LEASE_RENEW_SECONDS="0.5"), "fetch")
    wait_workers_ready(database_url, [worker])
    job = _start_long_job(database_url, procs, "unrenewable", seconds=60)

    blocker = psycopg.connect(database_url)
    try:
        blocker.execute("LOCK TABLE ingest_jobs IN EXCLUSIVE MODE")  # renewals block; reads still work
        locked_at = time.monotonic()
        assert wait_exit(worker, 3 * lease, procs) == 77, procs.logs()
        stopped_after = time.monotonic() - locked_at
        row = _job(database_url, job["id"])
        assert row["lease_expires_at"] is not None and (row["status"], row["claimed_by"]) == ("running", job["claimed_by"])
        still_leased = query(database_url, "SELECT %s > now() AS ok", (row["lease_expires_at"],))[0]["ok"]
    finally:
        blocker.close()
    print(f"renewals blocked -> worker stopped after {stopped_after:.2f}s (lease {lease:g}s)")
    assert still_leased, "the worker must stop before its lease lapses, not after"
    assert "lease could not be renewed" in log_text(worker), procs.logs()


def test_kill_9_is_still_seen_within_a_second_with_two_lock_holders(database_url: str, procs: Procs) -> None:
    env = service_env(database_url, QW_LEASE_SECONDS="120", QW_LEASE_RENEW_SECONDS="40", QW_SHUTDOWN_GRACE_SECONDS="1")
    orchestrator = procs.orchestrator(env)
    victim, spare = procs.worker(env, "fetch"), procs.worker(env, "fetch")
    wait_workers_ready(database_url, [victim, spare])
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    job = _start_long_job(database_url, procs, "kill9-two-holders", seconds=60)
    lost = victim if str(victim.pid) in job["claimed_by"] else spare
    assert len(_holders(database_url, job["claim_lock_key"])) == 2

    os.kill(lost.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(
        lambda: _job(database_url, job["id"])["claimed_by"] not in (None, job["claimed_by"]),
        timeout=10, interval=0.01, what=f"job running elsewhere\n{procs.logs()}",
    )
    took = time.monotonic() - killed_at
    print(f"kill -9 -> running elsewhere in {took:.3f}s")
    assert took < 1.5, procs.logs()


def test_the_beat_outlives_unexpected_errors_and_keeps_renewing(database_url: str, conn, monkeypatch, caplog) -> None:
    import threading

    import queue_workflows
    from queue_workflows import claim_worker, jobstore

    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}), lease_seconds=3, lease_renew_seconds=0.2)
    release = threading.Event()
    register_ingest_task("hold", lambda reason: {"released": release.wait(30)})
    job = node_queue.enqueue_ingest_job("hold", "fetch")

    real_renew, faults = jobstore.renew_lease, []

    def flaky_renew(*args, **kwargs):
        if len(faults) < 3:
            faults.append(1)
            raise RuntimeError("injected fault in the beat")
        return real_renew(*args, **kwargs)

    monkeypatch.setattr(jobstore, "renew_lease", flaky_renew)
    worker = claim_worker.ClaimWorker("fetch", max_jobs=1)
    exits: list[int] = []
    worker.beat.exit_fn = lambda code, reason: exits.append(code)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    try:
        first = wait_until(lambda: (r := conn.execute("SELECT * FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone())["status"] == "running" and r, timeout=10)
        wait_until(lambda: len(faults) == 3, timeout=10, what="three injected faults")
        wait_until(
            lambda: conn.execute("SELECT lease_expires_at > %s AS later FROM ingest_jobs WHERE id = %s", (first["lease_expires_at"], job["id"])).fetchone()["later"],
            timeout=5, what="a renewal after the faults",
        )
        assert worker.beat.is_alive() and exits == []
        assert "liveness beat failed" in caplog.text and "injected fault" in caplog.text
    finally:
        release.set()
        thread.join(timeout=10)
    assert conn.execute("SELECT status, attempts FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone() == {"status": "completed", "attempts": 1}


def test_a_cancel_heard_before_the_job_starts_still_stops_it_at_once(database_url: str, conn, monkeypatch) -> None:
    """The claim commits, the operator cancels, the beat hears it, and only then does the job's code start."""
    import threading

    import queue_workflows
    from queue_workflows import admin, claim_worker

    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}), lease_seconds=60,
                              lease_renew_seconds=30, heartbeat_seconds=0.1)
    release = threading.Event()
    register_ingest_task("hold", lambda reason: {"released": release.wait(30)})
    job = node_queue.enqueue_ingest_job("hold", "fetch")
    worker = claim_worker.ClaimWorker("fetch", max_jobs=1)
    exits: list[tuple[float, int]] = []
    worker.beat.exit_fn = lambda code, reason: exits.append((time.monotonic(), code))
    real_started = worker.beat.job_started

    def beat_since(moment) -> bool:
        row = conn.execute("SELECT last_seen > %s AS beat FROM worker_heartbeats WHERE worker_id = %s", (moment, worker.worker_id)).fetchone()
        return row is not None and row["beat"]

    def started_after_a_cancel(*args, **kwargs):
        # The claim may come before the beat's first heartbeat, and so before it LISTENs: a notice
        # sent then is lost (the renewal would catch it, 30 s on), which is not what this test is about.
        wait_until(lambda: beat_since("-infinity"), timeout=10, what="the beat's first heartbeat: it is listening")
        admin.cancel_job(f"ingest:{job['id']}")
        cancelled_at = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        wait_until(lambda: beat_since(cancelled_at), timeout=10, what="a heartbeat after the cancel: the beat has read its notice")
        return real_started(*args, **kwargs)

    monkeypatch.setattr(worker.beat, "job_started", started_after_a_cancel)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    try:
        wait_until(lambda: exits, timeout=10, what="the worker stopping the cancelled job (a renewal is 30 s away)")
        assert [code for _, code in exits] == [77]
    finally:
        release.set()
        worker.request_stop()
        thread.join(timeout=10)
    assert conn.execute("SELECT status FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()["status"] == "cancelled"
