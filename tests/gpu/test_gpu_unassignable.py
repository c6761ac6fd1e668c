"""The "no live worker fits" flag goes once a worker has the job: every claim path and the terminal
marks clear it, and the leader's sweep never flags a job that a claim took while the sweep ran. It is
decided per device, less the margin, on `gpus` devices of one worker."""

from __future__ import annotations

import threading

import psycopg
import pytest
from procs import TEST_INGEST_QUEUES, query, wait_until
from psycopg.types.json import Jsonb

import queue_workflows
from queue_workflows import claim_worker, db, jobstore, model_registry, node_queue
from queue_workflows.gpu import learn
from queue_workflows.jobrow import NodeJob
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE
from queue_workflows.worker.batch.worker import claim_batch_query

REASON = "model big needs about 20 GB of VRAM; the largest live gpu worker has 16.0 GB"


def live_gpu_worker(conn, database_url: str, name: str, key: int, total_gb: float) -> psycopg.Connection:
    """A heartbeat row for a gpu worker whose lock a connection of ours holds (so it counts as live)."""
    holder = psycopg.connect(database_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, key))
    conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, vram_total_gb) "
                 "VALUES (%s, %s, 'gpu', 1, %s, %s)", (name, name, key, total_gb))
    return holder


def reason_of(conn, job_id: int) -> str | None:
    return conn.execute("SELECT unassignable_reason FROM workflow_node_jobs WHERE id = %s", (job_id,)).fetchone()["unassignable_reason"]


def flagged_big_job(conn, database_url: str) -> tuple[int, psycopg.Connection]:
    """A queued job for a 20 GB model, flagged by the sweep while the largest live gpu worker has 16 GB."""
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('big', 20)")
    job = node_queue.enqueue_node_job("b", "gpu", node_module="qw_gpu_nodes", required_model="big")["id"]
    holder = live_gpu_worker(conn, database_url, "box-16", 7201, 16)
    [row] = jobstore.flag_unassignable(conn)
    assert (row["id"], row["unassignable_reason"]) == (job, REASON)
    return job, holder


def test_a_worker_that_fits_and_claims_before_the_next_sweep_leaves_no_flag(database_url, conn):
    job, holder = flagged_big_job(conn, database_url)
    try:
        queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=True,
                                  gpu_free_vram_gb=24, heartbeat_seconds=0.2)
        model_registry.register(model_registry.ModelSpec("big", lambda: {"model": "big"}, est_vram_gb=20))
        worker = claim_worker.ClaimWorker("gpu", max_jobs=1)
        thread = threading.Thread(target=worker.run_forever, daemon=True)
        thread.start()
        wait_until(lambda: query(database_url, "SELECT status FROM workflow_node_jobs WHERE id = %s", (job,))[0]["status"] == "completed",
                   timeout=20, what="the 24 GB worker to run the job")
        thread.join(timeout=10)
        assert reason_of(conn, job) is None
    finally:
        holder.close()


def _routed_gpu_claim(conn, queue: str) -> list[dict]:
    statement = node_queue.claim_statement("workflow_node_jobs", queue, jobstore.Claimant("w-fit", 1), vram_available_gb=24)
    return [jobstore.fetch_one(conn, statement)]


def _plain_claim(conn, queue: str) -> list[dict]:
    return [jobstore.fetch_one(conn, node_queue.claim_statement("workflow_node_jobs", queue, jobstore.Claimant("w-plain", 1)))]


def _batch_claim(conn, queue: str) -> list[dict]:
    params = {"queue": queue, "worker_id": "w-batch", "lock_key": 1, "lease_seconds": 30, "limit": 5, "aging_seconds": 0}
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(claim_batch_query("workflow_node_jobs", "highest_first"), params).fetchall()


@pytest.mark.parametrize(("claim", "queue", "routing"), [
    (_routed_gpu_claim, "gpu", "affinity"),
    (_plain_claim, "gpu", "fifo"),
    (_plain_claim, "cpu", "affinity"),
    (_batch_claim, "cpu", "affinity"),
], ids=["gpu-routed", "gpu-fifo", "claim_job", "batch"])
def test_every_claim_path_clears_the_flag(database_url, conn, claim, queue, routing):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=True, gpu_routing=routing)
    job = node_queue.enqueue_node_job("n", queue, node_module="qw_gpu_nodes")["id"]
    conn.execute("UPDATE workflow_node_jobs SET unassignable_reason = %s WHERE id = %s", (REASON, job))
    rows = claim(conn, queue)
    assert [(r["id"], r["status"], r["unassignable_reason"]) for r in rows] == [(job, "running", None)]
    assert reason_of(conn, job) is None


@pytest.mark.parametrize("outcome", ["completed", "failed"])
def test_a_terminal_mark_clears_the_flag(database_url, conn, outcome):
    job = node_queue.enqueue_node_job("n", "gpu", node_module="qw_gpu_nodes")["id"]
    conn.execute("UPDATE workflow_node_jobs SET unassignable_reason = %s WHERE id = %s", (REASON, job))
    marked = jobstore.mark("workflow_node_jobs", outcome, job, conn=conn, error="x" if outcome == "failed" else None)
    assert marked is not None and marked["status"] == outcome
    assert reason_of(conn, job) is None


def test_the_sweep_does_not_flag_a_job_claimed_while_it_ran(database_url, conn):
    """The sweep's verdict sees the job queued; its update waits on the claim's row lock, then finds it running."""
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('big', 20)")
    job = node_queue.enqueue_node_job("b", "gpu", node_module="qw_gpu_nodes", required_model="big")["id"]
    holder = live_gpu_worker(conn, database_url, "box-16", 7202, 16)
    swept: list[list[dict]] = []
    try:
        with db.connect(url=database_url) as claimer:  # not autocommit: the claim holds its row until we commit
            [claimed] = _routed_gpu_claim(claimer, "gpu")
            assert claimed["id"] == job
            sweep_conn = db.connect(autocommit=True, url=database_url)  # its pid, not its text: pg_stat_activity cuts a long query short
            sweeper = threading.Thread(target=lambda: swept.append(jobstore.flag_unassignable(sweep_conn)))
            sweeper.start()
            wait_until(lambda: conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
                "AND pid = %s", (sweep_conn.info.backend_pid,)).fetchone()["count"] == 1, timeout=10, what="the sweep to wait on the claimed row")
            claimer.commit()
        sweeper.join(timeout=10)
        assert swept == [[]]
        assert reason_of(conn, job) is None
    finally:
        holder.close()


# Per device, less the margin, `gpus` of them ---------------------------------------------------


def live_worker_with_devices(conn, database_url: str, name: str, key: int, *totals_gb: float) -> psycopg.Connection:
    """A live gpu worker's heartbeat listing its devices, as GpuSide publishes them (summed VRAM beside)."""
    holder = psycopg.connect(database_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, key))
    devices = [{"uuid": f"GPU-{name}-{i}", "total_gb": gb, "free_gb": gb} for i, gb in enumerate(totals_gb)]
    conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, vram_total_gb, gpu_devices) "
                 "VALUES (%s, %s, 'gpu', 1, %s, %s, %s)", (name, name, key, sum(totals_gb), Jsonb(devices)))
    return holder


def reasons(conn, margin_gb: float = 1.0) -> dict[int, str | None]:
    return {r["id"]: r["unassignable_reason"] for r in jobstore.flag_unassignable(conn, margin_gb=margin_gb)}


def test_a_job_larger_than_every_device_is_flagged_though_a_hosts_sum_would_hold_it(database_url, conn):
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('big', 20), ('fits', 11)")
    big = node_queue.enqueue_node_job("b", "gpu", node_module="qw_gpu_nodes", required_model="big")["id"]
    node_queue.enqueue_node_job("f", "gpu", node_module="qw_gpu_nodes", required_model="fits")
    holder = live_worker_with_devices(conn, database_url, "twin", 7301, 12, 12)
    try:
        assert reasons(conn) == {big: "model big needs about 20 GB of VRAM on a device; the largest live gpu device, GPU-twin-0 of twin, "
                                      "has 12.0 GB (11.0 GB after the 1 GB margin)"}
    finally:
        holder.close()


def test_the_margin_counts(database_url, conn):
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('snug', 11.5)")
    job = node_queue.enqueue_node_job("s", "gpu", node_module="qw_gpu_nodes", required_model="snug")["id"]
    holder = live_worker_with_devices(conn, database_url, "one", 7302, 12)
    try:
        assert reasons(conn, margin_gb=1.0) == {job: "model snug needs about 11.5 GB of VRAM on a device; the largest live gpu device, "
                                                     "GPU-one-0 of one, has 12.0 GB (11.0 GB after the 1 GB margin)"}
        assert reasons(conn, margin_gb=0.5) == {job: None}  # a claim leaving 0.5 GB would take it: the flag goes
    finally:
        holder.close()


def test_a_job_needing_more_devices_than_any_host_has_is_flagged(database_url, conn):
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('m8', 8)")
    three = node_queue.enqueue_node_job("g", "gpu", node_module="qw_gpu_nodes", required_model="m8", gpus=3)["id"]
    two = node_queue.enqueue_node_job("g", "gpu", node_module="qw_gpu_nodes", required_model="m8", gpus=2)["id"]
    pair = live_worker_with_devices(conn, database_url, "pair", 7303, 24, 24)
    lone = live_worker_with_devices(conn, database_url, "lone", 7304, 24)  # devices are counted per worker, never summed over hosts
    try:
        assert reasons(conn) == {three: "model m8 needs 3 devices with about 8 GB of VRAM each; no live gpu worker has that many (the most is 2)"}
        assert two not in reasons(conn)
    finally:
        pair.close()
        lone.close()


def test_an_oom_that_raises_the_need_past_every_device_flags_the_job(database_url, conn):
    """The OOM path as a worker runs it (gpu/learn.py): the job back in the queue, its model's need raised."""
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('grows', 16)")
    job = node_queue.enqueue_node_job("g", "gpu", node_module="qw_gpu_nodes", required_model="grows")["id"]
    holder = live_worker_with_devices(conn, database_url, "host", 7305, 24, 24)
    try:
        assert reasons(conn) == {}  # 16 GB fits a 24 GB card
        statement = node_queue.claim_statement("workflow_node_jobs", "gpu", jobstore.Claimant("w-oom", 1), vram_available_gb=24)
        claimed = NodeJob.from_row(jobstore.fetch_one(conn, statement))
        assert claimed.id == job
        for sql, params in learn.raise_need_statements(claimed, held_bytes=16 << 30, free_gb=8.0):  # it held 16 with 8 free: 24 needed
            conn.execute(sql, params)
        conn.execute(*learn.oom_requeue_statement("workflow_node_jobs", job, "w-oom", error="CUDA out of memory"))
        assert (reason_of(conn, job), query(database_url, "SELECT status FROM workflow_node_jobs WHERE id = %s", (job,))[0]["status"]) == (None, "queued")
        assert reasons(conn) == {job: "model grows needs about 24 GB of VRAM on a device; the largest live gpu device, GPU-host-0 of host, "
                                      "has 24.0 GB (23.0 GB after the 1 GB margin)"}
    finally:
        holder.close()
