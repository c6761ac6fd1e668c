"""A PgBouncer restart under load: producers enqueue through it in a loop, direct workers drain, nothing is lost or run twice."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
import qw_test_app
from procs import TEST_INGEST_QUEUES, Procs, query, service_env, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows import db, node_queue, tasks

pytestmark = pytest.mark.multiprocess

ACKED_AFTER_RESTART = 150


class Producer:
    """Enqueues token after token through the pooler; a failed enqueue is retried under the same dedup key, so a
    commit whose answer the restart cut off is found, not written twice."""

    def __init__(self) -> None:
        self.acked: list[str] = []
        self.errors: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.failed: BaseException | None = None

    def run(self) -> None:
        try:
            n = 0
            while not self.stop.is_set():
                token = f"t{n}"
                while not self.stop.is_set():
                    try:
                        node_queue.enqueue_ingest_job("record", "fetch", {"token": token}, dedup_key=token)
                        self.acked.append(token)
                        break
                    except psycopg.OperationalError as exc:  # what a producer sees while PgBouncer is away
                        self.errors.append((time.monotonic(), type(exc).__name__))
                        time.sleep(0.02)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failed = exc


def test_a_pgbouncer_restart_under_load_loses_nothing(database_url, pgbouncer, procs: Procs):
    bouncer = pgbouncer("transaction")
    workers = [procs.worker(service_env(database_url), "fetch") for _ in range(2)]
    wait_workers_ready(database_url, workers)
    db.close_pools()
    queue_workflows.configure(database_url=bouncer.url, ingest_queues=TEST_INGEST_QUEUES)
    tasks.register_ingest_task("record", qw_test_app.record)
    producer = Producer()
    thread = threading.Thread(target=producer.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(producer.acked) >= 100 or producer.failed, timeout=30, what="100 enqueues through the pooler")
        stopped_at = time.monotonic()
        before = len(producer.acked)
        bouncer.restart()
        wait_until(lambda: len(producer.acked) > before or producer.failed, timeout=30, what="an enqueue after the restart")
        recovered_s = time.monotonic() - stopped_at
        wait_until(lambda: len(producer.acked) >= before + ACKED_AFTER_RESTART or producer.failed, timeout=30,
                   what="enqueues to go on after the restart")
    finally:
        producer.stop.set()
        thread.join(timeout=30)
    assert producer.failed is None, repr(producer.failed)
    print(f"PgBouncer restart: first enqueue acknowledged {recovered_s:.3f}s after the stop; "
          f"{len(producer.errors)} failed tries ({sorted({e for _, e in producer.errors})}), {len(producer.acked)} acknowledged")
    acked = set(producer.acked)

    def all_done() -> bool:
        rows = query(database_url, "SELECT count(*) AS n FROM ingest_jobs WHERE status = 'completed'")
        return rows[0]["n"] >= len(acked)

    wait_until(all_done, timeout=60, interval=0.2, what="every acknowledged enqueue to complete")
    jobs = query(database_url, "SELECT args->>'token' AS token, status FROM ingest_jobs")
    runs = query(database_url, "SELECT token, count(*) AS n FROM test_executions GROUP BY token")
    assert len(jobs) == len({j["token"] for j in jobs}), "a retried enqueue was written twice"
    assert acked <= {j["token"] for j in jobs}, "an acknowledged enqueue is missing"
    assert {j["status"] for j in jobs} == {"completed"}, jobs
    assert {r["n"] for r in runs} == {1} and {r["token"] for r in runs} == {j["token"] for j in jobs}, runs
    assert all(w.poll() is None for w in workers), procs.logs()
