"""`python -m queue_workflows.hw_metrics` is the `queue-hw-metrics` command: the same snapshot, the
same flags and errors, the same sidecar publishing to Postgres."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from procs import query, service_env, wait_until

from queue_workflows.telemetry.snapshot import PAYLOAD_VERSION

BIN = Path(sys.executable).parent
COMMANDS = {"module": [sys.executable, "-m", "queue_workflows.hw_metrics"], "script": [str(BIN / "queue-hw-metrics")]}


def _run(database_url: str, how: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMANDS[how], *argv], env=service_env(database_url, QW_HOST_LABEL="hwm-box"), capture_output=True,
                          text=True, timeout=60)


def test_once_prints_the_same_snapshot_as_the_console_script(database_url):
    shots = {how: _run(database_url, how, "--once") for how in COMMANDS}
    for how, done in shots.items():
        assert done.returncode == 0 and done.stdout.strip(), (how, done.returncode, done.stdout, done.stderr)
    module, script = (json.loads(shots[how].stdout) for how in COMMANDS)
    assert (module["v"], module["host"]) == (PAYLOAD_VERSION, "hwm-box")
    assert module.keys() == script.keys()


@pytest.mark.parametrize("how", list(COMMANDS))
def test_a_bad_flag_is_the_same_usage_error(database_url, how):
    done = _run(database_url, how, "--interval", "often")
    assert done.returncode == 2 and "argument --interval: invalid float value: 'often'" in done.stderr, (done.returncode, done.stderr)


def test_the_module_runs_the_sidecar_until_sigterm(database_url, tmp_path):
    log = (tmp_path / "hw-metrics.log").open("w")
    proc = subprocess.Popen([*COMMANDS["module"], "--port", "0", "--interval", "0.2", "--queue-seconds", "0"],
                            env=service_env(database_url, QW_HOST_LABEL="hwm-box"), stdout=log, stderr=subprocess.STDOUT)
    try:
        row = wait_until(lambda: query(database_url, "SELECT payload FROM host_metrics WHERE host_label = 'hwm-box'"),
                         timeout=30, what="the sidecar's host_metrics row")
        assert row[0]["payload"]["v"] == PAYLOAD_VERSION
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, (tmp_path / "hw-metrics.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
