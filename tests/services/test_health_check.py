"""`qw health worker|orchestrator|schema` for operators, against real processes (the images'
HEALTHCHECK reads the stamp file each service rewrites: tests/services/test_health_stamp.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
from procs import query, service_env, wait_until, wait_workers_ready

from queue_workflows.worker.liveness import id_notes

pytestmark = pytest.mark.multiprocess


def _health(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qw_services.cli", "health", *args], env=service_env(database_url),
                          capture_output=True, text=True, timeout=60)


def test_a_worker_is_healthy_while_its_own_row_beats(database_url, procs):
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(database_url, [worker])
    ok = _health(database_url, "worker", "--queue", "fetch")
    assert ok.returncode == 0, ok.stderr
    assert f":fetch:{worker.pid}:" in ok.stdout
    # Another queue's row is not this worker's.
    other = _health(database_url, "worker", "--queue", "load")
    assert other.returncode == 1 and "no worker_heartbeats row" in other.stderr
    # A wedged worker: its process lives on, its row stops beating (stopped, so no beat of its
    # own freshens the row while the check starts, however slowly).
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        query(database_url, "UPDATE worker_heartbeats SET last_seen = now() - interval '1 hour' WHERE pid = %s", (worker.pid,))
        stale = _health(database_url, "worker", "--queue", "fetch")
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    assert stale.returncode == 1 and "last beat" in stale.stderr, stale.stderr


def test_a_worker_row_that_started_before_the_process_is_not_its_own(database_url, procs):
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(database_url, [worker])
    id_notes.forget(worker.pid)  # an older image's worker, which notes no id: pid and start time decide
    # A replica on the same host reusing the pid left a row from long before this process began.
    query(database_url, "UPDATE worker_heartbeats SET started_at = now() - interval '1 day' WHERE pid = %s", (worker.pid,))
    result = _health(database_url, "worker")
    assert result.returncode == 1 and "no worker_heartbeats row" in result.stderr, result.stderr


@pytest.mark.parametrize("noted", [True, False], ids=["id noted", "pid and start time"])
def test_of_two_replicas_sharing_a_pid_the_one_started_nearest_the_process_is_its_own(database_url, procs, noted):
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(database_url, [worker])
    if not noted:
        id_notes.forget(worker.pid)
    # Another container's replica has the same pid and host label and started 20 s earlier.
    query(database_url, """
        INSERT INTO worker_heartbeats
        SELECT (jsonb_populate_record(w, jsonb_build_object('worker_id', w.worker_id || '-replica',
                                                            'started_at', w.started_at - interval '20 seconds'))).*
          FROM worker_heartbeats w WHERE pid = %s""", (worker.pid,))
    assert len(query(database_url, "SELECT 1 FROM worker_heartbeats WHERE pid = %s", (worker.pid,))) == 2
    ok = _health(database_url, "worker", "--queue", "fetch")
    assert ok.returncode == 0, ok.stderr
    assert f":fetch:{worker.pid}:" in ok.stdout and "-replica" not in ok.stdout, ok.stdout


def test_the_id_a_worker_noted_picks_its_row_where_start_times_cannot(database_url, procs):
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(database_url, [worker])
    assert id_notes.read(worker.pid, psutil.Process(worker.pid).create_time()) is not None
    # A replica in another container, same pid and host label, registered the instant this
    # process started: closer to its start than its own row, so start times would pick it.
    query(database_url, """
        INSERT INTO worker_heartbeats
        SELECT (jsonb_populate_record(w, jsonb_build_object('worker_id', w.worker_id || '-replica',
                                                            'started_at', to_timestamp(%s)))).*
          FROM worker_heartbeats w WHERE pid = %s""", (psutil.Process(worker.pid).create_time(), worker.pid))
    ok = _health(database_url, "worker", "--queue", "fetch")
    assert ok.returncode == 0, ok.stderr
    assert f":fetch:{worker.pid}:" in ok.stdout and "-replica" not in ok.stdout, ok.stdout
    id_notes.note("e2e:fetch:gone", database_url, pid=worker.pid)  # the noted worker has no row: no other row stands in for it
    gone = _health(database_url, "worker", "--queue", "fetch")
    assert gone.returncode == 1 and "worker e2e:fetch:gone" in gone.stderr, gone.stderr


def test_a_stopped_worker_takes_its_note_with_it(database_url, procs):
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(database_url, [worker])
    started = psutil.Process(worker.pid).create_time()
    assert id_notes.read(worker.pid, started)
    worker.terminate()
    assert worker.wait(timeout=30) == 0
    assert id_notes.read(worker.pid, started) is None


def test_no_worker_process_is_unhealthy(database_url):
    result = _health(database_url, "worker")
    assert result.returncode == 1 and "no claim-worker process" in result.stderr


def test_an_orchestrator_is_healthy_while_it_beats(database_url, procs):
    orchestrator = procs.orchestrator(service_env(database_url))
    wait_until(lambda: query(database_url, "SELECT 1 FROM qw_orchestrators WHERE pid = %s", (orchestrator.pid,)),
               timeout=30, what="the orchestrator's row")
    ok = _health(database_url, "orchestrator")
    assert ok.returncode == 0, ok.stderr
    assert f":{orchestrator.pid}" in ok.stdout and ("leader" in ok.stdout or "standby" in ok.stdout)
    orchestrator.kill()
    orchestrator.wait(timeout=10)
    query(database_url, "UPDATE qw_orchestrators SET beat_at = now() - interval '1 minute' WHERE pid = %s", (orchestrator.pid,))
    gone = _health(database_url, "orchestrator")
    assert gone.returncode == 1 and "last beat" in gone.stderr, gone.stderr


def test_schema_health_needs_the_migrations(database_url, scratch_database_url):
    assert _health(database_url, "schema").returncode == 0
    bare = _health(scratch_database_url, "schema")
    assert bare.returncode == 1 and "qw migrate" in bare.stderr


def test_a_worker_of_another_database_on_the_same_host_decides_nothing(database_url, scratch_database_url, procs):
    """On a host (not in a container) other workers run beside ours; their notes match no row here."""
    from queue_workflows import db

    db.bootstrap(url=scratch_database_url)
    foreign = procs.worker(service_env(scratch_database_url), "fetch")
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(scratch_database_url, [foreign])
    wait_workers_ready(database_url, [worker])
    id_notes.forget(worker.pid)  # ours is matched by pid and start time; the foreign one left its note
    ok = _health(database_url, "worker", "--queue", "fetch")
    assert ok.returncode == 0, ok.stderr
    assert f":fetch:{worker.pid}:" in ok.stdout, ok.stdout


def test_workers_of_another_database_on_the_host_are_none_of_this_checks_business(database_url, scratch_database_url, procs):
    """`qw dev` in another terminal, or another suite's workers: the check sees this database's workers only."""
    from queue_workflows import db

    db.bootstrap(url=scratch_database_url)
    foreign = procs.worker(service_env(scratch_database_url), "fetch")
    foreign_id = wait_workers_ready(scratch_database_url, [foreign])[foreign.pid]["worker_id"]
    alone = _health(database_url, "worker")
    assert alone.returncode == 1 and "no claim-worker process of this database" in alone.stderr, alone.stderr
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(database_url, [worker])
    ok = _health(database_url, "worker")
    assert ok.returncode == 0 and f":fetch:{worker.pid}:" in ok.stdout, ok.stderr
    id_notes.note("e2e:fetch:gone", database_url, pid=worker.pid)
    gone = _health(database_url, "worker", "--queue", "fetch")
    assert gone.returncode == 1 and "worker e2e:fetch:gone)" in gone.stderr and foreign_id not in gone.stderr, gone.stderr
