"""Several jobs per GPU: a gpu claim admits a job by VRAM on one of its worker's devices and reserves
it on the running row, so whatever takes the row out of `running` frees the reservation."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest
from procs import Procs, log_text, query, wait_until
from test_gpu_memory import fake_nvml, gpu_worker_env, one_device, status_of

import queue_workflows
from queue_workflows import Workflow, jobstore, node_queue
from queue_workflows.dag.definition import WorkflowValidationError
from queue_workflows.gpu.devices import Device, claim_params, current_device, current_devices, device_env, from_samples, on_devices
from queue_workflows.jobrow import NodeJob
from queue_workflows.telemetry.gpu_sample import GpuSample

A = Device("GPU-a", 24.0, 24.0)


def models(conn, **gb: float) -> None:
    for model_id, est in gb.items():
        conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES (%s, %s)", (model_id, est))


def enqueue(model: str | None, *, vram_gb: float | None = None) -> int:
    return node_queue.enqueue_node_job("job", "gpu", node_module="qw_test_nodes", required_model=model, vram_gb=vram_gb)["id"]


def claim(conn, *devices: Device, margin: float = 1.0, worker: str = "w1") -> dict | None:
    """One routed claim in its own transaction, turn first (serialize_gpu_claims), as a gpu worker makes it."""
    statements = node_queue.claim_statements("workflow_node_jobs", "gpu", jobstore.Claimant(worker, 1),
                                             gpu_devices=claim_params(devices, margin_gb=margin))
    with conn.transaction():
        for statement in statements[:-1]:
            conn.execute(*statement)
        return conn.execute(*statements[-1]).fetchone()


def reserved(conn, job_id: int) -> tuple[list[str] | None, float | None]:
    row = conn.execute("SELECT gpu_devices, vram_reserved_gb FROM workflow_node_jobs WHERE id = %s", (job_id,)).fetchone()
    return row["gpu_devices"], row["vram_reserved_gb"]


# Admission ---------------------------------------------------------------------------------


def test_a_job_is_admitted_while_its_need_fits_the_devices_room(conn):
    models(conn, m8=8, m12=12)
    first, second, third = enqueue("m8"), enqueue("m8", vram_gb=2), enqueue("m12")
    assert claim(conn, A, worker="w1")["id"] == first
    assert reserved(conn, first) == (["GPU-a"], 8.0)
    assert claim(conn, A, worker="w2")["id"] == second
    assert reserved(conn, second) == (["GPU-a"], 10.0)  # its model's 8 GB and its own 2
    assert claim(conn, A, worker="w3") is None, "18 GB reserved + 12 > 24 - 1"
    assert query_status(conn, third) == "queued"


def test_the_margin_is_left_unreserved(conn):
    models(conn, m8=8)
    jobs = [enqueue("m8") for _ in range(3)]
    assert claim(conn, A)["id"] == jobs[0] and claim(conn, A)["id"] == jobs[1]
    assert claim(conn, A, margin=1.0) is None, "16 + 8 = 24 leaves no 1 GB margin"
    assert claim(conn, A, margin=0.0)["id"] == jobs[2]


def test_what_nvml_says_is_free_bounds_the_claim_too(conn):
    models(conn, m8=8)
    job = enqueue("m8")
    busy = Device("GPU-a", 24.0, 7.5)  # nothing reserved, but a foreign process holds 16.5 GB
    assert claim(conn, busy) is None
    assert claim(conn, Device("GPU-a", 24.0, 8.0))["id"] == job


def test_the_best_fitting_device_is_reserved_on(conn):
    models(conn, m8=8, m4=4)
    roomy, snug = Device("GPU-roomy", 24.0, 24.0), Device("GPU-snug", 10.0, 10.0)
    big, small = enqueue("m8"), enqueue("m4")
    assert claim(conn, roomy, snug)["id"] == big
    assert reserved(conn, big) == (["GPU-snug"], 8.0)  # 9 GB of room there, 23 on the other: the snug one
    assert claim(conn, roomy, snug)["id"] == small
    assert reserved(conn, small) == (["GPU-roomy"], 4.0)  # 1 GB left on the snug one


def test_an_unknown_need_runs_alone_on_its_device(conn):
    models(conn, m4=4)
    unknown = enqueue("never-registered")
    known = enqueue("m4")
    assert claim(conn, A)["id"] == unknown
    assert reserved(conn, unknown) == (["GPU-a"], 24.0)  # the whole device
    assert claim(conn, A) is None
    jobstore.mark("workflow_node_jobs", "completed", unknown, worker_id="w1", conn=conn)
    assert claim(conn, A)["id"] == known
    assert claim(conn, Device("GPU-a", 24.0, 24.0)) is None  # and an unknown one waits for a device with nothing on it


def test_a_worker_naming_no_device_claims_as_before(conn):
    models(conn, m30=30)
    job = enqueue("m30")
    assert claim(conn)["id"] == job
    assert reserved(conn, job) == (None, None)


def test_a_vram_gb_that_is_not_a_size_is_refused_and_nothing_written(conn):
    before = conn.execute("SELECT count(*) AS n FROM workflow_node_jobs").fetchone()["n"]
    for bad in (-1, float("nan"), "8", True):
        with pytest.raises(node_queue.InvalidPayloadError, match="vram_gb must be a number of GB"):
            enqueue("m8", vram_gb=bad)
    assert conn.execute("SELECT count(*) AS n FROM workflow_node_jobs").fetchone()["n"] == before


def test_the_row_carries_its_reservation(conn):
    models(conn, m8=8)
    enqueue("m8", vram_gb=1.5)
    job = NodeJob.from_row(claim(conn, A))
    assert (job.vram_gb, job.gpus, job.gpu_devices, job.vram_reserved_gb) == (1.5, 1, ["GPU-a"], 9.5)


def query_status(conn, job_id: int) -> str:
    return conn.execute("SELECT status FROM workflow_node_jobs WHERE id = %s", (job_id,)).fetchone()["status"]


# Release: every way out of `running` --------------------------------------------------------


@pytest.mark.parametrize("way", ["completed", "failed", "retried", "released"])
def test_leaving_running_frees_the_reservation(conn, way):
    models(conn, m12=12)
    first, second = enqueue("m12"), enqueue("m12")
    assert claim(conn, A, worker="w1")["id"] == first
    assert claim(conn, A, worker="w2") is None
    if way in ("completed", "failed"):
        assert jobstore.mark("workflow_node_jobs", way, first, worker_id="w1", conn=conn) is not None
    elif way == "retried":
        assert jobstore.fetch_one(conn, jobstore.retry_statement("workflow_node_jobs", first, "w1", error="x", delay_seconds=60)) is not None
    else:
        assert jobstore.release(conn, "workflow_node_jobs", [first], "w1") == {first}
    assert claim(conn, A, worker="w2")["id"] == (first if way == "released" else second)  # a released job is the older one queued


def test_a_hard_cancel_frees_the_reservation(conn):
    models(conn, m12=12)
    flow = Workflow("pack").node("n", "qw_dag_nodes", queue="gpu", model="m12")
    first, second = queue_workflows.start_run(flow, {}), queue_workflows.start_run(flow, {})
    assert claim(conn, A, worker="w1")["run_id"] == first
    assert claim(conn, A, worker="w2") is None
    queue_workflows.cancel_run(first, hard=True)
    assert claim(conn, A, worker="w2")["run_id"] == second


# Multi-GPU jobs -----------------------------------------------------------------------------


def test_a_multi_gpu_job_reserves_all_its_devices_at_once_or_waits(conn):
    models(conn, m8=8, m20=20)
    a, b, c = Device("GPU-a", 24.0, 24.0), Device("GPU-b", 24.0, 24.0), Device("GPU-c", 24.0, 24.0)
    big = enqueue("m20")
    assert claim(conn, a, b, worker="w1")["id"] == big and reserved(conn, big) == (["GPU-a"], 20.0)
    gang = node_queue.enqueue_node_job("gang", "gpu", node_module="qw_test_nodes", required_model="m8", vram_gb=1, gpus=2)["id"]
    assert claim(conn, a, b, worker="w2") is None, "only GPU-b has 9 GB free: a two-GPU job waits rather than take one"
    assert claim(conn, b, worker="w3") is None, "a worker with one device never takes it"
    assert claim(conn, a, b, c, worker="w4")["id"] == gang
    assert reserved(conn, gang) == (["GPU-b", "GPU-c"], 9.0)  # 9 GB on each
    assert claim(conn, a, b, c, worker="w5") is None  # nothing queued


def test_gpus_that_is_not_a_count_is_refused(conn):
    for bad in (0, 65, 1.5, True, "2"):
        with pytest.raises(node_queue.InvalidPayloadError, match="gpus must be a whole number of devices"):
            node_queue.enqueue_node_job("gang", "gpu", node_module="qw_test_nodes", gpus=bad)
    assert conn.execute("SELECT count(*) AS n FROM workflow_node_jobs").fetchone()["n"] == 0


@pytest.mark.multiprocess
def test_a_two_gpu_job_runs_on_a_real_worker_seeing_both_devices(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = str(tmp_path / "nvml.json")
    fake_nvml.write_state(state, {"init_error": None, "devices": [
        {"name": "Fake A10", "uuid": f"GPU-fake-{i}", "total": 24 * (1 << 30), "base_used": 0, "procs": {}} for i in range(3)]})
    env = gpu_worker_env(database_url, state, QW_POLL_SECONDS="0.2", CUDA_VISIBLE_DEVICES="GPU-fake-1,GPU-fake-2")
    job = node_queue.enqueue_node_job("gang", "gpu", node_module="qw_gpu_nodes", required_model="a8", gpus=2,
                                      inputs={"report_devices": True})["id"]
    worker = procs.worker(env, "gpu")
    wait_until(lambda: status_of(database_url, job) == "completed", timeout=30, what="the two-GPU job to run")
    row = query(database_url, "SELECT gpu_devices, vram_reserved_gb, context_delta FROM workflow_node_jobs WHERE id = %s", (job,))[0]
    assert row["gpu_devices"] == ["GPU-fake-1", "GPU-fake-2"] and row["vram_reserved_gb"] == 8.0  # GPU-fake-0 is not this worker's
    assert row["context_delta"]["devices"] == ["GPU-fake-1", "GPU-fake-2"]
    assert row["context_delta"]["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-fake-1,GPU-fake-2", log_text(worker)[-2000:]


def test_a_workflow_node_sizes_its_reservation_and_bad_sizes_are_refused_naming_node_and_key(conn):
    models(conn, m8=8)
    flow = Workflow("sized").node("train", "qw_dag_nodes", queue="gpu", model="m8", gpus=2, vram_gb=3)
    assert Workflow.from_dict(flow.to_dict()).to_dict() == flow.to_dict() and flow.to_dict()["nodes"][0]["gpus"] == 2
    run_id = queue_workflows.start_run(flow, {})
    b = Device("GPU-b", 24.0, 24.0)
    row = claim(conn, A, b)
    assert (row["run_id"], sorted(row["gpu_devices"]), row["vram_reserved_gb"]) == (run_id, ["GPU-a", "GPU-b"], 11.0)
    mapped = Workflow("mapped").map("each", "qw_dag_nodes", over=[1, 2], queue="gpu", model="m8", vram_gb=1)
    assert Workflow.from_dict(mapped.to_dict()).nodes[0].vram_gb == 1
    items = conn.execute("SELECT gpus, vram_gb FROM workflow_node_jobs WHERE run_id = %s AND map_node = 'each'",
                         (queue_workflows.start_run(mapped, {}),)).fetchall()
    assert [(r["gpus"], r["vram_gb"]) for r in items] == [(1, 1.0), (1, 1.0)]  # each item inherits its map's sizes
    before = conn.execute("SELECT count(*) AS n FROM workflow_node_jobs").fetchone()["n"]
    for flow, message in (
        (Workflow("w").node("n", "qw_dag_nodes", gpus=2), "node 'n': only a gpu node takes 'gpus' or 'vram_gb'"),
        (Workflow("w").node("n", "qw_dag_nodes", queue="gpu", model="m8", gpus=0), "node 'n': gpus must be a whole number"),
        (Workflow("w").node("n", "qw_dag_nodes", queue="gpu", model="m8", vram_gb=-1), "node 'n': vram_gb must be a number"),
    ):
        with pytest.raises(WorkflowValidationError, match=message):
            queue_workflows.start_run(flow, {})
    assert conn.execute("SELECT count(*) AS n FROM workflow_node_jobs").fetchone()["n"] == before


# Concurrent claimers ------------------------------------------------------------------------


def test_concurrent_claims_never_overbook_a_device(conn, database_url):
    """The second claimer waits for the first's turn; its sum then sees the first's reservation."""
    models(conn, a12=12, b12=12)
    enqueue("a12")
    enqueue("b12")
    first = psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row)
    second = psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row)
    try:
        second_pid = second.info.backend_pid
        with first.transaction():
            statements = node_queue.claim_statements("workflow_node_jobs", "gpu", jobstore.Claimant("w1", 1),
                                                     gpu_devices=claim_params([A], margin_gb=1.0))
            for statement in statements[:-1]:
                first.execute(*statement)
            assert first.execute(*statements[-1]).fetchone() is not None
            result: dict = {}
            racer = threading.Thread(target=lambda: result.update(row=claim(second, A, worker="w2")), daemon=True)
            racer.start()
            wait_until(lambda: not racer.is_alive() or conn.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s AND datname = current_database()",
                (second_pid,)).fetchone()["wait_event_type"] == "Lock", timeout=10, what="the second claim to wait its turn, or end")
        racer.join(10)
        assert not racer.is_alive()
        assert result["row"] is None, "12 GB reserved + 12 > 24 - 1"
        total = conn.execute("SELECT sum(vram_reserved_gb) AS gb FROM workflow_node_jobs WHERE status = 'running' AND gpu_devices @> ARRAY['GPU-a']").fetchone()
        assert total["gb"] == 12.0
    finally:
        first.close()
        second.close()


# Real gpu worker processes over one fake device ---------------------------------------------


def spans_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def most_at_once(spans: list[dict]) -> float:
    """The most GB the spans held at any one instant."""
    edges = sorted([(s["start"], s["gb"]) for s in spans] + [(s["end"], -s["gb"]) for s in spans], key=lambda e: (e[0], e[1]))
    held = peak = 0.0
    for _, change in edges:
        held += change
        peak = max(peak, held)
    return peak


@pytest.mark.multiprocess
def test_gpu_workers_share_one_device_and_never_hold_more_than_it_has(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = one_device(tmp_path / "nvml.json", used_gb=0.0)
    spans = tmp_path / "spans.jsonl"
    env = gpu_worker_env(database_url, state, QW_POLL_SECONDS="0.2")
    jobs = [node_queue.enqueue_node_job(f"hold-{m}", "gpu", node_module="qw_gpu_nodes", required_model=m,
                                        inputs={"hold_gb": 8, "seconds": 1.5, "spans": str(spans)})["id"] for m in ("a8", "b8", "c8")]
    workers = [procs.worker(env, "gpu") for _ in range(3)]
    wait_until(lambda: all(status_of(database_url, j) == "completed" for j in jobs), timeout=60, what="the three jobs to run")
    held = spans_of(spans)
    assert len(held) == 3 and {s["device"] for s in held} == {"GPU-fake-0"}  # each job saw the device it reserved on
    assert most_at_once(held) == 16, "two 8 GB jobs share the 24 GB device; a third would leave no 1 GB margin"
    rows = query(database_url, "SELECT gpu_devices, vram_reserved_gb FROM workflow_node_jobs WHERE id = ANY(%s)", (jobs,))
    assert {(tuple(r["gpu_devices"]), r["vram_reserved_gb"]) for r in rows} == {(("GPU-fake-0",), 8.0)}
    beats = query(database_url, "SELECT gpu_devices FROM worker_heartbeats WHERE pid = %s", (workers[0].pid,))
    assert beats and beats[0]["gpu_devices"][0]["uuid"] == "GPU-fake-0" and beats[0]["gpu_devices"][0]["total_gb"] == 24
    assert all("Traceback" not in log_text(w) for w in workers)


@pytest.mark.multiprocess
def test_a_killed_workers_reservation_holds_until_reclaim_then_frees(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = one_device(tmp_path / "nvml.json", used_gb=0.0)
    env = gpu_worker_env(database_url, state, QW_POLL_SECONDS="0.2")
    victim = procs.worker(env, "gpu")
    doomed = node_queue.enqueue_node_job("hold", "gpu", node_module="qw_gpu_nodes", required_model="a12", inputs={"hold_gb": 12, "seconds": 60, "until": str(tmp_path / "go")})["id"]
    wait_until(lambda: query(database_url, "SELECT gpu_devices FROM workflow_node_jobs WHERE id = %s AND status = 'running'", (doomed,)),
               timeout=30, what="the first worker to claim its job")
    waiting = node_queue.enqueue_node_job("other", "gpu", node_module="qw_gpu_nodes", required_model="b12", inputs={"hold_gb": 12})["id"]
    survivor = procs.worker(env, "gpu")
    wait_until(lambda: query(database_url, "SELECT 1 FROM worker_heartbeats WHERE pid = %s AND state = 'idle'", (survivor.pid,)),
               timeout=30, what="the second worker to go idle")
    assert status_of(database_url, waiting) == "queued", "12 GB reserved + 12 > 24 - 1"
    victim.kill()
    victim.wait()
    fake_nvml.set_process_memory(state, victim.pid, 0)  # NVML drops a dead process's memory
    (tmp_path / "go").touch()  # the job's second run returns at once
    procs.orchestrator(env)  # its sweep reclaims the dead worker's row: the one way out of running
    wait_until(lambda: status_of(database_url, waiting) == status_of(database_url, doomed) == "completed", timeout=60,
               what="both jobs to run on the survivor once the dead worker's reservation went")
    rows = query(database_url, "SELECT claimed_by FROM workflow_node_jobs WHERE id = ANY(%s)", ([doomed, waiting],))
    assert all(f":{survivor.pid}:" in r["claimed_by"] for r in rows), rows
    assert "Traceback" not in log_text(survivor)


# The worker's devices -----------------------------------------------------------------------


def sample(index: int, uuid: str, source: str = "nvml", total_gb: float = 24, used_gb: float = 2) -> GpuSample:
    return GpuSample(index=index, name="x", uuid=uuid, source=source, util_percent=None, memory_used_bytes=int(used_gb * (1 << 30)),
                     memory_total_bytes=int(total_gb * (1 << 30)), temperature_c=None, power_w=None)


def test_a_worker_reserves_only_on_the_devices_it_may_use():
    """NVML lists every device on the host; a worker pinned by CUDA_VISIBLE_DEVICES (index or UUID prefix) names only its own."""
    host = [sample(0, "GPU-aaaa-0"), sample(1, "GPU-bbbb-1"), sample(2, "GPU-cccc-2"), sample(0, "GPU-amd-0", source="amdsmi")]
    assert [d.uuid for d in from_samples(host, env={})] == ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2", "GPU-amd-0"]
    assert [d.uuid for d in from_samples(host, env={"CUDA_VISIBLE_DEVICES": "1"})] == ["GPU-bbbb-1", "GPU-amd-0"]
    assert [d.uuid for d in from_samples(host, env={"CUDA_VISIBLE_DEVICES": "GPU-cccc", "HIP_VISIBLE_DEVICES": ""})] == ["GPU-cccc-2"]
    assert from_samples([sample(0, "GPU-a")], free_override=3.0, env={}) == [Device("GPU-a", 24.0, 3.0)]
    assert from_samples([sample(0, "")], env={}) == []  # no UUID: not told apart from another host's device, not reserved on
    assert from_samples(host[:1], env={})[0].free_gb == 22.0


def test_a_job_sees_the_devices_it_reserved_on():
    assert current_device() is None and current_devices() == () and device_env() == {}
    with on_devices(["GPU-a", "GPU-b"]):
        assert current_device() == "GPU-a" and current_devices() == ("GPU-a", "GPU-b")
        assert device_env() == {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", "HIP_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    assert current_device() is None
