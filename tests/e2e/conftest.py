"""The real container stack: images built from docker/Dockerfile, `compose.yaml` up with the
head and cpu profiles under a project of its own, torn down with `down -v` at the end.

These tests run only when selected (`pytest -m e2e tests/e2e`, as .ci/containers.sh does) and
skip, saying why, when no Docker engine or Compose answers. Images come from
docker/build-images.sh (QW_BUILD_FLAGS passes e.g. "--network host"); QW_E2E_SKIP_BUILD=1
reuses images already built.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import ROOT, engine_problem, write_secrets
from operator_docs import Host, clean_env, copy_of_the_repository, shell_blocks

E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Container tests are slow and need an engine: only `-m e2e` runs them."""
    selected = "e2e" in (config.getoption("markexpr") or "")
    skip = pytest.mark.skip(reason="container end-to-end test: run it with `pytest -m e2e tests/e2e` (.ci/containers.sh does)")
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            if not selected:
                item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Stack:
    """One compose project of the real stack, and helpers to drive it."""

    def __init__(self, secrets: Path) -> None:
        # QW_E2E_PROJECT_PREFIX keeps one runner's projects apart from another's on a shared engine.
        self.project = f"{os.environ.get('QW_E2E_PROJECT_PREFIX', 'qwe2e')}{uuid.uuid4().hex[:6]}"
        docker_gid = subprocess.run(["getent", "group", "docker"], capture_output=True, text=True).stdout.split(":")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
        self.env.update(
            COMPOSE_PROJECT_NAME=self.project,
            COMPOSE_PROFILES="head,cpu",
            COMPOSE_FILE="compose.yaml:deploy/compose.head.yaml",
            QW_HOST_LABEL="e2e",
            QW_SECRETS_DIR=str(secrets),
            # A fixed port, as an operator's 5432 is: a restarted container keeps it.
            QW_DB_PUBLISH=f"127.0.0.1:{_free_port()}",
            QW_METRICS_PUBLISH="127.0.0.1:",
            QW_DASHBOARD_PUBLISH="127.0.0.1:",
            QW_DOCKER_GID=docker_gid[2] if len(docker_gid) > 2 else "0",
            QW_IMAGE_TAG=os.environ.get("QW_IMAGE_TAG", "latest"),
            QW_SHUTDOWN_GRACE_SECONDS="5",
            QW_STOP_GRACE_PERIOD="15s",
        )
        self.secrets = secrets

    def compose(self, *args: str, check: bool = True, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`docker compose` on this project; `env` adds to (or overrides) its environment for this call."""
        result = subprocess.run(["docker", "compose", *args], cwd=ROOT, env={**self.env, **(env or {})}, capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service).stdout.split()

    def states(self) -> dict[str, list[tuple[str, str]]]:
        found: dict[str, list[tuple[str, str]]] = {}
        for line in self.compose("ps", "-a", "--format", "json").stdout.splitlines():
            for row in json.loads(line) if line.startswith("[") else [json.loads(line)]:
                found.setdefault(row["Service"], []).append((row["State"], row.get("Health", "")))
        return found

    def url(self, role: str = "orchestrator") -> str:
        """A DSN through the published port as one of the services' roles (the owner may not log in there)."""
        port = self.compose("port", "postgres", "5432").stdout.strip().rsplit(":", 1)[1]
        user, secret = ("qw", "postgres_password") if role == "owner" else (f"qw_{role}", f"{role}_db_password")
        return f"postgresql://{user}:{(self.secrets / secret).read_text().strip()}@127.0.0.1:{port}/qw"

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "80", check=False).stdout


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    if os.environ.get("QW_E2E_SKIP_BUILD") != "1":
        started = time.monotonic()
        subprocess.run([str(ROOT / "docker" / "build-images.sh")], cwd=ROOT, check=True, timeout=1800)
        print(f"\nimages built in {time.monotonic() - started:.1f}s")
    secrets = write_secrets(tmp_path_factory.mktemp("secrets"))
    running = Stack(secrets)
    started = time.monotonic()
    try:
        # --wait returns once every service is running and healthy: no one-shot in the profiles.
        running.compose("up", "-d", "--wait", timeout=600)
        running.up_seconds = time.monotonic() - started  # type: ignore[attr-defined]
        running.started_at = started  # type: ignore[attr-defined]
        print(f"\ncompose up -d --wait: {running.up_seconds:.1f}s")  # type: ignore[attr-defined]
        running.demo = running.compose("run", "--rm", "-T", "demo").stdout  # type: ignore[attr-defined]
        yield running
    finally:
        print(running.logs()[-6000:])
        running.compose("down", "-v", "--remove-orphans", "--timeout", "20", check=False)


@pytest.fixture(scope="session")
def operator_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """A head set up by README.md's compose block, run as written in a copy of the repository.

    Shared by test_multi_host.py (the hosts join it) and test_readme_stack.py (deploy/README's
    blocks run on it; its last test takes it down). Only what differs between stacks on one
    machine is set, in the shell (which overrides .env): the project, and free published ports.
    """
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    [block] = [b for b in shell_blocks() if b.doc == "README.md"]
    head = Host("head", copy_of_the_repository(tmp_path_factory.mktemp("head") / "repo"), clean_env(
        COMPOSE_PROJECT_NAME=f"{os.environ.get('QW_E2E_PROJECT_PREFIX', 'qwe2e')}head{uuid.uuid4().hex[:6]}",
        QW_DB_PUBLISH=f"0.0.0.0:{_free_port()}",
        QW_METRICS_PUBLISH="127.0.0.1:",
        QW_DASHBOARD_PUBLISH="127.0.0.1:",
    ))
    try:
        head.readme = head.run(block.code, "up", timeout=900)  # type: ignore[attr-defined]
        print(f"\nhead up (README.md's compose block, {block.where}): {head.seconds['up']:.1f}s")
        yield head
    finally:
        head.down()
