"""A multi-GPU job does not starve behind a stream of one-GPU jobs (docs/gpu.md, "Busy is not warm"):
once it has waited QW_GPU_GANG_HOLD_SECONDS, the devices that could run it take nothing smaller."""

from __future__ import annotations

from test_gpu_packing import claim, models

import queue_workflows
from queue_workflows import jobstore, node_queue
from queue_workflows.gpu.devices import Device

A, B = Device("GPU-a", 24.0, 24.0), Device("GPU-b", 24.0, 24.0)


def one_gpu_job() -> int:
    return node_queue.enqueue_node_job("frame", "gpu", node_module="qw_test_nodes", required_model="m20")["id"]


def rounds_until_the_gang_runs(conn, gang: int, rounds: int) -> int | None:
    """A stream of 20 GB one-GPU jobs over two 24 GB devices: each round the oldest running one
    completes, a new one is enqueued and the worker claims; the round the gang job is claimed, or None."""
    for n in range(rounds):
        oldest = conn.execute("SELECT id FROM workflow_node_jobs WHERE status = 'running' ORDER BY started_at, id LIMIT 1").fetchone()
        if oldest is not None:
            jobstore.mark("workflow_node_jobs", "completed", oldest["id"], worker_id="w", conn=conn)
        one_gpu_job()
        got = claim(conn, A, B, worker="w")
        if got is not None and got["id"] == gang:
            return n
    return None


def test_a_gang_job_waiting_past_the_hold_gets_both_devices(conn, database_url):
    queue_workflows.configure(database_url=database_url, gpu_gang_hold_seconds=60)
    models(conn, m20=20, m8=8)
    for _ in range(2):
        one_gpu_job()
    assert claim(conn, A, B, worker="w")["gpu_devices"] == ["GPU-a"]
    gang = node_queue.enqueue_node_job("train", "gpu", node_module="qw_test_nodes", required_model="m8", gpus=2)["id"]
    got = claim(conn, A, B, worker="w")
    assert got is not None and got["gpu_devices"] == ["GPU-b"], "a gang job that has just arrived holds nothing back"
    assert rounds_until_the_gang_runs(conn, gang, 3) is None  # each device frees while the other is busy
    conn.execute("UPDATE workflow_node_jobs SET run_after = now() - interval '61 seconds' WHERE id = %s", (gang,))
    ran_in = rounds_until_the_gang_runs(conn, gang, 6)
    assert ran_in is not None, "the gang job starved: one-GPU jobs kept taking whichever device freed"
    assert ran_in <= 2  # the busy device's job completes, the held one stayed free: both at once
    row = conn.execute("SELECT gpu_devices FROM workflow_node_jobs WHERE id = %s", (gang,)).fetchone()
    assert sorted(row["gpu_devices"]) == ["GPU-a", "GPU-b"]


def test_a_device_no_capable_worker_names_is_not_held(conn, database_url):
    """A worker with one device cannot run a two-GPU job; the hold stops it only on a device that a
    live worker with enough devices names (here none: it goes on)."""
    queue_workflows.configure(database_url=database_url, gpu_gang_hold_seconds=0)
    models(conn, m20=20, m8=8)
    gang = node_queue.enqueue_node_job("train", "gpu", node_module="qw_test_nodes", required_model="m8", gpus=2)["id"]
    conn.execute("UPDATE workflow_node_jobs SET run_after = now() - interval '1 second' WHERE id = %s", (gang,))
    job = one_gpu_job()
    got = claim(conn, A, worker="w-one")
    assert got is not None and got["id"] == job
