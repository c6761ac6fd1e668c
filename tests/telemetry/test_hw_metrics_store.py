"""The sidecar's database side against a real Postgres: NOTIFY + host_metrics row, queue figures, outcome counters."""

from __future__ import annotations

import json

import psycopg
from psycopg.types.json import Jsonb

from queue_workflows import db, node_queue, tasks
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE
from queue_workflows.telemetry import snapshot, store
from queue_workflows.telemetry.attribution import ContainerUsage, StackUsage
from queue_workflows.telemetry.host import HostFigures

HOST = HostFigures(10.0, 4, (0.5, 0.5, 0.5), 1 << 30, 8 << 30, 0, 0)


def _payload(host: str, ts: float, containers: int = 0) -> dict:
    stack = StackUsage(2, 1.0, 0, 9.0, 1 << 30, tuple(ContainerUsage(f"{i:064x}", f"container-{i:05d}", 0.1, i) for i in range(containers)))
    return snapshot.build(host_label=host, sampled_at=ts, host=HOST, gpus=[], stack=stack)


def _notifies(conn: psycopg.Connection, n: int) -> list[str]:
    got = [note.payload for note in conn.notifies(timeout=5, stop_after=n)]
    assert len(got) == n, f"expected {n} notification(s), got {got}"
    return got


def test_publish_notifies_and_upserts_one_row_per_host(database_url, conn):
    with db.connect(autocommit=True) as listener:
        listener.execute("LISTEN hw_metrics")
        store.publish(conn, _payload("box-a", 1000.0))
        store.publish(conn, _payload("box-a", 1005.0))
        store.publish(conn, _payload("box-b", 1001.0))
        sent = [json.loads(p) for p in _notifies(listener, 3)]
    assert [(p["host"], p["ts"], p["v"]) for p in sent] == [("box-a", 1000.0, 1), ("box-a", 1005.0, 1), ("box-b", 1001.0, 1)]
    rows = store.latest(conn)
    assert [(r["host_label"], r["payload_version"], r["payload"]["ts"], r["sampled_at"].timestamp()) for r in rows] == [
        ("box-a", 1, 1005.0, 1005.0), ("box-b", 1, 1001.0, 1001.0)
    ]


def test_an_oversize_snapshot_is_trimmed_in_the_notify_but_whole_in_the_row(database_url, conn):
    payload = _payload("crowded", 1.0, containers=400)
    with db.connect(autocommit=True) as listener:
        listener.execute("LISTEN hw_metrics")
        sent = store.publish(conn, payload)
        (received,) = _notifies(listener, 1)
    assert received == sent and len(received.encode()) < 8000
    assert json.loads(received)["truncated"]["containers"] > 0
    (row,) = store.latest(conn)
    assert len(row["payload"]["stack"]["containers"]) == 400


def _fake_live_worker(conn: psycopg.Connection, host: str, queue: str, lock_key: int) -> None:
    """A heartbeat row whose lock a session holds: alive, as far as the cluster can tell."""
    conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, lock_key))
    conn.execute(
        "INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key) VALUES (%s, %s, %s, 1, %s)",
        (f"{host}:{queue}:{lock_key}", host, queue, lock_key),
    )


def test_queue_figures_depth_age_live_workers_and_warm_models(database_url, conn):
    tasks.register_ingest_task("noop", lambda reason: {})
    for _ in range(3):
        node_queue.enqueue_ingest_job("noop", "fetch")
    node_queue.enqueue_ingest_job("noop", "load")
    conn.execute("UPDATE ingest_jobs SET status = 'running' WHERE queue = 'load'")
    conn.execute("UPDATE ingest_jobs SET created_at = now() - interval '90 seconds' WHERE id = (SELECT min(id) FROM ingest_jobs)")
    with db.connect(autocommit=True) as holder:
        _fake_live_worker(holder, "gpu-box", "gpu", 900001)
        _fake_live_worker(holder, "gpu-box", "gpu", 900002)
        _fake_live_worker(holder, "cpu-box", "fetch", 900003)
        conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key) VALUES ('dead', 'cpu-box', 'load', 2, 900004)")
        with conn.transaction(force_rollback=True):  # the GPU side's column, if its migration is not here yet
            kind = conn.execute(
                "SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                "WHERE attrelid = 'worker_heartbeats'::regclass AND attname = 'loaded_models' AND NOT attisdropped"
            ).fetchone()
            if kind is None:
                conn.execute("ALTER TABLE worker_heartbeats ADD COLUMN loaded_models jsonb")
            value = ["llama-3-8b"] if kind is not None and kind["t"].endswith("[]") else Jsonb(["llama-3-8b"])
            conn.execute("UPDATE worker_heartbeats SET loaded_models = %s WHERE worker_id = 'gpu-box:gpu:900001'", (value,))
            figures = store.read_queue_figures(conn, stale_after_seconds=30)
    assert figures.jobs == {("ingest", "fetch", "queued"): 3, ("ingest", "load", "running"): 1}
    assert 89 < figures.oldest_queued_s[("ingest", "fetch")] < 120
    assert figures.live_workers == {("gpu-box", "gpu"): 2, ("cpu-box", "fetch"): 1}  # the lockless one is dead
    assert figures.warm_models == {("gpu-box", "gpu", "llama-3-8b"): 1}


def test_outcome_counters_count_each_finished_job_once_from_start(database_url, conn):
    tasks.register_ingest_task("noop", lambda reason: {})
    early = node_queue.enqueue_ingest_job("noop", "fetch")
    conn.execute("UPDATE ingest_jobs SET status = 'completed', finished_at = now() WHERE id = %s", (early["id"],))
    counter = store.OutcomeCounter(lag_seconds=0.0)
    counter.advance(conn)  # starts the window: the job finished before is not counted
    jobs = [node_queue.enqueue_ingest_job("noop", q)["id"] for q in ("fetch", "fetch", "load")]
    conn.execute("UPDATE ingest_jobs SET status = 'completed', finished_at = now(), cpu_seconds = 1.5, wall_seconds = 2, "
                 "model_hit = false, model_load_seconds = 0.25 WHERE id = ANY(%s)", (jobs[:2],))
    conn.execute("UPDATE ingest_jobs SET status = 'failed', finished_at = now() WHERE id = %s", (jobs[2],))
    counter.advance(conn)
    counter.advance(conn)  # nothing new: nothing added
    assert counter.totals == {("ingest", "fetch", "completed"): 2, ("ingest", "load", "failed"): 1}
    # What they cost, summed per queue (a job that recorded nothing adds nothing).
    fetch = {cost: v for (family, queue, cost), v in counter.costs.items() if (family, queue) == ("ingest", "fetch")}
    assert fetch == {"cpu_seconds": 3.0, "wall_seconds": 4.0, "model_loads": 2.0, "model_load_seconds": 0.5}
    assert counter.costs[("ingest", "load", "cpu_seconds")] == 0.0


def test_the_sidecar_reads_queue_figures_on_their_own_cadence_and_at_once_after_an_outage(database_url, tmp_path):
    from pathlib import Path

    from queue_workflows import config
    from queue_workflows.telemetry.attribution import Attribution
    from queue_workflows.telemetry.sidecar import Sidecar

    class Clock:
        now = 100.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    settings = config.current().settings.model_copy(update={"metrics_queue_seconds": 10.0, "host_label": "cadence"})
    sidecar = Sidecar(settings, gpu_probe=list, monotonic_fn=clock,
                      attribution=Attribution(cgroup_root=Path(tmp_path / "none"), lister=None, cpu_count=1))
    tasks.register_ingest_task("noop", lambda reason: {})

    def queued() -> int | None:
        figures = sidecar.state.queues
        return None if figures is None else figures.jobs.get(("ingest", "fetch", "queued"), 0)

    sidecar.step()
    assert queued() == 0 and sidecar.state.database_up
    node_queue.enqueue_ingest_job("noop", "fetch")
    clock.now += 5
    sidecar.step()
    assert queued() == 0  # not due yet: the row is upserted, the counts are not re-read
    clock.now += 5
    sidecar.step()
    assert queued() == 1

    node_queue.enqueue_ingest_job("noop", "fetch")
    sidecar._database_url = "postgresql://nobody@127.0.0.1:1/absent?connect_timeout=1"  # an outage, as the sidecar sees it
    sidecar._close()
    assert sidecar.publish(sidecar.sample()) is False and not sidecar.state.database_up
    sidecar._database_url = database_url
    sidecar.step()  # back before the 10 s are up: read at once rather than serve the old counts as fresh
    assert sidecar.state.database_up and queued() == 2
    sidecar._close()
