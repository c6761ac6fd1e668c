"""Batch mode blames only the row that was running: a crash, a poison job, a cancel or a hard stop
never charges, fails or re-runs a batch-mate that did nothing wrong, and rows run in claim order.

Real worker processes against a real Postgres; `test_executions` counts how often each job's
code actually ran. The orchestrator is the reclaim (the one recovery path).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_exit, wait_until, wait_workers_ready

from queue_workflows import node_queue, register_ingest_task, worker_control
from queue_workflows.ops import admin

pytestmark = pytest.mark.multiprocess


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("record", qw_test_app.record)
    register_ingest_task("kill_self", qw_test_app.kill_self)


def enqueue(specs: list[dict[str, Any]]) -> list[int]:
    """One transaction, so a waiting batch worker claims them all at once."""
    return [j["id"] for j in node_queue.enqueue_ingest_jobs([{"queue": "fetch", **s} for s in specs])]


def jobs(url: str) -> list[dict]:
    return query(url, "SELECT * FROM ingest_jobs ORDER BY id")


def runs(url: str) -> Counter[str]:
    return Counter(r["token"] for r in query(url, "SELECT token FROM test_executions"))


def all_settled(url: str) -> bool:
    return all(j["status"] in ("completed", "failed", "cancelled") for j in jobs(url))


def supervise(procs: Procs, start: Callable[[], subprocess.Popen[bytes]], until: Callable[[], bool], *, timeout: float) -> list[int]:
    """Restart the worker whenever it exits (as systemd would) until `until()`; the exit codes seen."""
    worker, exits = [start()], []

    def check() -> bool:
        if (rc := worker[0].poll()) is not None:
            exits.append(rc)
            worker[0] = start()
        return until()

    wait_until(check, timeout=timeout, interval=0.1, what="the jobs to settle")
    return exits


def test_kill_9_mid_batch_fails_only_the_running_row_and_requeues_the_unstarted_uncharged(database_url: str, procs: Procs, tmp_path: Path) -> None:
    env = service_env(database_url)
    procs.orchestrator(env)
    victim = procs.worker(env, "fetch", "--batch", "10")
    wait_workers_ready(database_url, [victim])
    never = str(tmp_path / "never-created")  # the 4th job waits until its worker is killed
    ids = enqueue([{"task_name": "record", "max_attempts": 1,
                    "args": {"token": f"k{i}", **({"first_run_wait_file": never} if i == 3 else {})}} for i in range(10)])
    wait_until(lambda: len(runs(database_url)) == 4 and jobs(database_url)[3]["attempts"] == 1, timeout=20,
               what="4 rows of the batch started, the 4th recorded as running")
    os.kill(victim.pid, signal.SIGKILL)
    rescuer = procs.worker(env, "fetch", "--batch", "10")
    wait_until(lambda: all_settled(database_url), timeout=60, what=f"every row settled\n{procs.logs()}")

    rows = jobs(database_url)
    assert [r["id"] for r in rows] == ids
    assert [(r["status"], r["attempts"]) for r in rows] == [("completed", 1)] * 3 + [("failed", 1)] + [("completed", 1)] * 6
    assert "abandoned after 1 attempts" in rows[3]["error"]
    assert [r["result"]["pid"] for r in rows[4:]] == [rescuer.pid] * 6, "the rows that never started ran on the rescuer"
    assert runs(database_url) == Counter({f"k{i}": 1 for i in range(10)})


def test_a_job_that_kills_its_worker_fails_alone_and_its_batch_mates_run_once(database_url: str, procs: Procs) -> None:
    env = service_env(database_url)
    procs.orchestrator(env)
    specs = [{"task_name": "record", "args": {"token": f"p{i}"}} for i in range(10)]
    specs[4] = {"task_name": "kill_self", "args": {"token": "poison"}}  # max_attempts: the default 3
    ids = enqueue(specs)
    exits = supervise(procs, lambda: procs.worker(env, "fetch", "--batch", "10"), lambda: all_settled(database_url), timeout=90)

    rows = {r["id"]: r for r in jobs(database_url)}
    poison = rows[ids[4]]
    assert (poison["status"], poison["attempts"]) == ("failed", 3) and "abandoned after 3 attempts" in poison["error"]
    innocent = [rows[i] for i in ids if i != ids[4]]
    assert [(r["status"], r["attempts"]) for r in innocent] == [("completed", 1)] * 9, "no batch-mate charged or failed"
    ran = runs(database_url)
    # A crash within a progress interval of the poison's start is not yet blamed on it: it goes back
    # uncharged and suspect, and its next runs are recorded before they start. So it runs 3 or 4
    # times; rows that finished in that last interval run once more, and none of the rest does.
    assert ran["poison"] in (3, 4) and exits.count(-signal.SIGKILL) == ran["poison"], (ran, exits)
    assert all(ran[f"p{i}"] == 1 for i in range(5, 10)), ran
    assert all(ran[f"p{i}"] in (1, 2) for i in range(4)), ran


@pytest.mark.parametrize("how", ["cancel_an_unstarted_row", "hard_off"])
def test_a_stop_after_half_the_batch_reruns_no_finished_row(database_url: str, procs: Procs, tmp_path: Path, how: str) -> None:
    env = service_env(database_url, QW_HOST_LABEL="box-a")
    procs.orchestrator(env)
    worker = procs.worker(env, "fetch", "--batch", "10")
    wait_workers_ready(database_url, [worker])
    gate = tmp_path / "gate"  # the 6th row runs until the gate opens
    ids = enqueue([{"task_name": "record", "max_attempts": 1,
                    "args": {"token": f"h{i}", **({"first_run_wait_file": str(gate)} if i == 5 else {})}} for i in range(10)])
    wait_until(lambda: len(runs(database_url)) == 6, timeout=20, what="5 rows finished and the 6th running")

    if how == "hard_off":
        worker_control.disable_worker("box-a", "fetch", requested_by="test")
        assert wait_exit(worker, 15, procs) == 79
        worker_control.enable_worker("box-a", "fetch")
    else:
        admin.cancel_job(f"ingest:{ids[8]}")
        gate.touch()
    current = [worker]
    exits = supervise(procs, lambda: current.pop() if current else procs.worker(env, "fetch", "--batch", "10"),
                      lambda: all_settled(database_url), timeout=60)

    rows = {r["id"]: r for r in jobs(database_url)}
    ran = runs(database_url)
    assert [ran[f"h{i}"] for i in range(5)] == [1] * 5, "a finished row never runs again"
    assert [(rows[i]["status"], rows[i]["attempts"]) for i in ids[:5]] == [("completed", 1)] * 5
    if how == "hard_off":  # the running row was stopped mid-way: it runs again, uncharged for the stop
        assert ran["h5"] == 2 and [ran[f"h{i}"] for i in range(6, 10)] == [1] * 4
        assert [(rows[i]["status"], rows[i]["attempts"]) for i in ids[5:]] == [("completed", 1)] * 5
    else:  # a batch-mate cancelled before it started: the worker runs on, and only that row is skipped
        assert exits == [] and worker.poll() is None, f"the worker stopped for a row it was not running (exit {exits})"
        assert [ran[f"h{i}"] for i in (5, 6, 7, 9)] == [1] * 4 and ran["h8"] == 0
        assert [(rows[i]["status"], rows[i]["attempts"]) for i in ids[5:]] == [
            ("completed", 1), ("completed", 1), ("completed", 1), ("cancelled", 0), ("completed", 1)]


def test_a_batch_runs_its_rows_in_priority_order(database_url: str, procs: Procs) -> None:
    specs = [{"task_name": "record", "args": {"token": f"o{i}"}} for i in range(10)]
    specs[3]["priority"] = 100
    enqueue(specs)  # before the worker starts: its first claim takes all ten
    worker = procs.worker(service_env(database_url), "fetch", "--batch", "10")
    wait_until(lambda: all_settled(database_url), timeout=30, what=f"every row done\n{procs.logs()}")
    order = [r["token"] for r in query(database_url, "SELECT token FROM test_executions ORDER BY id")]
    assert order == ["o3", *(f"o{i}" for i in range(10) if i != 3)]
    assert all(f":{worker.pid}:" in r["claimed_by"] for r in jobs(database_url)), "one worker ran them all"
