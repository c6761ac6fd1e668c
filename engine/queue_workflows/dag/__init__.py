"""DAG workflows: definitions, the reference mini-language, the pure dispatcher, and the outbox.

    from queue_workflows.dag import Workflow
    wf = Workflow("ingest").node("fetch", "myapp.nodes.fetch").node("parse", "myapp.nodes.parse", deps=["fetch"],
                                inputs={"html": {"$from": "fetch.html"}})
    run_id = queue_workflows.start_run(wf, {"url": "https://example.org"})

Modules: `definition` (builder and data form), `validate`, `refs`, `dispatcher` (pure DAG walk),
`hooks` (host-injected resolvers), `store` (start_run/run_status/apply a dispatch step),
`execute` (worker-side invoke), `outbox` (the orchestrator's drain), `control` (cancel, restart,
reconcile), `inputs` (input steps), `audit` (who cancelled, restarted or answered a run),
`child` (child workflows: a node that starts a run of its own), `keeper` (the orchestrator's
input listener and reconcile sweep), `timers` (sleep and wait_event nodes), `events`
(send_event) and `timekeeper` (the orchestrator's service that fires them).
"""

from __future__ import annotations

from queue_workflows.dag.audit import run_actions
from queue_workflows.dag.control import RunStateError, cancel_run, cancelled, reconcile_runs, restart_run, run_cancelled
from queue_workflows.dag.definition import Node, Workflow, WorkflowValidationError
from queue_workflows.dag.events import event_status, send_event
from queue_workflows.dag.hooks import (
    set_invoke_context,
    set_node_module_package,
    set_node_resolver,
    set_ref_resolver,
    set_workflow_provider,
)
from queue_workflows.dag.inputs import InputNotAwaitedError, submit_input
from queue_workflows.dag.validate import check_upstream_refs, validate

__all__ = [
    "InputNotAwaitedError",
    "Node",
    "RunStateError",
    "cancel_run",
    "cancelled",
    "reconcile_runs",
    "restart_run",
    "run_actions",
    "run_cancelled",
    "submit_input",
    "send_event",
    "event_status",
    "Workflow",
    "WorkflowValidationError",
    "set_invoke_context",
    "set_node_module_package",
    "set_node_resolver",
    "set_ref_resolver",
    "set_workflow_provider",
    "check_upstream_refs",
    "validate",
]
