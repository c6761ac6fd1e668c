"""Container health checks that cost nothing: each service rewrites a stamp after a beat that
reached the database, and docker/qw-healthy only compares the stamp's age with a limit."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

from queue_workflows.common.health_stamp import HealthStamp

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "qw-healthy"


def _check(stamp: Path, limit: str = "30") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QW_HEALTH_FILE": str(stamp)}
    return subprocess.run([str(SCRIPT), limit], capture_output=True, text=True, env=env, timeout=10)


def test_a_fresh_stamp_is_healthy_and_says_what_beat(tmp_path):
    stamp = tmp_path / "qw" / "healthy"
    HealthStamp(stamp).touch("worker w1 (idle) beat")
    result = _check(stamp)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("healthy: worker w1 (idle) beat")


def test_a_stale_or_missing_stamp_is_unhealthy_with_one_line(tmp_path):
    stamp = tmp_path / "healthy"
    missing = _check(stamp)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "no health stamp" in missing.stderr
    HealthStamp(stamp).touch("orchestrator o1 beat")
    old = time.time() - 31
    os.utime(stamp, (old, old))
    stale = _check(stamp)
    assert stale.returncode == 1 and "orchestrator o1 beat 31s ago (limit 30s)" in stale.stderr, stale.stderr


def test_a_stamp_that_cannot_be_written_warns_once_and_never_raises(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    stamp = HealthStamp(blocker / "healthy")  # a path under a regular file
    stamp.touch("a")
    stamp.touch("b")
    assert sum("health stamp" in r.getMessage() for r in caplog.records) == 1
    HealthStamp(None).touch("no file configured: nothing happens")


def test_a_check_costs_a_few_milliseconds_of_cpu(tmp_path):
    stamp = tmp_path / "healthy"
    HealthStamp(stamp).touch("x")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(20):
        assert _check(stamp).returncode == 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    per_check = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / 20
    print(f"\nqw-healthy: {per_check * 1000:.1f} ms of CPU per check")
    assert per_check < 0.05  # the budget; `qw health worker` took about 0.6 s


def test_a_running_worker_orchestrator_and_scheduler_keep_their_stamps_fresh(database_url, procs, tmp_path):
    from procs import service_env, wait_until

    stamps = {name: tmp_path / name / "healthy" for name in ("worker", "orchestrator", "scheduler")}
    procs.worker(service_env(database_url, QW_HEALTH_FILE=str(stamps["worker"])), "fetch")
    procs.orchestrator(service_env(database_url, QW_HEALTH_FILE=str(stamps["orchestrator"])))
    procs.scheduler(service_env(database_url, QW_HEALTH_FILE=str(stamps["scheduler"]), QW_APP="qw_sched_app"))
    for name, stamp in stamps.items():
        wait_until(lambda: stamp.exists(), timeout=30, what=f"the {name}'s health stamp")
        result = _check(stamp, "10")
        assert result.returncode == 0 and name in result.stdout, (name, result.stdout, result.stderr, procs.logs())
