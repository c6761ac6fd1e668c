"""Contract 7: watchdogs kill the process, never interrupt code; every trip goes through one
function that writes the job's outcome (requeue while watchdog retries remain, else fail).

Decisions run on a virtual clock; trips run in real worker processes with short budgets.
"""

from __future__ import annotations

import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_exit, wait_until, wait_workers_ready

from queue_workflows import node_queue, register_ingest_task
from queue_workflows.jobrow import IngestJob, NodeJob
from queue_workflows.settings import Settings
from queue_workflows.worker import exits
from queue_workflows.worker.liveness.watchdogs import JobWatch, budget_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_trips_exactly_when_spent():
    clock = Clock()
    watch = JobWatch(stall_seconds=60, now_fn=clock)
    assert watch.check() is None, "no job, no trip"
    watch.start(7, budget_seconds=30)
    clock.now += 29.9
    assert watch.check() is None
    clock.now += 0.1
    trip = watch.check()
    assert trip is not None and trip.code == exits.EXIT_BUDGET and "30s" in trip.reason
    watch.finish()
    assert watch.check() is None


def test_the_stall_watchdog_is_inert_until_the_first_beat_then_trips_on_silence():
    clock = Clock()
    watch = JobWatch(stall_seconds=10, now_fn=clock)
    watch.start(7, budget_seconds=10_000)
    clock.now += 500  # a long cold model load without a beat is never policed
    assert watch.check() is None
    watch.beat()
    clock.now += 9
    assert watch.check() is None
    watch.beat()  # each beat restarts the silence
    clock.now += 9.99
    assert watch.check() is None
    clock.now += 0.01
    trip = watch.check()
    assert trip is not None and trip.code == exits.EXIT_STALLED
    watch.start(8, budget_seconds=10_000)
    assert watch.check() is None and watch.beats == 0, "a new job starts unarmed"


def test_budget_for_each_kind_of_job():
    settings = Settings(ingest_default_budget_s=100, node_default_budget_s=200, video_budget_s=50, video_model_ids="wan,sdxl-video")
    row = {"id": 1, "status": "running", "priority": 0, "attempts": 1, "max_attempts": 3}
    assert budget_for(IngestJob.from_row({**row, "queue": "fetch", "task_name": "t", "args": {}, "reason": "r"}), settings) == 100

    def node(**kw):
        return NodeJob.from_row({**row, "queue": "gpu", "node_name": "n", "inputs": {}, **kw})

    assert budget_for(node(required_model=None), settings) == 200
    assert budget_for(node(required_model="llama"), settings) == 200
    assert budget_for(node(required_model="wan"), settings) == 50
    assert budget_for(node(required_model="wan", budget_seconds=7.5), settings) == 7.5  # a DAG node's own budget first


# -- real worker processes ---------------------------------------------------------------------



@pytest.fixture
def tasks(database_url: str) -> None:
    register_ingest_task("record", qw_test_app.record)
    register_ingest_task("beat_then_hang", qw_test_app.beat_then_hang)


def _job(url: str, job_id: int) -> dict:
    [row] = query(url, "SELECT * FROM ingest_jobs WHERE id = %s", (job_id,))
    return row


def _run_one(url: str, procs: Procs, task: str, args: dict, *, expect_exit: int, **settings: str) -> dict:
    worker = procs.worker(service_env(url, **settings), "fetch")
    wait_workers_ready(url, [worker])
    job_id = node_queue.enqueue_ingest_job(task, "fetch", args)["id"]
    assert wait_exit(worker, 20, procs) == expect_exit, procs.logs()
    return _job(url, job_id)


@pytest.mark.multiprocess
def test_a_spent_budget_exits_75_and_requeues_until_the_cap_then_fails(database_url: str, procs: Procs, tasks: None) -> None:
    settings = dict(QW_INGEST_DEFAULT_BUDGET_S="1", QW_WATCHDOG_MAX_TRIPS="2")
    first = _run_one(database_url, procs, "record", {"token": "budget", "sleep": 30}, expect_exit=75, **settings)
    assert (first["status"], first["watchdog_trips"], first["attempts"], first["claimed_by"]) == ("queued", 1, 0, None)
    assert "exit 75" in first["error"] and "budget of 1s" in first["error"]

    worker = procs.worker(service_env(database_url, **settings), "fetch")  # the supervisor's restart
    assert wait_exit(worker, 20, procs) == 75, procs.logs()
    last = _job(database_url, first["id"])
    assert (last["status"], last["watchdog_trips"], last["attempts"]) == ("failed", 2, 1), last
    assert last["finished_at"] is not None and "budget" in last["error"]
    runs = query(database_url, "SELECT count(*) AS n FROM test_executions WHERE token = 'budget'")[0]["n"]
    assert runs == 2


@pytest.mark.multiprocess
def test_silence_after_a_progress_report_exits_76(database_url: str, procs: Procs, tasks: None) -> None:
    row = _run_one(
        database_url, procs, "beat_then_hang", {"token": "stall", "beats": 3, "hang": 30},
        expect_exit=76, QW_STALL_TIMEOUT_SECONDS="1", QW_WATCHDOG_MAX_TRIPS="1",
    )
    assert (row["status"], row["watchdog_trips"]) == ("failed", 1) and "exit 76" in row["error"] and "no progress" in row["error"]


@pytest.mark.multiprocess
def test_a_job_that_never_reports_progress_is_not_policed_for_stalls(database_url: str, procs: Procs, tasks: None) -> None:
    worker = procs.worker(service_env(database_url, QW_STALL_TIMEOUT_SECONDS="0.5"), "fetch")
    wait_workers_ready(database_url, [worker])
    job_id = node_queue.enqueue_ingest_job("beat_then_hang", "fetch", {"token": "quiet", "beats": 0, "hang": 2})["id"]
    done = wait_until(lambda: (j := _job(database_url, job_id))["status"] == "completed" and j, timeout=15, what=f"job done\n{procs.logs()}")
    assert done["watchdog_trips"] == 0 and worker.poll() is None
