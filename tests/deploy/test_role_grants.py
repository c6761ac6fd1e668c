"""Each process kind's database role (migration 0033) may make the writes its SQL makes, and no other.

Every role here is a throwaway LOGIN member of one group role, created in the session Postgres
under a unique name and dropped afterwards, as the stack's login roles are members of theirs.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from procs import TEST_INGEST_QUEUES, Procs, query, service_env, wait_for_log, wait_until, wait_workers_ready
from psycopg import conninfo, errors, sql

import queue_workflows
from queue_workflows import db, node_queue, worker_control
from queue_workflows.dag import Workflow
from queue_workflows.jobstore import Claimant
from queue_workflows.leader import reclaim, retention
from queue_workflows.leader.cluster_metrics import ClusterMetrics
from queue_workflows.schedule.entries import ScheduleEntry
from queue_workflows.schedule.slots import Fire
from queue_workflows.schedule.store import SlotStore
from queue_workflows.telemetry import snapshot, store
from queue_workflows.worker import exit_log

LEDGER = "DELETE FROM queue_schema_version"
DEPOSE = "UPDATE qw_leadership SET epoch = epoch + 1"
REGISTER = "INSERT INTO qw_orchestrators (orchestrator_id, hostname, host_label, pid) VALUES ('evil', 'h', 'h', 1)"
EVERYONE = [
    LEDGER,
    "INSERT INTO queue_schema_version (version, name) VALUES (9999, 'evil')",
    "CREATE TABLE evil (id int)",
    "ALTER TABLE ingest_jobs ADD COLUMN evil text",
    "TRUNCATE ingest_jobs",
    "COPY (SELECT 1) TO PROGRAM 'true'",  # server-side programs are a superuser's
    "INSERT INTO schedule_slots (entry_name, slot_time, kind, task_name, queue, enqueued_by)"
    " VALUES ('evil', now(), 'slot', 'noop', 'fetch', 'evil')",
]
FORBIDDEN: dict[str, list[str]] = {
    "qw_worker": EVERYONE + [
        DEPOSE,
        REGISTER,
        "DELETE FROM qw_orchestrators",
        "INSERT INTO host_metrics (host_label, payload_version, payload, sampled_at) VALUES ('evil', 1, '{}', now())",
        "DELETE FROM ingest_jobs",
        "DELETE FROM workflow_runs",
        "DELETE FROM job_events",
        "UPDATE qw_worker_exits SET code = 0",  # a worker appends its exits (migration 0055), never rewrites them
        "DELETE FROM qw_worker_exits",
    ],
    "qw_orchestrator": EVERYONE + [
        "INSERT INTO host_metrics (host_label, payload_version, payload, sampled_at) VALUES ('evil', 1, '{}', now())",
    ],
    "qw_scheduler": EVERYONE[:-1] + [
        DEPOSE,
        REGISTER,
        "UPDATE ingest_jobs SET status = 'running'",  # a claim
        "UPDATE workflow_node_jobs SET status = 'running'",
        "INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key) VALUES ('evil', 'h', 'q', 1, 1)",
        "INSERT INTO worker_controls (host_label, queue, desired_state) VALUES ('h', 'q', 'off')",
        "DELETE FROM ingest_jobs",
    ],
    "qw_dashboard": EVERYONE + [
        DEPOSE,
        REGISTER,
        "UPDATE worker_heartbeats SET last_seen = now()",
        "DELETE FROM worker_heartbeats",
        "DELETE FROM ingest_jobs",
        "DELETE FROM workflow_runs",
        "UPDATE gpu_models SET est_vram_gb = 0",
        "INSERT INTO host_metrics (host_label, payload_version, payload, sampled_at) VALUES ('evil', 1, '{}', now())",
    ],
    "qw_metrics": EVERYONE + [
        DEPOSE,
        REGISTER,
        "INSERT INTO ingest_jobs (task_name, queue, reason) VALUES ('noop', 'fetch', 'evil')",
        "UPDATE ingest_jobs SET status = 'running'",
        "UPDATE worker_heartbeats SET last_seen = now()",
        "INSERT INTO worker_controls (host_label, queue, desired_state) VALUES ('h', 'q', 'off')",
    ],
}


@pytest.mark.parametrize("group", sorted(FORBIDDEN))
def test_a_role_cannot_make_writes_its_process_never_makes(login_as, group):
    allowed = []
    with psycopg.connect(login_as(group), autocommit=True) as conn:
        for statement in FORBIDDEN[group]:
            try:
                with conn.transaction(force_rollback=True):
                    conn.execute(statement)
                allowed.append(statement)
            except errors.InsufficientPrivilege:
                pass
    assert allowed == [], f"{group} may still run these"


def test_orchestrator_and_workers_run_a_workflow_and_a_job_each_as_its_own_role(login_as, database_url, procs: Procs):
    worker_url, orchestrator_url = login_as("qw_worker"), login_as("qw_orchestrator")
    orchestrator = procs.orchestrator(service_env(orchestrator_url, QW_MIGRATE_ON_START="false"))
    workers = [procs.worker(service_env(worker_url), queue) for queue in ("cpu", "fetch")]
    wait_workers_ready(database_url, workers)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    queue_workflows.configure(database_url=worker_url, ingest_queues=TEST_INGEST_QUEUES)  # the app enqueues as a worker
    queue_workflows.register_ingest_task("noop", lambda reason: {})
    wf = (Workflow("roles").node("first", "qw_dag_nodes:work", inputs={"label": "first"})
          .node("second", "qw_dag_nodes:work", deps=["first"], inputs={"label": "second"}))
    run_id = queue_workflows.start_run(wf, {})
    job_id = node_queue.enqueue_ingest_job("noop", "fetch")["id"]

    def done() -> bool:
        rows = query(database_url, "SELECT status FROM workflow_runs WHERE id = %s UNION ALL"
                                   " SELECT status FROM ingest_jobs WHERE id = %s", (run_id, job_id))
        return [r["status"] for r in rows] == ["completed", "completed"]

    wait_until(done, timeout=30, interval=0.1, what=f"the run and the job as their roles\n{procs.logs()}")
    leader = query(database_url, "SELECT o.role FROM qw_orchestrators o JOIN qw_leadership l ON l.leader_id = o.orchestrator_id")
    assert leader == [{"role": "leader"}]
    assert "insufficient_privilege" not in procs.logs() and "permission denied" not in procs.logs()


def test_the_orchestrator_role_reclaims_an_orphan_and_prunes_finished_rows(login_as, database_url):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, retain_finished_seconds=3600)
    queue_workflows.register_ingest_task("noop", lambda reason: {})
    lost = node_queue.enqueue_ingest_job("noop", "fetch")["id"]
    node_queue.claim_ingest_job("fetch", Claimant("gone:fetch:1:x", 7301))  # no session holds 7301
    old = node_queue.enqueue_ingest_job("noop", "fetch")["id"]
    query(database_url, "UPDATE ingest_jobs SET status = 'completed', finished_at = now() - interval '2 hours' WHERE id = %s", (old,))
    queue_workflows.configure(database_url=login_as("qw_orchestrator"), ingest_queues=TEST_INGEST_QUEUES, retain_finished_seconds=3600)
    assert [row["id"] for row in reclaim.reclaim_orphans(confirm_seconds=0)] == [lost]
    with db.connect(autocommit=True) as conn:
        assert retention.prune_once(conn)["prune_ingest_jobs"] == 1
    assert [r["id"] for r in query(database_url, "SELECT id FROM ingest_jobs")] == [lost]


def test_the_dashboard_role_toggles_cancels_restarts_and_answers(login_as, database_url):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES)
    run_id = queue_workflows.start_run(Workflow("ops").node("ask", input=True).node("after", "qw_dag_nodes:work", deps=["ask"]), {})
    queue_workflows.configure(database_url=login_as("qw_dashboard"), ingest_queues=TEST_INGEST_QUEUES)
    assert worker_control.disable_worker("h1", "cpu", "park", requested_by="dashboard:ops")["desired_state"] == "off"
    assert worker_control.enable_worker("h1", "cpu", requested_by="dashboard:ops")["desired_state"] == "on"
    queue_workflows.submit_input(run_id, "ask", {"ok": True}, requested_by="dashboard:ops")
    queue_workflows.cancel_run(run_id, requested_by="dashboard:ops")
    queue_workflows.restart_run(run_id, requested_by="dashboard:ops")
    assert [a["action"] for a in queue_workflows.run_actions(run_id)] == ["input", "cancel", "restart"]


def test_the_scheduler_role_enqueues_its_slot_once(login_as):
    queue_workflows.configure(database_url=login_as("qw_scheduler"), ingest_queues=TEST_INGEST_QUEUES)
    queue_workflows.register_ingest_task("noop", lambda reason: {})
    entry = ScheduleEntry.cron("* * * * *", "roles", "noop", "fetch")
    fire = Fire(datetime(2024, 5, 1, 12, 37, tzinfo=UTC), "slot")
    slots = SlotStore(replica="roles")
    try:
        job = slots.fire(entry, fire)
        assert job is not None and slots.fire(entry, fire) is None
        assert slots.prune(datetime(2024, 5, 1, 13, 0, tzinfo=UTC)) == 0  # the entry's latest slot stays
    finally:
        slots.close()


def test_the_metrics_role_publishes_its_host_snapshot(login_as):
    payload = {"v": snapshot.PAYLOAD_VERSION, "host": "roles-host", "ts": 1_700_000_000.0}
    with db.connect(autocommit=True, url=login_as("qw_metrics")) as conn:
        store.prepare_session(conn, statement_timeout_s=5)
        store.publish(conn, payload)
        store.publish(conn, payload)  # the second is the upsert's UPDATE arm
        assert [row["host_label"] for row in store.latest(conn)] == ["roles-host"]
        store.read_queue_figures(conn, stale_after_seconds=30)


def test_a_worker_records_its_exit_and_the_orchestrator_samples_the_cluster(login_as, database_url):
    exit_log.record_now(login_as("qw_worker"), worker_id="h:fetch:1:x", host_label="h", queue="fetch", code=77, reason="taken")
    assert [r["code"] for r in query(database_url, "SELECT code FROM qw_worker_exits")] == [77]
    metrics = ClusterMetrics(interval=1, max_tasks=10, stale_after_seconds=30)
    metrics.took_office(1)
    with db.connect(autocommit=True, url=login_as("qw_orchestrator")) as conn:
        for _ in range(2):  # the first sample sets the term's watermarks, the second reads from them
            assert metrics.sample(conn).database_up


def test_no_connected_role_can_hold_off_migrate(login_as, database_url):
    ledger = sql.Identifier(db.DEFAULT_VERSION_TABLE)
    with psycopg.connect(login_as("qw_worker")) as rogue:
        # The key migrate once serialised on: an advisory lock needs no privilege at all.
        rogue.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"queue_workflows:migrate:{db.DEFAULT_VERSION_TABLE}",))
        with pytest.raises(errors.InsufficientPrivilege):
            rogue.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(ledger))
        rogue.rollback()
        rogue.execute(sql.SQL("SELECT version FROM {}").format(ledger)).fetchall()  # a reader left open
        bounded = conninfo.make_conninfo(database_url, options="-c lock_timeout=5s")
        assert db.bootstrap(url=bounded) == []
