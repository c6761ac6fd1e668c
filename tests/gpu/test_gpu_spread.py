"""Busy is not warm (docs/gpu.md): a hot model's holders that are running a job are not free to take
the next one, so its queue spreads to another worker, preferably on a device without a copy.

Other gpu workers are heartbeat rows whose worker lock a connection of ours holds (live), with the
devices their heartbeat names; "busy" is a running row claimed by them, as a real claim leaves it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psycopg
import pytest
from procs import Procs, log_text, query, wait_until
from psycopg.types.json import Jsonb
from test_gpu_memory import GIB, fake_nvml, gpu_worker_env, status_of
from test_gpu_routing import enqueue, history, models

import queue_workflows
from queue_workflows import jobstore, node_queue
from queue_workflows.gpu.devices import Device, claim_params
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE

DEV0, DEV1 = Device("GPU-0", 24.0, 24.0), Device("GPU-1", 24.0, 24.0)


@pytest.fixture
def others(database_url, conn):
    """`add(name, key, loaded=(), devices=())`: a live gpu worker on `devices`; its lock is held until the test ends."""
    holders: list[psycopg.Connection] = []

    def add(name: str, key: int, loaded: tuple[str, ...] = (), devices: tuple[Device, ...] = ()) -> str:
        holder = psycopg.connect(database_url, autocommit=True)
        holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, key))
        holders.append(holder)
        conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, loaded_models, gpu_devices, vram_free_gb) "
                     "VALUES (%s, 'host', 'gpu', 1, %s, %s, %s, %s)",
                     (name, key, list(loaded), Jsonb([d.published() for d in devices]) if devices else None,
                      sum(d.free_gb or 0 for d in devices) if devices else None))
        return name

    yield add
    for h in holders:
        h.close()


def busy(conn, worker_id: str, model: str | None, *, started_ago: float = 0.0, devices: tuple[Device, ...] = ()) -> int:
    """`worker_id` runs a job for `model` that it claimed `started_ago` seconds ago (reserving 4 GB on `devices`)."""
    (job_id,) = enqueue(model)
    conn.execute("UPDATE workflow_node_jobs SET status = 'running', claimed_by = %s, started_at = now() - make_interval(secs => %s), "
                 "gpu_devices = %s, vram_reserved_gb = %s WHERE id = %s",
                 (worker_id, started_ago, [d.uuid for d in devices] or None, 4.0 if devices else None, job_id))
    return job_id


def claim(conn, *devices: Device, worker: str = "w-me") -> dict | None:
    """One routed claim in its own transaction, turn first, as a gpu worker on `devices` makes it."""
    statements = node_queue.claim_statements("workflow_node_jobs", "gpu", jobstore.Claimant(worker, 901),
                                             gpu_devices=claim_params(devices, margin_gb=1.0) if devices else None)
    with conn.transaction():
        for statement in statements[:-1]:
            conn.execute(*statement)
        return conn.execute(*statements[-1]).fetchone()


# The rule: a busy holder's wait counts, an idle holder takes the next job ---------------------


def test_a_busy_holders_wait_longer_than_a_load_spreads_even_one_job(conn, others, database_url):
    # One queued job per holder is the floor an operator may set (QW_GPU_SECOND_COPY_BACKLOG=1): above
    # it, the busy holder's remaining time is what decides.
    queue_workflows.configure(database_url=database_url, gpu_second_copy_backlog=1)
    history(conn, "A", job_seconds=10.0, load_seconds=1.0)
    others("w-a", 911, loaded=("A",))
    busy(conn, "w-a", "A", started_ago=0.5)  # 9.5 s left of its job; a new copy is ready in 1 s
    (job,) = enqueue("A")
    got = claim(conn)
    assert got is not None and got["id"] == job, "the only holder is busy for longer than a load: a free worker loads A"


def test_an_idle_warm_holder_takes_the_next_job_so_no_copy_is_loaded(conn, others):
    history(conn, "A", job_seconds=1.0, load_seconds=1.5)
    others("w-a", 921, loaded=("A",))  # warm and idle
    enqueue("A", 2)  # the holder runs one now and the other in 1 s, before a copy could be ready (1.5 s)
    assert claim(conn) is None, "an idle warm holder is free to take the next job: no second copy"
    busy(conn, "w-a", "B", started_ago=0.0)  # the same holder, now busy for another 1 s
    got = claim(conn)
    assert got is not None and got["required_model"] == "A", "busy is not warm: its 2 queued jobs wait 1 s more, a copy helps"


def test_the_backlog_floor_holds_however_long_the_holder_is_busy(conn, others, database_url):
    queue_workflows.configure(database_url=database_url, gpu_second_copy_backlog=1000)  # "no second copies"
    history(conn, "A", job_seconds=10.0, load_seconds=0.1)
    others("w-a", 941, loaded=("A",))
    busy(conn, "w-a", "A", started_ago=0.0)
    enqueue("A", 20)  # 200 s of work behind a holder busy for 10 s: the timed rule alone would spread
    assert claim(conn) is None, "the operator's floor of 1000 queued jobs per holder is not reached"


def test_a_shallow_queue_behind_a_holder_about_to_finish_is_not_spread(conn, others):
    history(conn, "A", job_seconds=2.0, load_seconds=1.0)
    others("w-a", 931, loaded=("A",))
    busy(conn, "w-a", "A", started_ago=1.95)  # done in 0.05 s: its next job starts long before a load ends
    enqueue("A")
    assert claim(conn) is None
    enqueue("A", 2)  # three queued: 6 s of work plus 0.05 s > 1 holder x (1 s load + 2 s job)
    assert claim(conn)["required_model"] == "A"


# Where the second copy goes ------------------------------------------------------------------


def test_a_second_copy_goes_to_a_device_without_one_while_such_a_worker_is_free(conn, others):
    models(conn, A=4, B=4)
    others("w-holder", 941, loaded=("A",), devices=(DEV0,))
    busy(conn, "w-holder", "A", started_ago=0.0, devices=(DEV0,))
    far = others("w-far", 942, devices=(DEV1,))  # idle on the other device
    enqueue("A", 6)  # no history: the backlog rule (2 per holder) wants a second copy
    assert claim(conn, DEV0) is None, "this worker's device already hosts A, and w-far on GPU-1 is free to load it"
    got = claim(conn, DEV1, worker="w-far-itself")
    assert got is not None and got["gpu_devices"] == ["GPU-1"], "the worker on the device without a copy loads it"
    conn.execute("DELETE FROM workflow_node_jobs WHERE id = %s", (got["id"],))
    busy(conn, far, "B", devices=(DEV1,))  # the far worker is busy now: the same device is the fallback
    got = claim(conn, DEV0)
    assert got is not None and got["required_model"] == "A" and got["gpu_devices"] == ["GPU-0"]


# Real gpu workers over two fake devices ------------------------------------------------------


def worker_of(database_url: str, job_id: int) -> str:
    return query(database_url, "SELECT claimed_by FROM workflow_node_jobs WHERE id = %s", (job_id,))[0]["claimed_by"]


def worker_backends(database_url: str, pid: int) -> list[int]:
    """The backends holding the worker's lock (its session, where claims run, and its beat's connection)."""
    rows = query(database_url, "SELECT l.pid FROM pg_locks l JOIN worker_heartbeats h ON l.objid = h.lock_key "
                               "WHERE h.pid = %s AND l.locktype = 'advisory' AND l.classid = %s AND l.granted "
                               "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                 (pid, WORKER_LOCK_NAMESPACE))
    return [r["pid"] for r in rows]


@pytest.mark.multiprocess
def test_a_hot_models_second_copy_lands_on_the_other_devices_worker(database_url: str, procs: Procs, tmp_path: Path) -> None:
    """GPU-fake-0 runs two workers, one busy with a long a8 job; GPU-fake-1 runs one. A deep a8 queue
    spreads to GPU-fake-1's worker, not to the free worker beside the busy holder.

    The far worker is frozen (SIGSTOP: its session and lock stay, so it stays live and idle) until the
    worker beside the holder has made its claim, so that worker claims first whatever the NOTIFY order.
    """
    state = str(tmp_path / "nvml.json")
    fake_nvml.write_state(state, {"init_error": None, "devices": [
        {"name": "Fake A10", "uuid": f"GPU-fake-{i}", "total": 24 * GIB, "base_used": 0, "procs": {}} for i in range(2)]})

    def env(device: int) -> dict[str, str]:
        return gpu_worker_env(database_url, state, QW_POLL_SECONDS="0.3", CUDA_VISIBLE_DEVICES=f"GPU-fake-{device}")

    holder = procs.worker(env(0), "gpu")
    long_job = node_queue.enqueue_node_job("long", "gpu", node_module="qw_gpu_nodes", required_model="a8",
                                           inputs={"hold_gb": 1, "seconds": 60, "until": str(tmp_path / "go")})["id"]
    wait_until(lambda: status_of(database_url, long_job) == "running", timeout=30, what="the holder to start its long a8 job")
    beside, far = procs.worker(env(0), "gpu"), procs.worker(env(1), "gpu")
    wait_until(lambda: len(query(database_url, "SELECT 1 FROM worker_heartbeats WHERE pid = ANY(%s) AND state = 'idle' AND gpu_devices IS NOT NULL",
                                 ([beside.pid, far.pid],))) == 2, timeout=30, what="both free workers to go idle")
    beside_backends = worker_backends(database_url, beside.pid)
    os.kill(far.pid, signal.SIGSTOP)
    try:
        queued = [node_queue.enqueue_node_job(f"hot-{i}", "gpu", node_module="qw_gpu_nodes", required_model="a8", inputs={"sleep": 0.3})["id"]
                  for i in range(4)]
        (since,) = query(database_url, "SELECT clock_timestamp() AS t")
        taken_beside = "SELECT 1 FROM workflow_node_jobs WHERE id = ANY(%s) AND claimed_by LIKE %s"
        # An empty claim is followed by the promotion of due delayed jobs, on the same connection.
        claimed_nothing = ("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s) AND datname = current_database() AND state = 'idle' "
                           "AND state_change > %s AND query LIKE '%%run_after <= now()%%'")
        wait_until(lambda: query(database_url, taken_beside, (queued, f"%:{beside.pid}:%"))
                   or query(database_url, claimed_nothing, (beside_backends, since["t"])), timeout=30,
                   what="the worker beside the busy holder to claim after the enqueue")
        assert not query(database_url, taken_beside, (queued, f"%:{beside.pid}:%")), \
            "the worker beside the busy holder loaded a second copy on GPU-fake-0 while GPU-fake-1's worker was free"
    finally:
        os.kill(far.pid, signal.SIGCONT)
    wait_until(lambda: all(status_of(database_url, j) == "completed" for j in queued[:2]), timeout=30, what="the hot queue to move")
    rows = query(database_url, "SELECT claimed_by, gpu_devices FROM workflow_node_jobs WHERE id = ANY(%s) AND status <> 'queued'", (queued,))
    assert rows and all(f":{far.pid}:" in r["claimed_by"] and r["gpu_devices"] == ["GPU-fake-1"] for r in rows), \
        f"the second copy belongs on GPU-fake-1 (worker {far.pid}), not beside the busy holder (worker {beside.pid}): {rows}"
    (tmp_path / "go").touch()
    wait_until(lambda: all(status_of(database_url, j) == "completed" for j in [long_job, *queued]), timeout=30, what="everything to finish")
    assert f":{holder.pid}:" in worker_of(database_url, long_job)
    assert all("Traceback" not in log_text(w) for w in (holder, beside, far))
