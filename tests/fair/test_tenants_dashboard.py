"""The dashboard's front page shows each tenant's queued/running/served share and weight."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():  # Starlette 1.x nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from dashboard_helpers import LOCAL

from queue_workflows import node_queue, register_ingest_task, set_tenant_weight
from queue_workflows.jobstore import Claimant
from qw_services.dashboard.app import create_app


def test_the_front_page_shows_tenant_shares(database_url):
    register_ingest_task("t", lambda reason, args: args)
    set_tenant_weight("acme", 3)
    node_queue.enqueue_ingest_jobs([{"task_name": "t", "queue": "fetch", "tenant": t} for t in ("acme",) * 6 + ("zeta",) * 6])
    for _ in range(4):
        node_queue.claim_ingest_job("fetch", Claimant("w", 1))
    with TestClient(create_app(), base_url=LOCAL) as client:
        html = client.get("/").text
    row = html.split('data-tenant="acme"', 1)[1].split("</tr>", 1)[0]
    cells = [c.rsplit(">", 1)[1] for c in row.split("</td>")[:-1]]
    assert cells == ["fetch", "acme", "3", "3", "3", "3", "75.0%", "75.0%"], cells
    assert 'data-tenant="zeta"' in html
