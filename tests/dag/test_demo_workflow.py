"""The demo app's workflow walks as its docstring says: fan-out, a gpu node, a skip, a fan-in."""

from __future__ import annotations

import subprocess
import sys
import threading

from procs import query, service_env

import qw_demo.nodes as demo
from queue_workflows import run_status, start_run
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.testing import wait_until
from queue_workflows.worker.claim import ClaimWorker


def test_the_demo_workflow_skips_translation_for_english_only(database_url, conn):
    demo.register_models()  # what the gpu worker's registrar does at start
    runs = {topic: start_run(demo.WORKFLOW, {"topic": topic}) for topic in demo.ARTICLES}
    workers = [ClaimWorker("cpu"), ClaimWorker("gpu")]
    stop = threading.Event()
    drain = threading.Thread(target=DispatchDrain().run_forever, args=(stop,), daemon=True)
    drain.start()
    try:
        def finished() -> bool:
            for worker in workers:
                worker.drain()
            return all(run_status(r)["status"] != "running" for r in runs.values())

        wait_until(finished, timeout=30, what="both demo runs finished")
    finally:
        stop.set()
        drain.join(timeout=5)
        for worker in workers:
            worker.session.close()
    english, german = run_status(runs["queues"]), run_status(runs["warteschlangen"])
    assert english["status"] == german["status"] == "completed"
    assert english["nodes"]["translate"]["status"] == "skipped" and german["nodes"]["translate"]["status"] == "completed"
    assert english["nodes"]["embed"]["queue"] == "gpu"
    assert english["nodes"]["summarize"]["output"]["translated"] is False
    assert german["nodes"]["summarize"]["output"]["translated"] is True
    # The demo model was loaded once, for the first embed, and was warm for the second.
    assert english["nodes"]["embed"]["output"]["warm_model"] and german["nodes"]["embed"]["output"]["warm_model"]
    hits = [r["model_hit"] for r in conn.execute("SELECT model_hit FROM workflow_node_jobs WHERE node_name = 'embed' ORDER BY finished_at")]
    assert hits == [False, True]


def test_the_demo_approval_waits_for_input_then_publishes(database_url):
    import qw_demo
    from queue_workflows import submit_input
    from queue_workflows.dag.keeper import RunKeeper

    run_id = qw_demo.start_approval()
    assert run_status(run_id)["nodes"]["approve"]["status"] == "awaiting_input"
    submit_input(run_id, "approve", {"approved": True, "note": "ship it"})
    worker = ClaimWorker("cpu")
    stop = threading.Event()
    threads = [threading.Thread(target=DispatchDrain().run_forever, args=(stop,), daemon=True),
               threading.Thread(target=RunKeeper().run_forever, args=(stop,), daemon=True)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: worker.drain() >= 0 and run_status(run_id)["status"] == "completed", timeout=30, what="approval run done")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
        worker.session.close()
    assert run_status(run_id)["nodes"]["publish"]["output"] == {"published": True, "note": "ship it"}


def test_the_compose_demo_seeds_once_and_honours_qw_demo_jobs(database_url):
    # The compose `demo` service runs `python -m qw_demo`: a second run (an `up`, an upgrade) adds nothing.
    def seed(jobs: str) -> subprocess.CompletedProcess[str]:
        env = service_env(database_url, QW_APP="qw_demo", QW_INGEST_QUEUES="fetch,load", QW_DEMO_JOBS=jobs)
        return subprocess.run([sys.executable, "-m", "qw_demo"], env=env, capture_output=True, text=True, timeout=60)

    def demo_jobs() -> int:
        return query(database_url, "SELECT count(*) AS n FROM ingest_jobs WHERE reason = 'demo'")[0]["n"]

    bad = seed("five")
    assert (bad.returncode, bad.stderr.strip()) == (2, "QW_DEMO_JOBS must be a whole number of jobs per queue, not 'five'")
    none = seed("0")
    assert none.returncode == 0 and "demo enqueued nothing (QW_DEMO_JOBS=0)" in none.stdout, none.stderr
    assert demo_jobs() == 0
    first = seed("2")
    assert first.returncode == 0 and "'ingest_jobs': 4" in first.stdout, first.stderr
    again = seed("2")
    assert again.returncode == 0 and "nothing: this database already has the demo's work" in again.stdout, again.stderr
    assert demo_jobs() == 4
