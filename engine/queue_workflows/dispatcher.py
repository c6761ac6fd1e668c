"""Face: the seed's `queue_workflows.dispatcher`; the pure DAG walk lives in `queue_workflows.dag.dispatcher`."""

from __future__ import annotations

from queue_workflows.dag.dispatcher import DONE, Step, advance, advance_after, dependants, on_node_end, roots, start

__all__ = ["DONE", "Step", "advance", "advance_after", "dependants", "on_node_end", "roots", "start"]
