"""The dashboard in a real browser (Debian's chromium, driven by Playwright) against the real service and Postgres.

The page loads; a host card updates when `hw_metrics` is notified; OFF (park) from the page
parks a real worker process; a run's DAG renders with its node states; ten open pages cost
the database no more connections than one. Screenshots of each view, and the figures, go to
$QW_TEST_ARTIFACTS (default: test-artifacts/dashboard/ in the repository).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import qw_test_app
from dag_rows import approval, complete
from dashboard_helpers import dashboard_connections, publish, snapshot, start_dashboard
from procs import Procs, query, service_env, wait_for_log, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows import node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess

ARTIFACTS = Path(os.environ.get("QW_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / "test-artifacts") / "dashboard"
PAGES = 10


def _chromium() -> str | None:
    candidates = [os.environ.get("QW_TEST_CHROMIUM"), "/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")]
    return next((c for c in candidates if c and Path(c).exists()), None)


CHROMIUM = _chromium()
try:
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]

needs_browser = pytest.mark.skipif(
    CHROMIUM is None or sync_playwright is None,
    reason="no Chromium (apt-get install -y chromium) or no Playwright (pip install -e '.[test]'): browser tests skipped",
)


def _shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def _page_weight(page: Page) -> dict[str, int]:
    return page.evaluate("""() => {
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource').filter(r => !r.name.endsWith('/events'));
        const sum = (k) => res.reduce((a, r) => a + r[k], nav[k]);
        return {requests: res.length + 1, transfer_bytes: sum('transferSize'), decoded_bytes: sum('decodedBodySize')};
    }""")


@needs_browser
@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_dashboard_in_a_real_browser(database_url: str, procs: Procs, conn, tmp_path: Path) -> None:
    register_ingest_task("record", qw_test_app.record)
    worker = procs.worker(service_env(database_url, QW_HOST_LABEL="browser-box"), "fetch")
    orchestrator = procs.orchestrator(service_env(database_url))  # resumes the input step the page answers
    wait_workers_ready(database_url, [worker])
    (tmp_path / "pw").write_text("browser-secret\n")
    publish(database_url, snapshot("gpu-box-1", 12.5))
    base = start_dashboard(procs, database_url, "--password-file", str(tmp_path / "pw"), "--refresh", "0.5")
    figures: dict[str, object] = {}

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(base + "/")
        card = page.locator('article.host[data-host="gpu-box-1"]')
        card.wait_for(timeout=10_000)
        assert "12.5%" in card.inner_text() and "Test GPU" in card.inner_text()
        page.wait_for_function("() => document.body.dataset.live === '1'", timeout=10_000)
        figures["page_weight"] = _page_weight(page)

        # NOTIFY -> card: the browser stamps the moment the card shows the new figure.
        page.evaluate("""() => { const card = document.querySelector('article.host[data-host="gpu-box-1"]');
            new MutationObserver(() => { if (card.dataset.cpu === '77.7' && !window.cardAt) window.cardAt = Date.now(); })
              .observe(card, {attributes: true}); }""")
        delays = []
        for i, cpu in enumerate((77.7, 33.3, 77.7, 33.3, 77.7)):
            page.evaluate("() => { window.cardAt = null; }")
            sent = time.time()
            publish(database_url, snapshot("gpu-box-1", cpu, ts=time.time() + i))
            if cpu == 77.7:
                page.wait_for_function("() => window.cardAt !== null", timeout=5_000)
                delays.append(page.evaluate("() => window.cardAt") / 1000 - sent)
            else:
                page.wait_for_function("() => document.querySelector('article.host[data-host=\"gpu-box-1\"]').dataset.cpu === '33.3'", timeout=5_000)
        assert "77.7%" in card.inner_text()
        figures["notify_to_card_ms"] = sorted(round(1000 * d, 1) for d in delays)
        publish(database_url, snapshot("cpu-box-2", 5.0, gpus=[], stack=None))
        page.locator('article.host[data-host="cpu-box-2"]').wait_for(timeout=5_000)
        figures["screenshot_hosts"] = str(_shot(page, "overview-hosts"))

        # Jobs the real worker finishes show in the queues panel, live, with a per-minute sparkline.
        for i in range(3):
            node_queue.enqueue_ingest_job("record", "fetch", {"token": f"browser-{i}"})
        fetch_row = page.locator('#panel-queues tr[data-queue="fetch"]')
        page.wait_for_function("() => (document.querySelector('#panel-queues tr[data-queue=\"fetch\"]') || {}).textContent.includes('3 / 3 / 3')",
                               timeout=15_000)
        fetch_row.locator("td.qspark canvas").wait_for(timeout=5_000)
        figures["screenshot_queues"] = str(_shot(page, "overview-queues"))

        # Actions are hidden until log-in; OFF (park) from the page parks the real worker.
        row = page.locator('tr[data-host="browser-box"][data-queue="fetch"]')
        assert not row.locator('button[value="off-park"]').is_visible()
        page.goto(base + "/login")
        page.fill('input[name="name"]', "browser-test")
        page.fill('input[name="password"]', "browser-secret")
        page.click("form.login button")
        page.wait_for_url(base + "/")
        clicked = time.monotonic()
        row.locator('button[value="off-park"]').click()
        wait_until(lambda: query(database_url, "SELECT state FROM worker_heartbeats WHERE pid = %s", (worker.pid,))[0]["state"] == "parked",
                   timeout=15, interval=0.01, what="the worker to park")
        figures["click_off_park_to_parked_ms"] = round(1000 * (time.monotonic() - clicked), 1)
        assert figures["click_off_park_to_parked_ms"] < 2000, "the switch is meant to act within about a second"
        page.locator("#flash .flash.ok").wait_for(timeout=5_000)
        assert "OFF (park)" in page.inner_text("#flash")
        page.locator('tr[data-host="browser-box"][data-queue="fetch"][data-state="parked"]').wait_for(timeout=10_000)
        [control] = query(database_url, "SELECT desired_state, stop_policy, requested_by FROM worker_controls")
        assert control["desired_state"] == "off" and control["requested_by"].startswith("dashboard:browser-test@")
        assert worker.poll() is None, "park keeps the process alive"
        figures["screenshot_workers"] = str(_shot(page, "overview-workers-parked"))

        # A run's DAG with its node states: the leading orchestrator's drain dispatches 'ask' once 'draft' completes.
        wait_for_log(orchestrator, "orchestrator running", timeout=30)
        run_id = queue_workflows.start_run(approval(), {})
        complete(database_url, conn, run_id, "draft", {"echo": {"v": 1}})
        # The leader's drain may take the completion from the test's and dispatch 'ask' later; no
        # NOTIFY follows that step, so the page is opened once the row says it happened.
        wait_until(lambda: query(database_url, "SELECT status FROM workflow_node_jobs WHERE run_id = %s AND node_name = 'ask'", (run_id,))
                   == [{"status": "awaiting_input"}], timeout=15, what=f"'ask' awaiting input\n{procs.logs()}")
        page.goto(f"{base}/runs/{run_id}")
        for node, status in (("draft", "completed"), ("ask", "awaiting_input"), ("publish", "pending")):
            page.locator(f'svg.dag g[data-node="{node}"][data-status="{status}"]').wait_for(timeout=15_000)
        assert page.locator("svg.dag path.edge").count() == 2
        figures["screenshot_run"] = str(_shot(page, "run-dag"))
        page.fill('form.input-form textarea[name="value"]', '{"approver": "browser"}')
        page.click("form.input-form button")
        page.locator("#flash .flash.ok").wait_for(timeout=5_000)
        assert query(database_url, "SELECT value FROM workflow_input_submissions")[0]["value"] == {"approver": "browser"}
        wait_for_log(orchestrator, "orchestrator running", timeout=30)
        # The orchestrator resumes the step and enqueues the next node: the open page redraws itself.
        page.locator('svg.dag g[data-node="ask"][data-status="completed"]').wait_for(timeout=15_000)
        page.locator('svg.dag g[data-node="publish"][data-status="queued"]').wait_for(timeout=15_000)
        # The run's audit trail names who gave the input.
        page.locator("#run-actions tr", has_text="dashboard:").first.wait_for(timeout=15_000)
        figures["screenshot_run_live"] = str(_shot(page, "run-dag-after-input"))
        page.goto(base + "/runs")
        # The list is live too: a run started while the page is open appears without a reload.
        second = queue_workflows.start_run(approval(), {})
        page.locator(f'#runs-live a[href="/runs/{second}"]').wait_for(timeout=15_000)
        figures["screenshot_runs"] = str(_shot(page, "runs"))
        page.goto(base + "/jobs")
        figures["screenshot_jobs"] = str(_shot(page, "jobs"))
        job = query(database_url, "SELECT id FROM workflow_node_jobs WHERE run_id = %s AND node_name = 'draft'", (run_id,))[0]["id"]
        page.goto(f"{base}/jobs/node:{job}")
        figures["screenshot_job"] = str(_shot(page, "job"))

        # Ten open pages: the same one LISTEN connection, no more pooled ones than with one page.
        pages = [browser.new_page() for _ in range(PAGES)]
        for p in pages:
            p.goto(base + "/")
        for p in pages:
            p.wait_for_function("() => document.body.dataset.live === '1'", timeout=15_000)
        publish(database_url, snapshot("gpu-box-1", 66.6, ts=time.time() + 100))
        for p in pages:
            p.wait_for_function("() => document.querySelector('article.host[data-host=\"gpu-box-1\"]').dataset.cpu === '66.6'", timeout=10_000)
        rows = dashboard_connections(database_url)
        figures["db_connections_with_10_pages"] = len(rows)
        figures["listening_connections"] = sum(r["application_name"] == "qw-dashboard-listen" for r in rows)
        browser.close()

    (ARTIFACTS / "figures.json").write_text(json.dumps(figures, indent=2))
    print("dashboard figures:", json.dumps(figures, indent=2))
    assert figures["listening_connections"] == 1 and len(rows) <= 5, rows
