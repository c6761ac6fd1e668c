"""Row-level views of a DAG run for the cancel/restart/input tests, and the input tests' approval workflow."""

from __future__ import annotations

from collections import Counter

from procs import query

from queue_workflows.dag import Workflow
from queue_workflows.dag.outbox import DispatchDrain

N = "qw_dag_nodes"


def rows(url: str, run_id: int) -> dict[str, dict]:
    return {r["node_name"]: r for r in query(url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s", (run_id,))}


def states(url: str, run_id: int) -> dict[str, str]:
    return {name: r["status"] for name, r in rows(url, run_id).items()}


def run_row(url: str, run_id: int) -> dict:
    return query(url, "SELECT * FROM workflow_runs WHERE id = %s", (run_id,))[0]


def duplicates(url: str) -> list[dict]:
    return query(url, "SELECT run_id, node_name, count(*) AS n FROM workflow_node_jobs GROUP BY 1, 2 HAVING count(*) > 1")


def executions(url: str) -> Counter:
    return Counter(r["token"] for r in query(url, "SELECT token FROM test_executions"))


def approval() -> Workflow:
    return (Workflow("approve").node("draft", f"{N}:echo", inputs={"v": 1})
            .node("ask", deps=["draft"], input=True, inputs={"prompt": "ok?", "draft": {"$from": "draft.echo"}})
            .node("publish", f"{N}:echo", deps=["ask"], inputs={"by": {"$from": "ask.approver"}}))


def complete(url, conn, run_id, name, delta):
    from queue_workflows import node_queue

    node_queue.mark_completed(rows(url, run_id)[name]["id"], delta, conn=conn)
    DispatchDrain().drain_once(conn)
