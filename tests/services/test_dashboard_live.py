"""The real dashboard process: one LISTEN connection fanned out to many event-stream clients.

Ten SSE clients (what ten open pages hold) all get a `hw_metrics` snapshot and a re-rendered
workers panel after a switch flips, while the process holds one listening connection and no
more pooled ones than with a single client.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
from dashboard_helpers import dashboard_connections, publish, snapshot, start_dashboard
from procs import Procs, wait_until

from queue_workflows import worker_control

pytestmark = pytest.mark.multiprocess
CLIENTS = 10


@dataclass
class Client:
    base: str
    events: list[tuple[float, str, str]] = field(default_factory=list)
    connected: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            self._read()
        except httpx.HTTPError:  # the service stopped at teardown
            pass

    def _read(self) -> None:
        with httpx.stream("GET", self.base + "/events", timeout=httpx.Timeout(5, read=None)) as response:
            name, data = "message", []
            for line in response.iter_lines():
                if self.stop.is_set():
                    return
                if line.startswith("retry:"):
                    self.connected.set()
                elif line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
                elif line == "" and data:
                    self.events.append((time.monotonic(), name, "\n".join(data)))
                    name, data = "message", []

    def seen(self, kind: str, text: str) -> float | None:
        return next((t for t, n, d in list(self.events) if n == kind and text in d), None)


def test_ten_stream_clients_share_one_listen_connection(database_url: str, procs: Procs) -> None:
    base = start_dashboard(procs, database_url, "--refresh", "60")
    clients = [Client(base) for _ in range(CLIENTS)]
    threads = [threading.Thread(target=c.run, daemon=True) for c in clients]
    for t in threads:
        t.start()
    wait_until(lambda: all(c.connected.is_set() for c in clients), timeout=15, what="every client to connect")

    snap = snapshot("live-box", 55.5)
    sent = time.monotonic()
    publish(database_url, snap)
    wait_until(lambda: all(c.seen("host", '"live-box"') for c in clients), timeout=10, what="the snapshot at every client")
    delays = sorted((c.seen("host", '"live-box"') or 0) - sent for c in clients)
    print(f"hw_metrics NOTIFY -> {CLIENTS} SSE clients: median {1000 * delays[CLIENTS // 2]:.1f} ms, max {1000 * delays[-1]:.1f} ms")
    assert json.loads(next(d for _, n, d in clients[0].events if n == "host" and "live-box" in d))["cpu"]["percent"] == 55.5

    worker_control.disable_worker("live-host", "fetch", "park", requested_by="live-test")
    wait_until(lambda: all(c.seen("workers", 'data-host="live-host"') for c in clients), timeout=10, what="the workers panel at every client")
    panel = next(d for _, n, d in clients[0].events if n == "workers" and "live-host" in d)
    assert "OFF" in panel and "live-test" in panel

    rows = dashboard_connections(database_url)
    listening = [r for r in rows if r["application_name"] == "qw-dashboard-listen"]
    print(f"dashboard connections with {CLIENTS} stream clients: {len(rows)} ({len(listening)} listening): {rows}")
    assert len(listening) == 1, rows
    assert len(rows) <= 1 + 4, f"one LISTEN connection plus the engine pool (max 4), whatever the clients: {rows}"
    for c in clients:
        c.stop.set()


def test_qw_web_listens_on_localhost_only_by_default(database_url: str, procs: Procs) -> None:
    import psutil

    start_dashboard(procs, database_url, via_qw=True)
    addresses = {c.laddr.ip for c in psutil.Process(procs.dashboard.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
    assert addresses == {"127.0.0.1"}, addresses


def test_an_unreadable_password_file_is_one_clear_line(database_url: str, tmp_path) -> None:
    import subprocess
    import sys

    from procs import service_env

    done = subprocess.run([sys.executable, "-m", "qw_services.dashboard.service", "--password-file", str(tmp_path / "missing")],
                          env=service_env(database_url), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--password-file: cannot read" in done.stderr, done.stderr


def _one_client(base: str) -> Client:
    client = Client(base)
    threading.Thread(target=client.run, daemon=True).start()
    assert client.connected.wait(15), "the event stream did not open"
    return client


def _listener_pids(url: str) -> set[int]:
    from procs import query

    return {r["pid"] for r in query(url, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'qw-dashboard-listen'")}


def test_the_listener_comes_back_after_its_connection_is_killed(database_url: str, procs: Procs) -> None:
    from procs import query

    base = start_dashboard(procs, database_url)
    assert httpx.get(base + "/healthz").status_code == 200
    client = _one_client(base)
    [old] = _listener_pids(database_url)
    query(database_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s AND datname = current_database()", (old,))
    wait_until(lambda: len(pids := _listener_pids(database_url)) == 1 and old not in pids, timeout=15, what="a new listening connection")
    wait_until(lambda: httpx.get(base + "/healthz").status_code == 200, timeout=5, what="healthz back to 200")
    publish(database_url, snapshot("after-outage", 1.0))
    wait_until(lambda: client.seen("host", '"after-outage"'), timeout=10, what="a snapshot after the reconnect")
    client.stop.set()


def test_a_trimmed_notification_is_completed_from_the_host_row(database_url: str, procs: Procs) -> None:
    from procs import query

    base = start_dashboard(procs, database_url)
    client = _one_client(base)
    full = snapshot("big-box", 20.0)
    full["stack"]["containers"] = [{"id": f"c{i:03d}", "name": f"qw-worker-{i}", "cpu_percent": 1.0, "memory_bytes": 1} for i in range(40)]
    trimmed = {**full, "stack": {**full["stack"], "containers": []}, "truncated": {"containers": 40}}
    query(database_url, "INSERT INTO host_metrics (host_label, payload_version, payload, sampled_at, updated_at) VALUES ('big-box', 1, %s::jsonb, now(), now())",
          (json.dumps(full),))
    query(database_url, "SELECT pg_notify('hw_metrics', %s)", (json.dumps(trimmed),))
    wait_until(lambda: client.seen("host", "qw-worker-39"), timeout=10, what="the whole snapshot read from host_metrics")
    hosts = [json.loads(d) for _, n, d in client.events if n == "host" and '"big-box"' in d]
    assert "truncated" in hosts[0] and "truncated" not in hosts[-1] and len(hosts[-1]["stack"]["containers"]) == 40
    client.stop.set()
