"""The real dashboard process through a transaction-mode PgBouncer: pages render, panels refresh without LISTEN."""

from __future__ import annotations

import httpx
import pytest
from dashboard_helpers import start_dashboard
from procs import Procs, log_text, wait_until

from queue_workflows import worker_control

pytestmark = pytest.mark.multiprocess


def test_the_dashboard_serves_through_a_transaction_pooler(database_url, pgbouncer, procs: Procs):
    bouncer = pgbouncer("transaction")
    base = start_dashboard(procs, bouncer.url, "--refresh", "0.5")
    for _ in range(15):  # past psycopg's prepare threshold, on whichever server connection PgBouncer hands out
        page = httpx.get(base + "/", timeout=10)
        assert page.status_code == 200, page.text[-2000:]
    worker_control.disable_worker("pooled-host", "fetch", "park", requested_by="pooler-test")
    wait_until(lambda: "pooled-host" in httpx.get(base + "/", timeout=10).text, timeout=15, what="the switch on the page")
    assert httpx.get(base + "/healthz", timeout=5).status_code == 200
    text = log_text(procs.started[0])
    assert "transaction-mode pooler, where LISTEN cannot work" in text, text[-2000:]
    assert "Traceback" not in text and "refresh failed" not in text, text[-3000:]
