"""The README's main command: `qw dev` on a machine with no database configured."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from procs import wait_until


def _dev_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QW_")}
    env.update(QW_DATA_DIR=str(tmp_path / "qwdata"), QW_LOG_LEVEL="WARNING", QW_ORCHESTRATOR_METRICS_PORT="0", **extra)
    return env


def _summary(lines: list[str]) -> dict[str, dict[str, str]] | None:
    """The rows of the table `qw dev` prints when the demo finished, by queue (None until printed)."""
    text = "".join(lines)
    if "demo finished" not in text:
        return None
    table = text.split("demo finished", 1)[1].splitlines()
    header = next((line.split() for line in table if line.startswith("family")), None)
    rows = {cells[1]: dict(zip(header, cells)) for cells in map(str.split, table) if header and cells[:1] in (["node"], ["ingest"])}
    return rows if {"cpu", "fetch", "load"} <= set(rows) else None


def _postgres_running_under(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and any(str(data_dir) in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


@pytest.mark.multiprocess
def test_qw_dev_runs_the_demo_on_an_embedded_postgres_and_stops_on_ctrl_c(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "qw_services.cli", "dev", "--jobs", "4"],
        env=_dev_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        rows = wait_until(lambda: _summary(lines), timeout=90, what="the demo's summary table")
        assert rows["load"]["completed"] == "4" and rows["load"]["failed"] == "0", rows
        # cpu also runs the demo workflow's nodes; gpu its embed node (on the CPU here)
        assert int(rows["cpu"]["completed"]) > 4 and rows["cpu"]["failed"] == "0" and rows["gpu"]["completed"] == "2", rows
        # fetch also runs the demo schedule's boot kick and minute ticks
        assert int(rows["fetch"]["completed"]) >= 4 and rows["fetch"]["failed"] == "0", rows
        wait_until(lambda: any("qw dev: schedule 'demo.heartbeat' enqueued" in line for line in lines), timeout=30, what="the schedule's boot kick")
        # The printed DSN lets `qw status` watch the embedded database from another terminal.
        dsn = next(line for line in lines if "embedded Postgres at " in line).split("embedded Postgres at ", 1)[1].strip()
        status = subprocess.run(
            [sys.executable, "-m", "qw_services.cli", "status", "--json"],
            env={**_dev_env(tmp_path), "QW_DATABASE_URL": dsn}, capture_output=True, text=True, timeout=60,
        )
        assert status.returncode == 0 and json.loads(status.stdout)["node"]["gpu"]["completed"] == 2, status.stderr
        runs = subprocess.run(
            [sys.executable, "-m", "qw_services.cli", "runs", "--json"],
            env={**_dev_env(tmp_path), "QW_DATABASE_URL": dsn}, capture_output=True, text=True, timeout=60,
        )
        assert runs.returncode == 0, runs.stderr
        by_name = sorted((r["workflow_name"], r["status"]) for r in json.loads(runs.stdout))
        assert by_name == [("demo.approval", "running"), ("demo.article", "completed"), ("demo.article", "completed")], runs.stdout
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len([c for c in children if "qw_services" in " ".join(c.cmdline())]) == 6  # orchestrator + cpu, gpu, fetch, load + scheduler
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends to the whole group
        assert proc.wait(timeout=60) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(timeout=5)
    output = "".join(lines)
    assert "stopping embedded Postgres" in output
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE], output
    wait_until(lambda: not _postgres_running_under(tmp_path / "qwdata"), timeout=20, what="embedded Postgres to stop")
    assert "Traceback" not in output, output


@pytest.mark.multiprocess
def test_qw_dev_uses_the_configured_database_and_can_exit_when_done(tmp_path, scratch_database_url):
    done = subprocess.run(
        [sys.executable, "-m", "qw_services.cli", "dev", "--jobs", "3", "--exit-when-done"],
        env=_dev_env(tmp_path, QW_DATABASE_URL=scratch_database_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "11/11 done" in done.stdout and "embedded" not in done.stdout + done.stderr  # 9 jobs and 2 workflow runs
    assert not (tmp_path / "qwdata").exists()


def test_bad_configuration_exits_2_naming_the_variable(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "qw_services.orchestrator"],
        env=_dev_env(tmp_path, QW_DATABASE_URL="postgresql://x/y", QW_LEASE_SECONDS="forever"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "QW_LEASE_SECONDS" in done.stderr, done.stderr


def test_an_unreachable_database_is_one_clear_line_not_a_traceback(tmp_path):
    env = _dev_env(tmp_path, QW_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none?connect_timeout=1", QW_SCHEMA_WAIT_SECONDS="1")
    status = subprocess.run([sys.executable, "-m", "qw_services.cli", "status"], env=env, capture_output=True, text=True, timeout=60)
    worker = subprocess.run([sys.executable, "-m", "qw_services.worker", "--queue=fetch"], env=env, capture_output=True, text=True, timeout=60)
    for done in (status, worker):
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr and "error: " in done.stderr, done.stderr
    assert "schema did not reach version" in worker.stderr and "127.0.0.1" in worker.stderr


@pytest.mark.multiprocess
@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_a_killed_qw_dev_takes_its_children_with_it_and_the_next_run_cleans_up(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "qw_services.cli", "dev", "--jobs", "1"],
        env=_dev_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: _summary(lines), timeout=90, what="the demo's summary table")
        children = [c for c in psutil.Process(proc.pid).children(recursive=True) if "qw_services" in " ".join(c.cmdline())]
        assert children
        proc.kill()  # no chance to clean up: only the kernel's parent-death signal reaches the children
        proc.wait(timeout=10)
        def survivors() -> list[str]:
            try:
                return [f"{c.pid} ({c.status()}): {' '.join(c.cmdline())}" for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
            except psutil.NoSuchProcess:
                return survivors()

        try:
            wait_until(lambda: not survivors(), timeout=30, what="children gone")
        except AssertionError:
            raise AssertionError(f"children still running 30 s after qw dev was killed: {survivors()}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    again = subprocess.run(
        [sys.executable, "-m", "qw_services.cli", "dev", "--jobs", "1", "--exit-when-done"],
        env=_dev_env(tmp_path), capture_output=True, text=True, timeout=120,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "did not stop cleanly" in again.stderr, again.stderr
    wait_until(lambda: not _postgres_running_under(tmp_path / "qwdata"), timeout=20, what="embedded Postgres stopped by the next run")


def test_a_child_whose_parent_died_before_it_set_the_death_signal_gives_up():
    """`qw dev` killed between a fork and its child's prctl sends no signal: the child sees a new parent and exits."""
    from qw_services.dev import _die_with_parent

    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=functools.partial(_die_with_parent, 1))
    assert orphan.wait(timeout=10) == 1
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=functools.partial(_die_with_parent, os.getpid()))
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)
    finally:
        child.kill()
        child.wait()
