"""DAG runs on real processes: an orchestrator draining the outbox and cpu claim workers running nodes."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest
from procs import Procs, pid_of, query, service_env, wait_for_log, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows.dag import Workflow

pytestmark = pytest.mark.multiprocess

N = "qw_dag_nodes"


def executions(url: str) -> Counter:
    return Counter(r["token"] for r in query(url, "SELECT token FROM test_executions"))


def start_stack(url: str, procs: Procs, workers: int, **env_overrides: str) -> list:
    env = service_env(url, **env_overrides)
    orchestrator = procs.orchestrator(env)
    started = [procs.worker(env, "cpu") for _ in range(workers)]
    wait_workers_ready(url, started)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    return started


def wait_run(run_id: int, procs: Procs, timeout: float) -> dict:
    def finished() -> dict | None:
        status = queue_workflows.run_status(run_id)
        return status if status["status"] in ("completed", "failed") else None

    status = wait_until(finished, timeout=timeout, interval=0.1, what=f"run {run_id} to finish\n{procs.logs()}")
    assert status["status"] == "completed", f"{status}\n{procs.logs()}"
    return status


def test_fan_out_fan_in_and_a_skip_on_two_workers_each_node_exactly_once(database_url: str, procs: Procs) -> None:
    start_stack(database_url, procs, 2)
    wf = Workflow("e2e").node("source", f"{N}:source", inputs={"n": 4})
    for i in range(4):
        wf.node(f"w{i}", f"{N}:work", deps=["source"], inputs={"item": {"$from": f"source.items.{i}"}, "label": f"w{i}", "sleep": 0.2})
    wf.node("maybe", f"{N}:work", deps=["source"], inputs={"label": "maybe"},
            skip_if={"$eq": [{"$from": "source.items.0.kind"}, "even"]})
    wf.node("after_maybe", f"{N}:work", deps=["maybe"], inputs={"label": "after_maybe"})
    wf.node("join", f"{N}:join", deps=[f"w{i}" for i in range(4)] + ["after_maybe"],
            inputs={"a": {"$from": "w0.w0"}, "b": {"$from": "w3.w3.kind"}})
    run_id = queue_workflows.start_run(wf, {})
    status = wait_run(run_id, procs, timeout=30)
    states = {name: (node["status"], node["attempts"]) for name, node in status["nodes"].items()}
    assert states == {"source": ("completed", 1), **{f"w{i}": ("completed", 1) for i in range(4)},
                      "maybe": ("skipped", 0), "after_maybe": ("skipped", 0), "join": ("completed", 1)}
    assert executions(database_url) == Counter({"source": 1, "w0": 1, "w1": 1, "w2": 1, "w3": 1, "join": 1})
    assert status["nodes"]["w2"]["output"]["w2"] == {"i": 2, "kind": "even"}
    assert status["nodes"]["join"]["output"]["joined"] == ["a", "b"]
    pids = {node["output"]["pid"] for node in status["nodes"].values() if node["output"]}
    assert len(pids) == 2, "both workers took part in the fan-out"  # 4 x 0.2 s nodes, 2 idle workers
    undone = query(database_url, "SELECT count(*) AS n FROM workflow_dispatch_events WHERE processed_at IS NULL")
    assert undone == [{"n": 0}]


def test_kill_9_of_a_worker_mid_node_runs_the_node_and_its_dependant_once(database_url: str, procs: Procs) -> None:
    workers = start_stack(database_url, procs, 2)
    wf = (Workflow("kill").node("slow", f"{N}:work", inputs={"label": "slow", "sleep": 2.0})
          .node("after", f"{N}:work", deps=["slow"], inputs={"label": "after"}))
    run_id = queue_workflows.start_run(wf, {})
    running = wait_until(
        lambda: next(iter(query(database_url, "SELECT claimed_by FROM workflow_node_jobs WHERE node_name = 'slow' AND status = 'running'")), None),
        timeout=15, what="the slow node to be claimed")
    os.kill(pid_of(running["claimed_by"]), signal.SIGKILL)  # between its claim and its finish
    status = wait_run(run_id, procs, timeout=30)
    assert status["nodes"]["slow"]["attempts"] == 2
    assert executions(database_url) == Counter({"slow": 1, "after": 1})
    assert len([w for w in workers if w.poll() is None]) == 1
    kinds = query(database_url, "SELECT node_name, kind FROM workflow_dispatch_events ORDER BY id")
    assert kinds == [{"node_name": "slow", "kind": "completed"}, {"node_name": "after", "kind": "completed"}]


def test_a_node_retried_under_its_own_max_attempts_then_a_failed_node_fails_the_run(database_url: str, procs: Procs) -> None:
    start_stack(database_url, procs, 2, QW_RETRY_BASE_SECONDS="0.1", QW_RETRY_MAX_SECONDS="0.2")
    wf = Workflow("retry").node("flaky", f"{N}:flaky", max_attempts=2).node("after", f"{N}:work", deps=["flaky"], inputs={"label": "after"})
    status = wait_run(queue_workflows.start_run(wf, {}), procs, timeout=30)
    assert status["nodes"]["flaky"]["attempts"] == 2 and status["nodes"]["flaky"]["output"] == {"tries": 2}
    assert executions(database_url) == Counter({"flaky_try": 2, "flaky": 1, "after": 1})
    wf = (Workflow("fails").node("bad", f"{N}:boom", max_attempts=1).node("slow", f"{N}:work", inputs={"label": "slow", "sleep": 1})
          .node("late", f"{N}:work", inputs={"label": "late"}, deps=["slow"]).node("next", f"{N}:work", deps=["bad"]))
    run_id = queue_workflows.start_run(wf, {})
    failed = wait_until(lambda: (s := queue_workflows.run_status(run_id))["status"] == "failed" and s, timeout=30, what="the run to fail")
    assert failed["error"] == "node 'bad' failed" and failed["nodes"]["next"]["status"] == "pending"
    # a sibling already running finishes (one still queued would have been cancelled) ...
    wait_until(lambda: queue_workflows.run_status(run_id)["nodes"]["slow"]["status"] in ("completed", "cancelled"), timeout=10, what="slow to end")
    assert queue_workflows.run_status(run_id)["nodes"]["late"]["status"] == "pending"  # a failed run starts nothing new


def test_kill_9_of_the_orchestrator_mid_run_a_new_one_finishes_it(database_url: str, procs: Procs) -> None:
    env = service_env(database_url)
    first = procs.orchestrator(env)
    workers = [procs.worker(env, "cpu") for _ in range(2)]
    wait_workers_ready(database_url, workers)
    wait_for_log(first, "orchestrator running", timeout=30)
    wf = Workflow("orch").node("a", f"{N}:work", inputs={"label": "a"})
    for i in range(6):
        wf.node(f"b{i}", f"{N}:work", deps=["a"], inputs={"label": f"b{i}", "sleep": 0.3})
    wf.node("c", f"{N}:join", deps=[f"b{i}" for i in range(6)])
    run_id = queue_workflows.start_run(wf, {})
    wait_until(lambda: executions(database_url)["b0"] + executions(database_url)["b1"] > 0, timeout=15, what="the fan-out to start")
    first.kill()  # events of the b's completing now pile up in the outbox: nobody drains them
    first.wait()
    wait_until(lambda: query(database_url, "SELECT 1 FROM workflow_dispatch_events WHERE processed_at IS NULL"), timeout=15,
               what="an event left for the next orchestrator")
    wait_for_log(procs.orchestrator(env), "orchestrator running", timeout=30)
    wait_run(run_id, procs, timeout=30)
    assert executions(database_url) == Counter({"a": 1, "join": 1, **{f"b{i}": 1 for i in range(6)}})


def test_a_200_node_layered_dag_on_four_workers(database_url: str, procs: Procs) -> None:
    start_stack(database_url, procs, 4)
    wf = Workflow("layers").node("root", f"{N}:work", inputs={"label": "root"})
    previous = ["root"]
    for layer in range(3):
        current = [f"l{layer}_{i}" for i in range(66)]
        for i, name in enumerate(current):
            deps = ["root"] if layer == 0 else [previous[i], previous[(i + 1) % 66]]
            wf.node(name, f"{N}:work", deps=deps, inputs={"label": name})
        previous = current
    wf.node("join", f"{N}:join", deps=previous)
    assert len(wf.nodes) == 200
    run_id = queue_workflows.start_run(wf, {})
    wait_run(run_id, procs, timeout=60)
    counts = executions(database_url)
    assert len(counts) == 200 and set(counts.values()) == {1}
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE run_id = %s AND attempts = 1", (run_id,)) == [{"n": 200}]


def test_kill_9_of_the_leading_orchestrator_while_a_child_runs(database_url: str, procs: Procs) -> None:
    import qw_child_app

    queue_workflows.set_workflow_provider(qw_child_app.load)  # start_run here checks the child's name, as the services load it

    env = service_env(database_url, QW_APP="qw_child_app")
    first = procs.orchestrator(env)
    workers = [procs.worker(env, "cpu") for _ in range(2)]
    wait_workers_ready(database_url, workers)
    wait_for_log(first, "orchestrator running", timeout=30)
    wf = (Workflow("parent").node("a", f"{N}:work", inputs={"label": "a", "item": 5})
          .child("sub", "e2e_child", deps=["a"], inputs={"item": {"$from": "a.a"}})
          .node("after", f"{N}:work", deps=["sub"], inputs={"label": "after", "item": {"$from": "sub.tail.child_tail"}}))
    run_id = queue_workflows.start_run(wf, {})
    wait_until(lambda: query(database_url, "SELECT 1 FROM workflow_node_jobs j JOIN workflow_runs r ON r.id = j.run_id "
                                           "WHERE r.parent_run_id = %s AND j.node_name = 'slow' AND j.status = 'running'", (run_id,)),
               timeout=15, what=f"the child's slow node to run\n{procs.logs()}")
    first.kill()  # the child's end, and its parent's hand-off, are left to the next leader
    first.wait()
    wait_for_log(procs.orchestrator(env), "orchestrator running", timeout=30)
    status = wait_run(run_id, procs, timeout=30)
    child = status["nodes"]["sub"]["child_run_id"]
    assert status["nodes"]["sub"]["child_status"] == "completed"
    assert status["nodes"]["sub"]["output"]["tail"]["child_tail"] == 5
    assert status["nodes"]["after"]["output"]["after"] == 5
    assert queue_workflows.run_status(child)["parent_run_id"] == run_id
    assert executions(database_url) == Counter({"a": 1, "child_slow": 1, "child_tail": 1, "after": 1})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_dispatch_events WHERE processed_at IS NULL") == [{"n": 0}]
