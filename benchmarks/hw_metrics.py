"""The hw-metrics sidecar's cost: one sample's time, NOTIFY delivery, its CPU, and a hung GPU tool's bound.

- step: one `Sidecar.step()` (sample the host, publish NOTIFY + host_metrics row, read the
  queue figures and outcome counters), p50/p95, on an empty queue and behind a backlog of
  queued jobs (the queue-depth read is the part that grows);
- notify: from the start of a publish to a LISTENing connection holding the payload;
- process CPU: a real `queue-hw-metrics` at a 1 s interval for a while, its CPU seconds per
  sample (at the default 5 s interval the sidecar's load is that / 5 s);
- hung GPU tool: `probe_gpus(timeout=0.5)` with an `nvidia-smi` on PATH that never answers.

    python benchmarks/hw_metrics.py [--samples 50] [--backlog 100000] [--seconds 20] [--database-url DSN]
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

import common
import psutil
from common import Procs, median, percentile

from queue_workflows import db
from queue_workflows.gpu.probe import probe_gpus
from queue_workflows.telemetry import nvidia
from queue_workflows.telemetry.sidecar import Sidecar

BACKLOG = "INSERT INTO ingest_jobs (task_name, queue, reason) SELECT 'noop', 'fetch', 'bench' FROM generate_series(1, %s)"


def step_times(samples: int) -> list[float]:
    sidecar = Sidecar(gpu_probe=list)
    sidecar.step()  # connect, prime the CPU rate and the outcome window
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        sidecar.step()
        times.append(time.perf_counter() - started)
    assert sidecar.state.database_up, "the sidecar could not reach the database"
    return times


def notify_latency(samples: int) -> tuple[list[float], int]:
    sidecar = Sidecar(gpu_probe=list)
    payload = sidecar.sample()
    conn = db.connect(autocommit=True)
    times, size = [], 0
    with db.connect(autocommit=True) as listener:
        listener.execute("LISTEN hw_metrics")
        for _ in range(samples):
            started = time.perf_counter()
            sent = sidecar_publish(conn, payload)
            note = next(listener.notifies(timeout=10, stop_after=1))
            times.append(time.perf_counter() - started)
            size = len(note.payload.encode())
            assert json.loads(note.payload)["host"] == payload["host"] and note.payload == sent
    conn.close()
    return times, size


def sidecar_publish(conn: db.Conn, payload: dict) -> str:
    from queue_workflows.telemetry import store

    return store.publish(conn, payload)


def process_cpu(url: str, seconds: float, procs: Procs) -> tuple[float, int]:
    env = common.child_env(url, QW_LOG_LEVEL="WARNING")
    argv = ["--interval", "1", "--port", "0", "--host-label", "bench-sidecar"]
    proc = procs.spawn("hw-metrics", [sys.executable, "-m", "qw_services.hw_metrics", *argv], env)
    ps = psutil.Process(proc.pid)
    count = "SELECT count(*) FROM host_metrics WHERE host_label = 'bench-sidecar'"
    deadline = time.monotonic() + 30
    while not common.scalar(url, count):  # started: imports done, its first sample published
        procs.check_alive([proc])
        if time.monotonic() > deadline:
            raise RuntimeError(f"no host_metrics row after 30 s:\n{procs.tail(proc)}")
        time.sleep(0.1)
    before = ps.cpu_times()
    time.sleep(seconds)
    after = ps.cpu_times()
    procs.check_alive([proc])
    used = (after.user - before.user) + (after.system - before.system)
    return used, round(seconds)


def hung_probe_seconds() -> float:
    bin_dir = Path(tempfile.mkdtemp(prefix="qwbench-smi-"))
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\nsleep 600\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"
    loader = nvidia.load_pynvml
    nvidia.load_pynvml = lambda: None  # type: ignore[assignment]  # the hung tool, not a real NVML, must answer
    try:
        started = time.perf_counter()
        probe_gpus(timeout=0.5)
        return time.perf_counter() - started
    finally:
        os.environ["PATH"] = path
        nvidia.load_pynvml = loader  # type: ignore[assignment]


def main() -> None:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    if args.quick:
        args.samples, args.backlog, args.seconds = 10, 10_000, 5.0
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner("hw-metrics sidecar", args, server_url)
        url = common.qw_database(server_url)
        try:
            empty = step_times(args.samples)
            with db.connect(autocommit=True) as conn:
                conn.execute(BACKLOG, (args.backlog,))
                conn.execute("VACUUM ANALYZE ingest_jobs")
            behind = step_times(args.samples)
            notify, size = notify_latency(args.samples)
            cpu, seconds = process_cpu(url, args.seconds, procs)
            hung = hung_probe_seconds()
        finally:
            db.close_pools()
            common.drop_database(server_url, url)
    ms = 1000.0
    common.print_table(
        ["measure", "p50", "p95", "note"],
        [
            ["step, empty queues", f"{median(empty) * ms:.1f} ms", f"{percentile(empty, 95) * ms:.1f} ms", "sample + NOTIFY/row + queue figures"],
            [f"step, {args.backlog:,} queued", f"{median(behind) * ms:.1f} ms", f"{percentile(behind, 95) * ms:.1f} ms", "queue depth read grows with the backlog"],
            ["publish -> NOTIFY received", f"{median(notify) * ms:.2f} ms", f"{percentile(notify, 95) * ms:.2f} ms", f"payload {size} bytes"],
            ["sidecar process CPU", f"{cpu / seconds * 1000:.1f} ms/sample", "", f"{cpu / seconds / 5 * 100:.2f} % of a core at the 5 s default"],
            ["probe_gpus, hung nvidia-smi", f"{hung:.2f} s", "", "timeout 0.5 s: killed, reported absent"],
        ],
    )


if __name__ == "__main__":
    main()
