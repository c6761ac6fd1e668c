"""What each page shows, read through the engine's public API and rendered with the package's templates.

Kept apart from the routes so the live hub can render the workers and queues panels with no
request at hand, once for every open page.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from starlette.templating import Jinja2Templates

from queue_workflows import db, run_actions, run_status, tenant_shares
from queue_workflows.hw_metrics import latest as latest_host_metrics
from queue_workflows.ops import admin, flow
from queue_workflows.ops.overview import empty_throughput, run_graph, search_jobs, throughput, worker_overview

from ..tables import age, waiting_for
from . import graph

TEMPLATES = Path(__file__).with_name("templates")
MAX_DRAWN_NODES = 400  # past this a drawing is unreadable and heavy: the node table stays
FLOW_KEYS_SHOWN = 50  # the busiest keys under flow limits; `qw keys` lists more
WORKER_STATES = ("busy", "idle", "parked", "throttled", "stopping", "dead", "absent")


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "—"


def _json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, sort_keys=True, default=str)


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(TEMPLATES))
    templates.env.filters.update(ago=age, when=_when, tojson_pretty=_json)
    return templates


def workers_context() -> dict[str, Any]:
    return {"workers": worker_overview()}


def queues_context() -> dict[str, Any]:
    rates = throughput()
    rows = admin.queue_overview()
    for row in rows:
        row.update(rates.get(row["queue"]) or empty_throughput())
    return {"queues": rows, "flow_keys": flow.flow_keys(limit=FLOW_KEYS_SHOWN)}


def tenants_context() -> dict[str, Any]:
    """Per-tenant shares, on the page as loaded, not in the live panels: the counts read every queued row."""
    return {"tenants": tenant_shares()}


def panels(templates: Jinja2Templates) -> dict[str, str]:
    """The live panels' HTML, as the hub broadcasts them (no per-user content: tokens travel in a header)."""
    return {
        "workers": templates.env.get_template("_workers.html").render(workers_context()),
        "queues": templates.env.get_template("_queues.html").render(queues_context()),
    }


def latest_hosts() -> list[dict[str, Any]]:
    with db.transaction() as conn:
        return latest_host_metrics(conn)


def run_context(run_id: int) -> dict[str, Any] | None:
    run = run_graph(run_id)
    if run is None:
        return None
    status = run_status(run_id)
    for node in run["nodes"]:  # a child node links to its run; a sleep shows its wake time, an event wait its key and timeout
        node["waits"] = waiting_for(status["nodes"].get(node["id"]) or {"status": None})
        started = status["nodes"].get(node["id"], {})
        if started.get("child_run_id") is not None:
            node.update(child_run_id=started["child_run_id"], child_status=started["child_status"])
    parent = {"id": status["parent_run_id"], "node": status["parent_node"]} if status.get("parent_run_id") is not None else None
    drawn = graph.layout(run["nodes"]) if len(run["nodes"]) <= MAX_DRAWN_NODES else None
    maps = {name: node["map"] for name, node in status["nodes"].items() if node.get("map")}  # items are not drawn: their progress is
    return {"run": run, "layout": drawn, "context": status.get("context"), "max_drawn": MAX_DRAWN_NODES,
            "box": {"w": graph.BOX_W, "h": graph.BOX_H}, "actions": run_actions(run_id), "parent": parent, "maps": maps}


def runs_context(status: str | None) -> dict[str, Any]:
    return {"runs": admin.list_runs(status=status, limit=200), "status": status or "", "statuses": admin.RUN_STATUSES}


def jobs_context(queue: str | None, status: str | None, task: str | None) -> dict[str, Any]:
    jobs = search_jobs(queue=queue, status=status, task=task, limit=200)
    return {"jobs": jobs, "queue": queue or "", "status": status or "", "task": task or "", "statuses": admin.STATUSES}


RESOURCE_HINTS = ("cpu", "rss", "vram", "load_ms", "load_seconds", "memory")


def job_context(ref: str) -> dict[str, Any]:
    detail = admin.job_detail(ref)
    job = detail["job"]
    resources = {k: v for k, v in job.items() if any(h in k for h in RESOURCE_HINTS)}
    return {**detail, "resources": resources}
