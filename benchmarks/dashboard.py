"""The operator dashboard's live fan-out: NOTIFY -> every open page, connections held, page weight.

- page weight: the overview's HTML and every static file it loads, gzip as a browser asks;
- fan-out: N event-stream clients (what N open pages hold) on a real `queue-dashboard`;
  `samples` hw_metrics snapshots are published (row + NOTIFY, as the sidecar does) and each
  client's arrival time is taken against the publish's start: p50/p95/max over all deliveries;
- connections: the process's Postgres connections (by application_name) with N clients open,
  and its CPU seconds over the burst.

    python benchmarks/dashboard.py [--clients 10] [--samples 200] [--database-url DSN]
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time

import common
import httpx
import psutil
import psycopg
from common import Procs, median, percentile

from queue_workflows import db

PUBLISH = ("WITH up AS (INSERT INTO host_metrics (host_label, payload_version, payload, sampled_at, updated_at) "
           "VALUES (%s, 1, %s::jsonb, now(), now()) ON CONFLICT (host_label) DO UPDATE SET payload = EXCLUDED.payload, "
           "sampled_at = now(), updated_at = now() RETURNING 1) SELECT pg_notify('hw_metrics', %s) FROM up")
CONNECTIONS = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'qw-dashboard%%'"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def page_weight(base: str) -> tuple[int, int, int]:
    """(requests, bytes on the wire, bytes decoded) for the overview and what it loads."""
    with httpx.Client(base_url=base, headers={"Accept-Encoding": "gzip"}) as client:
        page = client.get("/")
        assets = sorted(set(re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)))
        responses = [page, *(client.get(a) for a in assets)]
        return len(responses), sum(r.num_bytes_downloaded for r in responses), sum(len(r.content) for r in responses)


def listen(base: str, arrivals: dict[int, list[float]], ready: threading.Event, lock: threading.Lock) -> None:
    try:
        with httpx.stream("GET", base + "/events", timeout=httpx.Timeout(5, read=None)) as response:
            event = ""
            for line in response.iter_lines():
                if line.startswith("retry:"):
                    ready.set()
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "host":
                    seq = json.loads(line[6:]).get("seq")
                    if seq is not None:
                        with lock:
                            arrivals.setdefault(seq, []).append(time.perf_counter())
    except httpx.HTTPError:
        return


def main() -> None:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    if args.quick:
        args.samples = 30
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner("dashboard fan-out", args, server_url)
        url = common.qw_database(server_url)
        try:
            port = free_port()
            env = common.qw_env(url, PGAPPNAME="qw-dashboard-bench")
            proc = procs.spawn("dashboard", [sys.executable, "-m", "qw_services.dashboard.service", "--port", str(port), "--refresh", "60"], env)
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                procs.check_alive([proc])
                try:
                    if httpx.get(base + "/", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the dashboard did not answer:\n{procs.tail(proc)}")
                time.sleep(0.1)
            idle_connections = common.scalar(url, CONNECTIONS)
            requests, wire, decoded = page_weight(base)

            arrivals: dict[int, list[float]] = {}
            lock = threading.Lock()
            readies = [threading.Event() for _ in range(args.clients)]
            for ready in readies:
                threading.Thread(target=listen, args=(base, arrivals, ready, lock), daemon=True).start()
            for ready in readies:
                if not ready.wait(15):
                    raise RuntimeError("an event-stream client did not connect")
            ps = psutil.Process(proc.pid)
            before = ps.cpu_times()
            sent: dict[int, float] = {}
            with psycopg.connect(url, autocommit=True) as conn:
                for seq in range(args.samples):
                    payload = json.dumps({"v": 1, "host": "bench-host", "ts": time.time(), "seq": seq,
                                          "cpu": {"percent": seq % 100, "count": 8, "load": [0, 0, 0]},
                                          "memory": {"used_bytes": 1, "total_bytes": 2}, "swap": {"used_bytes": 0, "total_bytes": 0},
                                          "gpus": [], "stack": None})
                    sent[seq] = time.perf_counter()
                    conn.execute(PUBLISH, ("bench-host", payload, payload))
                    time.sleep(0.02)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sum(len(v) for v in arrivals.values()) < args.samples * args.clients:
                time.sleep(0.05)
            after = ps.cpu_times()
            busy_connections = common.scalar(url, CONNECTIONS)
        finally:
            db.close_pools()
            common.drop_database(server_url, url)
    delays = [t - sent[seq] for seq, times in arrivals.items() for t in times]
    expected = args.samples * args.clients
    cpu = (after.user - before.user) + (after.system - before.system)
    ms = 1000.0
    common.print_table(
        ["measure", "value", "note"],
        [
            ["overview page weight", f"{wire / 1024:.0f} KiB on the wire", f"{requests} requests, {decoded / 1024:.0f} KiB decoded (gzip)"],
            ["NOTIFY -> client, p50", f"{median(delays) * ms:.1f} ms", f"{len(delays)}/{expected} deliveries to {args.clients} clients"],
            ["NOTIFY -> client, p95 / max", f"{percentile(delays, 95) * ms:.1f} / {max(delays) * ms:.1f} ms", "publish start to the client holding the event"],
            ["DB connections, no client / N clients", f"{idle_connections} / {busy_connections}", "one LISTEN connection + the engine pool"],
            ["dashboard CPU over the burst", f"{cpu / args.samples * ms:.2f} ms per NOTIFY", f"{args.samples} notifications fanned out {args.clients}-fold"],
        ],
    )


if __name__ == "__main__":
    main()
