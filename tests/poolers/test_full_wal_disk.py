"""A full pg_wal disk: Postgres PANICs and stays down until space is freed and it is started again; a worker outlives it and nothing acknowledged is lost or run twice."""

from __future__ import annotations

import os
import shutil
import subprocess

import psycopg
import pytest
from procs import PrivatePostgres, Procs, query, query_or_none, service_env, wait_until, wait_workers_ready
from small_disk import SKIP_REASON, SmallDisk

from queue_workflows import db, node_queue

pytestmark = pytest.mark.multiprocess


def _wal_on_small_disk(private_pg: PrivatePostgres) -> SmallDisk:
    """Stop the server, move its pg_wal onto a 40 MB tmpfs (a symlink, as a separate WAL volume is), start it again."""
    private_pg.stop()
    try:
        disk = SmallDisk(40, private_pg.server.system_user or "pgserver")
    except subprocess.CalledProcessError as exc:
        private_pg.start()
        pytest.skip(f"cannot mount a tmpfs here: {exc.stderr.decode(errors='replace').strip()}")
    wal = private_pg.server.pgdata / "pg_wal"
    subprocess.run(["cp", "-a", f"{wal}/.", str(disk.path)], check=True, timeout=60)
    shutil.rmtree(wal)
    os.symlink(disk.path, wal)
    private_pg.start()
    return disk


def test_a_full_wal_disk_is_a_postgres_restart_the_engine_outlives(private_database_url, private_pg: PrivatePostgres, procs: Procs):
    if os.geteuid() != 0:
        pytest.skip(SKIP_REASON)
    url = private_database_url
    # The private server commits asynchronously (fast tests); a PANIC drops WAL not yet flushed, acknowledged or not.
    query(private_pg.admin_url, "ALTER SYSTEM SET synchronous_commit = on")
    query(private_pg.admin_url, "SELECT pg_reload_conf()")
    disk = _wal_on_small_disk(private_pg)
    try:
        worker = procs.worker(service_env(url), "fetch")
        wait_workers_ready(url, [worker])
        log_start = len(private_pg.server.log.read_bytes())  # the stop before the move logged a shutdown of its own
        disk.fill()
        acked: list[int] = []
        seen: BaseException | None = None
        for i in range(2000):  # incompressible args, so WAL fills its current segment within a few dozen jobs
            try:
                acked.append(node_queue.enqueue_ingest_job("record", "fetch", {"token": f"w{i}", "pad": os.urandom(100_000).hex()})["id"])
            except psycopg.OperationalError as exc:
                seen = exc
                break
        assert seen is not None, f"{len(acked)} enqueues fitted on a full WAL disk"
        print(f"full pg_wal: {len(acked)} enqueues, then {type(seen).__name__}: {str(seen).splitlines()[0]}")
        wait_until(lambda: b"database system is shut down" in private_pg.server.log.read_bytes()[log_start:], timeout=30,
                   what="Postgres to give up: its crash recovery needs WAL space too")
        assert query_or_none(private_pg.admin_url, "SELECT 1") is None
        assert worker.poll() is None, procs.logs()
        disk.free()
        private_pg.start()
        wait_until(lambda: (query_or_none(url, "SELECT count(*) AS n FROM ingest_jobs WHERE status = 'completed'") or [{"n": -1}])[0]["n"] >= len(acked),
                   timeout=90, interval=0.2, what="every acknowledged job to complete after the restart")
        jobs = {r["id"]: r["status"] for r in query(url, "SELECT id, status FROM ingest_jobs")}
        assert set(acked) <= set(jobs) and len(jobs) <= len(acked) + 1, "an acknowledged enqueue was lost"
        wait_until(lambda: set(r["status"] for r in query(url, "SELECT status FROM ingest_jobs")) == {"completed"}, timeout=30,
                   what="the enqueue in flight at the PANIC, if it committed, to complete too")
        runs = query(url, "SELECT token, count(*) AS n FROM test_executions GROUP BY token")
        assert len(runs) == len(jobs) and {r["n"] for r in runs} == {1}, runs
        assert worker.poll() is None, procs.logs()
    finally:
        db.close_pools()
        private_pg.close()
        disk.free()
        disk.close()
