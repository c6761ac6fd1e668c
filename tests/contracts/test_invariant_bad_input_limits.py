"""Contract 8 at the DAG and worker-control entry points: text Postgres cannot store, oversize
names, nesting past the depth limit and ids of the wrong type get the project's own error,
before any statement, and nothing is written."""

from __future__ import annotations

import psycopg
import pytest
from procs import query
from psycopg.pq import TransactionStatus

import queue_workflows
from queue_workflows import InvalidPayloadError, worker_control
from queue_workflows.dag import Workflow, WorkflowValidationError, cancel_run, restart_run, run_cancelled, submit_input
from queue_workflows.payloads import MAX_JSON_DEPTH

N = "qw_dag_nodes"
MAX_NAME_CHARS = 200  # the documented limit on a workflow name and a note (docs/dag.md)
SURROGATE = b"\xff".decode("utf-8", "surrogateescape")  # what a non-UTF-8 argv or file name becomes


def deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"d": value}
    return value


def written(url: str) -> int:
    return query(url, "SELECT (SELECT count(*) FROM workflow_runs) + (SELECT count(*) FROM workflow_node_jobs)"
                      " + (SELECT count(*) FROM worker_controls) + (SELECT count(*) FROM workflow_input_submissions) AS n")[0]["n"]


def one(**node) -> dict:
    return {"name": "w", "nodes": [{"id": "a", "call": f"{N}:echo", **node}]}


@pytest.mark.parametrize(
    ("workflow", "message"),
    [
        ({**one(), "name": "bad\x00name"}, r"workflow: workflow name contains a NUL character \(\\x00\) at position 3"),
        ({**one(), "name": f"bad{SURROGATE}"}, r"workflow: workflow name contains a lone surrogate"),
        ({**one(), "name": "x" * 1_000_000}, f"workflow: workflow name must be 1 to {MAX_NAME_CHARS} characters, not 1000000"),
        (Workflow("x" * (MAX_NAME_CHARS + 1)).node("a", f"{N}:echo"), f"must be 1 to {MAX_NAME_CHARS} characters"),
        (one(inputs={"x": {"key\x00": 1}}), r"""node 'a'\["inputs"\]\["x"\]\["key\\u0000"\] contains a NUL"""),
        (one(inputs={"x": ["ok", f"v{SURROGATE}"]}), r"""node 'a'\["inputs"\]\["x"\]\[1\] contains a lone surrogate"""),
        (one(skip_if={"$eq": [{"$from": "context.k", "default": ""}, "a\x00"]}), r"""node 'a'\["skip_if"\]\["\$eq"\]\[1\] contains a NUL"""),
        (one(skip_if={"$from": "context.k\x00"}), r"skip_if.*contains a NUL"),
        (one(inputs={"x": deep(5000)}), f"node 'a'.* is nested more than {MAX_JSON_DEPTH} levels deep"),
        (one(skip_if={"$eq": [deep(5000), 1]}), f"is nested more than {MAX_JSON_DEPTH} levels deep"),
    ],
)
def test_start_run_refuses_what_postgres_cannot_store_and_writes_nothing(database_url, workflow, message):
    with psycopg.connect(database_url) as caller:
        with pytest.raises(WorkflowValidationError, match=message) as caught:
            queue_workflows.start_run(workflow, {}, conn=caller)
        assert caller.info.transaction_status == TransactionStatus.IDLE  # refused before any statement
    assert len(str(caught.value)) < 400  # the bad value is never echoed whole
    assert written(database_url) == 0


def test_a_deep_context_or_input_answer_is_refused_without_recursion(database_url, conn):
    with pytest.raises(InvalidPayloadError, match=f"context is nested more than {MAX_JSON_DEPTH} levels deep"):
        queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo"), deep(5000))
    run_id = queue_workflows.start_run(Workflow("w").node("ask", input=True), {})
    before = written(database_url)
    with pytest.raises(InvalidPayloadError, match=f"input value is nested more than {MAX_JSON_DEPTH} levels deep"):
        submit_input(run_id, "ask", deep(5000))
    with pytest.raises(InvalidPayloadError, match="contains a NUL"):
        submit_input(run_id, "ask", {"key\x00": 1})
    assert written(database_url) == before


@pytest.mark.parametrize("bad", ["x", "1", 1.0, True, None, 0, -3, 2**63])
def test_run_ids_of_the_wrong_kind_are_bad_input_not_driver_errors(database_url, bad):
    for call in (queue_workflows.run_status, queue_workflows.run_actions, run_cancelled, cancel_run, restart_run):
        with pytest.raises(InvalidPayloadError, match="run id must be a positive integer, not "):
            call(bad)
    with pytest.raises(InvalidPayloadError, match="run id must be a positive integer"):
        submit_input(bad, "ask", {})
    assert written(database_url) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reason": f"bad {SURROGATE}"}, r"reason contains a lone surrogate \(\\udcff\) at position 4, which is not valid UTF-8"),
        ({"reason": "a\x00b"}, r"reason contains a NUL character"),
        ({"reason": "x" * (MAX_NAME_CHARS + 1)}, f"reason must be 1 to {MAX_NAME_CHARS} characters"),
        ({"requested_by": f"me{SURROGATE}"}, r"requested_by contains a lone surrogate"),
    ],
)
def test_worker_switch_notes_postgres_cannot_store_are_refused(database_url, kwargs, message):
    for switch in (lambda: worker_control.disable_worker("h1", "cpu", **kwargs), lambda: worker_control.enable_worker("h1", "cpu", **kwargs)):
        with pytest.raises(InvalidPayloadError, match=message):
            switch()
    assert written(database_url) == 0
