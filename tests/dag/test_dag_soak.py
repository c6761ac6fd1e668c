"""A layered DAG (fan-out, fan-in) on real processes: 4 cpu workers, two orchestrators.

Each node's body records itself only when it returns, so "exactly once" is counted where it
matters: one completed execution and one row per node. The default run takes a 122-node DAG;
the soak (`pytest -m soak`) runs the 1,000-node one, quietly and with kill -9s of random
workers throughout and of the leading orchestrator once, mid-run.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections import Counter

import pytest
from procs import Procs, query, service_env, wait_until, wait_workers_ready

import queue_workflows

pytestmark = pytest.mark.multiprocess

WIDTH, LAYERS, WORKERS = 100, 10, 4
SHORT_WIDTH, SHORT_LAYERS = 30, 4


def layered(sleep: float, width: int = WIDTH, layers: int = LAYERS) -> dict:
    """A root fanning out to `width` nodes, `layers` deep, each node fed by two of the layer before, then one sink."""
    def node(name: str, deps: list[str]) -> dict:
        return {"id": name, "call": "qw_dag_nodes:work", "deps": deps, "max_attempts": 10,
                "inputs": {"label": name, "sleep": sleep}}

    nodes, previous = [node("root", [])], ["root"]
    for k in range(layers):
        names = [f"l{k}n{j}" for j in range(width)]
        nodes += [node(n, previous if k == 0 else [previous[j], previous[(j + 1) % width]]) for j, n in enumerate(names)]
        previous = names
    nodes.append(node("sink", previous))
    return {"name": "soak", "nodes": nodes}


def progress(url: str, run_id: int) -> int:
    return query(url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE run_id = %s AND status = 'completed'", (run_id,))[0]["n"]


def finished(run_id: int) -> dict | None:
    status = queue_workflows.run_status(run_id)
    return status if status["status"] != "running" else None


def assert_each_node_once(url: str, run_id: int, status: dict, procs: Procs, width: int = WIDTH, layers: int = LAYERS, *, quiet: bool) -> None:
    """One row and one completion per node; a body ran to its end twice only where a kill -9 forced a second attempt."""
    assert status["status"] == "completed", f"{status['status']}: {status['error']}\n{procs.logs()}"
    assert len(status["nodes"]) == 1 + width * layers + 1
    assert {n["status"] for n in status["nodes"].values()} == {"completed"}
    rows = query(url, "SELECT node_name, count(*) AS n FROM workflow_node_jobs WHERE run_id = %s GROUP BY node_name", (run_id,))
    assert len(rows) == len(status["nodes"]) and {r["n"] for r in rows} == {1}
    ran = Counter(r["token"] for r in query(url, "SELECT token FROM test_executions"))
    assert set(ran) == set(status["nodes"]), set(status["nodes"]) - set(ran)
    if quiet:  # nothing was killed: no node needed a second attempt
        assert {n["attempts"] for n in status["nodes"].values()} == {1} and set(ran.values()) == {1}, {k: v for k, v in ran.items() if v > 1}
    twice = {name for name, n in ran.items() if n > 1}
    # A worker killed after the body returned but before its completion committed: the retry runs it again.
    assert all(status["nodes"][name]["attempts"] > 1 for name in twice), {n: ran[n] for n in twice}


def start(url: str, procs: Procs) -> tuple[dict[str, str], list]:
    env = service_env(url, QW_LOG_LEVEL="WARNING")
    leader = procs.orchestrator(env)
    wait_until(lambda: query(url, "SELECT 1 FROM qw_orchestrators WHERE role = 'leader'"), timeout=30, what="a leader")
    procs.orchestrator(env)
    workers = [procs.worker(env, "cpu") for _ in range(WORKERS)]
    wait_workers_ready(url, workers)
    return env, [leader, *workers]


def test_a_layered_dag_runs_each_node_exactly_once_on_four_workers(database_url: str, procs: Procs) -> None:
    start(database_url, procs)
    run_id = queue_workflows.start_run(layered(0.0, SHORT_WIDTH, SHORT_LAYERS), {})
    status = wait_until(lambda: finished(run_id), timeout=60, interval=0.2, what=f"run {run_id}\n{procs.logs()}")
    assert_each_node_once(database_url, run_id, status, procs, SHORT_WIDTH, SHORT_LAYERS, quiet=True)


@pytest.mark.soak
def test_a_thousand_node_dag_runs_each_node_exactly_once_on_four_workers(database_url: str, procs: Procs) -> None:
    start(database_url, procs)
    run_id = queue_workflows.start_run(layered(sleep=0.0), {})
    status = wait_until(lambda: finished(run_id), timeout=120, interval=0.2, what=f"run {run_id}\n{procs.logs()}")
    assert_each_node_once(database_url, run_id, status, procs, quiet=True)


@pytest.mark.soak
def test_the_same_dag_survives_kill_9_of_workers_and_of_the_leader(database_url: str, procs: Procs) -> None:
    env, (leader, *workers) = start(database_url, procs)
    run_id = queue_workflows.start_run(layered(sleep=0.02), {})
    total = 1 + WIDTH * LAYERS + 1
    rng = random.Random(7)
    stop = threading.Event()
    kills = Counter()

    def chaos() -> None:
        nonlocal leader
        while not stop.wait(rng.uniform(0.3, 0.8)):
            victim = workers.pop(rng.randrange(len(workers)))
            os.kill(victim.pid, signal.SIGKILL)
            workers.append(procs.worker(env, "cpu"))
            kills["worker"] += 1
            if not kills["leader"] and progress(database_url, run_id) > total * 0.4:
                os.kill(leader.pid, signal.SIGKILL)
                kills["leader"] += 1
                leader = procs.orchestrator(env)  # the new standby; the old standby leads now

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    try:
        status = wait_until(lambda: finished(run_id), timeout=300, interval=0.2, what=f"run {run_id}\n{procs.logs()}")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert kills["leader"] == 1 and kills["worker"] >= 5, kills
    reclaimed = query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE run_id = %s AND attempts > 1", (run_id,))[0]["n"]
    assert reclaimed >= 1, "no kill landed on a running node: the chaos proved nothing"
    assert_each_node_once(database_url, run_id, status, procs, quiet=False)
    # The replacement found a leader in place: it stands by.
    wait_until(lambda: query(database_url, "SELECT 1 FROM qw_orchestrators WHERE pid = %s AND role = 'standby'", (leader.pid,)),
               timeout=30, what="the replacement orchestrator standing by")
