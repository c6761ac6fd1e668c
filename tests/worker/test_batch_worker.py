"""Batch mode: many rows per claim and per transaction, with every contract of the one-job worker kept."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows import ConfigError, claim_worker, node_queue, register_ingest_task, worker_control
from queue_workflows.dag import Workflow
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.worker.batch import BatchWorker


def rows(url: str) -> dict[int, dict]:
    return {r["id"]: r for r in query(url, "SELECT * FROM ingest_jobs ORDER BY id")}


def enqueue(task: str, n: int, **args) -> list[int]:
    return [j["id"] for j in node_queue.enqueue_ingest_jobs([{"task_name": task, "queue": "fetch", "args": {"i": i, **args}} for i in range(n)])]


class CountingBatchWorker(BatchWorker):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[list[int]] = []

    def _run_batch(self, jobs):
        self.batches.append([j.id for j in jobs])
        return super()._run_batch(jobs)


def test_a_batch_is_claimed_in_one_statement_and_each_row_charged_once(database_url, conn):
    seen: list[int] = []
    register_ingest_task("count", lambda reason, args: seen.append(args["i"]) or {"i": args["i"]})
    ids = enqueue("count", 25)
    worker = CountingBatchWorker("fetch", batch_size=10, max_jobs=25)
    assert worker.run_forever() == 0
    assert seen == list(range(25))
    assert worker.batches == [ids[:10], ids[10:20], ids[20:]]
    stored = rows(database_url)
    assert all(stored[i]["status"] == "completed" and stored[i]["result"] == {"i": k} for k, i in enumerate(ids))
    assert {(stored[i]["claimed_by"], stored[i]["attempts"]) for i in ids} == {(worker.worker_id, 1)}
    assert all(stored[i]["started_at"] <= stored[i]["finished_at"] for i in ids)


def test_a_batch_takes_only_its_share_of_a_short_queue(database_url, conn):
    register_ingest_task("noop", lambda reason: {})
    enqueue("noop", 10)
    for n in range(3):  # three other live workers of this queue
        conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key) VALUES (%s, 'h', 'fetch', 1, %s)",
                     (f"peer{n}", 9000 + n))
    worker = BatchWorker("fetch", batch_size=100, max_jobs=10)
    worker.session.run(lambda c: None)  # connect and take the lock
    claimed = worker.session.run(worker._claim_batch)
    assert len(claimed) == 4  # ceil(10 queued / 3 live workers), not all 10
    worker.session.close()


def test_failures_retry_or_fail_alone_and_the_rest_of_the_batch_completes(database_url, conn):
    register_ingest_task("maybe", lambda reason, args: 1 / 0 if args["i"] % 3 == 0 else {"ok": args["i"]})
    ids = enqueue("maybe", 6)
    conn.execute("UPDATE ingest_jobs SET max_attempts = 1 WHERE id = %s", (ids[3],))
    assert BatchWorker("fetch", batch_size=6, max_jobs=6).run_forever() == 0
    stored = rows(database_url)
    assert [stored[i]["status"] for i in ids] == ["scheduled", "completed", "completed", "failed", "completed", "completed"]
    assert "ZeroDivisionError" in stored[ids[0]]["error"] and stored[ids[0]]["attempts"] == 1


def test_a_stop_mid_batch_hands_the_unstarted_rows_back_uncharged(database_url, conn):
    gate = threading.Event()
    register_ingest_task("slow", lambda reason, args: gate.wait(10) and {"i": args["i"]})
    ids = enqueue("slow", 5)
    worker = BatchWorker("fetch", batch_size=5)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    wait_until(lambda: all(r["status"] == "running" for r in rows(database_url).values()), timeout=10, what="the batch claimed")
    worker.request_stop()
    gate.set()
    thread.join(timeout=10)
    stored = rows(database_url)
    assert stored[ids[0]]["status"] == "completed"
    assert [(stored[i]["status"], stored[i]["attempts"], stored[i]["claimed_by"]) for i in ids[1:]] == [("queued", 0, None)] * 4


def test_the_lease_covers_every_row_of_the_batch(database_url, conn):
    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}), lease_seconds=1.0, lease_renew_seconds=0.2)
    register_ingest_task("nap", lambda reason, args: time.sleep(0.6) or {})
    ids = enqueue("nap", 4)
    worker = BatchWorker("fetch", batch_size=4, max_jobs=4)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    first = wait_until(lambda: (r := rows(database_url)) and all(x["status"] == "running" for x in r.values()) and r, timeout=10)
    # Past the first lease: the last row, not yet started, was renewed too (no one may reclaim it).
    wait_until(lambda: all(rows(database_url)[i]["lease_expires_at"] > first[i]["lease_expires_at"] for i in ids[1:]),
               timeout=5, what="every row's lease renewed")
    thread.join(timeout=20)
    assert {r["status"] for r in rows(database_url).values()} == {"completed"}


def test_a_row_taken_before_it_started_leaves_the_batch_and_the_worker_runs_on(database_url, conn):
    gate = threading.Event()
    register_ingest_task("held", lambda reason, args: gate.wait(10) and {})
    ids = enqueue("held", 3)
    worker = BatchWorker("fetch", batch_size=3, max_jobs=2)
    exits: list[int] = []
    worker.beat.exit_fn = lambda code, reason: exits.append(code)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    wait_until(lambda: rows(database_url)[ids[0]]["attempts"] == 1, timeout=10, what="the first row started")
    conn.execute("UPDATE ingest_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", (ids[2],))  # an operator cancel
    wait_until(lambda: worker.beat._job is not None and ids[2] not in worker.beat._job.ids, timeout=5, what="the row left the batch")
    gate.set()
    thread.join(timeout=10)
    assert exits == []
    stored = rows(database_url)
    assert [(stored[i]["status"], stored[i]["attempts"]) for i in ids] == [("completed", 1), ("completed", 1), ("cancelled", 0)]


def test_the_running_row_taken_stops_the_worker_storing_what_finished_and_handing_back_the_rest(database_url, conn):
    gate = threading.Event()
    register_ingest_task("held", lambda reason, args: (args["i"] != 1 or gate.wait(10)) and {})
    ids = enqueue("held", 4)
    worker = BatchWorker("fetch", batch_size=4)
    exits: list[int] = []
    worker.beat.exit_fn = lambda code, reason: exits.append(code)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    wait_until(lambda: rows(database_url)[ids[1]]["attempts"] == 1, timeout=10, what="the second row started")
    conn.execute("UPDATE ingest_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", (ids[1],))
    wait_until(lambda: exits, timeout=5, what="the worker to trip")
    assert exits == [77]
    stored = rows(database_url)
    assert [(stored[i]["status"], stored[i]["attempts"]) for i in ids] == [("completed", 1), ("cancelled", 1), ("queued", 0), ("queued", 0)]
    gate.set()
    worker.request_stop()
    thread.join(timeout=10)


@pytest.mark.parametrize("stop", ["hard_off", "budget"])
def test_a_trip_stores_rows_finished_in_memory_and_trips_only_the_running_ones(database_url, conn, stop):
    gate = threading.Event()
    register_ingest_task("held", lambda reason, args: (args["i"] != 0 or gate.wait(10)) and {})
    ids = enqueue("held", 2)
    worker = BatchWorker("fetch", batch_size=2, mode="threads", concurrency=2)
    worker.progress.interval = 3600  # no progress record: what finished stays in memory until the trip
    exits: list[int] = []
    worker.beat.exit_fn = lambda code, reason: exits.append(code)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    wait_until(lambda: worker._ledger is not None and len(worker._ledger.progress().finished) == 1, timeout=10, what="row 2 finished in memory")
    assert [rows(database_url)[i]["attempts"] for i in ids] == [0, 0], "nothing recorded yet"
    if stop == "hard_off":
        worker_control.disable_worker(worker.settings.host_label, "fetch")
    else:
        worker.watch.start(ids[0], 0.0)  # its budget spent
    wait_until(lambda: exits, timeout=5, what="the worker to trip")
    stored = rows(database_url)
    running_row = ("queued", 0, 0) if stop == "hard_off" else ("queued", 0, 1)  # requeued uncharged; a budget trip counts
    assert exits == [79 if stop == "hard_off" else 75]
    assert [(stored[i]["status"], stored[i]["attempts"], stored[i]["watchdog_trips"]) for i in ids] == [running_row, ("completed", 1, 0)]
    gate.set()
    worker.request_stop()
    thread.join(timeout=10)


def test_threads_and_async_run_a_batch_concurrently(database_url, conn):
    active, peak, lock = [0], [0], threading.Lock()

    def blocking(reason, args):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.1)
        with lock:
            active[0] -= 1
        return {}

    async def awaiting(reason, args):
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        await asyncio.sleep(0.1)
        active[0] -= 1
        return {"async": True}

    register_ingest_task("blocking", blocking)
    register_ingest_task("awaiting", awaiting)
    enqueue("blocking", 8)
    assert BatchWorker("fetch", batch_size=8, mode="threads", concurrency=4, max_jobs=8).run_forever() == 0
    assert peak[0] == 4
    peak[0] = 0
    conn.execute("DELETE FROM ingest_jobs")
    enqueue("awaiting", 8)
    assert BatchWorker("fetch", batch_size=8, mode="async", concurrency=8, max_jobs=8).run_forever() == 0
    assert peak[0] == 8
    assert {(r["status"], r["result"]["async"]) for r in rows(database_url).values()} == {("completed", True)}


def test_an_async_task_also_runs_on_a_one_job_worker(database_url):
    async def awaiting(reason):
        await asyncio.sleep(0)
        return {"ran": "async"}

    register_ingest_task("awaiting", awaiting)
    job = node_queue.enqueue_ingest_job("awaiting", "fetch")
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    assert rows(database_url)[job["id"]]["result"] == {"ran": "async"}


def test_dag_nodes_in_a_batch_still_commit_their_outbox_event_with_their_status(database_url, conn):
    wf = Workflow("fan").node("a", "qw_dag_nodes:echo")
    for i in range(5):
        wf.node(f"b{i}", "qw_dag_nodes:echo", deps=["a"])
    run_id = queue_workflows.start_run(wf, {})
    for layer in (1, 5):
        assert BatchWorker("cpu", batch_size=10, max_jobs=layer).run_forever() == 0
        DispatchDrain().drain_once(conn)
    assert queue_workflows.run_status(run_id)["status"] == "completed"
    events = query(database_url, "SELECT node_name FROM workflow_dispatch_events WHERE run_id = %s", (run_id,))
    assert sorted(e["node_name"] for e in events) == ["a", "b0", "b1", "b2", "b3", "b4"]


@pytest.mark.parametrize("kwargs, message", [
    ({"queue": "gpu", "batch_size": 4}, "gpu worker runs one job at a time"),
    ({"queue": "fetch", "batch_size": 0}, "--batch must be between 1 and 1000"),
    ({"queue": "cpu", "batch_size": 4, "mode": "async"}, "async batches run ingest tasks"),
    ({"queue": "fetch", "batch_size": 4, "mode": "fibers"}, "batch mode must be one of"),
])
def test_batch_mode_refuses_what_it_cannot_honour(database_url, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        BatchWorker(kwargs.pop("queue"), **kwargs)


def test_the_cli_builds_a_batch_worker_only_when_asked(database_url):
    plain = claim_worker.build_worker(claim_worker.build_parser().parse_args(["--queue", "fetch"]))
    batch = claim_worker.build_worker(claim_worker.build_parser().parse_args(["--queue", "fetch", "--batch", "50", "--concurrency", "4", "--batch-mode", "threads"]))
    assert type(plain) is claim_worker.ClaimWorker
    assert isinstance(batch, BatchWorker) and (batch.batch_size, batch.runner.mode, batch.runner.concurrency) == (50, "threads", 4)


@pytest.mark.multiprocess
def test_kill_9_of_a_batch_worker_recovers_every_row_of_its_batch(database_url: str, procs: Procs) -> None:
    register_ingest_task("record", qw_test_app.record)
    env = service_env(database_url)
    procs.orchestrator(env)
    victim = procs.worker(env, "fetch", "--batch", "20")
    wait_workers_ready(database_url, [victim])
    ids = [j["id"] for j in node_queue.enqueue_ingest_jobs(
        [{"task_name": "record", "queue": "fetch", "args": {"token": f"t{i}", "first_run_sleep": 30 if i == 0 else 0}} for i in range(6)])]
    wait_until(lambda: len(query(database_url, "SELECT 1 FROM test_executions")) >= 1, timeout=10, what="the batch started")  # t0 sleeps
    running = query(database_url, "SELECT id FROM ingest_jobs WHERE status = 'running' AND claimed_by LIKE %s", (f"%:{victim.pid}:%",))
    assert len(running) == 6  # the whole batch, claimed at once
    os.kill(victim.pid, signal.SIGKILL)
    rescuer = procs.worker(env, "fetch", "--batch", "20")
    wait_until(lambda: {r["status"] for r in query(database_url, "SELECT status FROM ingest_jobs")} == {"completed"},
               timeout=60, what=f"every row recovered and done\n{procs.logs()}")
    done = query(database_url, "SELECT id, attempts, result FROM ingest_jobs ORDER BY id")
    assert [r["id"] for r in done] == ids
    assert all(r["result"]["pid"] == rescuer.pid for r in done)
