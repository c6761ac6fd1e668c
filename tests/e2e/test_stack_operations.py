"""The stack as an operator runs it, on test_stack.py's stack (same session): a service process
that dies is restarted, `qw status` warns while an orchestrator is down, hw-metrics names the
right QW_DOCKER_GID, an application image of one's own runs its task, an upgrade rolls the
orchestrators one at a time, and `down -v` leaves nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest
from e2e_support import ROOT, TERMINAL
from e2e_support import rows as _rows
from e2e_support import rows_or_none as _rows_or_none
from e2e_support import use as _use
from procs import wait_until

from queue_workflows import node_queue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def _inspect(container: str, template: str) -> str:
    return subprocess.run(["docker", "inspect", "-f", template, container], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def _status_inside(stack, service: str = "orchestrator") -> dict:
    return json.loads(stack.compose("exec", "-T", service, "qw", "status", "--json").stdout)


@pytest.mark.parametrize("service", ["cpu-worker", "orchestrator"])
def test_a_service_process_that_dies_is_restarted_by_the_restart_policy(stack, service):
    # Not `docker kill`: Docker counts that as an operator's stop, which unless-stopped respects.
    [container] = stack.containers(service)
    restarts = int(_inspect(container, "{{.RestartCount}}"))
    pid = subprocess.run(["docker", "exec", container, "cat", "/proc/1/task/1/children"], capture_output=True, text=True,
                         check=True, timeout=30).stdout.split()[0]  # tini's one child: the service process
    # Its exit status is no evidence either way: the exec dies with the container (137) or returns first.
    subprocess.run(["docker", "exec", container, "sh", "-c", f"kill -9 {pid}"], capture_output=True, timeout=30)
    wait_until(lambda: int(_inspect(container, "{{.RestartCount}}")) > restarts and _inspect(container, "{{.State.Status}}") == "running",
               timeout=60, interval=0.5, what=f"Docker to restart {service}")
    if service == "cpu-worker":  # the stack's only cpu worker runs a job again
        url = _use(stack)
        job = node_queue.enqueue_node_job("square", "cpu", node_module="qw_demo.square", inputs={"x": 3})["id"]
        wait_until(lambda: _rows(url, "SELECT status FROM workflow_node_jobs_all WHERE id = %s", (job,))[0]["status"] == "completed",
                   timeout=90, interval=0.5, what="a cpu job on the restarted worker")
    else:  # the restarted process beats again, and the dead one's row (silent now) is not counted
        hostname, started = _inspect(container, "{{.Config.Hostname}}"), _inspect(container, "{{.State.StartedAt}}")
        wait_until(lambda: _rows(stack.url(), "SELECT 1 FROM qw_orchestrators WHERE hostname = %s AND beat_at > %s::timestamptz",
                                 (hostname, started)), timeout=90, interval=0.5, what="the restarted orchestrator's beat")

        def both_beating() -> dict | None:
            seen = _status_inside(stack, "orchestrator-2")
            live = sorted(o["role"] for o in seen["orchestrators"] if o["silent_seconds"] < 3)
            return seen if live == ["leader", "standby"] and not seen["warnings"] else None

        wait_until(both_beating, timeout=60, interval=1, what="a leader and a standby beating, no warning")


def test_hw_metrics_with_a_wrong_docker_gid_names_the_right_one(stack):
    gid = os.stat("/var/run/docker.sock").st_gid
    name = f"{stack.project}-wrong-gid"
    wrong = {**stack.env, "QW_DOCKER_GID": "4242"}
    ran = subprocess.run(["docker", "compose", "run", "-d", "--no-deps", "--name", name, "hw-metrics"], cwd=ROOT, env=wrong,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    try:
        def warned() -> str | None:
            logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, timeout=30)
            return logs.stdout + logs.stderr if "QW_DOCKER_GID=" in logs.stdout + logs.stderr else None

        said = wait_until(warned, timeout=60, interval=1, what="the sidecar's warning")
        assert f"permission denied on the Docker socket /var/run/docker.sock: it belongs to group {gid}" in said, said
        assert f"set QW_DOCKER_GID={gid} in this host's .env" in said, said
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def test_qw_status_warns_while_an_orchestrator_is_down(stack):
    stack.compose("stop", "--timeout", "15", "orchestrator-2")
    try:
        warned = wait_until(lambda: _status_inside(stack)["warnings"], timeout=30, interval=1, what="qw status to warn")
        assert warned == ["only 1 of 2 orchestrators running (QW_EXPECTED_ORCHESTRATORS=2): "
                          "start the missing ones (docker compose up -d on the head)"]
        table = stack.compose("exec", "-T", "orchestrator", "qw", "status").stdout
        assert f"WARNING: {warned[0]}" in table, table
    finally:
        stack.compose("up", "-d", "--no-deps", "--wait", "orchestrator-2", timeout=180)
    wait_until(lambda: not _status_inside(stack)["warnings"], timeout=30, interval=1, what="the warning to clear")


def test_your_own_application_runs_in_the_stack(stack, tmp_path):
    """deploy/app-example: its Dockerfile on the worker image, a dependency from wheels/, QW_APP."""
    context = tmp_path / "app"
    shutil.copytree(ROOT / "deploy" / "app-example", context)
    wheel = next((ROOT / "docker" / "wheelhouse").glob("itsdangerous-*.whl"), None)  # not in the cpu-worker image
    if wheel is not None:
        shutil.copy(wheel, context / "wheels")
    tag = stack.env["QW_IMAGE_TAG"]
    prefix = f"{stack.project}-app"
    started = time.monotonic()
    subprocess.run(["docker", "build", "-q", "--network", "none", "--build-arg", f"QW_BASE=queue-workflows/cpu-worker:{tag}",
                    "-t", f"{prefix}/cpu-worker:{tag}", str(context)], check=True, capture_output=True, timeout=300)
    print(f"\napp image built in {time.monotonic() - started:.1f}s")
    app_env = {**stack.env, "QW_IMAGE_PREFIX": prefix, "QW_APP": "qw_example_app"}
    try:
        ran = subprocess.run(["docker", "compose", "up", "-d", "--no-deps", "ingest-worker-2"], cwd=ROOT, env=app_env,
                             capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr
        [container] = stack.containers("ingest-worker-2")
        assert _inspect(container, "{{.Config.Image}}") == f"{prefix}/cpu-worker:{tag}"
        if wheel is not None:
            subprocess.run(["docker", "exec", container, "python", "-c", "import itsdangerous"], check=True, timeout=30)
        # Enqueued by a process that imports the application (here, one in its own image), as enqueueing checks the task.
        enqueue = ("import qw_example_app; from queue_workflows import node_queue; "
                   "print(node_queue.enqueue_ingest_job('example.word_count', 'load', {'text': 'three little words'})['id'])")
        job = int(subprocess.run(["docker", "exec", container, "python", "-c", enqueue], capture_output=True, text=True, check=True,
                                 timeout=60).stdout.split()[-1])
        url = stack.url()
        row = wait_until(lambda: (r := _rows(url, "SELECT status, result FROM ingest_jobs_all WHERE id = %s", (job,))[0])["status"] in TERMINAL and r,
                         timeout=90, interval=0.5, what="the application's job")
        assert row["status"] == "completed" and row["result"]["words"] == 3, row
    finally:
        stack.compose("up", "-d", "--no-deps", "ingest-worker-2", check=False, timeout=300)
        subprocess.run(["docker", "rmi", f"{prefix}/cpu-worker:{tag}"], capture_output=True, timeout=120)


def test_an_upgrade_rolls_the_orchestrators_one_at_a_time(stack):
    """deploy/README.md's upgrade: the tag pinned, then `up -d --no-deps --wait` per orchestrator."""
    old = stack.env["QW_IMAGE_TAG"]
    new = f"{old}-{stack.project}"
    subprocess.run(["docker", "tag", f"queue-workflows/orchestrator:{old}", f"queue-workflows/orchestrator:{new}"], check=True, timeout=60)
    owner = stack.url()
    leaderless: list[float] = []
    stop = threading.Event()

    def watch_the_leader() -> None:
        since = None
        while not stop.is_set():
            rows = _rows_or_none(owner, "SELECT 1 FROM qw_orchestrators o JOIN qw_leadership l ON o.epoch = l.epoch"
                                        " WHERE o.role = 'leader' AND o.beat_at > now() - interval '3 seconds'")
            now = time.monotonic()
            if rows:
                if since is not None:
                    leaderless.append(now - since)
                since = None
            elif since is None:
                since = now
            time.sleep(0.05)
        if since is not None:
            leaderless.append(time.monotonic() - since)

    watcher = threading.Thread(target=watch_the_leader, daemon=True)
    stack.env["QW_IMAGE_TAG"] = new  # as `sed` pins it in .env
    watcher.start()
    try:
        for service in ("orchestrator", "orchestrator-2"):
            stack.compose("up", "-d", "--no-deps", "--wait", service, timeout=300)
            [container] = stack.containers(service)
            assert _inspect(container, "{{.Config.Image}}") == f"queue-workflows/orchestrator:{new}"
        wait_until(lambda: not _status_inside(stack)["warnings"], timeout=30, interval=1, what="both orchestrators on the new tag")
    finally:
        stop.set()
        watcher.join(timeout=30)
        stack.env["QW_IMAGE_TAG"] = old
        subprocess.run(["docker", "rmi", f"queue-workflows/orchestrator:{new}"], capture_output=True, timeout=60)  # the tag only
    print(f"\nleaderless while rolling the orchestrators: {[round(g, 2) for g in leaderless]} s")
    # The old `QW_IMAGE_TAG=v2 docker compose up -d` recreated both at once: 5.3 s without a leader here.
    assert all(gap < 3 for gap in leaderless), leaderless
    seen = _status_inside(stack)
    assert sorted(o["role"] for o in seen["orchestrators"]) == ["leader", "standby"], seen["orchestrators"]


def test_down_v_leaves_nothing_behind(stack):
    stack.compose("down", "-v", "--remove-orphans", "--timeout", "20")
    label = f"label=com.docker.compose.project={stack.project}"
    for kind in ("container", "volume", "network"):
        left = subprocess.run(["docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", label],
                              capture_output=True, text=True, check=True).stdout.split()
        assert left == [], f"{kind}s left behind: {left}"
