"""Map nodes on real processes: an orchestrator expanding and refilling the window, cpu claim workers running items, kill -9 of either."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest
from procs import Procs, pid_of, query, service_env, wait_for_log, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows.dag import Workflow

pytestmark = pytest.mark.multiprocess

M = "qw_map_nodes"
LIVE = "SELECT count(*) AS n FROM workflow_node_jobs WHERE map_node = 'm' AND status IN ('scheduled', 'queued', 'running')"


def executions(url: str) -> Counter:
    return Counter(r["token"] for r in query(url, "SELECT token FROM test_executions"))


def start_stack(url: str, procs: Procs, workers: int, **env_overrides: str) -> tuple:
    env = service_env(url, **env_overrides)
    orchestrator = procs.orchestrator(env)
    started = [procs.worker(env, "cpu") for _ in range(workers)]
    wait_workers_ready(url, started)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    return env, orchestrator, started


def wait_run(url: str, run_id: int, procs: Procs, timeout: float, max_live: int | None = None) -> dict:
    def finished() -> dict | None:
        if max_live is not None:  # sampled all along: the window is never exceeded
            live = query(url, LIVE)[0]["n"]
            assert live <= max_live, f"{live} live items, max_parallel {max_live}"
        status = queue_workflows.run_status(run_id)
        return status if status["status"] in ("completed", "failed") else None

    status = wait_until(finished, timeout=timeout, interval=0.05, what=f"run {run_id} to finish\n{procs.logs()}")
    assert status["status"] == "completed", f"{status}\n{procs.logs()}"
    return status


def mapped(n: int, max_parallel: int, **inputs: object) -> Workflow:
    return (Workflow("m").node("src", f"{M}:ids", inputs={"n": n})
            .map("m", f"{M}:square", deps=["src"], over={"$from": "src.ids"}, max_parallel=max_parallel, inputs={"record": True, **inputs})
            .node("sum", f"{M}:total", deps=["m"], inputs={"items": {"$from": "m.items"}}))


def test_items_retry_on_their_own_within_the_window_on_real_workers(database_url: str, procs: Procs) -> None:
    start_stack(database_url, procs, 2, QW_RETRY_BASE_SECONDS="0.05", QW_RETRY_MAX_SECONDS="0.1")
    wf = Workflow("retry").map("m", f"{M}:flaky_item", over=list(range(6)), max_parallel=2, max_attempts=2)
    status = wait_run(database_url, queue_workflows.start_run(wf, {}), procs, timeout=60, max_live=2)
    assert status["nodes"]["m"]["output"]["items"] == [{"item": i} for i in range(6)]
    assert executions(database_url) == Counter({f"try:{i}": 2 for i in range(6)})
    attempts = query(database_url, "SELECT map_index, attempts FROM workflow_node_jobs WHERE map_node = 'm' ORDER BY map_index")
    assert [r["attempts"] for r in attempts] == [2] * 6


def test_kill_9_of_a_worker_mid_map_runs_that_item_again_and_loses_none(database_url: str, procs: Procs) -> None:
    _, _, workers = start_stack(database_url, procs, 2)
    run_id = queue_workflows.start_run(mapped(8, 2, sleep=0.4), {})
    def started_item() -> dict | None:  # claimed and inside its body (it records its start), not just claimed
        rows = query(database_url, "SELECT map_index, claimed_by FROM workflow_node_jobs"
                                   " WHERE map_node = 'm' AND status = 'running' ORDER BY map_index")
        begun = executions(database_url)
        return next((r for r in rows if begun[f"item:{r['map_index']}"]), None)

    running = wait_until(started_item, timeout=20, what="an item to be claimed and started")
    os.kill(pid_of(running["claimed_by"]), signal.SIGKILL)  # between the item's start and its finish
    status = wait_run(database_url, run_id, procs, timeout=60, max_live=2)
    assert [i["sq"] for i in status["nodes"]["m"]["output"]["items"]] == [i * i for i in range(8)]
    assert status["nodes"]["sum"]["output"] == {"sum": sum(i * i for i in range(8)), "n": 8}
    counts = executions(database_url)
    assert counts == Counter({**{f"item:{i}": 1 for i in range(8)}, f"item:{running['map_index']}": 2})
    assert len([w for w in workers if w.poll() is None]) == 1
    assert_no_overlapping_runs(database_url, 0.4)


def test_kill_9_of_the_leading_orchestrator_mid_fan_out_a_new_one_finishes_the_map(database_url: str, procs: Procs) -> None:
    env, first, _ = start_stack(database_url, procs, 2)
    run_id = queue_workflows.start_run(mapped(40, 4, sleep=0.05), {})
    wait_until(lambda: sum(executions(database_url).values()) >= 6, timeout=20, what="the fan-out to be under way")
    first.kill()
    first.wait()
    wait_until(lambda: query(database_url, "SELECT 1 FROM workflow_dispatch_events WHERE processed_at IS NULL"), timeout=15,
               what="item events left for the next orchestrator")
    assert query(database_url, LIVE)[0]["n"] <= 4
    wait_for_log(procs.orchestrator(env), "orchestrator running", timeout=30)
    status = wait_run(database_url, run_id, procs, timeout=60, max_live=4)
    assert [i["sq"] for i in status["nodes"]["m"]["output"]["items"]] == [i * i for i in range(40)]
    assert executions(database_url) == Counter({f"item:{i}": 1 for i in range(40)})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE map_node = 'm'") == [{"n": 40}]
    assert status["nodes"]["m"]["map"] == {"total": 40, "done": 40, "running": 0, "failed": 0, "queued": 0}


def assert_no_overlapping_runs(url: str, run_seconds: float) -> None:
    """An item that ran twice started again only after its first run could have ended: never two at once."""
    rows = query(url, "SELECT token, ran_at FROM test_executions ORDER BY token, ran_at")
    last: dict[str, float] = {}
    for row in rows:
        at = row["ran_at"].timestamp()
        if row["token"] in last:
            assert at - last[row["token"]] >= run_seconds, f"{row['token']} started twice within its own run time"
        last[row["token"]] = at
