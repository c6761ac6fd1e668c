"""The reconcile sweep: retries counted on the run (a new leader carries on), with backoff, and runs queued by plain SQL started."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from dag_rows import rows, run_row, states
from procs import Procs, log_text, query, service_env, wait_for_log, wait_until

from queue_workflows import db
from queue_workflows.dag import cancel_run, reconcile_runs, restart_run

N = "qw_dag_nodes"
CYCLIC = {"name": "cyc", "nodes": [{"id": "a", "call": f"{N}:echo", "deps": ["b"]}, {"id": "b", "call": f"{N}:echo", "deps": ["a"]}]}
SWEEP = (
    "import sys\n"
    "from queue_workflows import db\n"
    "from queue_workflows.dag import reconcile_runs\n"
    "with db.connect(autocommit=True) as c:\n"
    "    print(reconcile_runs(c))\n"
)


def insert_run(url: str, definition: object, *, status: str = "running", context: dict | None = None) -> int:
    statement = "INSERT INTO workflow_runs (workflow_name, status, definition, context) VALUES ('w', %s, %s, %s) RETURNING id"
    return query(url, statement, (status, json.dumps(definition), json.dumps(context or {})))[0]["id"]


def leader_sweeps(url: str, **env: str) -> str:
    """One sweep by a new process: a leader that knows nothing of the previous one."""
    done = subprocess.run([sys.executable, "-c", SWEEP], env=service_env(url, **env), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def retry_due(url: str) -> None:
    """The backoff's time condition, driven instead of waited for."""
    query(url, "UPDATE workflow_runs SET reconcile_next_at = now() - interval '1 second' WHERE reconcile_next_at IS NOT NULL")


def backoff(url: str, run_id: int) -> tuple[int, float | None, bool]:
    [row] = query(url, """SELECT reconcile_attempts, extract(epoch FROM reconcile_next_at - updated_at)::float AS delay,
                                 poisoned_at IS NOT NULL AS poisoned FROM workflow_runs WHERE id = %s""", (run_id,))
    return row["reconcile_attempts"], row["delay"], row["poisoned"]


# --- retries counted on the run, with backoff ---------------------------------------------------


def test_a_run_that_cannot_be_advanced_is_retried_with_backoff_and_poisoned_across_leaders(database_url):
    run_id = insert_run(database_url, CYCLIC)
    first = leader_sweeps(database_url, QW_DISPATCH_MAX_ATTEMPTS="3")
    assert f"reconcile: run {run_id} could not be advanced (attempt 1/3, retry in 5s)" in first
    assert backoff(database_url, run_id) == (1, 5.0, False)
    second = leader_sweeps(database_url, QW_DISPATCH_MAX_ATTEMPTS="3")  # a new leader at once: not due yet
    assert "could not be advanced" not in second and backoff(database_url, run_id) == (1, 5.0, False)
    retry_due(database_url)
    assert "(attempt 2/3, retry in 10s)" in leader_sweeps(database_url, QW_DISPATCH_MAX_ATTEMPTS="3")
    assert backoff(database_url, run_id) == (2, 10.0, False)
    retry_due(database_url)
    with db.connect(autocommit=True, url=database_url) as third:  # and a third leader, in this process
        assert reconcile_runs(third, max_attempts=3) == []
    attempts, _, poisoned = backoff(database_url, run_id)
    run = run_row(database_url, run_id)
    assert (attempts, poisoned, run["status"]) == (3, True, "running")
    assert run["error"].startswith("reconcile poisoned after 3 attempts: WorkflowValidationError: workflow 'cyc': cycle among ['a', 'b']")
    retry_due(database_url)
    assert "could not be advanced" not in leader_sweeps(database_url, QW_DISPATCH_MAX_ATTEMPTS="3")  # poisoned: left alone
    assert backoff(database_url, run_id)[0] == 3


def test_a_run_advanced_after_a_failure_starts_its_count_afresh(database_url, conn):
    run_id = insert_run(database_url, CYCLIC)
    assert reconcile_runs(conn, max_attempts=3, backoff_base=0.25) == []
    assert backoff(database_url, run_id) == (1, 0.25, False)
    fixed = {"name": "cyc", "nodes": [{"id": "a", "call": f"{N}:echo"}, {"id": "b", "call": f"{N}:echo", "deps": ["a"]}]}
    query(database_url, "UPDATE workflow_runs SET definition = %s WHERE id = %s", (json.dumps(fixed), run_id))  # an operator's fix
    retry_due(database_url)
    assert reconcile_runs(conn, max_attempts=3) == [run_id]
    assert states(database_url, run_id) == {"a": "queued"}
    assert backoff(database_url, run_id) == (0, None, False)


def test_restart_of_a_poisoned_run_starts_its_count_afresh(database_url, conn):
    run_id = insert_run(database_url, CYCLIC)
    reconcile_runs(conn, max_attempts=1)
    assert backoff(database_url, run_id)[::2] == (1, True)
    fixed = {"name": "cyc", "nodes": [{"id": "a", "call": f"{N}:echo"}]}
    query(database_url, "UPDATE workflow_runs SET definition = %s WHERE id = %s", (json.dumps(fixed), run_id))
    cancel_run(run_id)
    assert restart_run(run_id)["enqueued"] == ["a"]
    assert backoff(database_url, run_id) == (0, None, False)


# --- a run queued by plain SQL ------------------------------------------------------------------


def test_a_run_queued_by_plain_sql_is_started_by_the_sweep(database_url, conn, caplog):
    definition = {"name": "w", "nodes": [{"id": "a", "call": f"{N}:echo", "inputs": {"u": {"$from": "context.url"}}},
                                         {"id": "b", "call": f"{N}:echo", "deps": ["a"], "inputs": {"t": {"$from": "a.echo.u"}}}]}
    run_id = insert_run(database_url, definition, status="queued", context={"url": "https://example.org"})
    caplog.set_level(logging.WARNING, logger="queue_workflows.dag.control")
    assert reconcile_runs(conn) == [run_id]
    assert run_row(database_url, run_id)["status"] == "running"
    assert states(database_url, run_id) == {"a": "queued"} and rows(database_url, run_id)["a"]["inputs"] == {"u": "https://example.org"}
    assert f"reconcile: run {run_id} was queued and never started; enqueued ['a']" in caplog.text
    assert reconcile_runs(conn) == []  # started: it has a live node now


@pytest.mark.parametrize(("definition", "context", "why"), [
    ({"name": "w", "nodes": [{"id": "a", "call": f"{N}:echo", "deps": ["zz"]}]}, {},
     "invalid definition: workflow 'w': node 'a' depends on unknown node 'zz'"),
    ({"name": "w", "nodes": [{"id": "a", "call": f"{N}:echo"}, {"id": "c", "call": f"{N}:echo"},
                             {"id": "b", "call": f"{N}:echo", "deps": ["a"], "inputs": {"x": {"$from": "c.v"}}}]}, {},
     "invalid definition: workflow 'w': node 'b' input 'x': $from 'c.v' names node 'c', which is not upstream of 'b' (add it to deps)"),
    ({"name": "w", "nodes": [{"id": "a", "call": f"{N}:echo", "skip_if": {"$from": "context.flag"}}]}, {"other": 1},
     "invalid definition: workflow 'w': node 'a' skip_if: $from 'context.flag' has no value and no default (a root node reads only the run context)"),
    (["not", "a", "workflow"], {}, "invalid definition: a workflow must be a mapping with 'name' and 'nodes', not list"),
])
def test_a_queued_run_with_an_invalid_definition_is_failed_with_the_validation_error(database_url, conn, definition, context, why):
    run_id = insert_run(database_url, definition, status="queued", context=context)
    assert reconcile_runs(conn) == [run_id]
    run = run_row(database_url, run_id)
    assert (run["status"], run["error"], run["finished_at"] is not None) == ("failed", why, True)
    assert rows(database_url, run_id) == {}


@pytest.mark.multiprocess
def test_the_orchestrator_runs_a_workflow_queued_by_plain_sql(database_url, procs: Procs):
    env = service_env(database_url)
    orchestrator = procs.orchestrator(env)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    procs.worker(env, "cpu")
    definition = {"name": "w", "nodes": [{"id": "a", "call": f"{N}:run", "inputs": {"value": {"$from": "context.n"}}},
                                         {"id": "b", "call": f"{N}:echo", "deps": ["a"], "inputs": {"v": {"$from": "a.value"}}}]}
    run_id = insert_run(database_url, definition, status="queued", context={"n": 4})
    wait_until(lambda: run_row(database_url, run_id)["status"] == "completed", timeout=30, what=f"the queued run\n{procs.logs()}")
    assert rows(database_url, run_id)["b"]["context_delta"] == {"echo": {"v": 4}}
    assert f"run {run_id} was queued and never started" in log_text(orchestrator)
