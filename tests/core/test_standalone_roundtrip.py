"""The seed's standalone guarantee: import + configure() + a real Postgres runs end to end."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_import_configure_bootstrap_enqueue_and_work_in_a_fresh_process(scratch_database_url):
    script = textwrap.dedent(
        """
        import os, sys
        import queue_workflows
        from queue_workflows import claim_worker, db, node_queue

        queue_workflows.configure(db_url_env="MY_APP_DB", ingest_queues=frozenset({"hydro", "corrdiff"}))
        assert db.bootstrap() == [m.version for m in db.discover()]
        calls = []

        def run_scenario(reason, args):
            calls.append(args["scenario"])
            return {"scenario": args["scenario"], "reason": reason}

        queue_workflows.register_ingest_task("run_scenario", run_scenario)
        with db.connect() as conn, conn.transaction():
            conn.execute("CREATE TABLE scenarios (id int)")
            conn.execute("INSERT INTO scenarios VALUES (7)")
            job = node_queue.enqueue_ingest_job(task_name="run_scenario", queue="hydro", args={"scenario": 7}, conn=conn)
        assert claim_worker.main(["--queue", "hydro", "--max-jobs", "1"]) == 0
        snap = node_queue.ingest_snapshot()["queues"]
        assert snap["hydro"]["completed"] == 1 and snap["corrdiff"]["queued"] == 0, snap
        with db.connect() as conn:
            stored = conn.execute("SELECT result FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()["result"]
        assert calls == [7] and stored == {"scenario": 7, "reason": "manual"}, (calls, stored)
        print("ROUNDTRIP-OK")
        """
    )
    env = {"PATH": "/usr/bin:/bin", "MY_APP_DB": scratch_database_url, "HOME": "/tmp"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "ROUNDTRIP-OK" in done.stdout, done.stdout + done.stderr
