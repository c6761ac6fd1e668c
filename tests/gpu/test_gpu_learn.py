"""The learned VRAM need (p95 of a task's last 50 measured peaks, per model) and the OOM requeue: a
real gpu worker over a fake NVML runs out of memory, its job runs once more uncharged, the model's
need is raised, and a second OOM fails the job."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from procs import Procs, log_text, query, service_env, wait_until

import queue_workflows
from queue_workflows import claim_worker, jobstore, node_queue
from queue_workflows.gpu.learn import model_needs, raise_need_statements
from queue_workflows.jobrow import NodeJob

GIB = 1 << 30
FAKE_NVML_DIR = Path(__file__).resolve().parents[1] / "support" / "fake_nvml"
_spec = importlib.util.spec_from_file_location("fake_pynvml_state", FAKE_NVML_DIR / "pynvml.py")
assert _spec is not None and _spec.loader is not None
fake_nvml = importlib.util.module_from_spec(_spec)  # its write_state/queries helpers; this process's pynvml is untouched
_spec.loader.exec_module(fake_nvml)


def completed(conn, model: str, peaks_gb: list[float], *, node: str = "embed", module: str | None = "qw_gpu_nodes", gpus: int = 1) -> None:
    """Completed gpu jobs with these peaks, finished in this order, through the worker's terminal mark (so the trigger runs)."""
    for gb in peaks_gb:
        job = node_queue.enqueue_node_job(node, "gpu", node_module=module, required_model=model, gpus=gpus)["id"]
        conn.execute("UPDATE workflow_node_jobs SET status = 'running', claimed_by = 'w', peak_vram_bytes = %s WHERE id = %s",
                     (int(gb * GIB), job))
        jobstore.mark("workflow_node_jobs", "completed", job, conn=conn, worker_id="w")


def need(conn, model: str) -> float | None:
    return conn.execute("SELECT qw_gpu_need_gb(%s) AS gb", (model,)).fetchone()["gb"]


def test_the_need_is_the_declared_estimate_until_five_samples_then_the_p95_of_the_last_50(conn):
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('emb', 8)")
    assert need(conn, "nobody") is None
    completed(conn, "emb", [2, 2, 2, 2])
    assert need(conn, "emb") == 8  # four samples: not enough, the declared estimate stands
    completed(conn, "emb", [3])
    assert need(conn, "emb") == pytest.approx(2.8)  # p95 of 2,2,2,2,3 (interpolated)
    completed(conn, "emb", [10] * 10 + [4] * 50)  # the ten 10 GB jobs fall out of the 50-job window
    assert need(conn, "emb") == pytest.approx(4)
    [row] = model_needs(conn=conn)
    assert (row["declared_gb"], row["learned_gb"], row["samples"], row["need_gb"]) == (8, pytest.approx(4), 50, pytest.approx(4))
    # a worker's role completes jobs (the trigger writes both tables) and raises a need after an OOM
    for table in ("gpu_task_vram", "gpu_models"):
        assert conn.execute("SELECT has_table_privilege('qw_worker', %s, 'INSERT, UPDATE') AS ok", (table,)).fetchone()["ok"]


def test_a_model_needs_what_its_hungriest_task_needs_and_an_undeclared_model_learns_too(conn):
    completed(conn, "ocr", [1] * 5, node="small")
    completed(conn, "ocr", [6] * 5, node="large")
    completed(conn, "ocr", [20] * 4, node="rare")  # too few samples to count yet
    assert need(conn, "ocr") == pytest.approx(6)
    [row] = model_needs(conn=conn)
    assert row["declared_gb"] is None and row["samples"] == 14
    assert [(t["task"], t["samples"]) for t in row["tasks"]] == [
        ("qw_gpu_nodes/large", 5), ("qw_gpu_nodes/rare", 4), ("qw_gpu_nodes/small", 5)]


def test_a_multi_gpu_jobs_peak_teaches_the_need_per_device(conn):
    # Its peak is measured over both its devices, and the need is reserved on each.
    completed(conn, "pair", [16] * 5, gpus=2)
    assert need(conn, "pair") == pytest.approx(8)
    job = node_queue.enqueue_node_job("embed", "gpu", node_module="qw_gpu_nodes", required_model="pair", gpus=2)["id"]
    row = conn.execute("SELECT * FROM workflow_node_jobs WHERE id = %s", (job,)).fetchone()
    [(_, params)] = raise_need_statements(NodeJob.from_row(row), held_bytes=16 * GIB, free_gb=1.0)
    assert params["held_gb"] == pytest.approx(8), "an OOM's raise counts what the job held on each device"


def test_routing_and_the_unassignable_flag_use_the_learned_need(conn, database_url):
    queue_workflows.configure(database_url=database_url, gpu_cpu_fallback=True, gpu_free_vram_gb=4.0)
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('grown', 2)")
    completed(conn, "grown", [6] * 5)  # declared 2 GB, measured 6: a 4 GB worker must not load it
    job = node_queue.enqueue_node_job("run", "gpu", node_module="qw_gpu_nodes", required_model="grown")["id"]
    worker = claim_worker.ClaimWorker("gpu", max_jobs=1)
    assert worker.gpu is not None
    worker.gpu.start()  # measures: 4 GB free
    assert worker.drain() == 0
    assert conn.execute("SELECT status FROM workflow_node_jobs WHERE id = %s", (job,)).fetchone()["status"] == "queued"
    conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, vram_total_gb) "
                 "VALUES ('box-5', 'box-5', 'gpu', 1, (SELECT lock_key FROM qw_worker_sessions LIMIT 1), 5)")
    flagged = {r["id"]: r["unassignable_reason"] for r in jobstore.flag_unassignable(conn)}
    assert flagged == {job: "model grown needs about 6 GB of VRAM; the largest live gpu worker has 5.0 GB"}


def one_device(path: Path, foreign: int = 0) -> str:
    """A fake 24 GB device with 1 GB in use at base and `foreign` bytes held by another process."""
    fake_nvml.write_state(str(path), {"init_error": None, "devices": [
        {"name": "Fake A10", "uuid": "GPU-fake-0", "total": 24 * GIB, "base_used": GIB, "procs": {"999999": foreign} if foreign else {}}]})
    return str(path)


@pytest.mark.multiprocess
@pytest.mark.parametrize("how", ["raise", "exit"])
def test_an_oom_runs_the_job_once_more_uncharged_raises_the_need_and_a_second_fails_it(database_url, procs: Procs, tmp_path: Path, how: str) -> None:
    # Another process holds 10 GB through the first run, so the first OOM raises the need to what
    # the job held plus what was free (3 + 10 GB): a need that fits once that process is gone.
    state = one_device(tmp_path / "nvml.json", foreign=10 * GIB)
    env = service_env(database_url, QW_APP="qw_gpu_nodes", QW_FAKE_NVML=state, QW_GPU_VRAM_SAMPLE_SECONDS="0.05",
                      QW_GPU_CPU_FALLBACK="0", QW_POLL_SECONDS="0.2")
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML_DIR), env["PYTHONPATH"]])
    runs = tmp_path / "runs"
    job = node_queue.enqueue_node_job("run", "gpu", node_module="qw_gpu_nodes", required_model="warm", max_attempts=1,
                                      inputs={"oom": how, "hold": 3 * GIB, "runs_file": str(runs)})["id"]
    worker = procs.worker(env, "gpu")

    def status() -> dict:
        return query(database_url, "SELECT status, oom_requeued FROM workflow_node_jobs WHERE id = %s", (job,))[0]

    try:
        wait_until(lambda: status() == {"status": "queued", "oom_requeued": True}, timeout=30, what="the first OOM requeueing the job")
        [model] = [m for m in model_needs() if m["model"] == "warm"]
        assert (model["oom_gb"], model["need_gb"]) == (pytest.approx(13), pytest.approx(13))
        assert status()["status"] == "queued", "a 13 GB need was admitted with 10 GB free"
        one_device(tmp_path / "nvml.json")  # the other process ends: 23 GB free
        wait_until(lambda: status()["status"] == "failed", timeout=30, what="the job to run out of memory a second time")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{procs.logs()[-5000:]}") from None
    row = query(database_url, "SELECT attempts, oom_requeued, error, watchdog_trips FROM workflow_node_jobs WHERE id = %s", (job,))[0]
    assert runs.read_text().count("run") == 2, log_text(worker)[-3000:]  # max_attempts=1, yet it ran twice: the first OOM was not charged
    assert (row["attempts"], row["oom_requeued"], row["watchdog_trips"]) == (1, True, 0)
    assert row["error"].startswith("GPU out of memory again after its one uncharged requeue (this attempt is charged): ")
    assert ("OutOfMemoryError: Tried to allocate" if how == "raise" else "CUDA out of memory") in row["error"]
    # Second: it held 3 GB with 20 free, so it needs over 23 GB: more than 13 x 1.5.
    [model] = [m for m in model_needs() if m["model"] == "warm"]
    assert (model["declared_gb"], model["oom_gb"], model["need_gb"]) == (1, pytest.approx(23), pytest.approx(23)), log_text(worker)[-3000:]


def test_an_oom_of_a_job_without_a_model_requeues_it_once_and_a_second_fails_it(database_url, conn):
    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}))
    queue_workflows.register_ingest_task("oom", lambda reason: (_ for _ in ()).throw(RuntimeError("CUDA out of memory. Tried to allocate 8 GiB")))
    job = node_queue.enqueue_ingest_job("oom", "fetch", max_attempts=1)
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    first = conn.execute("SELECT * FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert (first["status"], first["attempts"], first["oom_requeued"], first["watchdog_trips"]) == ("queued", 0, True, 0)
    assert first["error"].startswith("GPU out of memory (requeued once, no attempt charged)")
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    last = conn.execute("SELECT * FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert (last["status"], last["attempts"]) == ("failed", 1)
    assert last["error"].startswith("GPU out of memory again after its one uncharged requeue")


def test_qw_models_shows_declared_learned_with_samples_and_the_need_used(database_url, conn, monkeypatch, capsys):
    from qw_services import cli

    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.delenv("QW_APP", raising=False)
    queue_workflows.config.reset()
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('emb', 8), ('fresh', 3)")
    completed(conn, "emb", [5] * 6)
    assert cli.main(["models", "--json"]) == 0
    rows = {r["model"]: r for r in json.loads(capsys.readouterr().out)}
    assert {m: (r["declared_gb"], r["learned_gb"], r["samples"], r["need_gb"]) for m, r in rows.items()} == {
        "emb": (8, 5, 6, 5), "fresh": (3, None, 0, 3)}
    assert cli.main(["models"]) == 0
    table = capsys.readouterr().out
    assert "learned GB" in table and "8.00" in table and "5.00" in table, table
