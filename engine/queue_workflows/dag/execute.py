"""Worker side of a DAG node: resolve late references, call the node by name, wrap it in the host's invoke context."""

from __future__ import annotations

from typing import Any

from queue_workflows import config
from queue_workflows.dag import control, hooks, refs, store


def invoke(job: dict[str, Any]) -> Any:
    """Call the node's callable with its inputs by name; its (JSON dict) return becomes `context_delta`.

    Inputs left as references at enqueue are resolved now, against the run's context and the
    outputs of its completed nodes; one still missing fails the node, naming the input and path.
    With `set_invoke_context(factory)`, `factory(job, run)` brackets the call and the
    `finalize(delta)` it yields is applied only when the node returned normally.
    """
    fn = hooks.resolve_callable(job["node_module"] or job["node_name"])
    inputs = dict(job["inputs"] or {})
    late = job.get("input_refs") or {}
    factory = hooks.invoke_context()
    run: dict[str, Any] = {}
    if (late or factory is not None) and job.get("run_id") is not None:
        run, scope = store.load_run_scope(job["run_id"], url=config.current().database_url())
        for name, expr in late.items():
            try:
                inputs[name] = refs.resolve(expr, scope)
            except refs.Unresolved as exc:
                raise refs.Unresolved(f"input {name!r} of node {job['node_name']!r}: {exc}") from None
    with control.running_node(job.get("run_id")):  # for `queue_workflows.dag.cancelled()` inside the node
        if factory is None:
            return fn(**inputs)
        return _with_context(factory, job, run, fn, inputs)


def _with_context(factory: Any, job: dict[str, Any], run: dict[str, Any], fn: Any, inputs: dict[str, Any]) -> Any:
    with factory(job, run) as finalize:
        value = fn(**inputs)
        return finalize(value) if callable(finalize) else value
