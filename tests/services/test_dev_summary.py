"""`qw dev` keeps the screen readable: one live summary line instead of a log line per job (`-v`:
the log), and a worker that exits by design (--max-jobs) is started again without a "restarting" alarm."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from procs import service_env

from queue_workflows import node_queue, register_ingest_task
from qw_services.live_line import LiveLine

JOB_LOG = re.compile(r"job \d+ completed in")


def _enqueue(n: int) -> list[int]:
    register_ingest_task("noop", lambda reason: {})  # here only to enqueue: the workers run qw_test_app's noop
    return [node_queue.enqueue_ingest_job("noop", "fetch", {"n": i})["id"] for i in range(n)]


def _dev(database_url: str, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = service_env(database_url, QW_INGEST_QUEUES="fetch", **env)
    if "QW_LOG_LEVEL" not in env:
        del environ["QW_LOG_LEVEL"]  # as on a newcomer's shell
    return subprocess.run([sys.executable, "-m", "qw_services.cli", "dev", *flags, "--exit-when-done", "--timeout", "60"],
                          env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.multiprocess
def test_qw_dev_shows_a_summary_line_not_a_log_line_per_job(database_url):
    _enqueue(3)
    done = _dev(database_url)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not JOB_LOG.search(output), output
    summaries = [line for line in done.stdout.splitlines() if line.startswith("qw dev: scheduled ")]
    assert summaries and summaries[-1].startswith("qw dev: scheduled 0, queued 0, running 0, completed 3, failed 0;"), done.stdout
    assert all(a != b for a, b in zip(summaries, summaries[1:])), "piped, the summary is printed only when it changes"


@pytest.mark.multiprocess
def test_qw_dev_v_shows_the_log_and_a_finished_worker_is_not_restarting(database_url):
    first, second = _enqueue(2)
    done = _dev(database_url, "-v", QW_WORKER_MAX_JOBS="1", QW_LOG_LEVEL="WARNING")  # -v wins over a quieter level
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert {str(first), str(second)} <= set(re.findall(r"job (\d+) completed in", output)), output
    assert "worker-fetch exited 0 (finished); starting a fresh one" in output, output
    assert "restarting" not in output, output


def test_the_live_line_redraws_in_place_on_a_terminal():
    master, replica = os.openpty()
    with open(replica, "w") as tty:
        live = LiveLine(tty)
        live.show("qw dev: 1/2 done")
        live.show("qw dev: 1/2 done")
        live.show("qw dev: 2/2 done")
        live.say("qw dev: demo finished")
    written = ""
    while not written.endswith("finished\r\n"):  # a pty hands over what was written in pieces
        written += os.read(master, 4096).decode()
    os.close(master)
    assert written.replace("\r\n", "\n") == "\r\x1b[Kqw dev: 1/2 done\r\x1b[Kqw dev: 2/2 done\nqw dev: demo finished\n", repr(written)
