"""The dashboard's Costs page against the real Postgres: the table, the JSON its charts read, the CSV download, bad input.

Three jobs with known costs are finished through the worker's own statements; the figures on the
page, in the JSON and in the CSV are the sums worked out here by hand.
"""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from dashboard_helpers import LOCAL

from queue_workflows import db, jobstore, node_queue, register_ingest_task
from queue_workflows.node_queue import INGEST_TABLE, NODE_TABLE
from queue_workflows.ops import costs
from queue_workflows.worker.usage import Usage
from qw_services.dashboard.app import create_app

GB = 10**9


def _finish(table: object, job_id: int, host: str, usage: Usage, outcome: str = "completed") -> None:
    worker = f"{host}:q:1:abc"
    name = "ingest_jobs" if table == INGEST_TABLE else "workflow_node_jobs"
    with db.transaction() as conn:
        conn.execute(f"UPDATE {name} SET status = 'running', claimed_by = %s WHERE id = %s", (worker, job_id))  # noqa: S608 - fixed names
        conn.execute(*usage.statement(table, job_id, worker))  # type: ignore[arg-type]
        conn.execute(*jobstore.mark_statement(table, outcome, job_id, error="x" if outcome == "failed" else None, worker_id=worker))  # type: ignore[arg-type]


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    register_ingest_task("crawl", lambda reason: {})
    a = node_queue.enqueue_node_job("qw_test_nodes", "gpu", required_model="llama", tenant="acme", gpus=2)["id"]
    b = node_queue.enqueue_node_job("qw_test_nodes", "gpu", required_model="llama", tenant="acme")["id"]
    c = node_queue.enqueue_ingest_job("crawl", "fetch", tenant="globex")["id"]
    _finish(NODE_TABLE, a, "gpu-1", Usage(cpu_seconds=10.0, peak_rss_bytes=2 * GB, wall_seconds=100.0, peak_vram_bytes=8 * GB,
                                          model_load_seconds=12.0, model_hit=False))
    _finish(NODE_TABLE, b, "gpu-1", Usage(cpu_seconds=5.0, peak_rss_bytes=1 * GB, wall_seconds=50.0, peak_vram_bytes=4 * GB,
                                          model_load_seconds=0.0, model_hit=True), outcome="failed")
    _finish(INGEST_TABLE, c, "cpu-1", Usage(cpu_seconds=3.0, peak_rss_bytes=GB // 2, wall_seconds=4.0))
    with TestClient(create_app(), base_url=LOCAL) as c:
        yield c


def test_json_is_the_report_the_charts_read(client: TestClient) -> None:
    report = client.get("/costs.json", params={"by": "tenant", "since": "1h"}).json()
    assert report["by"] == "tenant" and [g["group"] for g in report["groups"]] == ["acme", "globex"]
    acme, globex = report["groups"]
    assert (acme["jobs"], acme["failed"], acme["cpu_seconds"], acme["gpu_seconds"], acme["wall_seconds"]) == (2, 1, 15.0, 250.0, 150.0)
    assert (acme["peak_vram_p50_bytes"], acme["peak_vram_max_bytes"], acme["model_load_seconds"], acme["model_hit_rate"]) == (6 * GB, 8 * GB, 12.0, 0.5)
    assert (globex["gpu_seconds"], globex["peak_vram_p95_bytes"], globex["model_hit_rate"]) == (0, None, None)
    assert report["totals"]["jobs"] == 3 and report["totals"]["cpu_seconds"] == 18.0
    by_host = client.get("/costs.json", params={"by": "host", "since": "1h"}).json()
    assert {g["group"]: g["wall_seconds"] for g in by_host["groups"]} == {"gpu-1": 150.0, "cpu-1": 4.0}


def test_page_lists_every_group_links_the_csv_and_loads_its_chart_script(client: TestClient) -> None:
    html = client.get("/costs", params={"by": "model", "since": "1d"}).text
    assert '<a href="/costs" class="here">Costs</a>' in html
    assert 'data-group="llama"' in html and 'data-group=""' in html and 'data-group="total"' in html
    assert 'data-src="/costs.json?by=model&amp;since=1d"' in html
    assert 'href="/costs.csv?by=model&amp;since=1d"' in html
    assert '<script src="/static/costs.js" defer></script>' in html
    assert client.get("/static/costs.js").status_code == 200
    assert "No job finished in this window" in client.get("/costs", params={"since": "2020-01-01", "until": "2020-01-02"}).text


def test_csv_download_is_the_chargeback_file(client: TestClient) -> None:
    response = client.get("/costs.csv", params={"by": "queue", "since": "1h"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"].startswith('attachment; filename="qw-costs-by-queue-')
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert tuple(rows[0]) == costs.CSV_COLUMNS
    assert {r["group"]: (int(r["jobs"]), float(r["gpu_seconds"])) for r in rows} == {"gpu": (2, 250.0), "fetch": (1, 0.0)}


@pytest.mark.parametrize("params", [{"since": "7x"}, {"by": "colour"}, {"since": "1h", "until": "2h"}])
def test_bad_input_is_400_with_the_reason_everywhere(client: TestClient, params: dict[str, str]) -> None:
    for path in ("/costs", "/costs.json", "/costs.csv"):
        response = client.get(path, params=params)
        assert response.status_code == 400, (path, response.text)
        assert ("is not a time" in response.text or "is not a grouping" in response.text or "must be before" in response.text), response.text
