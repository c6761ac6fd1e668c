"""deploy/app-example's application runs in every service the stack starts with QW_APP naming it,
the head's scheduler included (deploy/README.md, "Your own application")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from queue_workflows import db

ROOT = Path(__file__).resolve().parents[2]


def test_the_scheduler_runs_the_example_app(scratch_database_url):
    db.bootstrap(url=scratch_database_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QW_")}
    env.update(QW_DATABASE_URL=scratch_database_url, QW_APP="qw_example_app", QW_INGEST_QUEUES="fetch,load",
               PYTHONPATH=os.pathsep.join([str(ROOT / "deploy" / "app-example"), env.get("PYTHONPATH", "")]))
    ran = subprocess.run([sys.executable, "-m", "qw_services.scheduler", "--once"], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "example.hourly_count" in ran.stderr + ran.stdout
