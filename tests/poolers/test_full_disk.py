"""Postgres out of disk space: enqueue raises DatabaseFullError, workers wait it out, and nothing is lost or run twice once space returns."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest
import qw_test_app
from procs import TEST_INGEST_QUEUES, PrivatePostgres, Procs, log_text, query, service_env, wait_until, wait_workers_ready
from psycopg import sql
from small_disk import SKIP_REASON, SmallDisk

import queue_workflows
from queue_workflows import db, node_queue, tasks
from queue_workflows.errors import DatabaseFullError

pytestmark = pytest.mark.multiprocess

TESTS_APP_MIGRATIONS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "apps", "app_migrations")


@pytest.fixture
def full_disk_database(private_pg: PrivatePostgres) -> Iterator[tuple[str, SmallDisk]]:
    """The test's own database, every file of it in a tablespace on a 48 MB tmpfs (WAL stays on the server's own disk)."""
    if os.geteuid() != 0:
        pytest.skip(SKIP_REASON)
    try:
        disk = SmallDisk(48, private_pg.server.system_user or "pgserver")
    except subprocess.CalledProcessError as exc:  # root without CAP_SYS_ADMIN (a plain container)
        pytest.skip(f"cannot mount a tmpfs here: {exc.stderr.decode(errors='replace').strip()}")
    try:
        with psycopg.connect(private_pg.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE TABLESPACE qw_small LOCATION {}").format(sql.Literal(str(disk.path))))
            admin.execute("CREATE DATABASE qw_full TABLESPACE qw_small")
        url = private_pg.server.get_uri("qw_full")
        db.bootstrap(url=url)
        db.bootstrap(url=url, migrations_dir=TESTS_APP_MIGRATIONS, version_table="test_app_schema_version")
        queue_workflows.configure(database_url=url, ingest_queues=TEST_INGEST_QUEUES)
        tasks.register_ingest_task("record", qw_test_app.record)
        yield url, disk
    finally:
        db.close_pools()
        disk.free()
        private_pg.close()  # before the unmount: the server holds files on it
        disk.close()


def test_a_full_disk_fails_enqueues_clearly_and_loses_nothing(full_disk_database, procs: Procs):
    url, disk = full_disk_database
    worker = procs.worker(service_env(url), "fetch")
    wait_workers_ready(url, [worker])
    acked = [node_queue.enqueue_ingest_job("record", "fetch", {"token": "before-0", "sleep": 1.5})["id"]]
    wait_until(lambda: query(url, "SELECT 1 FROM ingest_jobs WHERE status = 'running'"), timeout=20, what="a job running across the fill")
    filled = disk.fill()
    refused: DatabaseFullError | None = None
    for i in range(20000):  # rows go into pages with room left until the table must grow
        try:
            acked.append(node_queue.enqueue_ingest_job("record", "fetch", {"token": f"full-{i}"})["id"])
        except DatabaseFullError as exc:
            refused = exc
            break
    assert refused is not None, f"{len(acked)} enqueues passed on a full disk ({filled} bytes of ballast)"
    assert "out of disk space" in str(refused) and "nothing was written" in str(refused), refused
    print(f"full disk: {len(acked) - 1} enqueues fitted in pages with room, then: {refused}")
    time.sleep(3)  # the worker lives through a while of a full disk
    assert worker.poll() is None, procs.logs()
    tries = log_text(worker).count("No space left on device")
    assert tries <= 20, f"the worker hammered a full database {tries} times in 3 s rather than backing off:\n{log_text(worker)[-2000:]}"
    assert query(url, "SELECT count(*) AS n FROM ingest_jobs WHERE status = 'failed'")[0]["n"] == 0, procs.logs()
    disk.free()
    acked += [node_queue.enqueue_ingest_job("record", "fetch", {"token": f"after-{i}"})["id"] for i in range(20)]
    wait_until(lambda: query(url, "SELECT count(*) AS n FROM ingest_jobs WHERE status = 'completed'")[0]["n"] >= len(acked),
               timeout=60, interval=0.2, what="every acknowledged job to complete once space returned")
    jobs = query(url, "SELECT id, status FROM ingest_jobs")
    assert {j["id"] for j in jobs} == set(acked) and {j["status"] for j in jobs} == {"completed"}, jobs
    runs = query(url, "SELECT token, count(*) AS n FROM test_executions GROUP BY token")
    assert len(runs) == len(acked) and {r["n"] for r in runs} == {1}, runs
    assert worker.poll() is None, procs.logs()
