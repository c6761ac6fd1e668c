"""queue_workflows tasks for the benchmarks, imported by worker processes via QW_APP=bench_app."""

from __future__ import annotations

import time
from typing import Any

from queue_workflows import register_ingest_task, set_workflow_provider


def sleep(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """A long-running job for the recovery benchmark."""
    time.sleep(float(args.get("seconds", 600)))
    return {}


register_ingest_task("noop", lambda reason: {})
register_ingest_task("sleep", sleep)
# The instant the job's code starts, on the host's monotonic clock (benchmarks/producer_wake.py).
register_ingest_task("stamp", lambda reason: {"monotonic": time.monotonic()})


def dag_step(**_inputs: Any) -> dict[str, Any]:
    """A no-op DAG node (benchmarks/dag.py): the cost measured is the engine's, not the node's."""
    return {}


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """The same no-op as a plain node job (`node_module="bench_app"`), for the independent-jobs baseline."""
    return {}


def chain_link(name: str) -> dict[str, Any] | None:
    """`child_chain_<i>_<n>` (benchmarks/dag_child.py): a no-op step, then link i+1 as a child run, then a
    no-op after it; link n is the leaf, its step alone. Named, so each child run stores only its own link."""
    parts = name.split("_")
    if len(parts) != 4 or parts[:2] != ["child", "chain"] or not (parts[2].isdigit() and parts[3].isdigit()):
        return None
    i, n = int(parts[2]), int(parts[3])
    nodes: list[dict[str, Any]] = [{"id": "step", "call": "bench_app:dag_step"}]
    if i < n:
        nodes += [{"id": "next", "kind": "workflow", "workflow": f"child_chain_{i + 1}_{n}", "deps": ["step"]},
                  {"id": "after", "call": "bench_app:dag_step", "deps": ["next"]}]
    return {"name": name, "nodes": nodes}


set_workflow_provider(chain_link)
