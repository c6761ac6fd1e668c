"""Every ```python block in README.md and docs/*.md runs as written, for real.

Each block runs alone in a fresh Python process (cwd: an empty folder), against a database of
its own that already has the engine's migrations, with both MY_DB_URL and QW_DATABASE_URL
pointing at it. A block must either exit 0 on its own within SNIPPET_TIMEOUT seconds, or
have a comment saying `runs until stopped` (a worker, say): the test then waits until every
job the block enqueued has finished, sends SIGTERM, and expects exit code 0 and no failed job.
A block whose first line is `# needs: MODULE` (an optional extra's) skips where MODULE is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from procs import query, wait_until

from queue_workflows import db

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)
RUNS_UNTIL_STOPPED = re.compile(r"#.*\bruns until stopped\b")
NEEDS = re.compile(r"\A# needs: ([\w.]+)")
SNIPPET_TIMEOUT = 60.0
JOBS = "SELECT status, count(*) AS n FROM {} GROUP BY status"


def _snippets() -> list[object]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(pytest.param(match.group(1), id=f"{doc.relative_to(ROOT)}:{line}"))
    return found


def _job_counts(url: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table in ("ingest_jobs", "workflow_node_jobs"):
        for row in query(url, JOBS.format(table)):
            counts[row["status"]] = counts.get(row["status"], 0) + row["n"]
    return counts


def test_the_readme_application_snippet_is_covered():
    blocks = [p.values[0] for p in _snippets()]  # type: ignore[attr-defined]
    assert any("claim_worker.main" in code and RUNS_UNTIL_STOPPED.search(code) for code in blocks)


@pytest.mark.parametrize("code", _snippets())
def test_snippet_runs_as_written(code, tmp_path, scratch_database_url):
    if (needs := NEEDS.match(code)) and importlib.util.find_spec(needs.group(1)) is None:
        pytest.skip(f"the snippet needs {needs.group(1)}, which is not installed (an optional extra)")
    db.bootstrap(url=scratch_database_url)
    (tmp_path / "snippet.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QW_") and k != "PYTHONPATH"}
    env.update(MY_DB_URL=scratch_database_url, QW_DATABASE_URL=scratch_database_url)
    log = tmp_path / "snippet.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "snippet.py"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        if RUNS_UNTIL_STOPPED.search(code):

            def all_done() -> dict[str, int] | None:
                assert proc.poll() is None, f"exited early (rc={proc.returncode}):\n{log.read_text()}"
                counts = _job_counts(scratch_database_url)
                pending = sum(n for status, n in counts.items() if status not in ("completed", "failed", "cancelled"))
                return counts if counts and not pending else None

            counts = wait_until(all_done, timeout=SNIPPET_TIMEOUT, interval=0.2, what="the snippet's jobs to finish")
            assert set(counts) == {"completed"}, counts
            proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=SNIPPET_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {SNIPPET_TIMEOUT:g}s (comment it `# runs until stopped`?):\n{log.read_text()}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, log.read_text()
