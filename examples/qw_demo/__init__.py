"""The demo application `qw dev` runs: a few ingest tasks, a cpu node and a schedule, registered at import."""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any

from queue_workflows import ScheduleEntry, current, model_registry, node_queue, register_ingest_task, set_ingest_schedule, start_run

from . import nodes

# A gpu worker registers the demo's model when it starts (loaded once, then kept warm).
model_registry.set_builtin_model_registrar(nodes.register_models)


def fetch_page(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Pretend to download a page: a short wait and a content hash."""
    time.sleep(random.uniform(0.02, 0.15))
    url = args.get("url", "about:blank")
    return {"url": url, "sha256": hashlib.sha256(url.encode()).hexdigest()[:16], "reason": reason}


def load_rows(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    rows = [int(x) for x in args.get("rows", [])]
    time.sleep(0.01 * len(rows))
    return {"loaded": len(rows), "total": sum(rows)}


def heartbeat(reason: str) -> dict[str, Any]:
    return {"ok": True, "reason": reason}


register_ingest_task("demo.fetch_page", fetch_page)
register_ingest_task("demo.load_rows", load_rows)
register_ingest_task("demo.heartbeat", heartbeat)

# Work that arrives by itself: `qw dev` runs a scheduler, which kicks this once at start and
# then enqueues it at the top of every minute (`qw schedule` lists it).
_queues = current().settings.ingest_queues
set_ingest_schedule(
    [ScheduleEntry.cron("* * * * *", "demo.heartbeat", "demo.heartbeat", "fetch" if "fetch" in _queues else min(_queues), boot=True)]
)


def enqueue_demo(per_queue: int, *, queues: list[str]) -> dict[str, list[int]]:
    """Enqueue `per_queue` jobs on each ingest queue and on the cpu node queue, and start the demo
    workflow for each article (one English, so its `translate` is skipped); returns ids per table."""
    ingest: list[int] = []
    node_ids: list[int] = []
    for i in range(per_queue):
        for queue in queues:
            if queue == "load":
                row = node_queue.enqueue_ingest_job("demo.load_rows", queue, {"rows": list(range(i % 7))}, reason="demo")
            else:
                row = node_queue.enqueue_ingest_job("demo.fetch_page", queue, {"url": f"https://example.invalid/{i}"}, reason="demo")
            ingest.append(row["id"])
        node_ids.append(node_queue.enqueue_node_job("square", "cpu", node_module="qw_demo.square", inputs={"x": i})["id"])
    runs = [start_run(nodes.WORKFLOW, {"topic": topic}) for topic in sorted(nodes.ARTICLES)]
    return {node_queue.INGEST_TABLE: ingest, node_queue.NODE_TABLE: node_ids, "workflow_runs": runs}


def start_approval() -> int:
    """A run that waits for a person: its first node is an input step."""
    return start_run(nodes.APPROVAL, {})
