"""The real stack, end to end: work from the host completes, a killed worker's job finishes on
another, a frozen (paused) worker container loses its job and stops itself on thaw, OFF parks a worker, the CUDA gpu-worker image runs the demo's gpu node (CPU fallback),
hw_metrics arrives with the stack's containers, the dashboard serves the cluster, and a Postgres
restart under load loses no job. test_stack_operations.py goes on with the same stack, and takes
it down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import psycopg
import pytest
from e2e_support import ROOT, TERMINAL
from e2e_support import rows as _rows
from e2e_support import rows_or_none as _rows_or_none
from e2e_support import use as _use
from procs import wait_until

from queue_workflows import node_queue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_the_opt_in_demo_seeds_once_and_qw_status_sees_it(stack):
    owner = stack.url()
    # `run --rm demo` (the fixture's) enqueued the example app's jobs and workflows; the cpu profile ran them.
    assert "demo enqueued {'ingest_jobs': 10, 'workflow_node_jobs': 5, 'workflow_runs': 2}" in stack.demo, stack.demo
    def demo_done():
        rows = _rows_or_none(owner, "SELECT status, count(*) AS n FROM ingest_jobs_all WHERE reason = 'demo' GROUP BY status")
        return rows if rows and {r["status"] for r in rows} == {"completed"} else None

    done = wait_until(demo_done, timeout=180, interval=0.5, what="the demo's ingest jobs")
    first = _rows(owner, "SELECT extract(epoch FROM min(finished_at)) AS t FROM ingest_jobs_all")[0]["t"]
    print(f"\ncompose up -> first job completed: {float(first) - (time.time() - (time.monotonic() - stack.started_at)):.1f}s")
    assert sum(r["n"] for r in done) == 10
    again = stack.compose("run", "--rm", "-T", "demo").stdout
    assert "nothing: this database already has the demo's work" in again, again
    assert _rows(owner, "SELECT count(*) AS n FROM ingest_jobs_all WHERE reason = 'demo'")[0]["n"] == 10
    inside = json.loads(stack.compose("exec", "-T", "orchestrator", "qw", "status", "--json").stdout)
    host = subprocess.run([sys.executable, "-m", "qw_services.cli", "status", "--json"], capture_output=True, text=True,
                          env={**stack.env, "QW_DATABASE_URL": owner, "QW_APP": "qw_demo"}, timeout=60)
    assert host.returncode == 0, host.stderr
    from_host = json.loads(host.stdout)
    for seen in (inside, from_host):
        assert seen["ingest"]["fetch"]["completed"] >= 5 and seen["node"]["cpu"]["completed"] >= 5
        assert {o["role"] for o in seen["orchestrators"]} == {"leader", "standby"}
        assert {w["queue"] for w in seen["workers"]} >= {"cpu", "fetch", "load"}
    assert inside["warnings"] == [], inside["warnings"]
    services = ("postgres", "orchestrator", "orchestrator-2", "scheduler", "dashboard", "cpu-worker", "ingest-worker", "hw-metrics")

    def all_healthy():
        states = stack.states()
        return all(s == ("running", "healthy") for name in services for s in states[name]) and states

    wait_until(all_healthy, timeout=120, interval=2, what=f"{', '.join(services)} to report healthy")


def test_work_enqueued_from_the_host_completes(stack):
    url = _use(stack)  # the worker role, logging in over TCP with its password
    ids = [node_queue.enqueue_ingest_job("demo.fetch_page", "fetch", {"url": f"https://e2e.invalid/{i}"})["id"] for i in range(20)]
    wait_until(lambda: _rows(url, "SELECT count(*) AS n FROM ingest_jobs_all WHERE id = ANY(%s) AND status = 'completed'", (ids,))[0]["n"] == 20,
               timeout=60, interval=0.2, what="20 jobs from the host")


# A producer on the host: the engine's own tracer provider (OTEL_* variables), the demo's task.
PRODUCER = """
import json, sys, queue_workflows, qw_demo
from queue_workflows import node_queue
from queue_workflows.common import tracing
queue_workflows.configure(database_url=sys.argv[1], ingest_queues=frozenset({"fetch", "load"}))
queue_workflows.register_ingest_task("demo.fetch_page", qw_demo.fetch_page)
row = node_queue.enqueue_ingest_job("demo.fetch_page", "fetch", {"url": "https://trace.invalid/1"})
tracing.flush(10)
print(json.dumps({"id": row["id"]}))
"""


def test_a_job_enqueued_on_the_host_and_run_in_a_worker_container_is_one_trace(stack):
    """compose passes OTEL_EXPORTER_OTLP_ENDPOINT to the services and the images carry the otel
    extra: the worker container's run span reaches a real OTLP receiver in the host producer's
    trace, through the context the job row carries."""
    from otlp_receiver import OtlpReceiver  # the test extra carries the otel one: no skip

    url = stack.url("worker")
    network = f"{stack.project}_default"
    gateway = subprocess.run(["docker", "network", "inspect", network, "--format", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"],
                             capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    assert gateway, f"no gateway on {network}"
    with OtlpReceiver(host="0.0.0.0") as rx:  # the containers reach the host at their network's gateway
        stack.compose("up", "-d", "--wait", "--no-deps", "--force-recreate", "ingest-worker", timeout=300,
                      env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{gateway}:{rx.port}"})
        try:
            producer = subprocess.run([sys.executable, "-c", PRODUCER, url], capture_output=True, text=True, timeout=60, env={
                **stack.env, "OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_SERVICE_NAME": "e2e-producer",
                "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")])})
            assert producer.returncode == 0, producer.stderr
            job = json.loads(producer.stdout.strip().splitlines()[-1])["id"]
            wait_until(lambda: rx.named("qw.run", **{"qw.job.id": job}), timeout=60, interval=0.5,
                       what=f"job {job}'s run span from the worker container (spans so far: {sorted({s.name for s in rx.spans})})")
        finally:
            stack.compose("up", "-d", "--wait", "--no-deps", "--force-recreate", "ingest-worker", timeout=300)
    [enqueue] = rx.named("qw.enqueue")
    [run] = rx.named("qw.run", **{"qw.job.id": job})
    assert enqueue.service == "e2e-producer" and run.service == "queue-workflows", (enqueue, run)
    assert run.trace_id == enqueue.trace_id, (enqueue, run)
    assert run.attributes["qw.worker.id"].startswith("e2e:fetch:"), run
    assert _rows(url, "SELECT status FROM ingest_jobs_all WHERE id = %s", (job,))[0]["status"] == "completed"


def _worker_container(stack, service: str, worker_id: str) -> str:
    for container in stack.containers(service):
        said = subprocess.run(["docker", "exec", container, "qw", "health", "worker"], capture_output=True, text=True, timeout=30)
        if worker_id in said.stdout:
            return container
    raise AssertionError(f"no {service} container runs {worker_id}")


def test_a_killed_worker_container_loses_its_job_to_another(stack):
    url = _use(stack)
    stack.compose("up", "-d", "--no-recreate", "--scale", "ingest-worker-2=2", "ingest-worker-2")
    wait_until(lambda: len(_rows(url, "SELECT 1 FROM worker_heartbeats WHERE queue = 'load'")) == 2, timeout=90, what="two load workers")
    job = node_queue.enqueue_ingest_job("demo.load_rows", "load", {"rows": list(range(1500))})["id"]  # ~15 s of work
    running = wait_until(lambda: _rows(url, "SELECT claimed_by FROM ingest_jobs_all WHERE id = %s AND status = 'running'", (job,)),
                         timeout=30, what="the slow job to start")
    first = running[0]["claimed_by"]
    subprocess.run(["docker", "kill", _worker_container(stack, "ingest-worker-2", first)], check=True, capture_output=True, timeout=30)
    row = wait_until(lambda: (r := _rows(url, "SELECT status, claimed_by FROM ingest_jobs_all WHERE id = %s", (job,))[0])["status"] in TERMINAL and r,
                     timeout=90, interval=0.5, what="the job to finish elsewhere")
    assert row["status"] == "completed" and row["claimed_by"] != first



def test_a_frozen_worker_container_loses_its_job_and_stops_itself_on_thaw(stack):
    # `docker pause` freezes every process of the "host" while its sockets, and so its session's
    # advisory lock, stay up: only the lease (QW_LEASE_SECONDS, 30 s here) frees the job.
    url = _use(stack)
    stack.compose("up", "-d", "--no-recreate", "--scale", "ingest-worker-2=2", "ingest-worker-2")
    wait_until(lambda: len(_rows(url, "SELECT 1 FROM worker_heartbeats WHERE queue = 'load' AND last_seen > now() - interval '25 seconds'")) >= 2,
               timeout=90, what="two live load workers")
    job = node_queue.enqueue_ingest_job("demo.load_rows", "load", {"rows": list(range(1500))})["id"]  # ~15 s of work
    first = wait_until(lambda: _rows(url, "SELECT claimed_by FROM ingest_jobs_all WHERE id = %s AND status = 'running'", (job,)),
                       timeout=30, what="the slow job to start")[0]["claimed_by"]
    frozen = _worker_container(stack, "ingest-worker-2", first)
    subprocess.run(["docker", "pause", frozen], check=True, capture_output=True, timeout=30)
    try:
        row = wait_until(lambda: (r := _rows(url, "SELECT status, claimed_by, attempts FROM ingest_jobs_all WHERE id = %s", (job,))[0])["status"] in TERMINAL and r,
                         timeout=150, interval=0.5, what="the frozen host's job to finish elsewhere")
    finally:
        subprocess.run(["docker", "unpause", frozen], capture_output=True, timeout=30)
    assert row["status"] == "completed" and row["claimed_by"] != first and row["attempts"] == 2, row
    said = wait_until(lambda: (out := subprocess.run(["docker", "logs", frozen], capture_output=True, text=True, timeout=30)).returncode == 0
                      and "exiting with code 77" in out.stdout + out.stderr and out.stdout + out.stderr,
                      timeout=60, interval=0.5, what="the thawed worker to stop itself (exit 77)")
    assert f"job {job}: no longer ours" in said
    assert _rows(url, "SELECT status, claimed_by FROM ingest_jobs_all WHERE id = %s", (job,))[0] == {"status": "completed", "claimed_by": row["claimed_by"]}

def test_off_from_inside_a_container_parks_the_worker(stack):
    url = _use(stack)
    off = stack.compose("exec", "-T", "cpu-worker", "queue-worker-control", "--queue", "cpu", "--off", "--policy", "park", "--reason", "e2e")
    assert off.returncode == 0
    job = node_queue.enqueue_node_job("square", "cpu", node_module="qw_demo.square", inputs={"x": 12})["id"]
    wait_until(lambda: "turned OFF" in stack.compose("logs", "--no-color", "cpu-worker").stdout, timeout=30, what="the worker to park")
    deadline = time.monotonic() + 5  # parked: the job stays queued while the worker lives on
    while time.monotonic() < deadline:
        assert _rows(url, "SELECT status FROM workflow_node_jobs_all WHERE id = %s", (job,))[0]["status"] == "queued"
        time.sleep(0.5)
    assert stack.states()["cpu-worker"][0][0] == "running"
    stack.compose("exec", "-T", "cpu-worker", "queue-worker-control", "--queue", "cpu", "--on")
    wait_until(lambda: _rows(url, "SELECT status FROM workflow_node_jobs_all WHERE id = %s", (job,))[0]["status"] == "completed",
               timeout=60, what="the job once ON")


def test_the_cuda_gpu_worker_image_runs_the_demo_gpu_node_in_cpu_fallback(stack):
    # From here on the project includes the gpu worker, so later tests and `down -v` see it too.
    stack.env["COMPOSE_PROFILES"] += ",gpu-nvidia"
    stack.env["COMPOSE_FILE"] += ":tests/e2e/compose.gpu-cpu-fallback.yaml"
    stack.compose("up", "-d", "gpu-worker-cuda")
    owner = stack.url()
    # The demo's workflows wait on their `embed` node (model demo-embed) until a gpu worker comes.
    embeds = wait_until(
        lambda: (rows := _rows_or_none(owner, "SELECT status, claimed_by, model_hit, model_load_seconds FROM workflow_node_jobs_all"
                                             " WHERE node_name = 'embed'")) and all(r["status"] == "completed" for r in rows) and rows,
        timeout=180, interval=1, what="the demo's gpu nodes on the CUDA image")
    assert all(":gpu:" in r["claimed_by"] and r["claimed_by"].startswith("e2e:") for r in embeds), embeds
    assert sum(1 for r in embeds if r["model_hit"] is False) == 1, embeds  # loaded once, then warm
    # A run finishes after its embed node: its later nodes still run when the last embed completes.
    runs = wait_until(lambda: (r := _rows(owner, "SELECT status, count(*) AS n FROM workflow_runs GROUP BY status"))
                      and all(x["status"] in ("completed", "failed", "cancelled") for x in r) and r,
                      timeout=60, interval=0.5, what="every demo run to end")
    assert [r["status"] for r in runs] == ["completed"], runs
    wait_until(lambda: stack.states()["gpu-worker-cuda"] == [("running", "healthy")], timeout=120, interval=2,
               what="the gpu worker's HEALTHCHECK")


def test_hw_metrics_notifies_the_host(stack):
    with psycopg.connect(stack.url(), autocommit=True) as conn:
        conn.execute("LISTEN hw_metrics")
        notice = next(conn.notifies(timeout=30, stop_after=1), None)
    assert notice is not None, "no hw_metrics NOTIFY within 30 s"
    payload = json.loads(notice.payload)
    assert payload["host"] == "e2e" if "host" in payload else payload.get("host_label") == "e2e", payload
    stackinfo = payload.get("stack")
    if stackinfo is None:
        pytest.skip(f"attribution off on this engine (no usable cgroup tree): {sorted(payload)}")
    names = " ".join(c.get("name", "") for c in stackinfo.get("containers", []))
    assert stack.project in names, stackinfo


def test_the_dashboard_serves_the_cluster_read_only_without_its_password(stack):
    port = stack.compose("port", "dashboard", "8765").stdout.strip().rsplit(":", 1)[1]
    base = f"http://127.0.0.1:{port}"
    health = wait_until(lambda: _ok(_get(f"{base}/healthz")), timeout=90, interval=1, what="the dashboard's /healthz")
    assert health == (200, "ok\n")
    # Polled like /healthz: on a loaded CI machine one render may outlast a single request's timeout.
    answers: list[tuple[int, str] | None] = []
    try:
        page = wait_until(lambda: _ok(answers.append(_get(f"{base}/")) or answers[-1]), timeout=60, interval=1,
                          what="the dashboard's page")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its last answers: {[a if a is None else (a[0], a[1][:300]) for a in answers[-3:]]}") from None
    assert "e2e" in page[1], page[1][:2000]  # the host label of the stack's workers
    # An action without logging in is refused and changes nothing: the password is a secret.
    controls = "SELECT * FROM worker_controls ORDER BY host_label, queue"
    before = _rows(stack.url(), controls)
    request = urllib.request.Request(f"{base}/actions/worker", data=b"host=e2e&queue=cpu&op=off-hard", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            refused = response.status
    except urllib.error.HTTPError as exc:
        refused = exc.code
    assert refused in (401, 403), refused
    assert _rows(stack.url(), controls) == before


def _get(url: str) -> tuple[int, str] | None:
    """(status, body), also for an error status; None when nothing answered in time."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError:
        return None


def _ok(answer: tuple[int, str] | None) -> tuple[int, str] | None:
    return answer if answer is not None and answer[0] == 200 else None


def test_a_postgres_restart_under_load_loses_no_job(stack):
    url = _use(stack)
    acknowledged: list[int] = []
    stop = threading.Event()

    def enqueue_through_the_restart() -> None:
        n = 0
        while not stop.is_set():
            try:
                acknowledged.append(node_queue.enqueue_ingest_job("demo.fetch_page", "fetch", {"url": f"https://restart.invalid/{n}"})["id"])
                n += 1
            except Exception:  # noqa: BLE001 - Postgres is down: an unacknowledged job may or may not exist
                time.sleep(0.2)
            time.sleep(0.01)

    producer = threading.Thread(target=enqueue_through_the_restart, daemon=True)
    producer.start()
    try:
        wait_until(lambda: len(acknowledged) >= 50, timeout=60, what="load before the restart")
        stack.compose("restart", "--timeout", "10", "postgres")
        before = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= before + 50, timeout=120, interval=0.5, what="enqueues to resume after the restart")
    finally:
        stop.set()
        producer.join(timeout=30)

    def settled():
        rows = _rows_or_none(url, "SELECT status, count(*) AS n FROM ingest_jobs_all WHERE id = ANY(%s) GROUP BY status", (acknowledged,))
        return rows if rows and [r["status"] for r in rows] == ["completed"] else None

    rows = wait_until(settled, timeout=180, interval=1, what=f"all {len(acknowledged)} acknowledged jobs to complete after the restart")
    assert rows[0]["n"] == len(set(acknowledged))
