"""Contract 9 with real processes: a frozen worker (SIGSTOP past its lease, alone or with its
job's processes, as a hung host) loses its job to another worker once the lease lapses, and on
SIGCONT stops (exit 77) without writing anything: the row the other worker stored stays as it was.

The frozen process keeps its sessions and its advisory lock while stopped, so only the lease
path of the reclaim can take the job; its late outcome is refused by the terminal marks'
claim check (`claimed_by`), not by anything the frozen process decides.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
import qw_fault_tasks
from procs import Procs, pid_of, query, service_env, wait_exit, wait_until, wait_workers_ready

from queue_workflows import db, node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("hold_first", qw_fault_tasks.hold_first)

LEASE = 3.0


def _env(url: str) -> dict[str, str]:
    return service_env(url, QW_APP="qw_fault_tasks", QW_LEASE_SECONDS=str(LEASE), QW_LEASE_RENEW_SECONDS="0.5")


def _job(url: str, job_id: int) -> dict:
    [row] = query(url, "SELECT * FROM ingest_jobs WHERE id = %s", (job_id,))
    return row


def _executions(url: str, token: str) -> list[int]:
    return [r["worker_pid"] for r in query(url, "SELECT worker_pid FROM test_executions WHERE token = %s ORDER BY id", (token,))]


def freeze_and_take_over(url: str, procs: Procs, *, token: str, hold: float, child: bool, whole_group: bool,
                         frozen_for: float = 0.0) -> dict:
    """Run a job on worker A, freeze A, let B take it over and finish it, thaw A; figures and rows for the asserts."""
    env = _env(url)
    procs.orchestrator(env)
    frozen = procs.worker(env, "fetch")
    wait_workers_ready(url, [frozen])
    with db.connect(url=url) as conn, conn.transaction():
        job_id = node_queue.enqueue_ingest_job("hold_first", "fetch", {"token": token, "hold": hold, "child": child}, conn=conn)["id"]
    wait_until(lambda: _executions(url, token + (":child" if child else "")), timeout=20, what=f"job {job_id} running\n{procs.logs()}")
    taker = procs.worker(env, "fetch")
    wait_workers_ready(url, [taker])
    first = _job(url, job_id)
    assert first["status"] == "running" and pid_of(first["claimed_by"]) == frozen.pid, first
    if whole_group:
        assert os.getpgid(frozen.pid) == frozen.pid, "a worker leads its own process group"
    children = [p for p in _executions(url, f"{token}:child")]

    frozen_at = time.monotonic()
    if whole_group:
        os.killpg(frozen.pid, signal.SIGSTOP)  # the worker and every process of its job: a hung host
    else:
        os.kill(frozen.pid, signal.SIGSTOP)
    try:
        last_lease = first["lease_expires_at"]

        def taken() -> dict | None:
            nonlocal last_lease
            row = _job(url, job_id)
            if row["claimed_by"] is not None and pid_of(row["claimed_by"]) == frozen.pid:
                last_lease = row["lease_expires_at"]  # a renewal sent just before the freeze may land now
                return None
            return row if row["status"] in ("running", "completed") and row["claimed_by"] else None

        taken_row = wait_until(taken, timeout=6 * LEASE, interval=0.02, what=f"job {job_id} taken over\n{procs.logs()}")
        takeover = time.monotonic() - frozen_at
        done = wait_until(lambda: (r := _job(url, job_id))["status"] == "completed" and r, timeout=20, what=f"job done\n{procs.logs()}")
        while time.monotonic() - frozen_at < frozen_for:
            time.sleep(0.05)
    finally:
        if whole_group:
            os.killpg(frozen.pid, signal.SIGCONT)
        else:
            os.kill(frozen.pid, signal.SIGCONT)
    code = wait_exit(frozen, 20, procs)
    return {"job_id": job_id, "frozen": frozen, "taker": taker, "code": code, "takeover": takeover, "last_lease": last_lease,
            "taken": taken_row, "done": done, "after": _job(url, job_id), "children": children}


def _assert_fenced(url: str, procs: Procs, token: str, out: dict) -> None:
    frozen, taker, done = out["frozen"], out["taker"], out["done"]
    assert out["code"] == 77, f"the thawed worker must stop with 77, not {out['code']}\n{procs.logs()}"
    assert pid_of(done["claimed_by"]) == taker.pid and done["attempts"] == 2, (done, procs.logs())
    assert done["result"]["pid"] == taker.pid, "the stored result is the taker's"
    assert out["after"] == done, "the thawed worker wrote nothing to the row the taker stored"
    assert _executions(url, token) == [frozen.pid, taker.pid], "its code ran once on each worker, the frozen one first"
    assert out["taken"]["started_at"] >= out["last_lease"], (
        f"the taker started at {out['taken']['started_at']}, inside the frozen worker's lease (to {out['last_lease']})")
    assert taker.poll() is None, procs.logs()
    print(f"frozen worker: job taken over {out['takeover']:.2f}s after SIGSTOP (lease {LEASE:g}s); thawed -> exit {out['code']}")


def test_a_frozen_worker_loses_its_job_at_the_lease_and_stops_on_thaw(database_url: str, procs: Procs) -> None:
    out = freeze_and_take_over(database_url, procs, token="frozen", hold=60, child=False, whole_group=False)
    _assert_fenced(database_url, procs, "frozen", out)


def test_a_frozen_worker_whose_job_returns_on_thaw_stores_nothing_and_stops(database_url: str, procs: Procs) -> None:
    # The hold is spent while frozen: on SIGCONT the job's code returns at once, racing the beat's guard.
    out = freeze_and_take_over(database_url, procs, token="late", hold=LEASE + 1, child=False, whole_group=False, frozen_for=LEASE + 3)
    _assert_fenced(database_url, procs, "late", out)


def test_a_frozen_host_worker_and_job_processes_together_is_taken_over_and_its_child_ended(database_url: str, procs: Procs) -> None:
    out = freeze_and_take_over(database_url, procs, token="host", hold=60, child=True, whole_group=True)
    _assert_fenced(database_url, procs, "host", out)
    [child] = out["children"]
    wait_until(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE,
               timeout=5, what=f"the frozen job's child {child} ended with its worker")
