"""The README's "Running the stack with Docker Compose" block, run as written in a copy of the
repository: the head role's .env, the secret files, `docker compose up -d`, and `qw status`
inside the orchestrator. Runs before tests/e2e/test_stack.py's stack exists (file order), under
a project name of its own, and is taken down with `down -v`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from e2e_support import ROOT, engine_problem

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
SECTION = "## Running the stack with Docker Compose"


def _readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(SECTION, 1)[1]
    match = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M)
    assert match, f"no sh block under {SECTION!r} in README.md"
    return match.group(1)


def _copy_of_the_repository(dest: Path) -> Path:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def test_the_readme_compose_block_runs_as_written(tmp_path):
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    block = _readme_block()
    repo = _copy_of_the_repository(tmp_path / "repo")
    project = f"qwe2ereadme{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
    env["COMPOSE_PROJECT_NAME"] = project
    try:
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0, f"README block failed ({ran.returncode}):\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
        # `qw status` ran inside the orchestrator: the leader and the schema answered.
        assert "leader" in ran.stdout, ran.stdout[-3000:]
        # The containers read the secrets through their group; no other user on the host can.
        modes = {f.name: f.stat().st_mode & 0o777 for f in (repo / "deploy" / "secrets").glob("*password")}
        assert modes and all(mode & 0o007 == 0 for mode in modes.values()), modes
    finally:
        subprocess.run(["docker", "compose", "down", "-v", "--remove-orphans", "--timeout", "10"], cwd=repo, env=env,
                       capture_output=True, timeout=300)
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert left == []
