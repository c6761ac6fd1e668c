"""Hard stops and watchdog exits with real worker processes: a stop never fails, charges or
re-runs a job that did nothing wrong, and a watchdog's exit ends the job's own processes.

- A hard OFF racing the commit that stores a job's outcome and claims the next one waits for
  that commit: what finished is stored, what the commit claimed is handed back uncharged.
- A park escalated to a hard OFF stops the running job (exit 79, handed back uncharged).
- Exit 75 kills the processes the job started, children and orphaned grandchildren alike.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import qw_stop_tasks
from procs import Procs, log_text, query, service_env, wait_exit, wait_for_log, wait_until, wait_workers_ready
from psycopg.types.json import Jsonb

from queue_workflows import node_queue, register_ingest_task
from queue_workflows.leader import reclaim
from queue_workflows.worker import exits
from queue_workflows.worker.claim import ClaimWorker
from queue_workflows.worker.executor import Outcome
from queue_workflows.worker.liveness.watchdogs import Trip


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("tick", qw_stop_tasks.tick)
    register_ingest_task("record", qw_stop_tasks.qw_test_app.record)
    register_ingest_task("spawn_then_hang", qw_stop_tasks.spawn_then_hang)


def _env(url: str, host: str, **settings: str) -> dict[str, str]:
    return service_env(url, QW_APP="qw_stop_tasks", QW_HOST_LABEL=host, **settings)


def _set_control(url: str, host: str, state: str, policy: str = "hard") -> None:
    query(
        url,
        "INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy, requested_by) "
        "VALUES (%s, 'fetch', %s, %s, 'ops') ON CONFLICT (host_label, queue) DO UPDATE "
        "SET desired_state = EXCLUDED.desired_state, stop_policy = EXCLUDED.stop_policy, updated_at = now()",
        (host, state, policy),
    )


def _counts(url: str) -> dict[str, int]:
    return {r["status"]: r["n"] for r in query(url, "SELECT status, count(*) AS n FROM ingest_jobs GROUP BY status")}


def _left_running_by(url: str, pid: int) -> list[dict]:
    return query(url, "SELECT id, attempts FROM ingest_jobs WHERE status = 'running' AND claimed_by LIKE %s", (f"%:fetch:{pid}:%",))


class Racer:
    """One host's worker, stopped hard while it drains and restarted, as its supervisor would."""

    def __init__(self, url: str, procs: Procs, host: str) -> None:
        self.url, self.procs, self.host = url, procs, host
        self.worker: subprocess.Popen[bytes] | None = None
        self.off = False

    def step(self, stops: list[int], leaks: list[dict]) -> None:
        worker = self.worker
        if worker is None:
            _set_control(self.url, self.host, "on")
            self.worker, self.off = self.procs.worker(_env(self.url, self.host), "fetch"), False
        elif worker.poll() is not None:
            assert worker.returncode == 79, f"{self.host}: exit {worker.returncode}\n{log_text(worker)[-3000:]}"
            stops.append(worker.pid)
            leaks.extend(_left_running_by(self.url, worker.pid))  # a stop leaves nothing of its own running
            self.worker = None
        elif not self.off and "completed in" in log_text(worker):  # draining
            time.sleep(random.uniform(0, 0.004))  # land anywhere in the job / commit cycle
            _set_control(self.url, self.host, "off", "hard")
            self.off = True


@pytest.mark.multiprocess
@pytest.mark.parametrize(("seconds", "most_stops"), [pytest.param(5, 12, id="short"), pytest.param(12, 24, id="soak", marks=pytest.mark.soak)])
def test_a_hard_off_racing_the_commit_never_fails_or_charges_a_job(database_url: str, procs: Procs, seconds: float, most_stops: int) -> None:
    jobs = node_queue.enqueue_ingest_jobs(
        {"task_name": "tick", "queue": "fetch", "args": {"token": f"t{n}"}, "max_attempts": 1} for n in range(400)
    )
    racers = [Racer(database_url, procs, f"racer-{n}") for n in range(3)]
    stops: list[int] = []
    leaks: list[dict] = []
    deadline = time.monotonic() + seconds
    # Past the deadline only to reach the minimum of 6 stops, on a machine too busy to race fast.
    while len(stops) < most_stops and (time.monotonic() < deadline or (len(stops) < 6 and time.monotonic() < deadline + 48)):
        for racer in racers:
            racer.step(stops, leaks)
        time.sleep(0.005)
    for racer in racers:  # the last ones stop gracefully: their job is stored, nothing claimed after it
        if racer.worker is not None:
            racer.worker.terminate()
            code = wait_exit(racer.worker, 15, procs)
            assert code in (0, 79, -15)  # -15: still starting
            if code == 79:  # its hard OFF was already under way: a stop like the others, which may hand back its job
                stops.append(racer.worker.pid)
            leaks.extend(_left_running_by(database_url, racer.worker.pid))
    print(f"{_counts(database_url)} after {len(stops)} hard stops in {time.monotonic() - deadline + seconds:.1f}s; {len(leaks)} job(s) left running by a stopped worker")

    reclaim.reclaim_orphans(confirm_seconds=0.2)  # the orchestrator's sweep: what a dead worker left running
    _set_control(database_url, "finisher", "on")
    finisher = procs.worker(_env(database_url, "finisher"), "fetch")
    wait_until(lambda: set(_counts(database_url)) - {"completed", "failed"} == set(), timeout=60, what=f"the queue drained\n{procs.logs()}")
    finisher.terminate()

    counts = _counts(database_url)
    failed = query(database_url, "SELECT id, error FROM ingest_jobs WHERE status = 'failed' ORDER BY id")
    assert len(stops) >= 6, f"only {len(stops)} stops in the time allowed"
    assert not leaks and not failed, (
        f"{len(stops)} hard stops left {len(leaks)} job(s) running and charged ({leaks[:5]}); "
        f"{len(failed)} failed: {[f['error'][:80] for f in failed[:3]]}"
    )
    assert counts == {"completed": len(jobs)}
    runs = {r["token"]: r["n"] for r in query(database_url, "SELECT token, count(*) AS n FROM test_executions GROUP BY token")}
    charged = query(database_url, "SELECT count(*) AS n FROM ingest_jobs WHERE attempts <> 1")[0]["n"]
    assert charged == 0, "every job is charged for exactly the attempt that completed it"
    assert all(runs.get(f"t{n}", 0) >= 1 for n in range(len(jobs)))
    again = sum(n - 1 for n in runs.values())
    assert again <= len(stops), f"{again} re-runs for {len(stops)} stops: a stop hands back at most the job it interrupted"


@pytest.mark.multiprocess
def test_a_parked_worker_escalated_to_hard_stops_its_job_and_comes_back_parked(database_url: str, procs: Procs) -> None:
    worker = procs.worker(_env(database_url, "box-p"), "fetch")
    wait_workers_ready(database_url, [worker])
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": "parked", "first_run_sleep": 60})["id"]
    wait_until(lambda: query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (job_id,))[0]["status"] == "running", timeout=10)
    _set_control(database_url, "box-p", "off", "park")
    wait_for_log(worker, "(parked)", timeout=10)

    _set_control(database_url, "box-p", "off", "hard")
    assert wait_exit(worker, 10, procs) == 79, "a park escalated to hard stops the running job"
    [row] = query(database_url, "SELECT status, attempts, claimed_by FROM ingest_jobs WHERE id = %s", (job_id,))
    assert (row["status"], row["attempts"], row["claimed_by"]) == ("queued", 0, None), row

    restarted = procs.worker(_env(database_url, "box-p"), "fetch")  # its supervisor brings it back
    wait_until(lambda: query(database_url, "SELECT state FROM worker_heartbeats WHERE pid = %s", (restarted.pid,)) == [{"state": "parked"}],
               timeout=15, what="the restarted worker parked")
    assert restarted.poll() is None, "under the same hard OFF it parks; it does not stop again"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.multiprocess
@pytest.mark.parametrize("orphan", [False, True], ids=["child", "orphaned-grandchild"])
def test_a_budget_exit_ends_the_processes_the_job_started(database_url: str, procs: Procs, tmp_path: Path, orphan: bool) -> None:
    worker = procs.worker(_env(database_url, "box-c", QW_INGEST_DEFAULT_BUDGET_S="1"), "fetch")
    wait_workers_ready(database_url, [worker])
    marker = tmp_path / "marker"
    args = {"token": "spawner", "marker": str(marker), "child_delay": 20, "hang": 60, "orphan": orphan}
    job_id = node_queue.enqueue_ingest_job("spawn_then_hang", "fetch", args)["id"]
    assert wait_exit(worker, 15, procs) == 75, procs.logs()
    [spawned] = query(database_url, "SELECT worker_pid FROM test_executions WHERE token = 'spawner'")
    child = spawned["worker_pid"]
    try:
        wait_until(lambda: _gone(child), timeout=3, what=f"process {child}, started by the job, to be ended with it")
    finally:
        if not _gone(child):
            psutil.Process(child).kill()
    assert not marker.exists()
    assert log_text(worker).count("the job left running") == 1, log_text(worker)[-2000:]
    [row] = query(database_url, "SELECT status, watchdog_trips FROM ingest_jobs WHERE id = %s", (job_id,))
    assert (row["status"], row["watchdog_trips"]) == ("queued", 1)


@pytest.mark.multiprocess
def test_a_budget_exit_spares_a_process_that_only_shared_the_workers_first_group(database_url: str, procs: Procs, tmp_path: Path) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        with open(tmp_path / "worker.log", "wb") as out:  # started inside the bystander's group, as a supervisor's child is
            worker = subprocess.Popen([sys.executable, "-m", "qw_services.worker", "--queue=fetch"], stdout=out, stderr=subprocess.STDOUT,
                                      env=_env(database_url, "box-g", QW_INGEST_DEFAULT_BUDGET_S="1"), process_group=bystander.pid)
        procs.started.append(worker)
        wait_workers_ready(database_url, [worker])
        args = {"token": "grouped", "marker": str(tmp_path / "marker"), "child_delay": 20, "hang": 60}
        node_queue.enqueue_ingest_job("spawn_then_hang", "fetch", args)
        assert wait_exit(worker, 15, procs) == 75
        [spawned] = query(database_url, "SELECT worker_pid FROM test_executions WHERE token = 'grouped'")
        wait_until(lambda: _gone(spawned["worker_pid"]), timeout=3, what="the job's child to be ended")
        assert bystander.poll() is None, "a process that is not the job's is left alone"
    finally:
        bystander.kill()
        bystander.wait()


class InProcess:
    """A one-job worker in this process, its beat running, its exits recorded instead of taken."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.worker = ClaimWorker("fetch")
        self.exits: list[tuple[int, str]] = []
        self.worker.beat.exit_fn = lambda code, reason: self.exits.append((code, reason))
        self.worker.session.run(self.worker._read_switch)
        self.worker.beat.start()

    def hard_off(self) -> None:
        """Turn it OFF (hard) and wait until its beat has read that: its trip is deciding from then on."""
        _set_control(self.url, self.worker.settings.host_label, "off", "hard")
        wait_until(lambda: self.worker.switch.parked, timeout=10, what="the beat to read the hard OFF")

    def close(self) -> None:
        self.worker.beat.stop()
        self.worker.session.close()


def _row(url: str, job_id: int) -> dict:
    [row] = query(url, "SELECT status, attempts, claimed_by FROM ingest_jobs WHERE id = %s", (job_id,))
    return row


def test_a_hard_stop_waits_for_a_finished_jobs_commit_and_no_watchdog_fires_for_it(database_url: str) -> None:
    first = node_queue.enqueue_ingest_job("tick", "fetch", {"token": "a"}, max_attempts=1)["id"]
    w = InProcess(database_url)
    try:
        job = w.worker.session.run(w.worker._claim_and_start)
        assert job is not None and job.id == first
        w.worker.beat.job_returned()  # its code returned: an outcome is on its way to the commit
        w.worker.beat.trip_current_job(Trip(exits.EXIT_BUDGET, "budget spent just as it returned"))
        assert w.exits == [], "a watchdog never fires for a job whose code has returned"

        w.hard_off()
        time.sleep(0.3)
        assert w.exits == [], "the hard stop waits for the finished job's commit"
        w.worker.session.run(lambda conn: w.worker._store_outcome(conn, job, Outcome("completed", result=Jsonb({"ok": 1}))))
        wait_until(lambda: w.exits, timeout=10, what="the hard stop after the commit")
        assert w.exits[0][0] == exits.EXIT_HARD_STOP and w.exits[0][1].startswith("worker:"), w.exits
        assert _row(database_url, first)["status"] == "completed", "a result already computed is stored"
    finally:
        w.close()


def test_a_hard_stop_during_a_claim_hands_the_claimed_job_back_uncharged(database_url: str) -> None:
    claimed = node_queue.enqueue_ingest_job("tick", "fetch", {"token": "b"}, max_attempts=1)["id"]
    w = InProcess(database_url)
    try:
        with w.worker.beat.committing():  # the claim is in flight when the stop arrives
            w.hard_off()
            job = w.worker.session.run(w.worker._claim_and_start)
            assert job is not None and job.id == claimed and w.exits == []
        wait_until(lambda: w.exits, timeout=10, what="the hard stop after the claim")
        assert w.exits[0][0] == exits.EXIT_HARD_STOP and f"job {claimed}" in w.exits[0][1], w.exits
        assert _row(database_url, claimed) == {"status": "queued", "attempts": 0, "claimed_by": None}
    finally:
        w.close()
