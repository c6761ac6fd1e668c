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
