"""Memory-pressure throttle: stop claiming above the high marks, resume only below the low ones."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_until, wait_workers_ready

from queue_workflows import ConfigError, node_queue, register_ingest_task
from queue_workflows.control.throttle import Marks, MemoryReadings, Throttle
from queue_workflows.settings import load_settings


def test_hysteresis_with_injected_readings(caplog):
    throttle = Throttle(Marks())
    assert not throttle.update(MemoryReadings(ram_percent=89, swap_percent=10)) and not throttle.active
    assert throttle.update(MemoryReadings(ram_percent=91, swap_percent=10)) and throttle.active
    assert "RAM 91% > 90%" in throttle.reason
    for ram in (89, 85, 80.5):  # below the high mark is not enough
        assert not throttle.update(MemoryReadings(ram_percent=ram, swap_percent=10)) and throttle.active
    assert throttle.update(MemoryReadings(ram_percent=79, swap_percent=10)) and not throttle.active
    assert throttle.update(MemoryReadings(ram_percent=50, swap_percent=71)) and "swap 71%" in throttle.reason
    assert throttle.update(MemoryReadings(ram_percent=50, swap_percent=59)) and not throttle.active
    assert throttle.update(MemoryReadings(ram_percent=50, swap_percent=10, gpu_percent=86))
    assert not throttle.update(MemoryReadings(ram_percent=50, swap_percent=10, gpu_percent=76)), "GPU resumes below 75 %"
    assert throttle.update(MemoryReadings(ram_percent=50, swap_percent=10, gpu_percent=74)) and not throttle.active
    transitions = [r.message for r in caplog.records if "memory pressure" in r.message]
    assert len(transitions) == 6, "logged once per transition, not once per reading"


def test_marks_that_would_flap_are_rejected():
    with pytest.raises(ConfigError, match="QW_MEMORY_RESUME_PERCENT"):
        load_settings(memory_throttle_percent=80, memory_resume_percent=85)


@pytest.mark.multiprocess
def test_a_worker_under_memory_pressure_stops_claiming_and_says_so(database_url: str, procs: Procs, tmp_path: Path) -> None:
    register_ingest_task("record", qw_test_app.record)
    readings = tmp_path / "memory.json"
    readings.write_text(json.dumps({"ram": 95, "swap": 0}))
    worker = procs.worker(service_env(database_url, QW_TEST_MEMORY_FILE=str(readings), QW_MEMORY_CHECK_SECONDS="0.2"), "fetch")
    wait_workers_ready(database_url, [worker])
    state = lambda: query(database_url, "SELECT state FROM worker_heartbeats WHERE pid = %s", (worker.pid,))[0]["state"]  # noqa: E731
    wait_until(lambda: state() == "throttled", timeout=10, what="the heartbeat shows the throttle")
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": "throttled"})["id"]
    status = lambda: query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (job_id,))[0]["status"]  # noqa: E731
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert status() == "queued", "a throttled worker must not claim"
        time.sleep(0.05)
    readings.write_text(json.dumps({"ram": 85, "swap": 0}))  # between the marks: still throttled
    time.sleep(0.6)
    assert status() == "queued"
    readings.write_text(json.dumps({"ram": 70, "swap": 0}))
    wait_until(lambda: status() == "completed", timeout=10, what="claims again once below the low mark")
    log = Path(worker.log_path).read_text()  # type: ignore[attr-defined]
    assert log.count("memory pressure (RAM 95% > 90%)") == 1 and log.count("memory pressure eased") == 1
