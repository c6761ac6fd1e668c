"""Worker side of a DAG node: load what the node needs from its run, then call it by name inside the host's invoke context."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_workflows import config
from queue_workflows.dag import control, hooks, refs, store
from queue_workflows.jobrow import NodeJob


@dataclass(frozen=True)
class RunContext:
    """What a node reads from its run, loaded before the executor runs it (so that runs no query).

    `error` is what loading raised: the node then fails with it, as it did when it loaded its own.
    """

    run: Mapping[str, Any] = field(default_factory=dict)
    scope: refs.Scope | None = None
    error: Exception | None = None


def needs_context(job: NodeJob) -> bool:
    """A DAG node with late inputs, or any DAG node while an invoke context is set, reads its run."""
    return job.run_id is not None and bool(job.input_refs or hooks.invoke_context() is not None)


def load_context(job: NodeJob, *, url: str | None = None) -> RunContext | None:
    """For the worker, before the executor: the run row and the scope its late references resolve in (None: not needed)."""
    if not needs_context(job) or job.run_id is None:
        return None
    try:
        run, scope = store.load_run_scope(job.run_id, url=url or config.current().database_url())
    except Exception as exc:  # noqa: BLE001 - the node fails with it, charged, as any error of its invoke
        return RunContext(error=exc)
    return RunContext(run, scope)


def invoke(job: NodeJob, context: RunContext | None) -> Any:
    """Call the node's callable with its inputs by name; its (JSON dict) return becomes `context_delta`.

    Inputs left as references at enqueue are resolved now, against the run's context and the
    outputs of its completed nodes (`context`, from `load_context`); one still missing fails the
    node, naming the input and path. With `set_invoke_context(factory)`, `factory(job, run)`
    brackets the call and the `finalize(delta)` it yields is applied only when the node returned normally.
    """
    fn = hooks.resolve_callable(job.node_module or job.node_name)
    inputs = dict(job.inputs or {})
    factory = hooks.invoke_context()
    run: Mapping[str, Any] = {}
    if needs_context(job):
        if context is not None and context.error is not None:
            raise context.error
        if context is None or context.scope is None:
            raise RuntimeError(f"node {job.node_name!r} of run {job.run_id} reads its run: load it with dag.execute.load_context first")
        run, scope = context.run, context.scope
        for name, expr in (job.input_refs or {}).items():
            try:
                inputs[name] = hooks.resolve_ref(expr, scope)
            except refs.Unresolved as exc:
                raise exc.at(f"input {name!r} of node {job.node_name!r}") from None
    with control.running_node(job.run_id):  # for `queue_workflows.dag.cancelled()` inside the node
        if factory is None:
            return fn(**inputs)
        return _with_context(factory, job.as_dict(), run, fn, inputs)


def _with_context(factory: Any, job: Mapping[str, Any], run: Mapping[str, Any], fn: Any, inputs: dict[str, Any]) -> Any:
    with factory(job, run) as finalize:
        value = fn(**inputs)
        return finalize(value) if callable(finalize) else value
