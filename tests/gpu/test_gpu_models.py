"""The gpu worker's models: the registry, the warm cache on a virtual clock, and a real worker
running gpu jobs with their model loaded once, its hits, loads and costs recorded per job."""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

import psycopg
import pytest
from procs import TEST_INGEST_QUEUES, Procs, query, service_env, wait_for_log, wait_until

import queue_workflows
from queue_workflows import claim_worker, db, jobstore, model_registry, node_queue
from queue_workflows.gpu.cache import ModelCache, ModelLoadError
from queue_workflows.gpu.side import GpuSide
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Loads:
    """Loaders that count, models that remember being unloaded."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.unloaded: list[str] = []

    def spec(self, model_id: str, gb: float | None = None, fail: bool = False) -> model_registry.ModelSpec:
        def load():
            if fail:
                raise RuntimeError("weights not found")
            self.loaded.append(model_id)
            return {"model": model_id}

        return model_registry.register(model_registry.ModelSpec(model_id, load, lambda m: self.unloaded.append(m["model"]), gb))


def test_a_hit_loads_nothing_and_a_miss_evicts_the_least_recently_used():
    loads, clock, released = Loads(), Clock(), []
    for m in ("a", "b", "c"):
        loads.spec(m)
    cache = ModelCache(slots=2, now_fn=clock, release_fn=lambda: released.append(1))
    assert cache.acquire("a").hit is False and cache.acquire("b").hit is False
    assert cache.acquire("a").hit is True  # a is now the most recent
    got = cache.acquire("c")
    assert (got.hit, got.model) == (False, {"model": "c"})
    assert loads.loaded == ["a", "b", "c"] and loads.unloaded == ["b"] and released == [1]
    assert cache.loaded() == ["c", "a"]


def test_a_vram_budget_fits_models_by_their_estimate():
    loads = Loads()
    loads.spec("small", 4)
    loads.spec("mid", 6)
    loads.spec("big", 14)
    loads.spec("unknown")  # no estimate: it takes the whole budget
    cache = ModelCache(budget_gb=16, now_fn=Clock(), release_fn=lambda: None)
    cache.acquire("small")
    cache.acquire("mid")
    assert cache.loaded() == ["mid", "small"]  # 10 of 16 GB
    cache.acquire("big")  # 14: both must go
    assert cache.loaded() == ["big"] and loads.unloaded == ["small", "mid"]
    cache.acquire("unknown")
    assert cache.loaded() == ["unknown"]


def test_an_idle_model_is_unloaded_after_its_idle_time_on_the_clock():
    loads, clock = Loads(), Clock()
    loads.spec("a")
    loads.spec("b")
    cache = ModelCache(slots=2, idle_seconds=60, now_fn=clock, release_fn=lambda: None)
    cache.acquire("a")
    clock.now += 30
    cache.acquire("b")
    clock.now += 40  # a idle 70 s, b 40 s
    assert cache.idle_models() == ["a"]
    assert cache.unload_idle() == ["a"] and cache.loaded() == ["b"]
    clock.now += 20
    assert cache.unload_idle() == ["b"] and cache.loaded() == []


def test_a_failing_loader_leaves_the_slot_empty_and_says_why():
    loads = Loads()
    loads.spec("ok")
    loads.spec("broken", fail=True)
    cache = ModelCache(slots=1, now_fn=Clock(), release_fn=lambda: None)
    cache.acquire("ok")
    with pytest.raises(ModelLoadError, match="model 'broken' failed to load: RuntimeError: weights not found"):
        cache.acquire("broken")
    assert cache.loaded() == [] and not cache.swapping  # "ok" was evicted to make room, "broken" never arrived


def test_the_registry_refuses_bad_specs_and_runs_the_registrar_once():
    with pytest.raises(ValueError, match="model id"):
        model_registry.ModelSpec("", lambda: None)
    with pytest.raises(TypeError, match="loader must be callable"):
        model_registry.ModelSpec("m", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="est_vram_gb"):
        model_registry.ModelSpec("m", lambda: None, est_vram_gb=-1)
    with pytest.raises(model_registry.UnknownModelError, match="'ghost' is not registered"):
        model_registry.get("ghost")
    calls = []
    model_registry.set_builtin_model_registrar(lambda: calls.append(model_registry.register(model_registry.ModelSpec("b", dict))))
    model_registry.ensure_builtin_models()
    model_registry.ensure_builtin_models()
    assert len(calls) == 1 and [s.id for s in model_registry.registered()] == ["b"]


def test_a_box_without_a_gpu_refuses_unless_told_to_fall_back(database_url, caplog):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=False)
    side = GpuSide(queue_workflows.config.current().settings, probe=lambda: [])
    with caplog.at_level(logging.ERROR):
        side.start()
    assert not side.may_claim() and "no GPU is visible" in caplog.text and "QW_GPU_CPU_FALLBACK=1" in caplog.text
    seen = GpuSide(queue_workflows.config.current().settings, probe=lambda: ["a GPU"])
    seen.start()
    assert seen.may_claim()
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=True)
    fallback = GpuSide(queue_workflows.config.current().settings, probe=lambda: [])
    fallback.start()
    assert fallback.may_claim()


def _tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_worker_decides_from_the_vendor_tools_on_path(database_url, tmp_path, monkeypatch, caplog):
    from queue_workflows.telemetry import amd, nvidia

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(nvidia, "load_pynvml", lambda: None)
    monkeypatch.setattr(amd, "load_amdsmi", lambda: None)
    for tool in ("amd-smi", "rocm-smi"):
        _tool(bin_dir, tool, "exit 9")
    _tool(bin_dir, "nvidia-smi", "echo 'No devices were found'; exit 6")
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=False)
    blind = GpuSide(queue_workflows.config.current().settings)
    with caplog.at_level(logging.ERROR):
        blind.start()
    assert not blind.may_claim() and "no GPU is visible" in caplog.text
    _tool(bin_dir, "nvidia-smi", "echo '0, NVIDIA RTX A6000, GPU-aaa, 41, 1024, 49152, 63, 120.5'")
    seen = GpuSide(queue_workflows.config.current().settings)
    seen.start()
    assert seen.may_claim() and seen.vram_available_gb() == pytest.approx(47.0)


def test_a_gpu_worker_loads_a_model_once_and_records_hits_and_costs(database_url, conn):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=True,
                              heartbeat_seconds=0.2)
    loads = Loads()
    loads.spec("m1")
    ids = [node_queue.enqueue_node_job(f"n{i}", "gpu", node_module="qw_gpu_nodes", required_model="m1")["id"] for i in range(3)]
    other = node_queue.enqueue_node_job("plain", "gpu", node_module="qw_gpu_nodes")["id"]
    worker = claim_worker.ClaimWorker("gpu", max_jobs=4)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    thread.join(timeout=30)
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM workflow_node_jobs").fetchall()}
    assert loads.loaded == ["m1"]
    assert [rows[i]["context_delta"] for i in ids] == [{"model": {"model": "m1"}}] * 3  # model_registry.current()
    assert [rows[i]["model_hit"] for i in ids] == [False, True, True]
    assert rows[ids[0]]["model_load_seconds"] >= 0 and rows[ids[1]]["model_load_seconds"] == 0
    assert rows[other]["context_delta"] == {"model": None} and rows[other]["model_hit"] is None
    for r in rows.values():
        assert r["cpu_seconds"] >= 0 and r["wall_seconds"] >= 0 and r["peak_rss_bytes"] > 10_000_000


@pytest.mark.multiprocess
def test_the_heartbeat_shows_the_warm_model_and_a_failed_load_fails_the_job(database_url: str, procs: Procs, tmp_path: Path) -> None:
    env = service_env(database_url, QW_APP="qw_gpu_nodes", QW_HEARTBEAT_SECONDS="0.3")
    worker = procs.worker(env, "gpu")
    good = node_queue.enqueue_node_job("n", "gpu", node_module="qw_gpu_nodes", required_model="warm")["id"]
    wait_until(lambda: query(database_url, "SELECT loaded_models FROM worker_heartbeats WHERE pid = %s", (worker.pid,))
               == [{"loaded_models": ["warm"]}], timeout=30, what="the heartbeat to show the warm model")
    bad = node_queue.enqueue_node_job("n2", "gpu", node_module="qw_gpu_nodes", required_model="broken", max_attempts=1)["id"]
    wait_until(lambda: query(database_url, "SELECT status FROM workflow_node_jobs WHERE id = %s", (bad,))[0]["status"] == "failed",
               timeout=30, what="the job whose model cannot load to fail")
    row = query(database_url, "SELECT error FROM workflow_node_jobs WHERE id = %s", (bad,))[0]
    assert "model 'broken' failed to load" in row["error"]
    assert query(database_url, "SELECT status FROM workflow_node_jobs WHERE id = %s", (good,))[0]["status"] == "completed"
    wait_for_log(worker, "model warm loaded", timeout=10)


# Routing: warm models stay where they are ---------------------------------------------------


def start(worker: claim_worker.ClaimWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    return thread


def warm_on(database_url: str, worker: claim_worker.ClaimWorker) -> list[str]:
    rows = query(database_url, "SELECT loaded_models FROM worker_heartbeats WHERE worker_id = %s", (worker.worker_id,))
    return rows[0]["loaded_models"] if rows else []


def two_warm_workers(database_url: str, **settings):
    """W1 warm on A, W2 warm on B: W1 is kept busy on a long A job while the B job arrives."""
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=True,
                              heartbeat_seconds=0.2, gpu_model_slots=1, **settings)
    for m in ("A", "B"):
        model_registry.register(model_registry.ModelSpec(m, lambda m=m: {"model": m}))
    w1, w2 = claim_worker.ClaimWorker("gpu"), claim_worker.ClaimWorker("gpu")
    node_queue.enqueue_node_job("warm-a", "gpu", node_module="qw_gpu_nodes", required_model="A", inputs={"sleep": 1.0})
    threads = [start(w1)]
    wait_until(lambda: warm_on(database_url, w1) == ["A"], timeout=10, what="W1 warm on A")
    threads.append(start(w2))
    node_queue.enqueue_node_job("warm-b", "gpu", node_module="qw_gpu_nodes", required_model="B")
    wait_until(lambda: warm_on(database_url, w2) == ["B"], timeout=10, what="W2 warm on B")
    return w1, w2, threads


def all_done(database_url: str) -> bool:
    return not query(database_url, "SELECT 1 FROM workflow_node_jobs WHERE status <> 'completed'")


def run_backlog(database_url: str, jobs: list[tuple[str, float]], **settings):
    """Two warm workers, then `jobs` (model, seconds) enqueued at once and run to the end."""
    w1, w2, threads = two_warm_workers(database_url, **settings)
    try:
        wait_until(lambda: all_done(database_url), timeout=10, what="the warm-up jobs done")
        with db.connect(url=database_url) as c, c.transaction():
            for i, (model, seconds) in enumerate(jobs):
                node_queue.enqueue_node_job(f"{model}{i}", "gpu", node_module="qw_gpu_nodes", required_model=model,
                                            inputs={"sleep": seconds}, conn=c)
        wait_until(lambda: all_done(database_url), timeout=30, what="the backlog done")
    finally:
        for w in (w1, w2):
            w.request_stop()
        for t in threads:
            t.join(timeout=10)
    return w1, w2


def test_a_mixed_backlog_goes_to_the_worker_that_holds_each_model(database_url, conn):
    w1, w2 = run_backlog(database_url, [(m, 0.05) for _ in range(8) for m in ("A", "B")], gpu_second_copy_backlog=1000)
    by = {(r["required_model"], r["claimed_by"]) for r in conn.execute(
        "SELECT required_model, claimed_by FROM workflow_node_jobs WHERE node_name NOT LIKE 'warm-%'")}
    assert by == {("A", w1.worker_id), ("B", w2.worker_id)}, by
    assert conn.execute("SELECT count(*) AS n FROM workflow_node_jobs WHERE model_hit = false").fetchone()["n"] == 2  # the warm-ups


def test_a_long_enough_queue_earns_a_second_copy(database_url, conn):
    w1, w2 = run_backlog(database_url, [("A", 0.1)] * 12, gpu_second_copy_backlog=3)
    takers = {r["claimed_by"] for r in conn.execute("SELECT claimed_by FROM workflow_node_jobs WHERE node_name LIKE 'A%'")}
    assert takers == {w1.worker_id, w2.worker_id}  # 12 queued >= 3 per holder: W2 loaded A too


# VRAM: a claim takes only what fits; a job nothing live can fit is flagged -------------------


def gpu_claim(vram_available_gb, loaded=()):
    statement = node_queue.claim_statement("workflow_node_jobs", "gpu", jobstore.Claimant("w-vram", 1),
                                           loaded_models=loaded, vram_available_gb=vram_available_gb)
    return jobstore.fetch_one(None, statement)


def test_a_claim_takes_only_models_that_fit_the_free_vram(database_url, conn):
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('big', 8), ('small', 2)")
    big = node_queue.enqueue_node_job("b", "gpu", node_module="qw_test_nodes", required_model="big")["id"]
    small = node_queue.enqueue_node_job("s", "gpu", node_module="qw_test_nodes", required_model="small")["id"]
    assert gpu_claim(4)["id"] == small
    assert gpu_claim(4) is None  # 8 GB does not fit in 4
    assert gpu_claim(4, loaded=["big"])["id"] == big  # already loaded here: nothing more to fit
    node_queue.enqueue_node_job("b2", "gpu", node_module="qw_test_nodes", required_model="big")
    assert gpu_claim(None)["required_model"] == "big"  # VRAM unknown (CPU fallback): no check


def test_available_vram_counts_what_the_workers_own_models_would_give_back(database_url):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=True, gpu_free_vram_gb=10)
    model_registry.register(model_registry.ModelSpec("six", dict, est_vram_gb=6))
    side = GpuSide(queue_workflows.config.current().settings, probe=lambda: [])
    side.start()
    assert side.vram_available_gb() == 10
    side.cache.acquire("six")
    assert side.vram_available_gb() == 16
    assert side.heartbeat_fields() == {"loaded_models": ["six"], "swapping": False, "vram_total_gb": 10, "vram_free_gb": 10, "gpu_devices": None}


def live_gpu_worker(conn, database_url, name: str, key: int, total_gb: float):
    """A heartbeat row for a gpu worker whose lock a connection of ours holds (so it counts as live)."""
    holder = psycopg.connect(database_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, key))
    conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, vram_total_gb) "
                 "VALUES (%s, %s, 'gpu', 1, %s, %s)", (name, name, key, total_gb))
    return holder


def test_a_job_no_live_worker_can_fit_is_flagged_and_unflagged_when_one_appears(database_url, conn):
    conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES ('huge', 80), ('fine', 10)")
    huge = node_queue.enqueue_node_job("h", "gpu", node_module="qw_test_nodes", required_model="huge")["id"]
    node_queue.enqueue_node_job("f", "gpu", node_module="qw_test_nodes", required_model="fine")
    assert jobstore.flag_unassignable(conn) == []  # no live gpu worker reports VRAM yet: nothing decided
    small = live_gpu_worker(conn, database_url, "box-24", 7101, 24)
    try:
        [flagged] = jobstore.flag_unassignable(conn)
        assert flagged["id"] == huge
        assert flagged["unassignable_reason"] == "model huge needs about 80 GB of VRAM; the largest live gpu worker has 24.0 GB"
        assert jobstore.flag_unassignable(conn) == []  # unchanged: nothing rewritten
        large = live_gpu_worker(conn, database_url, "box-96", 7102, 96)
        try:
            [cleared] = jobstore.flag_unassignable(conn)
            assert (cleared["id"], cleared["unassignable_reason"]) == (huge, None)
        finally:
            large.close()
    finally:
        small.close()
