"""Fair share with real workers: kill -9 loses no job and runs none twice at once, and the small tenant is not starved."""

from __future__ import annotations

import os
import signal

import pytest
import qw_test_app
from procs import Procs, pid_of, query, service_env, wait_for_log, wait_until, wait_workers_ready

from queue_workflows import bulk, node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess


@pytest.fixture(autouse=True)
def _test_tasks(database_url: str) -> None:
    register_ingest_task("record", qw_test_app.record)


def test_kill_9_with_tenants_loses_no_job_runs_none_twice_and_starves_no_tenant(database_url: str, procs: Procs) -> None:
    env = service_env(database_url, QW_LEASE_SECONDS="60", QW_LEASE_RENEW_SECONDS="20")
    orchestrator = procs.orchestrator(env)
    workers = {w.pid: w for w in (procs.worker(env, "fetch"), procs.worker(env, "fetch"), procs.worker(env, "fetch"))}
    bulk.copy_ingest_jobs({"task_name": "record", "queue": "fetch", "tenant": "big", "args": {"token": f"big-{i}", "sleep": 0.05}}
                          for i in range(60))
    victim_job = node_queue.enqueue_ingest_job("record", "fetch", {"token": "victim", "first_run_sleep": 60}, tenant="small")["id"]
    bulk.copy_ingest_jobs({"task_name": "record", "queue": "fetch", "tenant": "small", "args": {"token": f"small-{i}", "sleep": 0.05}}
                          for i in range(10))
    wait_workers_ready(database_url, list(workers.values()))
    wait_for_log(orchestrator, "orchestrator running", timeout=30)

    running = wait_until(lambda: query(database_url, "SELECT claimed_by FROM ingest_jobs WHERE id = %s AND status = 'running'", (victim_job,)),
                         timeout=20, what=f"the victim job running\n{procs.logs()}")
    victim = workers[pid_of(running[0]["claimed_by"])]
    os.kill(victim.pid, signal.SIGKILL)

    wait_until(lambda: not query(database_url, "SELECT 1 FROM ingest_jobs WHERE status <> 'completed'"), timeout=60,
               what=f"every job completed\n{procs.logs()}")
    runs = query(database_url, "SELECT token, worker_pid FROM test_executions ORDER BY id")
    by_token: dict[str, list[int]] = {}
    for r in runs:
        by_token.setdefault(r["token"], []).append(r["worker_pid"])
    assert set(by_token) == {f"big-{i}" for i in range(60)} | {f"small-{i}" for i in range(10)} | {"victim"}
    twice = {t: pids for t, pids in by_token.items() if len(pids) != 1}
    assert twice == {"victim": [victim.pid, twice["victim"][1]]} and twice["victim"][1] != victim.pid, twice
    # Not starved: the small tenant's ten jobs all started while the big tenant still had most of its backlog queued.
    order = query(database_url, "SELECT tenant FROM ingest_jobs WHERE id <> %s ORDER BY started_at, id", (victim_job,))
    last_small = max(i for i, r in enumerate(order) if r["tenant"] == "small")
    assert last_small < 35, f"the small tenant's last job started {last_small + 1}th of {len(order)}"
