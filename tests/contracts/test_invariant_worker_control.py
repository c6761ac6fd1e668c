"""Contract 6: a `worker_controls` row per (host, queue), absent = ON, written by anyone.

OFF/hard requeues the in-flight job (no attempt charged), exits 79 and comes back parked;
OFF/park finishes the job first; ON resumes in place. Real worker processes throughout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import qw_test_app
from procs import Procs, log_text, query, service_env, wait_exit, wait_for_log, wait_until, wait_workers_ready

from queue_workflows import InvalidNameError, InvalidPayloadError, node_queue, register_ingest_task, worker_control

pytestmark = pytest.mark.multiprocess


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("record", qw_test_app.record)


def _worker(url: str, procs: Procs, host: str, **settings: str) -> subprocess.Popen[bytes]:
    worker = procs.worker(service_env(url, QW_HOST_LABEL=host, **settings), "fetch")
    wait_workers_ready(url, [worker])
    return worker


def _job(url: str, job_id: int) -> dict:
    [row] = query(url, "SELECT * FROM ingest_jobs WHERE id = %s", (job_id,))
    return row


def _state(url: str, proc: subprocess.Popen[bytes]) -> str | None:
    rows = query(url, "SELECT state FROM worker_heartbeats WHERE pid = %s", (proc.pid,))
    return rows[0]["state"] if rows else None


def _stays_queued(url: str, job_id: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _job(url, job_id)["status"] != "queued":
            return False
        time.sleep(0.05)
    return True


def _turn_off_by_sql(url: str, host: str, policy: str) -> None:
    query(
        url,
        "INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy, requested_by) "
        "VALUES (%s, 'fetch', 'off', %s, 'ops') ON CONFLICT (host_label, queue) DO UPDATE "
        "SET desired_state = EXCLUDED.desired_state, stop_policy = EXCLUDED.stop_policy, updated_at = now()",
        (host, policy),
    )


@pytest.mark.parametrize("how", ["api", "sql"])
def test_hard_off_hands_the_job_to_a_peer_exits_79_and_comes_back_parked_until_on(database_url: str, procs: Procs, how: str) -> None:
    box_a = _worker(database_url, procs, "box-a")
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": f"hard-{how}", "first_run_sleep": 60, "sleep": 0.2})["id"]
    wait_until(lambda: _job(database_url, job_id)["status"] == "running", timeout=10)
    box_b = _worker(database_url, procs, "box-b")

    off_at = time.monotonic()
    if how == "api":
        worker_control.disable_worker("box-a", "fetch", requested_by="test")
    else:
        _turn_off_by_sql(database_url, "box-a", "hard")
    assert wait_exit(box_a, 10, procs) == 79, procs.logs()
    moved = wait_until(lambda: (j := _job(database_url, job_id))["claimed_by"] and "box-b" in j["claimed_by"] and j, timeout=10, interval=0.01)
    print(f"OFF (hard) -> job running on the peer after {time.monotonic() - off_at:.3f}s")
    assert moved["attempts"] == 1, "a hard stop hands the job back without charging an attempt"
    done = wait_until(lambda: (j := _job(database_url, job_id))["status"] == "completed" and j, timeout=10)
    assert done["result"]["pid"] == box_b.pid

    box_b.send_signal(signal.SIGTERM)
    assert wait_exit(box_b, 15, procs) == 0
    restarted = _worker(database_url, procs, "box-a")  # its supervisor brings it back
    wait_until(lambda: _state(database_url, restarted) == "parked", timeout=15, what="the restarted worker parked")
    waiting = node_queue.enqueue_ingest_job("record", "fetch", {"token": f"after-{how}"})["id"]
    assert _stays_queued(database_url, waiting, 1.5), "a parked worker claims nothing"

    on_at = time.monotonic()
    worker_control.enable_worker("box-a", "fetch")
    claimed = wait_until(lambda: (j := _job(database_url, waiting))["status"] != "queued" and j, timeout=5, interval=0.01)
    print(f"ON -> parked worker claimed after {time.monotonic() - on_at:.3f}s")
    assert str(restarted.pid) in claimed["claimed_by"] and restarted.poll() is None, "resumed in place, no restart"
    assert worker_control.desired_state_for("box-a", "fetch") == "on"


def test_park_finishes_the_running_job_then_stops_claiming(database_url: str, procs: Procs) -> None:
    box_a = _worker(database_url, procs, "box-a")
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": "park", "sleep": 1.5})["id"]
    wait_until(lambda: _job(database_url, job_id)["status"] == "running", timeout=10)
    worker_control.disable_worker("box-a", "fetch", "park")
    done = wait_until(lambda: (j := _job(database_url, job_id))["status"] == "completed" and j, timeout=10)
    assert done["result"]["pid"] == box_a.pid and done["attempts"] == 1
    wait_until(lambda: _state(database_url, box_a) == "parked", timeout=15, what="parked after its job")
    later = node_queue.enqueue_ingest_job("record", "fetch", {"token": "park-later"})["id"]
    assert _stays_queued(database_url, later, 1.5)
    assert box_a.poll() is None, "park keeps the process"
    worker_control.enable_worker("box-a", "fetch")
    wait_until(lambda: _job(database_url, later)["status"] == "completed", timeout=5)


def test_control_input_is_validated_and_changes_nothing(database_url: str, conn) -> None:
    with pytest.raises(InvalidPayloadError, match="stop policy"):
        worker_control.disable_worker("box-a", "fetch", "gentle")  # type: ignore[arg-type]
    with pytest.raises(InvalidNameError, match="host label"):
        worker_control.disable_worker("box a; DROP", "fetch")
    with pytest.raises(InvalidNameError, match="queue name"):
        worker_control.enable_worker("box-a", "Fetch!")
    assert conn.execute("SELECT count(*) AS n FROM worker_controls").fetchone()["n"] == 0
    assert worker_control.desired_state_for("box-a", "fetch") == "on", "no row means ON"


def test_the_console_script_turns_a_worker_off_and_on(database_url: str) -> None:
    env = service_env(database_url)
    script = [sys.executable, "-m", "queue_workflows.control.commands"]
    off = subprocess.run([*script, "--queue", "fetch", "--off", "--host", "box-c", "--policy", "park"], env=env, capture_output=True, text=True, timeout=30)
    assert off.returncode == 0 and "box-c/fetch: OFF (park)" in off.stdout, off.stderr
    assert worker_control.desired_state_for("box-c", "fetch") == "off"
    on = subprocess.run([*script, "--queue", "fetch", "--on", "--host", "box-c"], env=env, capture_output=True, text=True, timeout=30)
    assert on.returncode == 0 and worker_control.desired_state_for("box-c", "fetch") == "on"
    bad = subprocess.run([*script, "--queue", "nope", "--off"], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown ingest queue 'nope'" in bad.stderr and "Traceback" not in bad.stderr


def test_max_jobs_exits_cleanly_after_n_jobs(database_url: str, procs: Procs) -> None:
    ids = [node_queue.enqueue_ingest_job("record", "fetch", {"token": f"max-{i}"})["id"] for i in range(3)]
    worker = procs.worker(service_env(database_url, QW_WORKER_MAX_JOBS="2"), "fetch")
    assert wait_exit(worker, 30, procs) == 0, procs.logs()
    statuses = [_job(database_url, i)["status"] for i in ids]
    assert statuses == ["completed", "completed", "queued"], statuses


def test_a_silent_worker_that_owns_a_running_job_is_flagged_dead_and_cleared_when_it_speaks(database_url: str, procs: Procs) -> None:
    env = service_env(database_url, QW_HEARTBEAT_SECONDS="0.3", QW_LEASE_SECONDS="60", QW_LEASE_RENEW_SECONDS="20", QW_SHUTDOWN_GRACE_SECONDS="1")
    orchestrator = procs.orchestrator(env)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    worker = procs.worker(env, "fetch")
    wait_workers_ready(database_url, [worker])
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": "wedged", "sleep": 30})["id"]
    wait_until(lambda: _job(database_url, job_id)["status"] == "running", timeout=10)

    os.kill(worker.pid, signal.SIGSTOP)  # as wedged as a GPU hang: no thread of it runs
    try:
        wait_for_log(orchestrator, "DEAD WORKER", timeout=10)
        # the line may be logged a moment before the sweep's transaction that stamps the row commits
        wait_until(lambda: query(database_url, "SELECT last_flagged_dead_at FROM worker_heartbeats WHERE pid = %s",
                                 (worker.pid,))[0]["last_flagged_dead_at"] is not None, timeout=5, what="the dead flag stamped")
        line = next(ln for ln in log_text(orchestrator).splitlines() if "DEAD WORKER" in ln)
        assert f"pid {worker.pid}" in line and "queue fetch" in line and f"job {job_id}" in line
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    wait_until(
        lambda: query(database_url, "SELECT last_flagged_dead_at FROM worker_heartbeats WHERE pid = %s", (worker.pid,))[0]["last_flagged_dead_at"] is None,
        timeout=10, what="a fresh heartbeat clears the flag",
    )
