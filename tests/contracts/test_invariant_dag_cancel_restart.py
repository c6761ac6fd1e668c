"""Cancel, restart and reconcile of DAG runs.

- Cancel: the run's not-started nodes are cancelled in the cancelling transaction; nothing of a
  cancelled run is dispatched or (re)queued afterwards, whoever tries; a running node is told
  (the cooperative flag) and left to finish, its result ignored; `hard=True` stops it (exit 77).
- Restart: only failed/cancelled and never-run nodes run again; completed outputs and skipped
  markers are kept; never a second row for a node.
- Reconcile: a running run with no live node and no pending event (its event lost) is advanced.
"""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest
from dag_rows import duplicates, executions, rows, run_row, states
from procs import Procs, query, service_env, wait_exit, wait_for_log, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows import node_queue, testing
from queue_workflows.dag import RunStateError, Workflow, cancel_run, reconcile_runs, restart_run, run_cancelled
from queue_workflows.dag.control import running_node
from queue_workflows.dag.outbox import DispatchDrain

N = "qw_dag_nodes"
C = "qw_dag_cancel_nodes"


def claim(conn, run_id, name):
    conn.execute("UPDATE workflow_node_jobs SET status = 'running', claimed_by = 'w1', attempts = attempts + 1,"
                 " lease_expires_at = now() + interval '30 s', started_at = now() WHERE run_id = %s AND node_name = %s",
                 (run_id, name))


def finish(url, conn, run_id, name):
    """Stand in for a worker: run the node in process, store its outcome, drain the outbox."""
    job = rows(url, run_id)[name]
    outcome = testing.run_node_row(job)
    if outcome.status == "completed":
        node_queue.mark_completed(job["id"], outcome.result.obj, conn=conn)
    else:
        node_queue.mark_failed(job["id"], outcome.error or "", conn=conn)
    DispatchDrain().drain_once(conn)


# --- cancel ---------------------------------------------------------------------------------


def test_cancel_cancels_not_started_nodes_at_once_and_dispatches_nothing_after(database_url, conn):
    wf = (Workflow("c").node("a", f"{N}:echo").node("b", f"{N}:echo").node("late", f"{N}:echo", deps=["a"])
          .node("ask", deps=["b"], input=True))
    run_id = queue_workflows.start_run(wf, {})
    claim(conn, run_id, "a")
    finish(database_url, conn, run_id, "b")
    assert states(database_url, run_id) == {"a": "running", "b": "completed", "ask": "awaiting_input"}
    with psycopg.connect(database_url) as caller:  # joins the caller's transaction: a rollback undoes it
        cancel_run(run_id, conn=caller)
        caller.rollback()
    assert run_row(database_url, run_id)["status"] == "running"
    got = cancel_run(run_id, reason="changed my mind")
    assert got == {"run_id": run_id, "cancelled": ["ask"], "running": ["a"]}
    run = run_row(database_url, run_id)
    assert run["status"] == "cancelled" and run["error"] == "cancelled by the operator: changed my mind" and run["finished_at"]
    assert states(database_url, run_id) == {"a": "running", "b": "completed", "ask": "cancelled"}
    assert run_cancelled(run_id) and not run_cancelled(queue_workflows.start_run(Workflow("other").node("x", f"{N}:echo"), {}))
    # the running node finishes: its result is kept on its row but ignored; 'late' is never dispatched
    node_queue.mark_completed(rows(database_url, run_id)["a"]["id"], {"done": 1}, conn=conn)
    DispatchDrain().drain_once(conn)
    reconcile_runs(conn)
    assert states(database_url, run_id) == {"a": "completed", "b": "completed", "ask": "cancelled"}
    assert run_row(database_url, run_id)["status"] == "cancelled"
    assert query(database_url, "SELECT count(*) AS n FROM workflow_dispatch_events WHERE processed_at IS NULL") == [{"n": 0}]
    with pytest.raises(RunStateError, match=f"run {run_id} is cancelled: only a running run can be cancelled"):
        cancel_run(run_id)
    with pytest.raises(RunStateError, match="no workflow run 999999"):
        cancel_run(999999)


def test_no_path_requeues_a_node_of_a_cancelled_or_failed_run(database_url, conn):
    wf = Workflow("g").node("retried", f"{N}:echo", max_attempts=3).node("released", f"{N}:echo").node("x", f"{N}:echo")
    run_id = queue_workflows.start_run(wf, {})
    claim(conn, run_id, "retried")
    claim(conn, run_id, "released")
    cancel_run(run_id)
    ids = {n: r["id"] for n, r in rows(database_url, run_id).items()}
    # a failed attempt with attempts left (retry -> scheduled), a graceful hand-back (-> queued),
    # and a plain insert: each ends 'cancelled'; an operator retry of a cancelled node is refused outright
    conn.execute("UPDATE workflow_node_jobs SET status = 'scheduled', claimed_by = NULL WHERE id = %s", (ids["retried"],))
    conn.execute("UPDATE workflow_node_jobs SET status = 'queued', claimed_by = NULL WHERE id = %s", (ids["released"],))
    with pytest.raises(queue_workflows.ops.admin.JobNotFoundError, match=f"run {run_id}, which is cancelled: .* restart the run instead"):
        queue_workflows.ops.admin.retry_job(f"node:{ids['x']}")
    conn.execute("INSERT INTO workflow_node_jobs (run_id, node_name, queue) VALUES (%s, 'sneaky', 'cpu')", (run_id,))
    assert set(states(database_url, run_id).values()) == {"cancelled"}
    assert rows(database_url, run_id)["retried"]["error"] == f"cancelled: run {run_id} is cancelled"
    # the same for a failed run: a sibling still running when it failed is not retried
    failed = queue_workflows.start_run(Workflow("f").node("bad", f"{N}:boom", max_attempts=1).node("sib", f"{N}:echo", max_attempts=3), {})
    claim(conn, failed, "sib")
    finish(database_url, conn, failed, "bad")
    assert run_row(database_url, failed)["status"] == "failed"
    conn.execute("UPDATE workflow_node_jobs SET status = 'scheduled', claimed_by = NULL WHERE run_id = %s AND node_name = 'sib'", (failed,))
    assert states(database_url, failed) == {"bad": "failed", "sib": "cancelled"}
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE status IN ('queued', 'scheduled')") == [{"n": 0}]


def test_the_cooperative_flag_inside_a_node(database_url, conn):
    run_id = queue_workflows.start_run(Workflow("flag").node("w", f"{C}:watch_cancel", inputs={"limit": 0.2}), {})
    job = rows(database_url, run_id)["w"]
    assert testing.run_node_row(job).result.obj["saw_cancel"] is False
    cancel_run(run_id)
    assert testing.run_node_row(job).result.obj["saw_cancel"] is True
    with running_node(None):
        assert queue_workflows.dag.cancelled() is False  # outside a DAG node: never cancelled


# --- restart --------------------------------------------------------------------------------


def test_restart_reruns_only_failed_and_never_run_nodes_keeping_outputs(database_url, conn):
    wf = (Workflow("r").node("a", f"{N}:echo", inputs={"v": 1}).node("skip", f"{N}:echo", deps=["a"], skip_if={"$value": True})
          .node("bad", f"{N}:boom", deps=["a"], max_attempts=1).node("sib", f"{N}:echo").node("end", f"{N}:echo", deps=["bad", "skip"]))
    run_id = queue_workflows.start_run(wf, {})
    claim(conn, run_id, "sib")
    finish(database_url, conn, run_id, "a")
    finish(database_url, conn, run_id, "bad")
    assert run_row(database_url, run_id)["status"] == "failed"
    assert states(database_url, run_id) == {"a": "completed", "skip": "skipped", "bad": "failed", "sib": "running"}
    with pytest.raises(RunStateError, match="only a failed or cancelled run can be restarted"):
        restart_run(queue_workflows.start_run(Workflow("x").node("x", f"{N}:echo"), {}))
    before = rows(database_url, run_id)
    got = restart_run(run_id)
    assert got == {"run_id": run_id, "reset": ["bad"], "enqueued": []}
    after = rows(database_url, run_id)
    for kept in ("a", "skip"):  # untouched: same row, same output, same finish time
        assert {k: after[kept][k] for k in ("id", "status", "context_delta", "finished_at", "attempts")} == \
               {k: before[kept][k] for k in ("id", "status", "context_delta", "finished_at", "attempts")}
    assert (after["bad"]["id"], after["bad"]["status"], after["bad"]["attempts"], after["bad"]["error"]) == (before["bad"]["id"], "queued", 0, None)
    run = run_row(database_url, run_id)
    assert (run["status"], run["error"], run["finished_at"]) == ("running", None, None)
    node_queue.mark_completed(after["bad"]["id"], {"fixed": True}, conn=conn)  # the rerun succeeds this time
    DispatchDrain().drain_once(conn)
    node_queue.mark_completed(after["sib"]["id"], {}, conn=conn)
    DispatchDrain().drain_once(conn)
    finish(database_url, conn, run_id, "end")
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "completed" and status["nodes"]["a"]["output"] == {"echo": {"v": 1}}
    assert duplicates(database_url) == []
    with pytest.raises(RunStateError, match="is completed"):
        restart_run(run_id)


def test_restart_of_a_cancelled_run_enqueues_the_never_run_nodes(database_url, conn):
    wf = Workflow("rc").node("a", f"{N}:echo").node("b", f"{N}:echo", deps=["a"]).node("c", f"{N}:echo", deps=["b"])
    run_id = queue_workflows.start_run(wf, {})
    claim(conn, run_id, "a")
    cancel_run(run_id)
    node_queue.mark_completed(rows(database_url, run_id)["a"]["id"], {"a": 1}, conn=conn)  # finished after the cancel
    DispatchDrain().drain_once(conn)
    assert states(database_url, run_id) == {"a": "completed"}
    got = restart_run(run_id)
    assert got == {"run_id": run_id, "reset": [], "enqueued": ["b"]}  # a's late result counts now
    finish(database_url, conn, run_id, "b")
    finish(database_url, conn, run_id, "c")
    assert queue_workflows.run_status(run_id)["status"] == "completed" and duplicates(database_url) == []


# --- reconcile ------------------------------------------------------------------------------


def test_reconcile_repairs_a_run_whose_outbox_event_was_lost(database_url, conn):
    wf = Workflow("lost").node("a", f"{N}:echo").node("b", f"{N}:echo", deps=["a"])
    run_id = queue_workflows.start_run(wf, {})
    healthy = queue_workflows.start_run(wf, {})
    node_queue.mark_completed(rows(database_url, run_id)["a"]["id"], {}, conn=conn)
    conn.execute("DELETE FROM workflow_dispatch_events")  # the event is lost: nothing would ever move the run
    assert reconcile_runs(conn) == [run_id]  # the healthy run (a queued node) is left alone
    assert states(database_url, run_id) == {"a": "completed", "b": "queued"}
    assert states(database_url, healthy) == {"a": "queued"}
    assert reconcile_runs(conn) == []  # repaired: it has a live node now
    node_queue.mark_completed(rows(database_url, run_id)["b"]["id"], {}, conn=conn)
    conn.execute("DELETE FROM workflow_dispatch_events")  # the last event lost: the run finishes by reconcile
    assert reconcile_runs(conn) == [run_id]
    assert run_row(database_url, run_id)["status"] == "completed"
    failing = queue_workflows.start_run(Workflow("lostfail").node("a", f"{N}:echo").node("b", f"{N}:echo"), {})
    claim(conn, failing, "b")
    node_queue.mark_failed(rows(database_url, failing)["a"]["id"], "boom", conn=conn)
    conn.execute("DELETE FROM workflow_dispatch_events")
    assert reconcile_runs(conn) == []  # 'b' still runs: the run is not stalled
    node_queue.mark_completed(rows(database_url, failing)["b"]["id"], {}, conn=conn)
    conn.execute("DELETE FROM workflow_dispatch_events")
    assert reconcile_runs(conn) == [failing]
    assert run_row(database_url, failing)["status"] == "failed" and run_row(database_url, failing)["error"] == "node 'a' failed"


# --- on real processes ----------------------------------------------------------------------


def start_stack(url, procs, workers, **env):
    e = service_env(url, **env)
    orchestrator = procs.orchestrator(e)
    started = [procs.worker(e, "cpu") for _ in range(workers)]
    wait_workers_ready(url, started)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    return orchestrator, started


@pytest.mark.multiprocess
def test_cancel_on_real_processes_cooperative_then_hard(database_url, procs: Procs):
    _, [worker] = start_stack(database_url, procs, 1)
    wf = (Workflow("coop").node("long", f"{C}:watch_cancel", inputs={"label": "long"})
          .node("queued", f"{C}:use", inputs={"label": "queued"}).node("after", f"{C}:use", deps=["long"], inputs={"label": "after"}))
    run_id = queue_workflows.start_run(wf, {})
    wait_until(lambda: executions(database_url)["long_start"], timeout=15, what="the long node to start")
    assert cancel_run(run_id) == {"run_id": run_id, "cancelled": ["queued"], "running": ["long"]}
    wait_until(lambda: states(database_url, run_id).get("long") == "completed", timeout=10, what=f"long to end\n{procs.logs()}")
    assert executions(database_url) == Counter({"long_start": 1, "long_saw_cancel": 1})  # told, it stopped itself
    assert rows(database_url, run_id)["long"]["context_delta"]["saw_cancel"] is True
    assert worker.poll() is None  # the cooperative cancel leaves the worker alone
    assert states(database_url, run_id) == {"long": "completed", "queued": "cancelled"}
    assert run_row(database_url, run_id)["status"] == "cancelled"

    hard = queue_workflows.start_run(Workflow("hard").node("long", f"{C}:watch_cancel", inputs={"label": "hard", "limit": 30}), {})
    wait_until(lambda: executions(database_url)["hard_start"], timeout=15, what="the hard node to start")
    assert cancel_run(hard, hard=True) == {"run_id": hard, "cancelled": ["long"], "running": []}
    assert wait_exit(worker, 15, procs) == 77  # revoked: its worker stops instead of finishing it
    assert executions(database_url)["hard_saw_cancel"] == 0 and states(database_url, hard) == {"long": "cancelled"}


@pytest.mark.multiprocess
def test_restart_and_reconcile_on_real_processes(database_url, procs: Procs):
    start_stack(database_url, procs, 2)
    wf = (Workflow("rp").node("pre", f"{C}:use", inputs={"label": "pre"})
          .node("flaky", f"{N}:flaky", deps=["pre"], max_attempts=1).node("post", f"{C}:use", deps=["flaky"], inputs={"label": "post"}))
    run_id = queue_workflows.start_run(wf, {})
    wait_until(lambda: run_row(database_url, run_id)["status"] == "failed", timeout=30, what=f"the run to fail\n{procs.logs()}")
    restart_run(run_id)
    wait_until(lambda: run_row(database_url, run_id)["status"] == "completed", timeout=30, what=f"the restarted run\n{procs.logs()}")
    assert executions(database_url) == Counter({"pre": 1, "flaky_try": 2, "flaky": 1, "post": 1})
    assert duplicates(database_url) == []
    # a lost event with the orchestrator running: the node's completion commits without one
    lost = queue_workflows.start_run(Workflow("lost").node("a", deps=[], input=True).node("b", f"{C}:use", deps=["a"], inputs={"label": "b"}), {})
    wait_until(lambda: states(database_url, lost) == {"a": "awaiting_input"}, timeout=10, what="the input step")
    with psycopg.connect(database_url) as tx:
        tx.execute("UPDATE workflow_node_jobs SET status = 'completed', context_delta = '{}' WHERE run_id = %s AND node_name = 'a'", (lost,))
        tx.execute("DELETE FROM workflow_dispatch_events WHERE run_id = %s", (lost,))
    wait_until(lambda: run_row(database_url, lost)["status"] == "completed", timeout=20, what=f"reconcile to finish the run\n{procs.logs()}")
    assert executions(database_url)["b"] == 1
