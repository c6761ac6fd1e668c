"""No role that merely connects can stall the engine with an advisory lock (migration 0034).

Advisory locks need no privilege: the gpu claim's and a schedule entry's turns are row locks that
only the claiming role may take, and a worker key held by another role keeps no dead worker alive.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import psycopg
import pytest
import qw_test_app
from procs import (
    TEST_INGEST_QUEUES,
    Procs,
    query,
    service_env,
    wait_until,
    wait_workers_ready,
)
from psycopg import conninfo, errors

import queue_workflows
from queue_workflows import node_queue
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE, Claimant
from queue_workflows.leader import reclaim
from queue_workflows.schedule.entries import ScheduleEntry
from queue_workflows.schedule.slots import Fire
from queue_workflows.schedule.store import SlotStore
from queue_workflows.tasks import register_ingest_task
from queue_workflows.worker.idle_baton import BATON_NAMESPACE
from queue_workflows.worker.session import SessionClosed, WorkerSession

GPU_CLAIM_KEY = ("SELECT pg_advisory_lock(%s, hashtext('gpu'))", (0x515A,))  # the claim's former turn
BOOT_KEY = "SELECT pg_advisory_lock(hashtext('queue_workflows:schedule:' || %s))"  # a boot kick's former turn


def bounded(url: str) -> str:
    """`url` whose lock waits give up after 3 s, so a stalled turn fails the test instead of hanging it."""
    return conninfo.make_conninfo(url, options="-c lock_timeout=3s")


@pytest.mark.parametrize("group", ["qw_dashboard", "qw_metrics", "qw_scheduler", "qw_orchestrator"])
def test_a_role_that_never_claims_gpu_jobs_cannot_take_the_claims_turn(login_as, group):
    with psycopg.connect(login_as(group)) as rogue:
        with pytest.raises(errors.InsufficientPrivilege):
            rogue.execute(*node_queue.claim_prelude("gpu"))
        rogue.rollback()
        with pytest.raises(errors.InsufficientPrivilege):
            rogue.execute("SELECT queue FROM gpu_claim_turns FOR UPDATE")


def test_a_gpu_claim_proceeds_while_another_role_holds_its_former_advisory_key(login_as, database_url):
    queue_workflows.configure(database_url=database_url)
    job = node_queue.enqueue_node_job("warm", "gpu", node_module="qw_test_nodes", required_model="m")["id"]
    with psycopg.connect(login_as("qw_dashboard"), autocommit=True) as rogue:
        rogue.execute(*GPU_CLAIM_KEY)
        queue_workflows.configure(database_url=bounded(login_as("qw_worker")))
        claimed = node_queue.claim_node_job("gpu", Claimant("w-gpu", 4101))
    assert claimed is not None and claimed["id"] == job


@pytest.mark.parametrize("group", ["qw_dashboard", "qw_metrics", "qw_worker", "qw_orchestrator"])
def test_a_role_that_never_schedules_cannot_take_an_entrys_turn(login_as, group):
    with psycopg.connect(login_as(group)) as rogue:
        with pytest.raises(errors.InsufficientPrivilege):
            rogue.execute("INSERT INTO schedule_entry_turns (entry_name) VALUES ('nightly')"
                          " ON CONFLICT (entry_name) DO UPDATE SET entry_name = EXCLUDED.entry_name WHERE false")
        rogue.rollback()
        with pytest.raises(errors.InsufficientPrivilege):
            rogue.execute("SELECT entry_name FROM schedule_entry_turns FOR UPDATE")


def test_a_boot_kick_proceeds_while_another_role_holds_its_former_advisory_key(login_as):
    entry = ScheduleEntry.cron("* * * * *", "nightly", "noop", "fetch")
    with psycopg.connect(login_as("qw_dashboard"), autocommit=True) as rogue:
        rogue.execute(BOOT_KEY, (entry.name,))
        queue_workflows.configure(database_url=bounded(login_as("qw_scheduler")), ingest_queues=TEST_INGEST_QUEUES)
        queue_workflows.register_ingest_task("noop", lambda reason: {})
        slots = SlotStore(replica="boot")
        try:
            kick = Fire(datetime(2024, 5, 1, 12, 0, tzinfo=UTC), "boot")
            assert slots.boot(entry, kick, window_seconds=60) is not None
            assert slots.boot(entry, kick, window_seconds=60) is None, "one kick per window"
        finally:
            slots.close()


def _orphan(database_url: str, key: int) -> int:
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES)
    queue_workflows.register_ingest_task("noop", lambda reason: {})
    job: int = node_queue.enqueue_ingest_job("noop", "fetch")["id"]
    node_queue.claim_ingest_job("fetch", Claimant("gone:fetch:1:x", key))
    return job


def test_another_role_holding_a_dead_workers_key_does_not_keep_its_job(login_as, database_url):
    job = _orphan(database_url, 7401)
    with psycopg.connect(login_as("qw_dashboard"), autocommit=True) as rogue:
        rogue.execute("SELECT pg_advisory_lock_shared(%s, 7401)", (WORKER_LOCK_NAMESPACE,))
        assert [row["id"] for row in reclaim.reclaim_orphans(confirm_seconds=0)] == [job]


def test_a_worker_roles_session_still_keeps_its_job(login_as, database_url):
    _orphan(database_url, 7402)
    with psycopg.connect(login_as("qw_worker"), autocommit=True) as worker:
        worker.execute("SELECT pg_advisory_lock_shared(%s, 7402)", (WORKER_LOCK_NAMESPACE,))
        assert reclaim.reclaim_orphans(confirm_seconds=0) == []


def test_a_new_worker_skips_keys_another_role_already_holds(login_as, database_url):
    with psycopg.connect(database_url, autocommit=True) as admin:
        (last,) = admin.execute("SELECT nextval('worker_lock_key_seq')").fetchone()
    ahead = [last + 1, last + 2]
    stop = threading.Event()
    with psycopg.connect(login_as("qw_dashboard"), autocommit=True) as rogue:
        rogue.execute("SELECT pg_advisory_lock(%s, %s)", (WORKER_LOCK_NAMESPACE, ahead[0]))
        rogue.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, ahead[1]))
        session = WorkerSession("qw_test_keys", url=login_as("qw_worker"), stop_event=stop, sleep_fn=lambda _delay: stop.set())
        try:
            assert session.conn is not None  # a refused key would retry, and the first retry stops it
        except SessionClosed:
            pytest.fail("the worker retried the key another role holds instead of drawing the next")
        finally:
            session.close()
    assert session.lock_key is not None and session.lock_key > ahead[1]


@pytest.mark.multiprocess
def test_another_role_holding_the_idle_baton_costs_at_most_a_poll(login_as, database_url, procs: Procs):
    """The baton stays advisory (docs/throughput.md): held by a foreign role, a worker's wait in line runs out and it polls."""
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES)
    register_ingest_task("record", qw_test_app.record)
    with psycopg.connect(login_as("qw_dashboard"), autocommit=True) as rogue:
        rogue.execute("SELECT pg_advisory_lock(%s, hashtext('fetch'))", (BATON_NAMESPACE,))
        worker = procs.worker(service_env(database_url, QW_POLL_SECONDS="1"), "fetch")
        wait_workers_ready(database_url, [worker])
        started = time.monotonic()
        job = node_queue.enqueue_ingest_job("record", "fetch", {"token": "baton"})["id"]
        wait_until(lambda: query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (job,))[0]["status"] == "completed",
                   timeout=10, interval=0.05, what=f"the job, with the baton held elsewhere\n{procs.logs()}")
        assert time.monotonic() - started < 5
        holders = query(database_url, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND granted"
                                      " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())", (BATON_NAMESPACE,))
        assert [h["pid"] for h in holders] == [rogue.info.backend_pid], "the foreign role held the baton throughout"
