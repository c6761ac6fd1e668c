"""`qw ... --json | head`: a reader that closes early ends the command quietly with 141 (128 + SIGPIPE,
as a shell reports any tool a closed pipe stopped), never a traceback and exit 1, which means the
database failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from procs import service_env

from queue_workflows import node_queue, register_ingest_task

BIN = Path(sys.executable).parent


def _closed_early(url: str, argv: list[str], read: int) -> subprocess.CompletedProcess[str]:
    """Run a console script into a pipe whose reader takes `read` bytes, then closes it."""
    proc = subprocess.Popen([str(BIN / argv[0]), *argv[1:]], env=service_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    got = proc.stdout.read(read) if read else b""
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=60)
    return subprocess.CompletedProcess(argv, proc.returncode, got.decode(), stderr)


def test_a_reader_that_stops_midway_through_long_output_ends_it_quietly(database_url):
    register_ingest_task("noop", lambda reason: {})
    node_queue.enqueue_ingest_jobs([{"task_name": "noop", "queue": "fetch", "args": {"pad": "x" * 200}} for _ in range(1000)])
    # 1,000 jobs of JSON is several pipe buffers: the command is still writing when the reader goes.
    done = _closed_early(database_url, ["qw", "jobs", "--json", "--limit", "1000"], read=100)
    assert done.stdout.startswith("[") and (done.returncode, done.stderr) == (141, ""), (done.returncode, done.stderr)


@pytest.mark.parametrize("argv", [["qw", "status", "--json"], ["queue-worker-control", "--on", "--queue", "cpu", "--host", "h1", "--json"]])
def test_a_reader_gone_before_the_first_byte_is_the_same_quiet_exit(database_url, argv):
    done = _closed_early(database_url, argv, read=0)  # output smaller than the pipe: the failing write is the exit's flush
    assert done.returncode == 141, (done.returncode, done.stderr)
    assert all(line.startswith("warning: no worker on host") for line in done.stderr.splitlines()), done.stderr  # nothing else
