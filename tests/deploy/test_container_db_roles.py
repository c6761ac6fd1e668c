"""The stack's database roles and secrets, against the real test Postgres.

Workers connect as a member of `qw_worker` (migration 0018): they enqueue, claim and finish
jobs, and Postgres refuses them any change to the schema. The password reaches a container
as a secret file named by QW_DATABASE_PASSWORD_FILE, and a missing one is a one-line error.
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest
from procs import TEST_INGEST_QUEUES
from psycopg import conninfo, errors

import queue_workflows
from queue_workflows import config, db, node_queue, tasks, testing
from queue_workflows.errors import ConfigError

SCHEMA_CHANGES = [
    "DROP TABLE ingest_jobs",
    "ALTER TABLE ingest_jobs ADD COLUMN evil text",
    "ALTER TABLE worker_heartbeats DROP COLUMN pid",
    "DROP TRIGGER ingest_jobs_revoked ON ingest_jobs",
    "DROP FUNCTION qw_notify_job_revoked()",
    "TRUNCATE ingest_jobs",
    "DROP VIEW qw_worker_sessions",
    "CREATE INDEX evil ON ingest_jobs (queue)",
]


def test_the_worker_role_runs_jobs(worker_url):
    queue_workflows.configure(database_url=worker_url, ingest_queues=TEST_INGEST_QUEUES)
    tasks.register_ingest_task("double", lambda reason, args: {"n": args["n"] * 2})
    with db.connect(autocommit=True) as conn:
        assert conn.execute("SELECT current_user AS u").fetchone()["u"] == conninfo.conninfo_to_dict(worker_url)["user"]
    job_id = node_queue.enqueue_ingest_job("double", "fetch", {"n": 21})["id"]
    assert testing.run_until_empty("fetch") == 1
    with db.connect(autocommit=True) as conn:
        row = conn.execute("SELECT status, result FROM ingest_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"status": "completed", "result": {"n": 42}}


@pytest.mark.parametrize("statement", SCHEMA_CHANGES)
def test_the_worker_role_cannot_change_the_schema(worker_url, statement):
    with psycopg.connect(worker_url, autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(statement)


def test_the_worker_role_acts_on_runs_as_the_dashboard_does(worker_url):
    queue_workflows.configure(database_url=worker_url, ingest_queues=TEST_INGEST_QUEUES)
    run_id = queue_workflows.start_run(queue_workflows.Workflow("ops").node("ask", input=True), {})
    queue_workflows.submit_input(run_id, "ask", {"ok": True}, requested_by="dashboard:ops")
    queue_workflows.cancel_run(run_id, requested_by="dashboard:ops")
    assert [(a["action"], a["requested_by"]) for a in queue_workflows.run_actions(run_id)] == [
        ("input", "dashboard:ops"), ("cancel", "dashboard:ops")]


def test_the_worker_role_cannot_create_tables(worker_url):
    with psycopg.connect(worker_url, autocommit=True) as conn:
        if conn.info.server_version < 150000:
            pytest.skip("before Postgres 15 PUBLIC may create in schema public; the stack pins 16")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE evil (id int)")


def test_the_migration_role_keeps_ownership(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        owners = conn.execute(
            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    assert owners and "qw_worker" not in {o[0] for o in owners}


def test_the_password_file_completes_the_dsn(tmp_path, database_url):
    secret = tmp_path / "qw_database_password"
    secret.write_text("s3cr3t pass\n")
    cfg = queue_workflows.configure(database_url=database_url, database_password_file=str(secret))
    assert conninfo.conninfo_to_dict(cfg.database_url())["password"] == "s3cr3t pass"


def test_a_missing_password_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope"
    cfg = queue_workflows.configure(database_url="postgresql://qw_worker@db/qw", database_password_file=str(missing))
    with pytest.raises(ConfigError, match=r"QW_DATABASE_PASSWORD_FILE: cannot read .*nope"):
        cfg.database_url()
    (tmp_path / "empty").write_text("\n")
    cfg = config.configure(database_url="postgresql://qw_worker@db/qw", database_password_file=str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="is empty"):
        cfg.database_url()


def test_a_service_without_its_secret_says_so_and_exits_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "QW_DATABASE_URL": "postgresql://qw_worker@db.invalid/qw",
           "QW_DATABASE_PASSWORD_FILE": str(tmp_path / "qw_database_password")}
    proc = subprocess.run([sys.executable, "-m", "qw_services.worker", "--queue", "cpu"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "QW_DATABASE_PASSWORD_FILE: cannot read" in proc.stderr and "Traceback" not in proc.stderr
