"""A gpu worker that exited by a trip (75/76/79) probes its device before it claims again, and
stays parked, saying why, while the device does not answer. The probe is the real vendor tool
call, run here against a fake `nvidia-smi` on PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from procs import Procs, log_text, query, service_env, wait_exit, wait_for_log, wait_until, wait_workers_ready

from queue_workflows import node_queue

pytestmark = pytest.mark.multiprocess


def _fake_smi(bin_dir: Path, *, healthy: bool) -> None:
    script = bin_dir / "nvidia-smi"
    body = 'echo "GPU 0: Fake GPU (UUID: GPU-0)"' if healthy else 'echo "Unable to determine the device handle for GPU0: GPU is lost" >&2; exit 15'
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def _pending(url: str) -> bool | None:
    rows = query(url, "SELECT device_check_pending FROM worker_controls WHERE host_label = 'gpu-box' AND queue = 'gpu'")
    return rows[0]["device_check_pending"] if rows else None


def test_a_gpu_worker_after_a_trip_waits_for_its_device(database_url: str, procs: Procs, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_smi(bin_dir, healthy=False)
    env = service_env(
        database_url, QW_HOST_LABEL="gpu-box", QW_NODE_DEFAULT_BUDGET_S="1", QW_WATCHDOG_MAX_TRIPS="1",
        QW_HEARTBEAT_SECONDS="0.3", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    worker = procs.worker(env, "gpu")
    wait_workers_ready(database_url, [worker])
    stuck = node_queue.enqueue_node_job("render", "gpu", node_module="qw_test_nodes", inputs={"sleep": 30})
    assert wait_exit(worker, 20, procs) == 75, procs.logs()
    assert _pending(database_url) is True, "the trip flags the device for a check"

    restarted = procs.worker(env, "gpu")
    wait_workers_ready(database_url, [restarted])
    wait_for_log(restarted, "device check failed: nvidia-smi -L failed (exit 15): Unable to determine the device handle", timeout=15)
    wait_until(lambda: query(database_url, "SELECT state FROM worker_heartbeats WHERE pid = %s", (restarted.pid,))[0]["state"] == "parked", timeout=10)
    job = node_queue.enqueue_node_job("render", "gpu", node_module="qw_test_nodes", inputs={"sleep": 0})
    status = lambda: query(database_url, "SELECT status FROM workflow_node_jobs WHERE id = %s", (job["id"],))[0]["status"]  # noqa: E731
    assert status() == "queued"

    _fake_smi(bin_dir, healthy=True)  # the device recovers: the next check lets the worker claim
    wait_until(lambda: status() == "completed", timeout=15, what=f"claimed once the device answered\n{procs.logs()}")
    assert _pending(database_url) is False and restarted.poll() is None
    assert "device check passed" in log_text(restarted) or "no longer holds" in log_text(restarted)
    failed = query(database_url, "SELECT status, error FROM workflow_node_jobs WHERE id = %s", (stuck["id"],))[0]
    assert failed["status"] == "failed" and "exit 75" in failed["error"]
