"""Typed job rows: one status enum equal to the schema's, frozen rows from every claim, an executor that reads no database, a validated beat config."""

from __future__ import annotations

import dataclasses
import re
import threading
from contextlib import contextmanager

import psycopg
import pytest
from procs import query

import queue_workflows
from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.config import current
from queue_workflows.dag import Workflow
from queue_workflows.dag.execute import load_context
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.errors import ConfigError
from queue_workflows.jobrow import IngestJob, JobStatus, NodeJob, job_from_row
from queue_workflows.worker import executor
from queue_workflows.worker.batch import BatchWorker
from queue_workflows.worker.claim import ClaimWorker
from queue_workflows.worker.liveness import BeatConfig, LivenessBeat
from queue_workflows.worker.session import WorkerSession

N = "qw_dag_nodes"


def check_values(conn, table: str) -> set[str]:
    """The statuses a table's CHECK constraint allows, read from this database's catalog."""
    row = conn.execute(
        "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s",
        (table, f"{table}_status_check"),
    ).fetchone()
    return set(re.findall(r"'(\w+)'::text", row["def"]))


def test_the_status_enum_is_the_set_the_schema_allows(conn):
    assert {s.value for s in JobStatus} == check_values(conn, "workflow_node_jobs")
    assert check_values(conn, "ingest_jobs") <= {s.value for s in JobStatus}
    assert {s for s in JobStatus if s.terminal} == {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.SKIPPED}


USAGE = {"cpu_seconds", "peak_rss_bytes", "peak_vram_bytes", "model_load_seconds", "model_hit", "wall_seconds"}  # written as the job ends


@pytest.mark.parametrize("row_type", [IngestJob, NodeJob])
def test_a_row_type_has_a_field_for_every_column_a_claim_returns(conn, row_type):
    columns = {r["column_name"] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = %s", (row_type.table,))}
    assert {f.name for f in dataclasses.fields(row_type)} == columns - USAGE


def test_every_claim_hands_the_worker_a_frozen_typed_row(database_url):
    register_ingest_task("noop", lambda reason: None)
    ingest = node_queue.enqueue_ingest_job("noop", "fetch", {"n": 1}, reason="rows")["id"]
    node = node_queue.enqueue_node_job("row", "cpu", node_module="qw_test_nodes", inputs={"k": "v"})["id"]
    worker, node_worker, batch = ClaimWorker("fetch"), ClaimWorker("cpu"), BatchWorker("fetch", batch_size=10)
    try:
        job = worker.session.run(worker._claim)
        assert isinstance(job, IngestJob) and (job.id, job.task_name, job.args, job.reason) == (ingest, "noop", {"n": 1}, "rows")
        assert job.status is JobStatus.RUNNING and job.attempts == 1 and job.claimed_by == worker.worker_id
        with pytest.raises(dataclasses.FrozenInstanceError):
            job.attempts = 5  # type: ignore[misc]
        node_job = node_worker.session.run(node_worker._claim)
        assert isinstance(node_job, NodeJob) and (node_job.id, node_job.node_module, node_job.inputs) == (node, "qw_test_nodes", {"k": "v"})
        assert node_job.status is JobStatus.RUNNING and node_job.run_id is None
        more = node_queue.enqueue_ingest_jobs([{"task_name": "noop", "queue": "fetch"}] * 2)
        rows = batch.session.run(batch._claim_batch)
        assert [type(r) for r in rows] == [IngestJob, IngestJob] and [r.id for r in rows] == [m["id"] for m in more]
    finally:
        for w in (worker, node_worker, batch):
            w.session.close()


def test_a_row_missing_a_column_or_with_an_unknown_status_is_refused_naming_it(database_url):
    register_ingest_task("noop", lambda reason: None)
    row = dict(node_queue.enqueue_ingest_job("noop", "fetch"))
    assert job_from_row(row) == IngestJob.from_row(row) and job_from_row(row).status is JobStatus.QUEUED
    with pytest.raises(ValueError, match="ingest_jobs row needs column.* max_attempts"):
        IngestJob.from_row({k: v for k, v in row.items() if k != "max_attempts"})
    with pytest.raises(ValueError, match="'paused' is not a valid JobStatus"):
        IngestJob.from_row({**row, "status": "paused"})


def _refuse(*args, **kwargs):
    raise AssertionError("the executor opened a database connection")


def test_the_executor_runs_a_dag_node_with_the_database_unreachable(database_url, conn, monkeypatch):
    # 'b' reads the merged key 'value' that only 'a' (not a dependency) gives, so the worker resolves it from the run when b runs.
    wf = Workflow("offline").node("a", f"{N}:run", inputs={"value": 1}).node("gate", f"{N}:echo").node(
        "b", f"{N}:echo", deps=["gate"], inputs={"seen": {"$from": "value"}})
    run_id = queue_workflows.start_run(wf, {})
    for name, delta in (("gate", {"echo": {}}), ("a", {"value": 1})):  # b is enqueued before a has run: its input stays a reference
        [row] = query(database_url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s AND node_name = %s", (run_id, name))
        node_queue.mark_completed(row["id"], delta, conn=conn)
        DispatchDrain().drain_once(conn)
    seen = []

    @contextmanager
    def around(job, run):
        seen.append((job["node_name"], run["workflow_name"]))
        yield lambda delta: delta

    queue_workflows.set_invoke_context(around)
    [row] = query(database_url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s AND node_name = 'b'", (run_id,))
    job = NodeJob.from_row(row)
    assert job.input_refs == {"seen": {"$from": "value"}}
    context = load_context(job)  # the worker's part, before the executor
    db.close_pools()
    for target, name in ((psycopg, "connect"), (psycopg.Connection, "connect"), (db, "connect"), (db, "pool")):
        monkeypatch.setattr(target, name, _refuse)
    outcome = executor.run_node_job(job, context)
    assert outcome.status == JobStatus.COMPLETED and outcome.result.obj == {"echo": {"seen": 1}}, outcome.error
    assert seen == [("b", "offline")]
    failed = executor.run_node_job(job, load_context(job))  # the run could not be read: the node fails with why, as before
    assert failed.status == JobStatus.FAILED and "the executor opened a database connection" in (failed.error or "")


def test_the_beat_config_is_validated_and_its_clock_is_the_beats(database_url):
    settings = current().settings
    config = BeatConfig.from_settings(settings, worker_id="h:fetch:1:ab", queue="fetch")
    assert (config.lease_seconds, config.renew_seconds, config.max_trips) == (settings.lease_seconds, settings.lease_renew_seconds, settings.watchdog_max_trips)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lease_seconds = 1  # type: ignore[misc]
    for bad, message in (
        ({"renew_seconds": config.lease_seconds}, "renew_seconds .* must be shorter than lease_seconds"),
        ({"heartbeat_seconds": 0}, "heartbeat_seconds must be a positive number of seconds, not 0"),
        ({"check_seconds": True}, "check_seconds must be a positive number"),
        ({"max_trips": 0}, "max_trips must be a positive integer, not 0"),
        ({"queue": ""}, "queue must be a non-empty string"),
    ):
        with pytest.raises(ConfigError, match=message):
            dataclasses.replace(config, **bad)
    clock = [100.0]
    stop = threading.Event()
    beat = LivenessBeat(dataclasses.replace(config, now_fn=lambda: clock[0]),
                        url=database_url, session=WorkerSession("qw_ready_fetch", url=database_url, stop_event=stop))
    beat.job_started(node_queue.INGEST_TABLE, 1, budget_seconds=5.0)
    clock[0] += 5.0
    assert beat.watch.check() is not None, "the budget watchdog runs on the config's clock"
    assert beat._lease_deadline == 100.0 + config.lease_seconds
