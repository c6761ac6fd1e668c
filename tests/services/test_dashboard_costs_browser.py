"""The Costs page in a real browser (Chromium, Playwright) against the real service, which logs JSON lines.

The page draws a bar chart per figure from /costs.json with no console error (the page's CSP
included), and its CSV link downloads the chargeback file; every line the dashboard process
logged, uvicorn's own included, parses as JSON.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from dashboard_helpers import start_dashboard
from procs import Procs
from test_dashboard_browser import ARTIFACTS, CHROMIUM, needs_browser, sync_playwright
from test_dashboard_costs import GB, _finish

from queue_workflows import node_queue
from queue_workflows.node_queue import NODE_TABLE
from queue_workflows.ops import costs
from queue_workflows.worker.usage import Usage

pytestmark = pytest.mark.multiprocess


@needs_browser
@pytest.mark.soak  # about 20 s, as the overview's browser test: the soak stage runs it
def test_costs_page_draws_its_charts_and_downloads_the_csv(database_url: str, procs: Procs) -> None:
    for tenant, model, wall in (("acme", "llama", 100.0), ("globex", "whisper", 40.0), ("acme", "whisper", 10.0)):
        job = node_queue.enqueue_node_job("qw_test_nodes", "gpu", required_model=model, tenant=tenant)["id"]
        _finish(NODE_TABLE, job, "gpu-1", Usage(cpu_seconds=wall / 2, peak_rss_bytes=GB, wall_seconds=wall, peak_vram_bytes=int(wall) * GB // 10,
                                                model_load_seconds=3.0, model_hit=False))
    base = start_dashboard(procs, database_url, QW_LOG_FORMAT="json")
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
        page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
        page.goto(base + "/costs?by=tenant&since=1h")
        page.wait_for_selector('#cost-charts[data-drawn="2"]', timeout=10_000)
        metrics = page.eval_on_selector_all("#cost-charts .cost-chart", "cards => cards.map(c => [c.dataset.metric, c.querySelectorAll('canvas').length])")
        assert [m for m, canvases in metrics if canvases == 1] == ["cpu_seconds", "gpu_seconds", "peak_vram_p95_bytes", "peak_vram_max_bytes",
                                                                    "model_load_seconds", "model_hit_rate"], metrics
        assert page.inner_text('#costs-table tr[data-group="acme"] td:nth-child(5)') == "110.0"  # GPU-seconds
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "costs.png"), full_page=True)
        with page.expect_download() as download:
            page.click("#costs-csv")
        rows = list(csv.DictReader(io.StringIO(open(download.value.path()).read())))
        browser.close()
    assert errors == []
    assert tuple(rows[0]) == costs.CSV_COLUMNS and {r["group"]: float(r["gpu_seconds"]) for r in rows} == {"acme": 110.0, "globex": 40.0}
    procs.stop_all()
    lines = procs.dashboard.log_path.read_text().splitlines()  # type: ignore[attr-defined]
    assert lines and all(isinstance(json.loads(line), dict) for line in lines), lines
    assert any(json.loads(line)["logger"].startswith("uvicorn") for line in lines), lines
