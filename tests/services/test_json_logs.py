"""QW_LOG_FORMAT=json on real processes: every line of an orchestrator's and two workers' output is a JSON object,
and every record a job produces names its job, run, queue and host.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import qw_log_app
from procs import Procs, query, service_env, wait_for_log, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows import node_queue, register_ingest_task
from queue_workflows.common import logjson
from queue_workflows.dag import Workflow

pytestmark = pytest.mark.multiprocess

HOST = "log-box-1"


def _lines(proc: subprocess.Popen[bytes]) -> list[dict]:
    text = proc.log_path.read_text()  # type: ignore[attr-defined]
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"line {number} of {proc.log_path.name} is not JSON: {line!r}")  # type: ignore[attr-defined]
        assert isinstance(record, dict), line
        assert set(logjson.JOB_FIELDS) <= set(record), line
        assert {"ts", "level", "logger", "message"} <= set(record), line
        out.append(record)
    return out


def test_every_line_is_json_and_every_job_line_names_its_job(database_url: str, procs: Procs) -> None:
    env = service_env(database_url, QW_LOG_FORMAT="json", QW_APP="qw_log_app", QW_HOST_LABEL=HOST)
    orchestrator = procs.orchestrator(env)
    fetch, cpu = procs.worker(env, "fetch"), procs.worker(env, "cpu")
    wait_workers_ready(database_url, [fetch, cpu])
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    register_ingest_task("chatty", qw_log_app.chatty)  # here too: enqueue checks the name
    ingest_id = node_queue.enqueue_ingest_job("chatty", "fetch", args={"who": "ingest"})["id"]
    run_id = queue_workflows.start_run(Workflow("logs").node("talk", "qw_log_app:chatty_node", inputs={"who": "dag"}), {},
                                       check_callables=False)
    node_id = query(database_url, "SELECT id FROM workflow_node_jobs WHERE run_id = %s", (run_id,))[0]["id"]

    def done() -> bool:
        rows = query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s UNION ALL SELECT status FROM workflow_runs WHERE id = %s",
                     (ingest_id, run_id))
        return all(r["status"] == "completed" for r in rows) and len(rows) == 2

    wait_until(done, timeout=30, what=f"the task and the run to complete\n{procs.logs()}")
    wait_until(lambda: any("completed in" in r["message"] for r in _lines(cpu)), timeout=10, what="the cpu worker's report line")
    procs.stop_all()

    for proc, job_id, run, queue, who in ((fetch, ingest_id, None, "fetch", "task ingest"), (cpu, node_id, run_id, "cpu", "dag")):
        records = _lines(proc)
        own = [r for r in records if r["logger"] == "qw_log_app"]
        assert [r["level"] for r in own] == ["INFO", "ERROR", "WARNING"], own
        assert own[0]["message"] == f"{who} says hello\nacross two lines" and own[0]["step"] == "start"
        assert f"ValueError: {who} handled this" in own[1]["exc_info"]
        about_job = [r for r in records if r["job_id"] is not None]
        assert own[0] in about_job and any(r["message"].startswith(f"job {job_id} completed") for r in about_job), records
        for r in about_job:
            assert (r["job_id"], r["run_id"], r["queue"], r["host"], r["trace_id"]) == (job_id, run, queue, HOST, None), r
        ready = next(r for r in records if "ready on queue" in r["message"])
        assert ready["job_id"] is None and ready["host"] == HOST
    assert any("orchestrator running" in r["message"] for r in _lines(orchestrator))


def test_a_bad_log_format_is_a_clear_startup_error(database_url: str) -> None:
    env = service_env(database_url, QW_LOG_FORMAT="yaml")
    done = subprocess.run([sys.executable, "-m", "qw_services.worker", "--queue=cpu"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["error: invalid configuration: QW_LOG_FORMAT: Input should be 'text' or 'json' (got 'yaml')"]


def test_the_filter_names_the_job_only_inside_its_context() -> None:
    record = logging.makeLogRecord({"msg": "x"})
    names = logjson.JobFieldsFilter(host="h")
    names.filter(record)
    assert (record.job_id, record.host) == (None, "h")  # type: ignore[attr-defined]
    with logjson.job_fields(job_id=7, queue="cpu", host="h2", run_id=3):
        names.filter(record)
        assert json.loads(logjson.JsonFormatter().format(record))["run_id"] == 3
    names.filter(record)
    assert record.job_id is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["threads", "async"])
def test_jobs_of_a_concurrent_batch_each_name_their_own(database_url: str, mode: str) -> None:
    """8 jobs 4 at a time on a thread pool or an event loop: each record names the job that logged it, never a neighbour."""
    import asyncio
    import time

    from queue_workflows.worker.batch import BatchWorker

    task_log = logging.getLogger("qw_log_batch")
    if mode == "threads":
        def talk(reason: str, args: dict) -> dict:
            task_log.info("job of i=%s starts", args["i"])
            time.sleep(0.05)  # the others of the batch log meanwhile
            task_log.info("job of i=%s ends", args["i"])
            return {}
    else:
        async def talk(reason: str, args: dict) -> dict:  # type: ignore[misc]
            task_log.info("job of i=%s starts", args["i"])
            await asyncio.sleep(0.05)
            task_log.info("job of i=%s ends", args["i"])
            return {}
    register_ingest_task("talk", talk)
    ids = {node_queue.enqueue_ingest_job("talk", "fetch", args={"i": i})["id"]: i for i in range(8)}
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    keep.addFilter(logjson.JobFieldsFilter(host="h"))
    task_log.addHandler(keep)
    task_log.setLevel(logging.INFO)
    try:
        assert BatchWorker("fetch", batch_size=8, mode=mode, concurrency=4, max_jobs=8).run_forever() == 0
    finally:
        task_log.removeHandler(keep)
    assert len(seen) == 16
    for record in seen:
        assert f"i={ids[record.job_id]} " in record.getMessage(), (record.job_id, record.getMessage())  # type: ignore[attr-defined]
        assert (record.queue, record.run_id) == ("fetch", None)  # type: ignore[attr-defined]
