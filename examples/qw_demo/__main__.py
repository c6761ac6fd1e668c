"""`python -m qw_demo`: enqueue the demo's work once, as the compose stack's opt-in `demo` service does."""

from __future__ import annotations

import os
import sys

import qw_demo
from queue_workflows import app_loader, db
from queue_workflows.ops import overview

QUEUES = ["fetch", "load"]


def seed(per_queue: int) -> str:
    """What was enqueued: nothing when the database already holds the demo's jobs, so a re-run adds none."""
    db.wait_for_schema()
    if per_queue == 0:
        return "nothing (QW_DEMO_JOBS=0)"
    if overview.search_jobs(task="demo.fetch_page", limit=1):
        return "nothing: this database already has the demo's work"
    return str({table: len(ids) for table, ids in qw_demo.enqueue_demo(per_queue, queues=QUEUES).items()})


def main() -> int:
    raw = os.environ.get("QW_DEMO_JOBS", "5")
    if not raw.isdigit():
        print(f"QW_DEMO_JOBS must be a whole number of jobs per queue, not {raw!r}", file=sys.stderr)
        return 2
    per_queue = int(raw)

    def body() -> int:
        print(f"demo enqueued {seed(per_queue)}", flush=True)
        return 0

    return app_loader.run_tool(body)


if __name__ == "__main__":
    raise SystemExit(main())
