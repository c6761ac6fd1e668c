"""`qw` and `queue-worker-control` tell the truth in their exit codes (0 done, 1 database failure,
2 bad input, 3 no such job or not allowed in its state), with one `error:` line and no traceback,
and a refused command writes nothing. Each runs the real console script in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from dag_rows import rows, run_row, states
from procs import query, service_env

import queue_workflows
from queue_workflows import node_queue
from queue_workflows.dag import Workflow
from queue_workflows.dag.outbox import DispatchDrain

BIN = Path(sys.executable).parent
N = "qw_dag_nodes"
NOT_UTF8 = b"\xffoff"


def tool(database_url: str, name: str, *argv: str | bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / name), *argv], env=service_env(database_url, QW_HOST_LABEL="ops-box"), capture_output=True,
                          text=True, errors="replace", timeout=60)


def refused(done: subprocess.CompletedProcess[str], code: int, message: str) -> str:
    """The one line a refused command prints on stderr; nothing on stdout."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line, line
    return line


def controls(url: str) -> list[dict]:
    return query(url, "SELECT host_label, queue, desired_state FROM worker_controls ORDER BY 1, 2")


# --- finding 13: retry of a node whose run has ended ----------------------------------------


def test_qw_retry_refuses_a_node_of_a_failed_run_and_says_to_restart_it(database_url, conn):
    wf = Workflow("r").node("a", f"{N}:echo", max_attempts=1).node("b", f"{N}:echo", deps=["a"]).node("c", f"{N}:echo")
    run_id = queue_workflows.start_run(wf, {})
    node_queue.mark_failed(rows(database_url, run_id)["a"]["id"], "boom", conn=conn)
    DispatchDrain().drain_once(conn)
    assert run_row(database_url, run_id)["status"] == "failed" and states(database_url, run_id) == {"a": "failed", "c": "cancelled"}
    before = rows(database_url, run_id)
    for name in ("a", "c"):
        line = refused(tool(database_url, "qw", "retry", f"node:{before[name]['id']}"), 3, f"is a node of workflow run {run_id}, which is failed")
        assert line.endswith(f"restart the run instead (qw restart {run_id})")
    assert rows(database_url, run_id) == before and run_row(database_url, run_id)["status"] == "failed"  # nothing written
    alone = node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", max_attempts=1)  # a node job of no run: retried as before
    node_queue.mark_failed(alone["id"], "boom", conn=conn)
    done = tool(database_url, "qw", "retry", f"node:{alone['id']}")
    assert (done.returncode, done.stdout.strip()) == (0, f"job {alone['id']} on 'cpu': queued again"), done.stderr
    assert query(database_url, "SELECT status FROM workflow_node_jobs WHERE id = %s", (alone["id"],)) == [{"status": "queued"}]


# --- finding 15: the worker switch and the other arguments ----------------------------------


@pytest.mark.parametrize("script", [("qw", "worker", "off", "--queue", "cpu"), ("queue-worker-control", "--off", "--queue", "cpu")])
def test_an_empty_or_invalid_host_is_refused_never_taken_for_this_host(database_url, script):
    name, *argv = script
    refused(tool(database_url, name, *argv, "--host", ""), 2, "error: host label '' is invalid")
    refused(tool(database_url, name, *argv, "--host", "bad host!"), 2, "host label 'bad host!' is invalid")  # no warning first
    assert controls(database_url) == []
    done = tool(database_url, name, *argv)  # no --host: this host, with a warning that no worker has it yet
    assert done.returncode == 0 and done.stdout.strip() == "ops-box/cpu: OFF (hard)", done.stderr
    assert done.stderr.startswith("warning: no worker on host 'ops-box'")
    assert controls(database_url) == [{"host_label": "ops-box", "queue": "cpu", "desired_state": "off"}]


@pytest.mark.parametrize("script", [("qw", "worker", "on", "--queue", "cpu"), ("queue-worker-control", "--on", "--queue", "cpu")])
def test_a_reason_that_is_not_utf8_is_bad_input_not_a_traceback(database_url, script):
    name, *argv = script
    refused(tool(database_url, name, *argv, "--host", "h1", "--reason", NOT_UTF8), 2,
            r"reason contains a lone surrogate (\udcff) at position 0, which is not valid UTF-8")
    assert controls(database_url) == []


def test_qw_web_with_an_address_it_cannot_listen_on_is_bad_input(database_url):
    for addr in ("999.1.1.1", "192.0.2.1"):  # not an address; an address of no interface here
        refused(tool(database_url, "qw", "web", "--addr", addr, "--port", "0"), 2, f"cannot listen on '{addr}' port 0")


@pytest.mark.parametrize(
    ("argv", "usage", "error"),
    [
        (("qw", "worker", "of", "--queue", "cpu"), "usage: qw worker {on,off} --queue QUEUE [options] (see qw worker --help)",
         "qw worker: error: argument switch: invalid choice: 'of' (choose from 'on', 'off')"),
        (("qw",), "usage: qw COMMAND [options] (see qw --help)", "qw: error: the following arguments are required: command"),
        (("qw", "jobs", "--limit", "many"), "usage: qw jobs [options] (see qw jobs --help)", "qw jobs: error: argument --limit: invalid int value: 'many'"),
        (("queue-worker-control", "--on"), "usage: queue-worker-control --queue QUEUE [options] (see queue-worker-control --help)",
         "queue-worker-control: error: the following arguments are required: --queue"),
    ],
)
def test_argument_errors_are_one_usage_line_and_the_error(database_url, argv, usage, error):
    done = tool(database_url, *argv)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [usage, error]
