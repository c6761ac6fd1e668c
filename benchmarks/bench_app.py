"""queue_workflows tasks for the benchmarks, imported by worker processes via QW_APP=bench_app."""

from __future__ import annotations

import time
from typing import Any

from queue_workflows import register_ingest_task


def sleep(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """A long-running job for the recovery benchmark."""
    time.sleep(float(args.get("seconds", 600)))
    return {}


register_ingest_task("noop", lambda reason: {})
register_ingest_task("sleep", sleep)


def dag_step(**_inputs: Any) -> dict[str, Any]:
    """A no-op DAG node (benchmarks/dag.py): the cost measured is the engine's, not the node's."""
    return {}


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """The same no-op as a plain node job (`node_module="bench_app"`), for the independent-jobs baseline."""
    return {}
