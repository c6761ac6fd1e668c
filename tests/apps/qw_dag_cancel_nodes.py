"""Node callables for the cancel/restart/input tests (each records its execution, like qw_dag_nodes)."""

from __future__ import annotations

import os
import time
from typing import Any

from qw_dag_nodes import _record

from queue_workflows.dag import cancelled


def watch_cancel(label: str = "watch", limit: float = 20.0) -> dict[str, Any]:
    """Run until the run is cancelled (the cooperative flag) or `limit` seconds pass."""
    _record(f"{label}_start")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cancelled():
            _record(f"{label}_saw_cancel")
            return {"saw_cancel": True, "pid": os.getpid()}
        time.sleep(0.05)
    _record(f"{label}_timeout")
    return {"saw_cancel": False, "pid": os.getpid()}


def use(**kwargs: Any) -> dict[str, Any]:
    _record(str(kwargs.get("label", "use")))
    return {"used": kwargs}
