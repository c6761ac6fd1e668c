"""An application that provides named child workflows (imported via QW_APP by the child-workflow process tests)."""

from __future__ import annotations

from typing import Any

import qw_test_app  # noqa: F401 - its ingest tasks, as the other process tests have them

from queue_workflows import set_workflow_provider

N = "qw_dag_nodes"

WORKFLOWS: dict[str, dict[str, Any]] = {
    "e2e_child": {"name": "e2e_child", "nodes": [
        {"id": "slow", "call": f"{N}:work", "inputs": {"label": "child_slow", "item": {"$from": "context.item"}, "sleep": 1.5}},
        {"id": "tail", "call": f"{N}:work", "deps": ["slow"], "inputs": {"label": "child_tail", "item": {"$from": "slow.child_slow"}}},
    ]},
}


def load(name: str) -> dict[str, Any] | None:
    return WORKFLOWS.get(name)


set_workflow_provider(load)
