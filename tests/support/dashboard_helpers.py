"""Shared by the dashboard tests: a hw_metrics snapshot, a fake-free worker row, a login, and the CSRF token of a page."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from procs import query

LOCAL = "http://127.0.0.1:8765"  # a TestClient's base URL: a Host the dashboard answers by default
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


def snapshot(host: str, cpu: float, **extra: Any) -> dict[str, Any]:
    """A version-1 hw_metrics snapshot as docs/metrics.md documents it."""
    gib = 1 << 30
    return {
        "v": 1, "host": host, "ts": time.time(),
        "cpu": {"percent": cpu, "count": 8, "load": [0.5, 0.4, 0.3]},
        "memory": {"used_bytes": 6 * gib, "total_bytes": 32 * gib},
        "swap": {"used_bytes": 0, "total_bytes": 8 * gib},
        "gpus": [{"index": 0, "name": "Test GPU", "uuid": "GPU-0", "source": "nvml", "util_percent": 41.0,
                  "memory_used_bytes": gib, "memory_total_bytes": 48 * gib, "temperature_c": 63.0, "power_w": 120.5}],
        "stack": {"cgroup_version": 2, "cpu_percent": 9.8, "memory_bytes": 2 * gib, "other_cpu_percent": 2.7,
                  "other_memory_bytes": 4 * gib, "containers": []},
        **extra,
    }


def publish(url: str, snap: dict[str, Any]) -> None:
    """What the sidecar does: the host_metrics row and the NOTIFY, in one transaction."""
    payload = json.dumps(snap)
    query(url, "WITH up AS (INSERT INTO host_metrics (host_label, payload_version, payload, sampled_at, updated_at) "
               "VALUES (%s, 1, %s::jsonb, now(), now()) ON CONFLICT (host_label) DO UPDATE SET payload = EXCLUDED.payload, "
               "sampled_at = now(), updated_at = now() RETURNING 1) SELECT pg_notify('hw_metrics', %s) FROM up",
          (snap["host"], payload, payload))


def csrf_of(html: str) -> str:
    match = CSRF_RE.search(html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_dashboard(procs: Any, url: str, *extra: str, via_qw: bool = False, **env: str) -> str:
    """The real `queue-dashboard` (or `qw web`) process on a free localhost port; its base URL once it answers."""
    import sys

    import httpx
    from procs import service_env, wait_until

    port = free_port()
    command = ["qw_services.cli", "web"] if via_qw else ["qw_services.dashboard.service"]
    proc = procs._spawn("dashboard", [sys.executable, "-m", *command, "--port", str(port), *extra],
                        service_env(url, PGAPPNAME="qw-dashboard-test", **env))
    procs.dashboard = proc
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, f"the dashboard exited:\n{procs.logs()}"
        try:
            return httpx.get(base + "/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=30, interval=0.1, what="the dashboard to answer")
    return base


def dashboard_connections(url: str) -> list[dict[str, Any]]:
    return query(url, "SELECT application_name, state, query FROM pg_stat_activity "
                      "WHERE datname = current_database() AND application_name LIKE 'qw-dashboard%%'")
