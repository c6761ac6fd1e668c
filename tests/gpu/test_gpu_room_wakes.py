"""Room freed on a device wakes the gpu workers waiting for it (migration 0046): a job that found no
room starts as soon as the job holding the room ends, not at its worker's next poll."""

from __future__ import annotations

from pathlib import Path

import pytest
from procs import Procs, log_text, query, wait_until
from test_gpu_memory import gpu_worker_env, one_device, status_of

from queue_workflows import node_queue


def claimed_nothing_yet(database_url: str, pid: int) -> bool:
    """The worker's session has made its claim and gone back to waiting: an empty claim ends with the
    promotion of due delayed jobs, the last statement its session ran."""
    return bool(query(database_url, "SELECT 1 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
                                    "JOIN worker_heartbeats h ON l.objid = h.lock_key AND l.locktype = 'advisory' "
                                    "WHERE h.pid = %s AND a.datname = current_database() AND a.state = 'idle' "
                                    "AND a.query LIKE '%%run_after <= now()%%'", (pid,)))


@pytest.mark.multiprocess
@pytest.mark.parametrize("way_out", ["completed", "failed"])
def test_a_job_waiting_for_room_starts_when_the_job_holding_it_ends(database_url: str, procs: Procs, tmp_path: Path, way_out: str) -> None:
    state = one_device(tmp_path / "nvml.json", used_gb=0.0)
    go = tmp_path / "go"
    inputs = {"hold_gb": 12, "seconds": 60, "until": str(go)}
    if way_out == "failed":
        inputs["sleep"] = "not a number"  # the node raises ValueError once its hold ends: no attempts left, failed
    # The holder stops after its one job, so nobody claims in the commit that ends it; the waiter
    # polls once a minute, so only a wake-up can start its job within the bound below.
    holder = procs.worker(gpu_worker_env(database_url, state, QW_WORKER_MAX_JOBS="1", QW_POLL_SECONDS="0.2"), "gpu")
    blocking = node_queue.enqueue_node_job("hold", "gpu", node_module="qw_gpu_nodes", required_model="a12", inputs=inputs, max_attempts=1)["id"]
    wait_until(lambda: status_of(database_url, blocking) == "running", timeout=30, what="the first job to hold 12 GB")
    waiting = node_queue.enqueue_node_job("next", "gpu", node_module="qw_gpu_nodes", required_model="b12")["id"]
    waiter = procs.worker(gpu_worker_env(database_url, state, QW_POLL_SECONDS="60"), "gpu")
    wait_until(lambda: claimed_nothing_yet(database_url, waiter.pid), timeout=30, what="the second worker to find no room and wait")
    assert status_of(database_url, waiting) == "queued", "12 GB reserved + 12 > 24 - 1"
    go.touch()
    wait_until(lambda: status_of(database_url, waiting) == "completed", timeout=10,
               what=f"the waiting job to start once the first one {way_out} (the waiter polls only every 60 s)")
    (gap,) = query(database_url, "SELECT extract(epoch FROM w.started_at - b.finished_at) AS s FROM workflow_node_jobs w, workflow_node_jobs b "
                                 "WHERE w.id = %s AND b.id = %s", (waiting, blocking))
    assert status_of(database_url, blocking) == way_out and gap["s"] < 5, gap
    owners = {r["id"]: r["claimed_by"] for r in query(database_url, "SELECT id, claimed_by FROM workflow_node_jobs WHERE id = ANY(%s)", ([blocking, waiting],))}
    assert f":{holder.pid}:" in owners[blocking] and f":{waiter.pid}:" in owners[waiting], owners
    assert "Traceback" not in log_text(waiter)
